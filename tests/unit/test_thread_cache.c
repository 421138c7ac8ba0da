/* The thread cache and the colored runs (heap.h: tcache_t, run_t.first):
 * - a block the thread frees is its next malloc of the class, whichever run
 *   it lies in, and stays counted in its run (`used` unchanged);
 * - a run of frees longer than the bound sends the whole cache to the runs
 *   and turns it off until each class's next malloc that finds its run's
 *   list empty;
 * - locus_collect gives the cache back to the runs; an exited thread's own
 *   blocks stay cached with its heap for the thread that adopts it, other
 *   heaps' blocks go home at its exit;
 * - a double free of a cached block is reported, not cached twice;
 * - runs start carving at different blocks; a block never carved in a run
 *   that wrapped round, and the run's tail slack, are rejected;
 * - another thread's block (a main heap of the same node, its thread alive)
 *   freed here is cached here and goes back to its owner's run when
 *   flushed; a placed block, or one of an exited thread, is not; a double
 *   free of a cached foreign block is reported;
 * - a bound of 0 (LOCUS_THREAD_CACHE=0) turns the cache off. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "locus.h"
#include "config/options.h"

static run_t *run_of(void *p, chunk_t **cp) {
  chunk_t *c = (chunk_t *)registry_lookup(p);
  CHECK(c && c->r.kind == REGION_SMALL, "%p is not in a small chunk", p);
  size_t off;
  if (cp) *cp = c;
  return chunk_run_of(c, p, &off);
}

/* Blocks of 1024 B over several runs (64 per run): one freed from the
 * oldest run is handed out next, not a block of the current run. */
static void test_lifo_across_runs(void) {
  heap_t *h = locus_tls_heap;
  unsigned cls = size_class(1024);
  enum { N = 200 };
  void *p[N];
  for (int i = 0; i < N; i++) CHECK((p[i] = malloc(1024)) != NULL, "malloc");
  run_t *old = run_of(p[0], NULL);
  CHECK(old != heap_cur(h, cls), "the first block's run is still current after %d blocks", N);
  unsigned used = old->used, n = tcache_length(&h->cache[cls]);
  free(p[0]);
  CHECK(tcache_length(&h->cache[cls]) == n + 1, "free did not go to the thread cache (%u -> %u)", n, tcache_length(&h->cache[cls]));
  CHECK(old->used == used, "the cached block left its run's count (%u -> %u)", used, old->used);
  void *q = malloc(1000);
  CHECK(q == p[0], "malloc handed out %p, not the block freed last %p", q, p[0]);
  CHECK(old->used == used, "the block came back without its run's count changing (%u -> %u)", used, old->used);
  for (int i = 0; i < N; i++) free(p[i]);
  CHECK(locus_heap_check() == 0, "heap check");
}

/* More frees in a row than the bound: everything goes to the runs, the
 * runs empty and retire; the next malloc of the class turns the cache on. */
static void test_overflow(void) {
  heap_t *h = locus_tls_heap;
  unsigned cls = size_class(512);
  tcache_t *t = &h->cache[cls];
  CHECK(t->bound == 256 * 1024 / 512, "bound %u for 512 B with the default 256k", t->bound);
  size_t n = (size_t)t->bound * 4;
  void **p = malloc(n * sizeof *p);
  bool fresh = heap_cur(h, cls) == &locus_empty_run;   /* p[0] starts a run: its run holds only p[] */
  for (size_t i = 0; i < n; i++) CHECK((p[i] = malloc(512)) != NULL, "malloc");
  run_t *first = run_of(p[0], NULL);
  for (size_t i = 0; i < t->bound; i++) free(p[i]);
  CHECK(tcache_length(t) == t->bound && t->room == 0, "cache %u, room %u after %u frees", tcache_length(t), t->room,
        t->bound);
  free(p[t->bound]);
  CHECK(t->room == 0 && !t->head, "overflow left %u blocks, room %u", tcache_length(t), t->room);
  CHECK(!fresh || first->state == RUN_FREE, "the run emptied by the overflow was not retired (state %u, used %u)",
        first->state, first->used);
  for (size_t i = t->bound + 1; i < n; i++) free(p[i]);
  CHECK(!t->head && t->room == 0, "frees with the cache off went to it");
  CHECK(locus_heap_check() == 0, "heap check");
  /* mallocs from the current run, until one needs another run */
  size_t k = 0;
  for (; k < n && t->room != t->bound; k++) CHECK((p[k] = malloc(512)) != NULL, "malloc");
  CHECK(t->room == t->bound, "the cache is still off after %zu mallocs", k);
  CHECK(k <= RUN_SIZE / 512 + 1, "the cache came on again only after %zu mallocs (a run holds %u)", k,
        (unsigned)(RUN_SIZE / 512));
  free(p[0]);
  CHECK(tcache_length(t) == 1, "free after the cache came on again: %u cached", tcache_length(t));
  for (size_t i = 1; i < k; i++) free(p[i]);
  free(p);
}

