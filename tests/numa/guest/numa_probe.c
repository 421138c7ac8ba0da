/* numa_probe: proves that the machine it runs on has the NUMA nodes it claims
 * and that the kernel places memory on them when asked.
 *
 *   numa_probe [--expect-nodes N] [--pages P] [--malloc-mib M]
 *
 * For each node that has memory it maps P fresh pages (default 64), binds them
 * to that node alone with mbind(MPOL_BIND, MPOL_MF_STRICT), touches them, and
 * asks the kernel where each page is: move_pages() with a NULL node list (which
 * moves nothing and reports each page's node) and, as a second opinion for the
 * first page, get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR).  It prints one line per
 * node and exits 0 only if every page of every node is where it was asked to
 * be, and (with --expect-nodes) the machine has exactly N nodes online.
 *
 * It also says which object provides malloc (the C library, or a preloaded
 * allocator such as liblocus), and, when LD_PRELOAD is set, fails unless malloc
 * comes from a preloaded object.  With --malloc-mib M (default 8; 0: off) it
 * reports, for information only, on which nodes M MiB from malloc landed.
 *
 * No libnuma: raw system calls with the constants of <linux/mempolicy.h>.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/mempolicy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_NODES 1024
#define LONG_BITS (8 * (int)sizeof(unsigned long))
#define MASK_LONGS (MAX_NODES / LONG_BITS)

typedef struct {
  unsigned long bits[MASK_LONGS];
} nodemask;

static void mask_set(nodemask *m, int n) { m->bits[n / LONG_BITS] |= 1UL << (n % LONG_BITS); }
static int mask_isset(const nodemask *m, int n) { return (m->bits[n / LONG_BITS] >> (n % LONG_BITS)) & 1; }
static int mask_count(const nodemask *m) {
  int c = 0;
  for (int n = 0; n < MAX_NODES; n++) c += mask_isset(m, n);
  return c;
}
static void mask_print(const char *label, const nodemask *m) {
  printf("%s", label);
  const char *sep = "";
  for (int n = 0; n < MAX_NODES; n++)
    if (mask_isset(m, n)) {
      printf("%s%d", sep, n);
      sep = ",";
    }
  printf("%s\n", *sep ? "" : "(none)");
}

/* The kernel reads maxnode - 1 bits of a mask it is given (mbind) and writes a
 * mask of maxnode bits at most (get_mempolicy): these values keep both within
 * the MAX_NODES bits of a nodemask. */
static long sys_mbind(void *addr, unsigned long len, int mode, const nodemask *m, unsigned flags) {
  return syscall(SYS_mbind, addr, len, mode, m ? m->bits : NULL, m ? MAX_NODES + 1UL : 0UL, flags);
}
static long sys_get_mempolicy(int *mode, nodemask *m, void *addr, unsigned long flags) {
  return syscall(SYS_get_mempolicy, mode, m ? m->bits : NULL, m ? (unsigned long)MAX_NODES : 0UL, addr, flags);
}
static long sys_move_pages(unsigned long count, void **pages, const int *nodes, int *status, int flags) {
  return syscall(SYS_move_pages, 0, count, pages, nodes, status, flags);
}

/* Parses a sysfs node list ("0-3", "0,2-3", "" ) into m; -1 if unreadable. */
static int read_node_list(const char *path, nodemask *m) {
  memset(m, 0, sizeof *m);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char buf[4096];
  if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
  fclose(f);
  char *p = buf;
  while (*p && *p != '\n') {
    char *end;
    long a = strtol(p, &end, 10), b;
    if (end == p) return -1;
    b = a;
    p = end;
    if (*p == '-') {
      b = strtol(p + 1, &end, 10);
      if (end == p + 1) return -1;
      p = end;
    }
    for (long n = a; n <= b && n < MAX_NODES; n++)
      if (n >= 0) mask_set(m, (int)n);
    if (*p == ',') p++;
  }
  return 0;
}

/* Which loaded object defines malloc, as the dynamic linker resolves it for
 * this program. */
