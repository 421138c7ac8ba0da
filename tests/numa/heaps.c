/* Placement of user heaps (locus_heap_*, issue 30), run inside a QEMU guest
 * with several NUMA nodes, one CPU per node (tests/numa/placement_all.sh runs
 * it in the numa_placement_2nodes / numa_placement_4nodes guests).
 *
 *   numa_heaps
 *
 * For each node N, a heap with c.node = N: small (64 B), medium (100 KiB,
 * calloc) and large (16 MiB) blocks, and a medium block realloc'ed to a large
 * one (3 MiB), each allocated and touched by a thread bound to another node,
 * so that first touch would put them there; 100 % of their pages must be on
 * N (move_pages, and locus_node_of of each block's first byte as a second
 * opinion); calloc's blocks must be zero. Then locus_heap_reset and the same
 * again (the reused memory and a fresh 4 MiB block): 100 % on N, calloc's
 * blocks zero. Then locus_heap_destroy: the heap's bytes leave locus's
 * accounting (bytes_in_use falls by what the heap held, bytes_cached does not
 * grow), VmRSS falls by at least 3/4 of the pages touched after the reset,
 * and no page of the heap's blocks is present any more (move_pages).
 *
 * An interleaved heap (c.interleave = 1): a 16 MiB block touched by a thread
 * of node 0 must have an even share of its pages on each node (within one
 * interleaving unit: a page, or a huge page under THP "always"), before and
 * after a reset; destroy returns its memory as above (all nodes summed).
 *
 * A control (not a promise of locus): a first-touch heap (c.node = -1), the
 * small and medium blocks and a 4 MiB one allocated and touched by a thread of
 * another node. Its pages must NOT be on N (at most 10 %): otherwise the
 * 100 % of the node heaps would prove nothing, since the memory would have
 * landed on N anyway.
 *
 * One line per case:
 *   HEAP <case> node=<node the case promises> <pages there> <pages> <percent>
 * Exit status 0 when every check holds, 1 otherwise, 2 on an unusable machine. */
#define _GNU_SOURCE
#include <errno.h>
#include <locus.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAXN 8
static int nnodes, node_cpu[MAXN];
static long page;
static int failures;

#define NSMALL 512
#define SMALL 64
#define NMED 8
#define MED (100 << 10)
#define LARGE (16 << 20)
#define REALLOC_TO (3 << 20)
#define FRESH (4 << 20)

/* The blocks of the heap under test, for the check after its destroy. */
#define MAXR 4096
static struct { void *p; size_t len; } ranges[MAXR];
static int nranges;

static void fail(const char *fmt, const char *what, long a, long b) {
  printf("  FAIL: ");
  printf(fmt, what, a, b);
  printf("\n");
  failures++;
}

/* Pages of [p, p+len) on `node` into *on, all pages into *all; per[] (if
 * given) counts pages per node. */
static void count(const void *p, size_t len, int node, long *on, long *all, long *per) {
  char *a = (char *)((uintptr_t)p & ~(uintptr_t)(page - 1)), *b = (char *)p + len;
  enum { B = 512 };
  void *pages[B];
  int st[B];
  while (a < b) {
    size_t n = 0;
    for (; n < B && a < b; n++, a += page) pages[n] = a;
    if (syscall(SYS_move_pages, 0, n, pages, NULL, st, 0) != 0) {
      perror("move_pages");
      exit(2);
    }
    for (size_t i = 0; i < n; i++) {
      *all += 1;
      *on += st[i] == node;
      if (per && st[i] >= 0 && st[i] < MAXN) per[st[i]]++;
    }
  }
}

static void bind_cpu(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) {
    perror("sched_setaffinity");
    exit(2);
  }
}

typedef struct { int node; void (*fn)(void *); void *arg; } job_t;
static void *job_main(void *a) {
  job_t *j = a;
  bind_cpu(node_cpu[j->node]);
  j->fn(j->arg);
  return NULL;
}
static void run_on(int node, void (*fn)(void *), void *arg) {
  pthread_t t;
  job_t j = {node, fn, arg};
  if (pthread_create(&t, NULL, job_main, &j) != 0) {
    perror("pthread_create");
    exit(2);
  }
  pthread_join(t, NULL);
}

/* ---- one class of blocks, allocated and touched by a thread ---- */
enum { K_SMALL, K_MEDIUM, K_LARGE, K_REALLOC, K_FRESH, NK };
static const char *kname[NK] = {"small_64B", "medium_100KiB", "large_16MiB", "realloc_to_3MiB", "fresh_4MiB"};

