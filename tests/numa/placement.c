/* Placement checks, run inside a QEMU guest with several NUMA nodes: for each
 * case, the share of the pages of the blocks that lie on the node the case
 * promises (read with move_pages, whatever the allocator).
 *
 *   placement [--require] [CASE...]
 *
 * Cases that any allocator can express (threads bound to nodes: first touch,
 * reuse after a free on another node, remote free, orphaned heaps) run under
 * whichever allocator is preloaded; cases of locus's API (on_node,
 * interleaved, realloc, next_touch, rebind) run when locus is there (found
 * with dlsym). One line per case:
 *
 *   PLACEMENT <case> <pages on the promised node> <pages> <percent>
 *
 * With --require, any case below 100 % fails the program (for locus). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXN 8
static int nnodes, node_cpu[MAXN];     /* a CPU of each node */
static long page;
static int failures, require;

/* ---- locus API, when present ---- */
static void *(*on_node)(size_t, int);
static void *(*interleaved)(size_t);
static int (*next_touch)(void *, size_t);
static int (*rebind)(void);
static int (*set_profile)(const char *);

/* Pages of [p, p+len) on `node` (node < 0: count per node into per[]). */
static void count(void *p, size_t len, int node, long *on, long *all) {
  char *a = (char *)((uintptr_t)p & ~(uintptr_t)(page - 1)), *b = (char *)p + len;
  enum { B = 512 };
  void *pages[B];
  int st[B];
  while (a < b) {
    size_t n = 0;
    for (; n < B && a < b; n++, a += page) pages[n] = a;
    syscall(SYS_move_pages, 0, n, pages, NULL, st, 0);
    for (size_t i = 0; i < n; i++) {
      *all += 1;
      *on += st[i] == node;
    }
  }
}

static void report(const char *name, long on, long all, int locus_case) {
  double pct = all ? 100.0 * on / all : 0;
  printf("PLACEMENT %-28s %8ld %8ld %6.1f%%\n", name, on, all, pct);
  if (require && locus_case && on != all) {
    printf("  FAIL: %s: %ld of %ld pages off the promised node\n", name, all - on, all);
    failures++;
  }
  fflush(stdout);
}

static void bind_cpu(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) perror("sched_setaffinity");
}

/* ---- a job run by a thread bound to a node ---- */
typedef struct { int node; void (*fn)(void *); void *arg; } job_t;
static void *job_main(void *a) {
  job_t *j = a;
  bind_cpu(node_cpu[j->node]);
  if (rebind) rebind();
  j->fn(j->arg);
  return NULL;
}
static void run_on(int node, void (*fn)(void *), void *arg) {
  pthread_t t;
  job_t j = {node, fn, arg};
  pthread_create(&t, NULL, job_main, &j);
  pthread_join(t, NULL);
}

/* A set of blocks of mixed sizes: small, medium, large. */
#define NB 100
static size_t bsize(int i) {
  static const size_t s[] = {24, 64, 200, 1000, 4000, 20000, 100000, 600000, 2 << 20, 5 << 20};
  return s[i % 10];
}
typedef struct { void *b[NB]; int node, use_calloc; long on, all; } set_t;

static void alloc_set(void *a) {
  set_t *s = a;
  for (int i = 0; i < NB; i++) {
    s->b[i] = s->use_calloc ? calloc(1, bsize(i)) : malloc(bsize(i));
    if (s->use_calloc)
      for (size_t k = 0; k < bsize(i); k += 512)
        if (((char *)s->b[i])[k]) {
          printf("  calloc returned a non-zero byte\n");
          failures++;
          break;
        }
    memset(s->b[i], 1, bsize(i));
  }
}
static void count_set(set_t *s, int node) {
  s->on = s->all = 0;
  for (int i = 0; i < NB; i++) count(s->b[i], bsize(i), node, &s->on, &s->all);
}
static void free_set(void *a) {
  set_t *s = a;
  for (int i = 0; i < NB; i++) free(s->b[i]);
}
static void alloc_count(void *a) {
  set_t *s = a;
  alloc_set(s);
  count_set(s, s->node);
}

/* ---- cases ---- */
static void case_first_touch(void) {
  long on = 0, all = 0;
  for (int n = 0; n < nnodes; n++) {
    set_t s = {.node = n};
    run_on(n, alloc_count, &s);
    on += s.on, all += s.all;
    free_set(&s);
  }
  report("bound_thread", on, all, 1);
}

/* The cases where memory passes between nodes share one shape: for each node
 * n, `prep` does something on another node with set a, then a thread of node
 * n allocates set b, whose pages must be on n. */