/* locus_collect gives the cache back: in use falls to what the program holds. */
static void test_collect(void) {
  heap_t *h = locus_tls_heap;
  enum { N = 3000 };
  static void *p[N];
  uint64_t s = 7;
  for (int i = 0; i < N; i++) CHECK((p[i] = malloc(size_64_1024(&s))) != NULL, "malloc");
  for (int i = N - 1; i >= 0; i -= 2) free(p[i]);   /* every other block: into the cache */
  size_t cached = 0;
  for (unsigned c = 0; c < NUM_CLASSES; c++) cached += tcache_length(&h->cache[c]);
  CHECK(cached > 100, "only %zu blocks in the thread cache", cached);
  locus_collect();
  for (unsigned c = 0; c < NUM_CLASSES; c++)
    CHECK(tcache_length(&h->cache[c]) == 0 && !h->cache[c].head, "class %u keeps %u blocks after locus_collect", c, tcache_length(&h->cache[c]));
  CHECK(locus_heap_check() == 0, "heap check");
  for (int i = N - 2; i >= 0; i -= 2) free(p[i]);
}

/* A thread that frees into its cache and exits leaves the cache with its
 * heap, for the thread that adopts it; a collector of orphans gives it back. */
static heap_t *exited;
static void *last_cached;
static void *churn(void *arg) {
  enum { N = 2000 };
  void *p[N];
  for (int i = 0; i < N; i++) p[i] = malloc(256);
  for (int i = 0; i < N; i += 5) free(p[i]);   /* 400: under the bound of 256 B (1024) */
  exited = locus_tls_heap;
  CHECK(tcache_length(&exited->cache[size_class(256)]) > 0, "nothing cached before the exit");
  for (int i = 1; i < N; i += 5) free(p[i]);
  last_cached = p[1996];
  return p[2] ? NULL : arg;              /* the rest leaks to the exit: still valid blocks */
}
static void *adopter(void *arg) {
  void *p = malloc(256);
  bool same = locus_tls_heap == exited;
  if (same) CHECK(p == last_cached, "the adopting thread got %p, not the block its heap cached last (%p)", p, last_cached);
  free(p);
  return same ? arg : NULL;
}
static void test_thread_exit(void) {
  pthread_t t;
  unsigned cls = size_class(256);
  CHECK(pthread_create(&t, NULL, churn, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  CHECK(tcache_length(&exited->cache[cls]) == 800, "the orphan caches %u blocks of 256 B, not 800",
        tcache_length(&exited->cache[cls]));
  CHECK(locus_heap_check() == 0, "heap check with an orphan's cache");
  /* a new thread of the node adopts an orphan: if it is this one, its cache serves first */
  void *adopted = (void *)1;
  CHECK(pthread_create(&t, NULL, adopter, adopted) == 0, "pthread_create");
  void *ret;
  pthread_join(t, &ret);
  if (ret != adopted) printf("  (the new thread adopted another orphan)\n");
  locus_collect();
  for (unsigned c = 0; c < NUM_CLASSES; c++)
    CHECK(tcache_length(&exited->cache[c]) == 0 && !exited->cache[c].head,
          "after locus_collect an orphan caches %u blocks of class %u", tcache_length(&exited->cache[c]), c);
  CHECK(locus_heap_check() == 0, "heap check");
}

/* A thread that cached other heaps' blocks leaves only its own to its
 * orphan: the others go back to their owners' runs at its exit. */
enum { OWN = 50, THEIRS = 100 };
static void *theirs[THEIRS];
static uint32_t before_exit;
static void *free_mixed(void *arg) {
  unsigned cls = size_class(256);
  heap_t *h = locus_tls_heap ? locus_tls_heap : (free(malloc(16)), locus_tls_heap);
  void *own[OWN];
  for (int i = 0; i < OWN; i++) own[i] = malloc(256);
  uint32_t start = tcache_length(&h->cache[cls]);   /* an adopted heap may come with some */
  for (int i = 0; i < OWN; i++) free(own[i]);
  for (int i = 0; i < THEIRS; i++) free(theirs[i]);  /* the main thread's blocks: cached here */
  CHECK(h->cache_foreign, "foreign blocks cached without the flag");
  before_exit = tcache_length(&h->cache[cls]);
  CHECK(before_exit == start + OWN + THEIRS, "%u blocks cached, expected %u", before_exit, start + OWN + THEIRS);
  exited = h;
  return arg;
}
static void test_thread_exit_foreign(void) {
  heap_t *self = locus_tls_heap;
  unsigned cls = size_class(256);
  for (int i = 0; i < THEIRS; i++) CHECK((theirs[i] = malloc(256)) != NULL, "malloc");
  chunk_t *c;
  run_of(theirs[0], &c);
  CHECK(c->r.heap == self, "the main thread's block is not its own");
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_mixed, NULL) == 0, "pthread_create");
  pthread_join(t, NULL);
  uint32_t kept = tcache_length(&exited->cache[cls]);
  CHECK(kept == before_exit - THEIRS, "the orphan keeps %u blocks, expected %u", kept, before_exit - THEIRS);
  CHECK(!exited->cache_foreign, "the orphan is still flagged foreign");
  for (void **b = exited->cache[cls].head; b; b = b[0]) {
    chunk_t *bc;
    run_of(b, &bc);
    CHECK(bc->r.heap == exited, "block %p of heap %p left in the orphan's cache", (void *)b, (void *)bc->r.heap);
  }
  /* the main thread's blocks went back to its runs through thread_free */
  run_t *runs[THEIRS];
  size_t nruns = 0, pending = 0;
  for (int i = 0; i < THEIRS; i++) {
    run_t *r = run_of(theirs[i], NULL);
    size_t k = 0;
    while (k < nruns && runs[k] != r) k++;
    if (k == nruns) runs[nruns++] = r;
  }
  bool emptied = false;                    /* a run whose every block came back is retired at once */
  for (size_t k = 0; k < nruns; k++) {
    pending += (atomic_load(&runs[k]->thread_free) & TF_COUNT_MASK) >> TF_COUNT_SHIFT;
    emptied |= runs[k]->state == RUN_FREE;
  }
  CHECK(pending >= THEIRS || emptied, "%zu blocks on the main thread's thread_free lists, expected %d", pending,
        THEIRS);
  CHECK(locus_heap_check() == 0, "heap check");
  locus_collect();
  CHECK(tcache_length(&exited->cache[cls]) == 0, "locus_collect left %u blocks in the orphan's cache",
        tcache_length(&exited->cache[cls]));
  CHECK(locus_heap_check() == 0, "heap check after collect");
}

