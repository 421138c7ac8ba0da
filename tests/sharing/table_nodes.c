/* Shared tables on a machine of several NUMA nodes (docs/sharing.md,
 * "Measurements"): --procs processes (4), process i bound to the CPUs of node
 * --bind[i] (default 0,0,1,1), each asking for the same table
 * (locus_shared_table, --mib 32 MiB) and reading all of it, then filling a
 * private copy (malloc) of the same size. Prints, per process, the node it is
 * bound to, locus_node_of(table) and where the table's pages are (move_pages),
 * and the sums over the processes of the Pss (/proc/self/smaps) of the shared
 * table and of the private copies.
 *
 * Fails unless: every process sees the same contents; init ran once per node
 * used; every page of each process's table is on its node and locus_node_of
 * says so; /dev/shm holds one file per node used while they map it and none
 * after; the sum of the shared tables' Pss is within 0.75-1.25 tables per
 * node used. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "locus.h"

#define MAXP 16
#define PAGE 4096ul

static void fill(void *table, size_t size, void *arg) {
  (*(int *)arg)++;
  uint64_t *w = table;
  for (size_t i = 0; i < size / 8; i++) w[i] = i * 0x9e3779b97f4a7c15ull + 7;
}

static uint64_t checksum(const void *table, size_t size) {
  const volatile uint64_t *w = table;
  uint64_t s = 0;
  for (size_t i = 0; i < size / 8; i++) s = s * 31 + w[i];
  return s;
}

static long pss_of(const void *p) {       /* KiB, of the mapping holding p */
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  int in = 0;
  long pss = -1;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char *dash = strchr(line, '-'), *sp = strchr(line, ' ');
    if (dash && sp && dash < sp && sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in) sscanf(line, "Pss: %ld kB", &pss);
  }
  if (f) fclose(f);
  return pss;
}

static int bind_node(int node) {          /* the CPUs of /sys/devices/system/node/nodeN/cpulist */
  char path[96], buf[256];
  snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
  FILE *f = fopen(path, "r");
  if (!f || !fgets(buf, sizeof buf, f)) return -1;
  fclose(f);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (char *s = buf; *s && *s != '\n';) {
    char *e;
    long a = strtol(s, &e, 10), b = a;
    if (e == s) return -1;
    if (*e == '-') b = strtol(e + 1, &e, 10);
    for (long c = a; c <= b; c++) CPU_SET((int)c, &set);
    s = *e == ',' ? e + 1 : e;
  }
  return CPU_COUNT(&set) ? sched_setaffinity(0, sizeof set, &set) : -1;
}

typedef struct {
  int idx, node, thread_node, node_of, inits, ok;
  long on_node, elsewhere, absent, pss_shared, pss_private;
  uint64_t sum;
  char why[96];
} rep_t;

static int files_named(const char *name) {
  DIR *d = opendir("/dev/shm");
  size_t nl = strlen(name);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (!strncmp(e->d_name, "locus-table-", 12) && l > nl && !strcmp(e->d_name + l - nl, name)) n++;
  }
  if (d) closedir(d);
  return n;
}

static int child(int idx, int node, const char *name, size_t size, int rfd, int gfd) {
  rep_t r = {.idx = idx, .node = node, .ok = 1};
  char c;
  if (bind_node(node)) snprintf(r.why, sizeof r.why, "cannot bind to node %d", node), r.ok = 0;
  locus_rebind();                         /* the heap follows the new binding (docs/numa.md) */
  r.thread_node = locus_thread_node();
  void *t = r.ok ? locus_shared_table(name, size, fill, &r.inits) : NULL;
  if (r.ok && !t) snprintf(r.why, sizeof r.why, "locus_shared_table: %s", strerror(errno)), r.ok = 0;
  if (t) {
    r.sum = checksum(t, size);
    r.node_of = locus_node_of(t);
    size_t n = size / PAGE;
    void **pages = malloc(n * sizeof *pages);
    int *st = malloc(n * sizeof *st);
    for (size_t i = 0; i < n; i++) pages[i] = (char *)t + i * PAGE;
    if (syscall(SYS_move_pages, 0, n, pages, NULL, st, 0) != 0) {
      snprintf(r.why, sizeof r.why, "move_pages: %s", strerror(errno)), r.ok = 0;
    } else {
      for (size_t i = 0; i < n; i++)
        if (st[i] == node) r.on_node++;
        else if (st[i] < 0) r.absent++;
        else r.elsewhere++;
    }
    free(pages), free(st);
  }
  if (write(rfd, "m", 1) != 1 || read(gfd, &c, 1) != 1) _exit(3);   /* every process maps it now */
  if (t) r.pss_shared = pss_of(t);
  int dummy = 0;
  void *priv = malloc(size);
  if (!priv) _exit(4);
  fill(priv, size, &dummy);
  r.pss_private = pss_of((char *)priv + size / 2);
  if (checksum(priv, size) != r.sum && t) snprintf(r.why, sizeof r.why, "private copy differs"), r.ok = 0;
  free(priv);
  if (write(rfd, &r, sizeof r) != (ssize_t)sizeof r || read(gfd, &c, 1) != 1) _exit(3);
  if (t && locus_shared_table_release(t)) _exit(5);
  return 0;
}