typedef void (*prep_fn)(int n, int other, set_t *a);

static void cross_case(const char *name, prep_fn prep, int use_calloc, void (*after)(set_t *a)) {
  long on = 0, all = 0;
  for (int n = 0; n < nnodes; n++) {
    int other = (n + 1) % nnodes;
    set_t a = {.node = other};
    prep(n, other, &a);
    set_t b = {.node = n, .use_calloc = use_calloc};
    run_on(n, alloc_count, &b);
    on += b.on, all += b.all;
    free_set(&b);
    if (after) after(&a);
  }
  report(name, on, all, 1);
}

/* Memory freed on the other node must not serve node n. */
static void freed_elsewhere(int n, int other, set_t *a) {
  (void)n;
  run_on(other, alloc_set, a);
  run_on(other, free_set, a);
}

/* Blocks of node n freed by a thread of the other node. */
static void freed_remotely(int n, int other, set_t *a) {
  a->node = n;
  run_on(n, alloc_set, a);
  run_on(other, free_set, a);
}

/* A thread of the other node exits holding free memory (its heap is then an
 * orphan); the rest of its blocks are freed after the case. */
static void half_free(void *arg) {
  set_t *s = arg;
  alloc_set(s);
  for (int i = 0; i < NB; i += 2) free(s->b[i]), s->b[i] = NULL;
}
static void exited_elsewhere(int n, int other, set_t *a) {
  (void)n;
  run_on(other, half_free, a);
}
static void free_rest(set_t *a) {
  for (int i = 1; i < NB; i += 2) free(a->b[i]);
}

/* locus API: on_node from an unbound thread, touched by a thread of another node. */
typedef struct { char *p; size_t len; } buf_t;
static void touch_buf(void *a) {
  buf_t *b = a;
  memset(b->p, 2, b->len);
}
static void case_on_node(void) {
  long on = 0, all = 0, ron = 0, rall = 0;
  for (int n = 0; n < nnodes; n++) {
    for (int i = 0; i < 40; i++) {
      size_t len = bsize(i);
      buf_t b = {on_node(len, n), len};
      run_on((n + 1) % nnodes, touch_buf, &b);    /* first touch elsewhere: binding wins */
      count(b.p, len, n, &on, &all);
      char *q = realloc(b.p, len * 2 + 4096);
      memset(q, 3, len * 2 + 4096);
      count(q, len * 2 + 4096, n, &ron, &rall);
      free(q);
    }
  }
  report("on_node", on, all, 1);
  report("on_node_realloc", ron, rall, 1);
}