typedef struct {
  locus_heap_t *h;
  int kind;
  void *b[NSMALL];
  size_t len[NSMALL];
  int n;
} blocks_t;

static void *checked(void *p, const char *what) {
  if (!p) {
    printf("  FAIL: %s returned NULL (errno %d)\n", what, errno);
    exit(1);
  }
  return p;
}

static void alloc_touch(void *arg) {
  blocks_t *s = arg;
  s->n = 0;
  switch (s->kind) {
  case K_SMALL:
    for (int i = 0; i < NSMALL; i++) s->b[i] = checked(locus_heap_malloc(s->h, SMALL), "heap_malloc"), s->len[i] = SMALL;
    s->n = NSMALL;
    break;
  case K_MEDIUM:
    long dirty = 0, dirty_blocks = 0;
    for (int i = 0; i < NMED; i++) {
      char *p = checked(locus_heap_calloc(s->h, 1, MED), "heap_calloc");
      long d = 0;
      for (size_t k = 0; k < MED; k++) d += p[k] != 0;
      dirty += d, dirty_blocks += d != 0;
      s->b[i] = p, s->len[i] = MED;
    }
    s->n = NMED;
    if (dirty) {
      printf("  FAIL: heap_calloc: %ld of %d blocks of %d bytes not zero (%ld non-zero bytes)\n", dirty_blocks, NMED,
             MED, dirty);
      failures++;
    }
    break;
  case K_LARGE:
    s->b[0] = checked(locus_heap_malloc(s->h, LARGE), "heap_malloc"), s->len[0] = LARGE, s->n = 1;
    break;
  case K_REALLOC: {
    char *p = checked(locus_heap_malloc(s->h, MED), "heap_malloc");
    memset(p, 5, MED);
    s->b[0] = checked(locus_heap_realloc(s->h, p, REALLOC_TO), "heap_realloc"), s->len[0] = REALLOC_TO, s->n = 1;
    if (((char *)s->b[0])[MED - 1] != 5) {
      printf("  FAIL: heap_realloc lost the block's contents\n");
      failures++;
    }
    break;
  }
  case K_FRESH:
    s->b[0] = checked(locus_heap_malloc(s->h, FRESH), "heap_malloc"), s->len[0] = FRESH, s->n = 1;
    break;
  }
  for (int i = 0; i < s->n; i++) {
    memset(s->b[i], 1, s->len[i]);
    if (locus_heap_of(s->b[i]) != s->h) {
      printf("  FAIL: a block of %s is not in its heap\n", kname[s->kind]);
      failures++;
    }
  }
}

/* The node of another CPU that touches class k's blocks for node n's heap:
 * with 4 nodes, the classes are touched from different nodes. */
static int toucher(int n, int k) { return (n + 1 + k % (nnodes - 1)) % nnodes; }

/* Allocates and touches class k for heap h from a thread of node `from`, and
 * counts its pages on `node`. Returns the pages there; *all all pages;
 * *first_on the blocks whose first byte locus_node_of puts on `node`. */
static long place(locus_heap_t *h, int k, int from, int node, long *all, int *first_on, int *nblocks) {
  blocks_t s = {.h = h, .kind = k};
  run_on(from, alloc_touch, &s);
  long on = 0;
  *all = 0;
  *first_on = 0;
  for (int i = 0; i < s.n; i++) {
    count(s.b[i], s.len[i], node, &on, all, NULL);
    if (nranges < MAXR) {
      ranges[nranges].p = s.b[i];
      ranges[nranges++].len = s.len[i];
    }
    *first_on += locus_node_of(s.b[i]) == node;
  }
  *nblocks = s.n;
  return on;
}

static void line(const char *phase, int k, int node, long on, long all) {
  char name[64];
  snprintf(name, sizeof name, "%s%s", phase, kname[k]);
  printf("HEAP %-32s node=%d %7ld %7ld %6.1f%%\n", name, node, on, all, all ? 100.0 * on / all : 0.0);
  fflush(stdout);
}

static long vm_rss_kib(void) {
  char buf[256];
  long kib = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  while (fgets(buf, sizeof buf, f))
    if (!strncmp(buf, "VmRSS:", 6)) kib = strtol(buf + 6, NULL, 10);
  fclose(f);
  return kib;
}