int main(int argc, char **argv) {
  int procs = 4, node[MAXP] = {0, 0, 1, 1};
  size_t size = 32ul << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--procs")) procs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mib")) size = (size_t)atol(argv[i + 1]) << 20;
    else if (!strcmp(argv[i], "--bind")) {
      char *s = argv[i + 1];
      for (int k = 0; k < MAXP && *s; k++) {
        node[k] = (int)strtol(s, &s, 10);
        if (*s == ',') s++;
      }
    } else {
      fprintf(stderr, "usage: table_nodes [--procs N] [--mib M] [--bind n0,n1,...]\n");
      return 2;
    }
  }
  if (procs < 1 || procs > MAXP) return 2;
  char name[64];
  snprintf(name, sizeof name, "nodes-%d", (int)getpid());
  int rp[2], gp[MAXP][2];
  if (pipe(rp)) return 1;
  pid_t pid[MAXP];
  for (int i = 0; i < procs; i++) {
    if (pipe(gp[i])) return 1;
    if (!(pid[i] = fork())) {
      close(rp[0]);
      _exit(child(i, node[i], name, size, rp[1], gp[i][0]));
    }
  }
  close(rp[1]);
  char c;
  for (int i = 0; i < procs; i++)
    if (read(rp[0], &c, 1) != 1) { fprintf(stderr, "table_nodes: a process died\n"); return 1; }
  int files = files_named(name);
  for (int i = 0; i < procs; i++)
    if (write(gp[i][1], "p", 1) != 1) return 1;
  rep_t r[MAXP];
  int fail = 0, nodes_used = 0, inits = 0;
  unsigned long used = 0;
  long sum_shared = 0, sum_private = 0;
  for (int i = 0; i < procs; i++) {
    rep_t x;
    if (read(rp[0], &x, sizeof x) != (ssize_t)sizeof x) { fprintf(stderr, "table_nodes: a process died\n"); return 1; }
    r[x.idx] = x;
  }
  for (int i = 0; i < procs; i++)
    if (write(gp[i][1], "q", 1) != 1) return 1;
  for (int i = 0; i < procs; i++) {
    int st;
    waitpid(pid[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) fail = 1;
  }
  printf("table_nodes: %d processes, table %zu MiB\n", procs, size >> 20);
  printf("proc  bound-node  locus_thread_node  locus_node_of  pages-on-node  elsewhere  absent  inits  Pss-shared-KiB  Pss-private-KiB\n");
  for (int i = 0; i < procs; i++) {
    rep_t *x = &r[i];
    printf("%4d  %10d  %17d  %13d  %13ld  %9ld  %6ld  %5d  %14ld  %15ld%s%s\n", i, x->node, x->thread_node,
           x->node_of, x->on_node, x->elsewhere, x->absent, x->inits, x->pss_shared, x->pss_private,
           x->ok ? "" : "  FAIL: ", x->ok ? "" : x->why);
    if (!x->ok || x->sum != r[0].sum || x->node_of != x->node || x->thread_node != x->node || x->elsewhere || x->absent ||
        x->on_node != (long)(size / PAGE))
      fail = 1;
    if (!(used & (1ul << x->node))) used |= 1ul << x->node, nodes_used++;
    inits += x->inits, sum_shared += x->pss_shared, sum_private += x->pss_private;
  }
  int left = files_named(name);
  double tab = (double)size / 1024;
  printf("table_nodes: nodes used %d, init ran %d time(s), files in /dev/shm while mapped %d, after release %d\n",
         nodes_used, inits, files, left);
  printf("table_nodes: sum of Pss: shared %.1f MiB = %.3f table(s); private copies %.1f MiB = %.3f table(s); "
         "contents %s\n", sum_shared / 1024.0, sum_shared / tab, sum_private / 1024.0, sum_private / tab,
         fail ? "checked (see FAIL)" : "identical");
  if (inits != nodes_used || files != nodes_used || left || sum_shared < 0.75 * nodes_used * tab ||
      sum_shared > 1.25 * nodes_used * tab)
    fail = 1;
  printf("table_nodes: %s\n", fail ? "FAIL" : "PASS");
  return fail;
}