/* Runs a function in a child; returns its exit status or signal, and its stderr. */
static int in_child(void (*fn)(void *), void *arg, char *err, size_t len) {
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < len && (r = read(fds[0], err + got, len - 1 - got)) > 0) got += (size_t)r;
  err[got] = 0;
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  return st;
}

static void double_free_cached(void *arg) {
  void *p = malloc(96);
  free(p);                                 /* into the cache */
  free(p);
}
static void test_double_free(void) {
  char err[512];
  int st = in_child(double_free_cached, NULL, err, sizeof err);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "double free of a cached block: status %#x", st);
  CHECK(strstr(err, "double free"), "message: %s", err);
}

/* Colors: fresh runs of one class start at different blocks, and the first
 * block a fresh run hands out is its block `first`; once carved to its end,
 * a run has carved the blocks before `first` too (then first = 0). */
static void test_colors(void) {
  unsigned cls = size_class(2048), distinct = 0;
  uint16_t seen[8];
  enum { PER_RUN = 32, RUNS = 8 };       /* 32 blocks of 2 KiB per run */
  static void *p[PER_RUN * RUNS];
  for (int r = 0; r < RUNS; r++) {
    CHECK((p[r * PER_RUN] = malloc(2048)) != NULL, "malloc");
    chunk_t *c;
    run_t *run = run_of(p[r * PER_RUN], &c);
    CHECK(run->cls == cls && run->used == 1, "not a fresh run of 2048 B: class %u, %u used", run->cls, run->used);
    unsigned first = run->first;
    CHECK((char *)p[r * PER_RUN] == run_start(c, run) + (size_t)first * run->bsize,
          "first block handed out %p is not block %u of its run", p[r * PER_RUN], first);
    bool known = false;
    for (unsigned k = 0; k < distinct; k++) known |= seen[k] == first;
    if (!known) seen[distinct++] = (uint16_t)first;
    for (int i = 1; i < PER_RUN; i++) CHECK((p[r * PER_RUN + i] = malloc(2048)) != NULL, "malloc");
    CHECK(run->carved == run->capacity && run->first == 0 && run->used == run->capacity,
          "run after %d mallocs: %u of %u carved from block %u, %u used", PER_RUN, run->carved, run->capacity,
          run->first, run->used);
  }
  CHECK(distinct >= 4, "%d runs started at only %u different blocks", RUNS, distinct);
  for (int i = 0; i < PER_RUN * RUNS; i++) free(p[i]);
  CHECK(locus_heap_check() == 0, "heap check");
}