static const char *malloc_provider(void) {
  Dl_info info;
  void *sym = dlsym(RTLD_DEFAULT, "malloc");
  if (sym && dladdr(sym, &info) && info.dli_fname) return info.dli_fname;
  return "?";
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Is the object at path one of the colon- or space-separated LD_PRELOAD entries? */
static int is_preloaded(const char *path, const char *preload) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", preload);
  for (char *save = NULL, *t = strtok_r(buf, ": ", &save); t; t = strtok_r(NULL, ": ", &save))
    if (strcmp(base_name(t), base_name(path)) == 0) return 1;
  return 0;
}

static void usage(const char *me) {
  fprintf(stderr, "usage: %s [--expect-nodes N] [--pages P] [--malloc-mib M]\n", me);
  exit(2);
}

int main(int argc, char **argv) {
  int expect = -1;
  long npages = 64, malloc_mib = 8;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--expect-nodes") == 0) expect = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--pages") == 0) npages = atol(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--malloc-mib") == 0) malloc_mib = atol(argv[++i]);
    else usage(argv[0]);
  }
  if (npages < 1 || npages > 1 << 20 || malloc_mib < 0 || malloc_mib > 1 << 16) usage(argv[0]);
  setvbuf(stdout, NULL, _IOLBF, 0);

  int failures = 0;
  long ps = sysconf(_SC_PAGESIZE);

  /* Which nodes: sysfs, and the kernel's own word (the nodes this task may use). */
  nodemask online, with_mem, allowed;
  int have_sysfs = read_node_list("/sys/devices/system/node/online", &online) == 0;
  if (read_node_list("/sys/devices/system/node/has_memory", &with_mem) != 0) with_mem = online;
  memset(&allowed, 0, sizeof allowed);
  if (sys_get_mempolicy(NULL, &allowed, NULL, MPOL_F_MEMS_ALLOWED) != 0) {
    printf("numa_probe: get_mempolicy(MPOL_F_MEMS_ALLOWED): %s\n", strerror(errno));
    failures++;
  }
  if (!have_sysfs) {
    printf("numa_probe: no /sys/devices/system/node/online: using the allowed nodes\n");
    online = with_mem = allowed;
  }
  mask_print("numa_probe: nodes online:      ", &online);
  mask_print("numa_probe: nodes with memory: ", &with_mem);
  mask_print("numa_probe: mems allowed:      ", &allowed);
  int nodes = mask_count(&online);
  if (expect >= 0 && nodes != expect) {
    printf("numa_probe: FAIL: %d node(s) online, expected %d\n", nodes, expect);
    failures++;
  }

  /* Placement: each node with memory, P pages bound to it alone. */
  void **pages = calloc((size_t)npages, sizeof *pages);
  int *status = calloc((size_t)npages, sizeof *status);
  if (!pages || !status) {
    perror("numa_probe: calloc");
    return 1;
  }
  printf("%-6s %7s %8s %10s %12s %14s  %s\n", "node", "pages", "on-node", "elsewhere", "not-present", "get_mempolicy",
         "result");
  int tested = 0;
  for (int node = 0; node < MAX_NODES; node++) {
    if (!mask_isset(&with_mem, node)) continue;
    tested++;
    size_t len = (size_t)npages * (size_t)ps;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      printf("%-6d mmap: %s\n", node, strerror(errno));
      failures++;
      continue;
    }
    nodemask m;
    memset(&m, 0, sizeof m);
    mask_set(&m, node);
    if (sys_mbind(p, len, MPOL_BIND, &m, MPOL_MF_STRICT) != 0) {
      printf("%-6d mbind(MPOL_BIND): %s\n", node, strerror(errno));
      failures++;
      munmap(p, len);
      continue;
    }
    /* The policy the kernel keeps for the range. */
    int mode = -1;
    nodemask got;
    memset(&got, 0, sizeof got);
    if (sys_get_mempolicy(&mode, &got, p, MPOL_F_ADDR) != 0 || mode != MPOL_BIND || mask_count(&got) != 1 ||
        !mask_isset(&got, node)) {
      printf("%-6d get_mempolicy(MPOL_F_ADDR): mode %d, %d node(s) in the mask: not MPOL_BIND to node %d\n", node,
             mode, mask_count(&got), node);
      failures++;
    }
    for (long i = 0; i < npages; i++) {
      p[i * ps] = (char)(i + 1); /* first touch allocates the page */
      pages[i] = p + i * ps;
      status[i] = -9999;
    }
    long on = 0, elsewhere = 0, absent = 0;
    if (sys_move_pages((unsigned long)npages, pages, NULL, status, 0) != 0) {
      printf("%-6d move_pages: %s\n", node, strerror(errno));
      failures++;
      munmap(p, len);
      continue;
    }
    for (long i = 0; i < npages; i++) {
      if (status[i] == node) on++;
      else if (status[i] >= 0) elsewhere++;
      else absent++;
    }
    int where = -1;
    if (sys_get_mempolicy(&where, NULL, p, MPOL_F_NODE | MPOL_F_ADDR) != 0) where = -errno;
    int ok = on == npages && where == node;
    printf("%-6d %7ld %8ld %10ld %12ld %14d  %s\n", node, npages, on, elsewhere, absent, where, ok ? "ok" : "FAIL");
    if (!ok) failures++;
    munmap(p, len);
  }
  if (tested == 0) {
    printf("numa_probe: FAIL: no node with memory found\n");
    failures++;
  }

  /* The allocator: which object provides malloc. */
  const char *prov = malloc_provider();
  const char *preload = getenv("LD_PRELOAD");
  printf("numa_probe: malloc is provided by %s\n", prov);
  if (preload && *preload) {
    if (is_preloaded(prov, preload)) {
      printf("numa_probe: LD_PRELOAD=%s is in effect\n", preload);
    } else {
      printf("numa_probe: FAIL: LD_PRELOAD=%s is set but malloc does not come from it\n", preload);
      failures++;
    }
  }

  /* For information: where memory from malloc lands (first touch by this thread). */
  if (malloc_mib > 0) {
    size_t len = (size_t)malloc_mib << 20;
    char *b = malloc(len);
    if (!b) {
      printf("numa_probe: malloc(%ld MiB) failed\n", malloc_mib);
      failures++;
    } else {
      unsigned cpu = 0, on_node = 0;
      if (syscall(SYS_getcpu, &cpu, &on_node, NULL) != 0) cpu = on_node = ~0u;
      memset(b, 1, len);
      char *first = (char *)(((unsigned long)b + (unsigned long)ps - 1) & ~((unsigned long)ps - 1));
      long n = (long)((b + len - first) / ps);
      void **pg = calloc((size_t)n, sizeof *pg);
      int *st = calloc((size_t)n, sizeof *st);
      long per[MAX_NODES] = {0}, bad = 0;
      if (pg && st) {
        for (long i = 0; i < n; i++) pg[i] = first + i * ps;
        if (sys_move_pages((unsigned long)n, pg, NULL, st, 0) == 0) {
          for (long i = 0; i < n; i++) {
            if (st[i] >= 0 && st[i] < MAX_NODES) per[st[i]]++;
            else bad++;
          }
          printf("numa_probe: %ld MiB from malloc, touched on CPU %d (node %d), %ld pages:", malloc_mib, (int)cpu,
                 (int)on_node, n);
          for (int node = 0; node < MAX_NODES; node++)
            if (per[node]) printf(" node%d=%ld", node, per[node]);
          if (bad) printf(" not-present=%ld", bad);
          printf(" (information only)\n");
        }
      }
      free(pg);
      free(st);
      free(b);
    }
  }
  free(pages);
  free(status);

  if (failures) {
    printf("numa_probe: FAIL (%d problem(s))\n", failures);
    return 1;
  }
  printf("numa_probe: PASS: %d node(s) online, 100%% of the pages on the node asked for each of %d node(s)\n", nodes,
         tested);
  return 0;
}