/* MemFree of a node in KiB, from sysfs (node < 0: all nodes). */
static long node_free_kib(int node) {
  long sum = 0;
  for (int n = 0; n < nnodes; n++) {
    if (node >= 0 && n != node) continue;
    char path[96], buf[256];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/meminfo", n);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(buf, sizeof buf, f)) {
      const char *m = strstr(buf, "MemFree:");
      if (m) sum += strtol(m + 8, NULL, 10);
    }
    fclose(f);
  }
  return sum;
}

/* destroy returns the heap's memory to its source, as free() does: out of
 * the heap (bytes_in_use falls by what the heap held; bytes_cached grows by
 * at most that: the source keeps it as the profile says); locus_release()
 * then gives it to the OS: VmRSS falls by at least 3/4 of the pages touched
 * last, and no page of its blocks is present any more (move_pages: -EFAULT
 * or -ENOENT).
 * The node's MemFree is printed for information: the kernel's per-CPU page
 * lists and THP's deferred splits keep some freed pages out of it. */
static void destroy_check(locus_heap_t *h, const char *label, int node, long touched_pages) {
  locus_stats_t hs, before, after;
  locus_heap_stats(h, &hs);
  locus_stats_get(&before);
  long free0 = node_free_kib(node), rss0 = vm_rss_kib();
  locus_heap_destroy(h);
  locus_stats_get(&after);
  locus_release();
  long free1 = node_free_kib(node), rss1 = vm_rss_kib();
  long present = 0, all = 0;
  for (int i = 0; i < nranges; i++) {
    long per[MAXN] = {0}, none = 0;
    count(ranges[i].p, ranges[i].len, -99, &none, &all, per);
    for (int n = 0; n < nnodes; n++) present += per[n];
  }
  nranges = 0;
  long want_kib = touched_pages * (page / 1024) * 3 / 4;
  long in_use_drop = (long)(before.bytes_in_use - after.bytes_in_use);
  long cached_rise = (long)after.bytes_cached - (long)before.bytes_cached;
  printf("HEAP %-32s node=%d held_KiB %ld in_use_drop_KiB %ld cached_rise_KiB %ld rss_drop_KiB %ld (want >= %ld) "
         "pages_still_present %ld of %ld node_memfree_rise_KiB %ld\n",
         label, node, (long)(hs.bytes_in_use >> 10), in_use_drop >> 10, cached_rise >> 10, rss0 - rss1, want_kib,
         present, all, free1 - free0);
  if (hs.bytes_in_use == 0 || in_use_drop < (long)hs.bytes_in_use)
    fail("%s: bytes_in_use fell by %ld, the heap held %ld", label, in_use_drop, (long)hs.bytes_in_use);
  if (cached_rise > (long)hs.bytes_in_use)
    fail("%s: the cache grew by %ld bytes, more than the heap held (%ld)", label, cached_rise, (long)hs.bytes_in_use);
  if (rss0 - rss1 < want_kib) fail("%s: VmRSS fell by %ld KiB, want >= %ld KiB", label, rss0 - rss1, want_kib);
  if (present) fail("%s: %ld of %ld pages of its blocks still present", label, present, all);
  fflush(stdout);
}

/* ---- node heaps ---- */
static void node_heap(int n) {
  locus_heap_config_t c = LOCUS_HEAP_CONFIG_INIT;
  char name[32];
  snprintf(name, sizeof name, "node%d", n);
  c.node = n;
  c.name = name;
  locus_heap_t *h = locus_heap_create(&c);
  if (!h) {
    printf("  FAIL: locus_heap_create(node %d): errno %d\n", n, errno);
    failures++;
    return;
  }
  long touched = 0;
  for (int round = 0; round < 2; round++) {
    const char *phase = round ? "after_reset_" : "";
    for (int k = 0; k < NK; k++) {
      if (k == K_FRESH && !round) continue;
      long all;
      int first_on, nb;
      long on = place(h, k, toucher(n, k), n, &all, &first_on, &nb);
      line(phase, k, n, on, all);
      if (round) touched += all;
      char what[64];
      snprintf(what, sizeof what, "node%d %s%s", n, phase, kname[k]);
      if (on != all) fail("%s: %ld of %ld pages off the heap's node", what, all - on, all);
      if (first_on != nb) fail("%s: locus_node_of puts %ld of %ld blocks elsewhere", what, nb - first_on, nb);
    }
    if (!round) locus_heap_reset(h);
  }
  char label[48];
  snprintf(label, sizeof label, "destroy_node%d", n);
  destroy_check(h, label, n, touched);
}