/* A run of 48 B blocks (1365 blocks, 16 bytes left over at its end) that
 * starts carving mid-run: the block after the carved ones, and the start of
 * the tail slack, are not blocks. */
static void *held48[1365];
static void free_uncarved(void *arg) { free(arg); }
static void test_uncarved(void) {
  unsigned cls = size_class(48);
  heap_t *h = locus_tls_heap;
  run_t *run;
  chunk_t *c;
  /* a fresh run whose carving does not start at block 0 */
  for (;;) {
    void *p = malloc(48);
    run = run_of(p, &c);
    if (run->carved < run->capacity && run->first > 100 && run->first + 200u < run->capacity &&
        heap_cur(h, cls) == run && run->used == 1)
      break;
    held48[0] = p;                       /* keeps runs from being reused: leaks a few, on purpose */
    static int tries;
    CHECK(++tries < 200000, "no fresh 48 B run with a middle start");
  }
  char err[512];
  unsigned next = run->first + run->carved;  /* below capacity: checked above */
  char *uncarved = run_start(c, run) + (size_t)next * run->bsize;
  int st = in_child(free_uncarved, uncarved, err, sizeof err);
  CHECK(WIFSIGNALED(st) && strstr(err, "invalid pointer"), "free of never-carved block %u: status %#x, %s", next, st,
        err);
  char *before = run_start(c, run) + (size_t)(run->first - 1) * run->bsize;
  st = in_child(free_uncarved, before, err, sizeof err);
  CHECK(WIFSIGNALED(st) && strstr(err, "invalid pointer"), "free of the block before `first`: status %#x, %s", st,
        err);
  /* carve the whole run (the blocks before `first` last), then the slack */
  for (unsigned i = 1; i < run->capacity; i++) CHECK((held48[i] = malloc(48)) != NULL, "malloc");
  CHECK(run->carved == run->capacity && run->first == 0, "run not fully carved: %u of %u from %u", run->carved,
        run->capacity, run->first);
  char *slack = run_start(c, run) + (size_t)run->capacity * run->bsize;
  st = in_child(free_uncarved, slack, err, sizeof err);
  CHECK(WIFSIGNALED(st) && strstr(err, "invalid pointer"), "free of the run's tail slack: status %#x, %s", st, err);
  st = in_child(free_uncarved, before, err, sizeof err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "free of a block carved after the wrap failed: %#x, %s", st, err);
}

/* Blocks another thread allocated: freed here, they go to this thread's
 * cache (same node, a main heap) and are handed out here again, still
 * counted in the owner's run; locus_collect sends them back to the owner's
 * run through thread_free. A block of a placed sub-heap (locus_malloc_on_node)
 * is never cached by another thread: it goes back to its placement. */
static void *foreign[64];
static void *placed;
/* A thread that allocates, then stays alive (its heap is live: its blocks
 * may be cached by others) until the main thread lets it go. */