static void case_interleaved(void) {
  long per[MAXN] = {0}, all = 0;
  size_t len = 64 << 20;
  char *p = interleaved(len);
  memset(p, 1, len);
  for (int n = 0; n < nnodes; n++) {
    long a = 0;
    count(p, len, n, &per[n], &a);
    all = a;
  }
  free(p);
  printf("INTERLEAVE pages per node:");
  for (int n = 0; n < nnodes; n++) printf(" %ld", per[n]);
  printf("\n");
  /* Promised: an even share per node, within one interleaving unit: a page,
   * or a huge page when the kernel backs the range with transparent huge
   * pages (THP "always"), since the kernel interleaves whole huge pages. */
  long unit = 1;
  char buf[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f) {
    if (fgets(buf, sizeof buf, f) && strstr(buf, "[always]")) unit = (2 << 20) / page;
    fclose(f);
  }
  long ok = 0, want = all / nnodes;
  for (int n = 0; n < nnodes; n++) ok += per[n] >= want - unit && per[n] <= want + unit ? per[n] : 0;
  printf("INTERLEAVE unit %ld pages\n", unit);
  report("interleaved", ok, all, 1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* next touch: made on node 0, touched by node 1. Cost per page compared with
 * one batched move_pages of the same pages, in the same run. */
static double nt_seconds;
static void touch_timed(void *a) {
  buf_t *b = a;
  double t0 = now();
  for (size_t i = 0; i < b->len; i += page) b->p[i]++;
  nt_seconds = now() - t0;
}
static void case_next_touch(void) {
  long on = 0, all = 0;
  size_t len = 32 << 20;
  double nt = 0, mp = 0;
  long moved = 0;
  for (int n = 0; n < nnodes; n++) {
    int dst = (n + 1) % nnodes;
    buf_t b = {malloc(len), len};
    run_on(n, touch_buf, &b);
    if (next_touch(b.p, len) != 0) {
      perror("locus_next_touch");
      failures++;
      return;
    }
    run_on(dst, touch_timed, &b);
    nt += nt_seconds;
    count(b.p, len, dst, &on, &all);
    /* the same pages back with one batched move_pages call */
    size_t np = len / page;
    void **pages = malloc(np * sizeof *pages);
    int *nodes = malloc(np * sizeof *nodes), *st = malloc(np * sizeof *st);
    for (size_t i = 0; i < np; i++) pages[i] = (char *)((uintptr_t)b.p & ~(uintptr_t)(page - 1)) + i * page, nodes[i] = n;
    double t0 = now();
    syscall(SYS_move_pages, 0, np, pages, nodes, st, 2 /* MPOL_MF_MOVE */);
    mp += now() - t0;
    moved += np;
    free(pages), free(nodes), free(st);
    free(b.p);
  }
  report("next_touch", on, all, 1);
  printf("NEXT_TOUCH_COST pages %ld next_touch_us_per_page %.3f move_pages_us_per_page %.3f ratio %.2f\n", moved,
         1e6 * nt / moved, 1e6 * mp / moved, nt / mp);
}

static void rebound(void *a) {
  set_t *s = a;
  int to = s->node;
  bind_cpu(node_cpu[to]);
  rebind();
  alloc_set(s);
  count_set(s, to);
}
static void case_rebind(void) {
  long on = 0, all = 0;
  for (int n = 0; n < nnodes; n++) {
    set_t s = {.node = (n + 1) % nnodes};
    run_on(n, rebound, &s);              /* starts on n, moves to n+1, rebinds */
    on += s.on, all += s.all;
    free_set(&s);
  }
  report("rebind", on, all, 1);
}

/* The process policy from LOCUS_NUMA, seen through plain malloc. */
static void case_env_policy(void) {
  const char *v = getenv("LOCUS_NUMA");
  if (!v || strncmp(v, "bind:", 5)) return;
  int n = atoi(v + 5);
  set_t s = {.node = n};
  alloc_count(&s);                     /* unbound main thread */
  report("env_bind", s.on, s.all, 1);
  free_set(&s);
}

int main(int argc, char **argv) {
  page = sysconf(_SC_PAGESIZE);
  int a = 1;
  if (a < argc && !strcmp(argv[a], "--require")) require = 1, a++;
  for (int n = 0; n < MAXN; n++) {
    char path[96], buf[256];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", n);
    FILE *f = fopen(path, "r");
    if (!f) break;
    if (!fgets(buf, sizeof buf, f) || buf[0] < '0' || buf[0] > '9') node_cpu[n] = -1;
    else node_cpu[n] = atoi(buf);
    fclose(f);
    nnodes = n + 1;
  }
  for (int n = 0; n < nnodes; n++)
    if (node_cpu[n] < 0) {
      printf("placement: node %d has no CPU: run with one CPU per node\n", n);
      return 2;
    }
  on_node = (void *(*)(size_t, int))dlsym(RTLD_DEFAULT, "locus_malloc_on_node");
  interleaved = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "locus_malloc_interleaved");
  next_touch = (int (*)(void *, size_t))dlsym(RTLD_DEFAULT, "locus_next_touch");
  rebind = (int (*)(void))dlsym(RTLD_DEFAULT, "locus_rebind");
  set_profile = (int (*)(const char *))dlsym(RTLD_DEFAULT, "locus_set_profile");
  printf("placement: %d nodes, allocator %s\n", nnodes, on_node ? "locus" : "not locus");
  if (getenv("PLACEMENT_NEXT_TOUCH_ONLY") && on_node) {   /* next touch's other engine: that case alone */
    case_next_touch();
    printf("placement: %s\n", failures ? "FAILED" : "done");
    return failures ? 1 : 0;
  }
  if (getenv("LOCUS_NUMA") && on_node) {      /* a process-wide policy: that case alone */
    case_env_policy();
    printf("placement: %s\n", failures ? "FAILED" : "done");
    return failures ? 1 : 0;
  }
  case_first_touch();
  cross_case("reuse_after_free_elsewhere", freed_elsewhere, 0, NULL);
  cross_case("after_remote_free", freed_remotely, 0, NULL);
  cross_case("thread_exit_adoption", exited_elsewhere, 0, free_rest);
  /* calloc of memory recycled from another node's free (alloc_set checks zeroes) */
  cross_case("calloc_after_free_elsewhere", freed_elsewhere, 1, NULL);
  if (on_node) {
    case_on_node();
    case_interleaved();
    case_next_touch();
    case_rebind();
  }
  printf("placement: %s\n", failures ? "FAILED" : "done");
  return failures ? 1 : 0;
}