/* ---- the control: a first-touch heap, the same blocks from another node ---- */
static void control(int n) {
  locus_heap_config_t c = LOCUS_HEAP_CONFIG_INIT;   /* node -1: first touch */
  c.name = "first_touch";
  /* Fresh pages only: memory earlier heaps gave back to locus's sources is
   * resident already, where it was (reused without a fault, as it should). */
  locus_release();
  locus_heap_t *h = locus_heap_create(&c);
  if (!h) {
    printf("  FAIL: locus_heap_create(first touch): errno %d\n", errno);
    failures++;
    return;
  }
  long on = 0, all = 0;
  static const int kinds[] = {K_SMALL, K_MEDIUM, K_FRESH};   /* 4 MiB: less to touch under TCG */
  for (int j = 0; j < 3; j++) {
    int k = kinds[j];
    long a;
    int f, nb;
    on += place(h, k, toucher(n, k), n, &a, &f, &nb);
    all += a;
  }
  printf("HEAP %-32s node=%d %7ld %7ld %6.1f%%   (control: must be low)\n", "control_first_touch", n, on, all,
         all ? 100.0 * on / all : 0.0);
  if (all == 0 || on * 10 > all)
    fail("control: %s %ld of %ld pages of a first-touch heap on the node: the check cannot tell", "", on, all);
  locus_heap_destroy(h);
  nranges = 0;
}

/* ---- the interleaved heap ---- */
static long thp_unit(void) {
  char buf[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  long unit = 1;
  if (f) {
    if (fgets(buf, sizeof buf, f) && strstr(buf, "[always]")) unit = (2 << 20) / page;
    fclose(f);
  }
  return unit;
}

static void interleaved_heap(void) {
  locus_heap_config_t c = LOCUS_HEAP_CONFIG_INIT;
  c.interleave = 1;
  c.name = "interleaved";
  locus_heap_t *h = locus_heap_create(&c);
  if (!h) {
    printf("  FAIL: locus_heap_create(interleave): errno %d\n", errno);
    failures++;
    return;
  }
  long unit = thp_unit(), touched = 0;
  for (int round = 0; round < 2; round++) {
    blocks_t s = {.h = h, .kind = K_LARGE};
    run_on(0, alloc_touch, &s);          /* first touch would put it all on node 0 */
    long per[MAXN] = {0}, on = 0, all = 0;
    count(s.b[0], s.len[0], -99, &on, &all, per);
    ranges[nranges].p = s.b[0];
    ranges[nranges++].len = s.len[0];
    touched += round ? all : 0;
    const char *label = round ? "interleaved_after_reset" : "interleaved_16MiB";
    printf("HEAP %-32s pages %ld:", label, all);
    for (int n = 0; n < nnodes; n++) printf(" node%d %ld (%.1f%%)", n, per[n], 100.0 * per[n] / all);
    printf("  unit %ld\n", unit);
    long want = all / nnodes, sum = 0;
    for (int n = 0; n < nnodes; n++) {
      sum += per[n];
      if (per[n] < want - unit || per[n] > want + unit)
        fail("%s: a node has %ld pages, want %ld (one unit either way)", label, per[n], want);
    }
    if (sum != all) fail("%s: %ld of %ld pages not present", label, all - sum, all);
    if (!round) locus_heap_reset(h);
  }
  destroy_check(h, "destroy_interleaved", -1, touched);
}

int main(void) {
  page = sysconf(_SC_PAGESIZE);
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
  if (nnodes < 2) {
    printf("numa_heaps: %d node(s): needs at least 2\n", nnodes);
    return 2;
  }
  for (int n = 0; n < nnodes; n++)
    if (node_cpu[n] < 0) {
      printf("numa_heaps: node %d has no CPU: run with one CPU per node\n", n);
      return 2;
    }
  printf("numa_heaps: %d nodes\n", nnodes);
  for (int n = 0; n < nnodes; n++) node_heap(n);
  for (int n = 0; n < nnodes; n++) control(n);
  interleaved_heap();
  printf("numa_heaps: %s\n", failures ? "FAILED" : "PASS: every node heap's pages on its node, interleaving even, memory returned");
  return failures ? 1 : 0;
}