static pthread_barrier_t hold;
static void *alloc_foreign(void *arg) {
  for (int i = 0; i < 64; i++) foreign[i] = malloc(160);
  placed = locus_malloc_on_node(160, 0);
  pthread_barrier_wait(&hold);             /* allocated */
  pthread_barrier_wait(&hold);             /* released */
  return arg;
}
static void test_foreign(void) {
  heap_t *h = locus_tls_heap;
  pthread_t th;
  CHECK(pthread_barrier_init(&hold, NULL, 2) == 0, "pthread_barrier_init");
  CHECK(pthread_create(&th, NULL, alloc_foreign, NULL) == 0, "pthread_create");
  pthread_barrier_wait(&hold);
  unsigned cls = size_class(160);
  tcache_t *t = &h->cache[cls];
  chunk_t *c;
  run_t *run = run_of(foreign[0], &c);
  CHECK(c->r.heap != h && c->r.heap->place == PLACE_MAIN, "block of another main heap expected");
  locus_collect();                         /* empty cache, and on */
  void *q = malloc(160);                   /* the slow path turns every class on */
  free(q);
  locus_collect();
  unsigned used = run->used;
  uintptr_t tf = atomic_load(&run->thread_free);
  free(foreign[0]);
  CHECK(tcache_length(t) == 1, "another thread's block not cached here (%u)", tcache_length(t));
  CHECK(run->used == used && atomic_load(&run->thread_free) == tf, "the owner's run changed at a cached free");
  CHECK(locus_heap_check() == 0, "heap check with a foreign block cached");
  void *again = malloc(150);
  CHECK(again == foreign[0], "malloc handed out %p, not the foreign block freed last %p", again, foreign[0]);
  free(again);
  locus_collect();
  CHECK(tcache_length(t) == 0, "locus_collect kept foreign blocks");
  CHECK(run->state == RUN_FREE || (atomic_load(&run->thread_free) & TF_COUNT_MASK) || run->used < used,
        "the flushed foreign block did not go back to its run");
  if (placed) {
    run_t *prun = run_of(placed, &c);
    CHECK(c->r.heap->place == 0, "locus_malloc_on_node(0) block in a heap of place %d", c->r.heap->place);
    unsigned n = tcache_length(&h->cache[prun->cls]);
    free(placed);
    CHECK(tcache_length(&h->cache[prun->cls]) == n, "a placed block was cached by another thread");
  }
  /* once the owner has exited, its blocks go home (small_free_foreign) */
  pthread_barrier_wait(&hold);
  pthread_join(th, NULL);
  run_of(foreign[1], &c);
  CHECK(heap_state(c->r.heap) == HEAP_ORPHAN, "the owner's heap is not an orphan");
  uint32_t n = tcache_length(t);
  tf = atomic_load(&run_of(foreign[1], NULL)->thread_free);
  free(foreign[1]);
  CHECK(tcache_length(t) == n, "a block of an exited thread was cached (%u blocks, %u before)", tcache_length(t), n);
  CHECK(((atomic_load(&run_of(foreign[1], NULL)->thread_free) ^ tf) & TF_COUNT_MASK) ||
        run_of(foreign[1], NULL)->state == RUN_FREE, "the exited thread's block did not go to its run");
  for (int i = 2; i < 64; i++) free(foreign[i]);
  CHECK(locus_heap_check() == 0, "heap check");
  pthread_barrier_destroy(&hold);
}

static void *alloc_one(void *arg) {
  *(void **)arg = malloc(200);
  pthread_barrier_wait(&hold);             /* allocated */
  pthread_barrier_wait(&hold);             /* released (never, in the child below) */
  return NULL;
}
/* In a child (a fork's other threads are gone, their heaps dead): a thread
 * of the child allocates and stays alive, so its block is cached here. */
static void double_free_foreign(void *arg) {
  pthread_t th;
  void *p = NULL;
  if (pthread_barrier_init(&hold, NULL, 2) || pthread_create(&th, NULL, alloc_one, &p)) _exit(5);
  pthread_barrier_wait(&hold);
  heap_t *h = locus_tls_heap;
  unsigned n = tcache_length(&h->cache[size_class(200)]);
  free(p);                                 /* into this thread's cache: its owner is alive */
  if (tcache_length(&h->cache[size_class(200)]) != n + 1) _exit(6);
  free(p);
  _exit(0);
}
static void test_double_free_foreign(void) {
  char err[512];
  int st = in_child(double_free_foreign, NULL, err, sizeof err);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(err, "double free"),
        "double free of a cached foreign block: status %#x, %s", st, err);
}

/* LOCUS_THREAD_CACHE=0 (the option as read at start, set here on a heap
 * whose cache was flushed): every free goes to the runs. */
static void cache_off(void *arg) {
  heap_t *h = locus_tls_heap;
  locus_collect();
  locus_opt.thread_cache = 0;
  small_cache_init(h);
  unsigned cls = size_class(64);
  void *p = malloc(64);
  run_t *run = run_of(p, NULL);
  unsigned used = run->used;
  free(p);
  if (h->cache[cls].bound || tcache_length(&h->cache[cls]) || run->used != used - 1) _exit(3);
  _exit(locus_heap_check() == 0 ? 0 : 4);
}

int main(void) {
  free(malloc(1));                         /* a heap */
  test_lifo_across_runs();
  test_overflow();
  test_collect();
  test_thread_exit();
  test_thread_exit_foreign();
  test_double_free();
  test_colors();
  test_uncarved();
  test_foreign();
  test_double_free_foreign();
  char err[512];
  int st = in_child(cache_off, NULL, err, sizeof err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "with the cache off: status %#x, %s", st, err);
  return TEST_DONE();
}
