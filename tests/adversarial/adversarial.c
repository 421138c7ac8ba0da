/* The adversarial suite: threads on the SAME object at once, for every
 * concurrency protocol of the heaps (docs/design.md, "Locks and waits" and
 * the invariants table):
 *
 *   same_run   a run's blocks freed by several threads at once (the last
 *              free's retire, two threads freeing a run's last two blocks)
 *              while the owner frees its own share of the run and allocates
 *              again from the class;
 *   notify     full runs (all blocks handed out) freed by several threads at
 *              once: the first free's notification, frees pushed while it is
 *              under way, the owner marking runs full and draining the
 *              notify stack meanwhile;
 *   medium     medium blocks of one chunk freed by several threads at once
 *              (the heap's remote stack) while the owner allocates and
 *              frees medium blocks (drains it, merges neighbours);
 *   orphan     a thread exits while others free its blocks; new threads
 *              adopt its heap and allocate while the frees go on; another
 *              thread collects orphans (locus_collect, locus_release);
 *   idle       an owner that stops allocating for about HEAP_IDLE_NS while
 *              others free its blocks (its current runs are taken back)
 *              and that allocates again at the moment they do;
 *   cache_exit threads that hold other threads' blocks in their thread
 *              caches exit while the owners free and allocate the same
 *              classes, or exit too;
 *   fork       fork() while a crew frees the same runs and the owner
 *              allocates; the child allocates, frees and exits in time.
 *
 * Every block carries its address mixed with a constant and a sequence
 * number (two words), checked at its free; every block made is freed once
 * (counts); after locus_release the bytes in use are back to where they
 * were before the case (nothing lost). Each case runs rounds until its time
 * budget (--seconds, default 1) is spent: bounded, and as many rounds as the
 * machine allows. The windows the protocols must survive are a few
 * instructions wide; a test hook of the library (small_notify_hook: the
 * suite links the library's objects, locus_internal) widens the widest one:
 * every 4th stage of a full run's notification (before its push, and
 * between its push and its end) yields the CPU, every 64th sleeps 50 us, as
 * a preempted notifier would. Run under `taskset -c 0` (ctest adversarial_cpu0) so that
 * preemption lands anywhere, with the thread cache off (every free of
 * another thread's block takes the remote path) and on, in the LOCUS_DEBUG
 * build (tests/debug/run.sh) and under ThreadSanitizer
 * (tests/sanitizers/run.sh).
 *
 *   adversarial [--seconds S] [CASE...]      (default: every case) */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "locus_test_api.h"

#define MAGIC ((uintptr_t)0x5eed5eed5eed5eedull)
#define MAXT 8

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static double budget = 1.0;

extern void (*small_notify_hook)(int stage);   /* heap/small.c, test hook */
extern size_t waits_slept(void);                /* util/lock.c */
static atomic_size_t notifications;
static void hold_notification(int stage) {
  static _Thread_local unsigned n;
  if (stage == 0) atomic_fetch_add_explicit(&notifications, 1, memory_order_relaxed);
  if (++n % 64 == 0) sleep_us(50);
  else if (n % 4 == 0) sched_yield();
}
static atomic_size_t made, freed;
static atomic_uint_fast64_t seq;

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "adversarial: FAILED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}


static double longest_round;           /* of the case running, in seconds */
static double round_end(double r0) {   /* returns now */
  double t = now_s();
  if (t - r0 > longest_round) longest_round = t - r0;
  return t;
}

static uint64_t rnd(uint64_t *s) {
  *s = *s * 6364136223846793005u + 1442695040888963407u;
  return *s >> 33;
}

/* A block of `size` (>= 16) with its two check words. */
static uintptr_t *make(size_t size) {
  uintptr_t *b = LOCUS_API(malloc)(size);
  if (!b) fail("malloc(%zu) failed", size);
  b[0] = (uintptr_t)b ^ MAGIC;
  b[1] = atomic_fetch_add_explicit(&seq, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&made, 1, memory_order_relaxed);
  return b;
}

static void check_free(uintptr_t *b) {
  if (b[0] != ((uintptr_t)b ^ MAGIC) || b[1] >= atomic_load_explicit(&seq, memory_order_relaxed))
    fail("block %p corrupted: words %zx %zx", (void *)b, (size_t)b[0], (size_t)b[1]);
  b[0] = 0;                            /* a second free of it is caught here */
  LOCUS_API(free)(b);
  atomic_fetch_add_explicit(&freed, 1, memory_order_relaxed);
}

/* A thread's argument: the case's shared state and the thread's number. */
typedef struct {
  void *ctx;
  size_t id;
} targ_t;

/* ---- a crew of threads that free slices of one batch at once ------------- */
typedef struct {
  pthread_barrier_t go, done;
  uintptr_t **blocks;
  size_t n;
  int crew;                            /* freeing threads, the owner not counted */
  atomic_int stop;
} crew_t;

static void *crew_member(void *arg) {
  crew_t *c = ((targ_t *)arg)->ctx;
  size_t id = ((targ_t *)arg)->id;
  for (;;) {
    pthread_barrier_wait(&c->go);
    if (atomic_load(&c->stop)) return NULL;
    /* every member frees every crew-th block: neighbours, same run */
    for (size_t i = id; i < c->n; i += (size_t)c->crew + 1) check_free(c->blocks[i]);
    pthread_barrier_wait(&c->done);
  }
}

typedef struct {
  crew_t c;
  pthread_t t[MAXT];
  targ_t args[MAXT];
} crew_run_t;

static void crew_start(crew_run_t *r, int crew, uintptr_t **blocks) {
  r->c.crew = crew;
  r->c.blocks = blocks;
  atomic_store(&r->c.stop, 0);
  pthread_barrier_init(&r->c.go, NULL, (unsigned)crew + 1);
  pthread_barrier_init(&r->c.done, NULL, (unsigned)crew + 1);
  for (int i = 0; i < crew; i++) {
    r->args[i] = (targ_t){&r->c, (size_t)i};
    if (pthread_create(&r->t[i], NULL, crew_member, &r->args[i])) fail("pthread_create");
  }
}

static void crew_stop(crew_run_t *r) {
  atomic_store(&r->c.stop, 1);
  pthread_barrier_wait(&r->c.go);
  for (int i = 0; i < r->c.crew; i++) pthread_join(r->t[i], NULL);
  pthread_barrier_destroy(&r->c.go);
  pthread_barrier_destroy(&r->c.done);
}

/* ---- same_run and notify --------------------------------------------------- */
#define BATCH_MAX 4096

/* The owner (this thread) makes a batch of one class (consecutive blocks:
 * the same runs), the crew frees it at once with the owner taking its own
 * share (index crew mod crew+1) and, in `notify`, allocating and freeing
 * more of the class meanwhile. `full`: whole runs, so they are full when
 * the crew starts. */
enum { SMALL_RUNS, FULL_RUNS, MEDIUM };
static size_t run_case_batches(int kind) {
  static uintptr_t *blocks[BATCH_MAX];
  crew_run_t r;
  int crew = 3;
  crew_start(&r, crew, blocks);
  uint64_t s = 42;
  size_t rounds = 0;
  double end = now_s() + budget;
  for (double r0 = now_s(); r0 < end; r0 = round_end(r0)) {
    size_t size = 16u << rnd(&s) % 8;  /* 16 B .. 2 KiB: 32 .. 4096 blocks per 64 KiB run */
    size_t per_run = 65536 / size, n;
    if (kind == FULL_RUNS) n = per_run * (1 + rnd(&s) % 3);
    else n = 2 + rnd(&s) % (per_run < 64 ? per_run : 64);
    if (n > BATCH_MAX) n = BATCH_MAX - BATCH_MAX % per_run;
    if (kind == MEDIUM) {              /* 8 KiB .. 256 KiB: neighbours in one medium chunk */
      size = 8192 + 16 + rnd(&s) % (248 * 1024);
      n = 2 + rnd(&s) % 24;
    }
    for (size_t i = 0; i < n; i++) blocks[i] = make(size);
    r.c.n = n;
    pthread_barrier_wait(&r.c.go);
    for (size_t i = (size_t)crew; i < n; i += (size_t)crew + 1) check_free(blocks[i]);
    uintptr_t *mine[32];
    for (int k = 0; k < 32; k++) mine[k] = make(size);   /* the owner allocates while they free */
    for (int k = 0; k < 32; k++) check_free(mine[k]);
    pthread_barrier_wait(&r.c.done);
    rounds++;
  }
  crew_stop(&r);
  return rounds;
}

static size_t case_same_run(void) { return run_case_batches(SMALL_RUNS); }
static size_t case_notify(void) { return run_case_batches(FULL_RUNS); }
static size_t case_medium(void) { return run_case_batches(MEDIUM); }

/* ---- orphan --------------------------------------------------------------- */
#define ORPHAN_N 2048
typedef struct {
  uintptr_t *blocks[ORPHAN_N];
  pthread_barrier_t made;              /* maker + freers: the blocks exist */
  atomic_size_t next;                  /* the freers' cursor */
} orphan_t;

static void *orphan_maker(void *arg) {
  orphan_t *o = arg;
  uint64_t s = (uintptr_t)arg;
  for (size_t i = 0; i < ORPHAN_N; i++) o->blocks[i] = make(16 + rnd(&s) % 600);
  pthread_barrier_wait(&o->made);
  return NULL;                         /* exits while the freers free: its heap is orphaned meanwhile */
}

static void *orphan_freer(void *arg) {
  orphan_t *o = arg;
  pthread_barrier_wait(&o->made);
  size_t i;
  while ((i = atomic_fetch_add(&o->next, 1)) < ORPHAN_N) check_free(o->blocks[i]);
  return NULL;
}

static void *adopter(void *arg) {     /* a new thread: adopts an orphan, allocates, exits */
  uint64_t s = (uintptr_t)arg;
  uintptr_t *b[64];
  for (int i = 0; i < 64; i++) b[i] = make(16 + rnd(&s) % 600);
  for (int i = 0; i < 64; i++) check_free(b[i]);
  return NULL;
}

static size_t case_orphan(void) {
  static orphan_t o;
  size_t rounds = 0;
  double end = now_s() + budget;
  for (double r0 = now_s(); r0 < end; r0 = round_end(r0)) {
    atomic_store(&o.next, 0);
    pthread_barrier_init(&o.made, NULL, 3);
    pthread_t m, f[2], a[2];
    pthread_create(&m, NULL, orphan_maker, &o);
    pthread_create(&f[0], NULL, orphan_freer, &o);
    pthread_create(&f[1], NULL, orphan_freer, &o);
    pthread_join(m, NULL);             /* the maker is gone: adopters may take its heap now */
    for (int i = 0; i < 2; i++) pthread_create(&a[i], NULL, adopter, (void *)(uintptr_t)(rounds * 2 + i + 1));
    if (rounds % 2) locus_collect();
    else locus_release();              /* collects orphans while frees and adoptions go on */
    for (int i = 0; i < 2; i++) pthread_join(f[i], NULL), pthread_join(a[i], NULL);
    pthread_barrier_destroy(&o.made);
    rounds++;
  }
  return rounds;
}

/* ---- idle ------------------------------------------------------------------- */
#define IDLE_N 1024
typedef struct {
  uintptr_t *blocks[IDLE_N];
  pthread_barrier_t made;
  atomic_int phase;                    /* 1: first half freed */
  long sleep_us;
} idle_t;

static void *idle_owner(void *arg) {
  idle_t *d = arg;
  for (size_t i = 0; i < IDLE_N; i++) d->blocks[i] = make(32 + 32 * (i % 4));
  pthread_barrier_wait(&d->made);
  sleep_us(d->sleep_us);               /* idle about HEAP_IDLE_NS (10 ms): probed, then taken back */
  uintptr_t *b[256];                   /* allocates again while the others free */
  for (int k = 0; k < 4; k++) {
    for (int i = 0; i < 256; i++) b[i] = make(32 + 32 * (i % 4));
    for (int i = 0; i < 256; i++) check_free(b[i]);
  }
  return NULL;
}

static void *idle_freer(void *arg) {
  idle_t *d = ((targ_t *)arg)->ctx;
  size_t half = ((targ_t *)arg)->id;
  pthread_barrier_wait(&d->made);
  for (size_t i = half; i < IDLE_N; i += 4) check_free(d->blocks[i]);   /* probes the owner */
  sleep_us(d->sleep_us - 1000 + (long)half * 700);
  for (size_t i = half + 2; i < IDLE_N; i += 4) check_free(d->blocks[i]);   /* the runs' last blocks */
  return NULL;
}

static size_t case_idle(void) {
  static idle_t d;
  size_t rounds = 0;
  uint64_t s = 7;
  double end = now_s() + budget;
  for (double r0 = now_s(); r0 < end; r0 = round_end(r0)) {
    d.sleep_us = 8000 + (long)(rnd(&s) % 6000);
    pthread_barrier_init(&d.made, NULL, 3);
    pthread_t o, f[2];
    targ_t args[2] = {{&d, 0}, {&d, 1}};
    pthread_create(&o, NULL, idle_owner, &d);
    for (int i = 0; i < 2; i++) pthread_create(&f[i], NULL, idle_freer, &args[i]);
    pthread_join(o, NULL);
    for (int i = 0; i < 2; i++) pthread_join(f[i], NULL);
    pthread_barrier_destroy(&d.made);
    rounds++;
  }
  return rounds;
}

/* ---- cache_exit ------------------------------------------------------------- */
#define CX_N 512
typedef struct {
  uintptr_t *blocks[CX_N];
  pthread_barrier_t made, cached;
  bool owner_exits;
} cx_t;

static void *cx_owner(void *arg) {
  cx_t *x = arg;
  for (size_t i = 0; i < CX_N; i++) x->blocks[i] = make(48 + 16 * (i % 5));
  pthread_barrier_wait(&x->made);
  pthread_barrier_wait(&x->cached);
  if (x->owner_exits) return NULL;     /* exits while the cachers exit: its heap an orphan */
  uintptr_t *b[128];
  for (int k = 0; k < 4; k++) {        /* same classes while the cachers send its blocks home */
    for (int i = 0; i < 128; i++) b[i] = make(48 + 16 * (i % 5));
    for (int i = 0; i < 128; i++) check_free(b[i]);
  }
  return NULL;
}

static void *cx_cacher(void *arg) {
  cx_t *x = ((targ_t *)arg)->ctx;
  size_t me = ((targ_t *)arg)->id;
  LOCUS_API(free)(LOCUS_API(malloc)(1));   /* a heap of its own, on the owner's node */
  pthread_barrier_wait(&x->made);
  for (size_t i = me; i < CX_N; i += 2) check_free(x->blocks[i]);   /* into this thread's cache (on) */
  pthread_barrier_wait(&x->cached);
  return NULL;                         /* exit: foreign cached blocks go back to the owner's runs */
}

static size_t case_cache_exit(void) {
  static cx_t x;
  size_t rounds = 0;
  double end = now_s() + budget;
  for (double r0 = now_s(); r0 < end; r0 = round_end(r0)) {
    x.owner_exits = rounds % 2;
    pthread_barrier_init(&x.made, NULL, 3);
    pthread_barrier_init(&x.cached, NULL, 3);
    pthread_t o, c[2];
    targ_t args[2] = {{&x, 0}, {&x, 1}};
    pthread_create(&o, NULL, cx_owner, &x);
    for (int i = 0; i < 2; i++) pthread_create(&c[i], NULL, cx_cacher, &args[i]);
    pthread_join(o, NULL);
    for (int i = 0; i < 2; i++) pthread_join(c[i], NULL);
    pthread_barrier_destroy(&x.made);
    pthread_barrier_destroy(&x.cached);
    rounds++;
  }
  return rounds;
}

/* ---- fork ------------------------------------------------------------------- */
#if defined(__SANITIZE_THREAD__)      /* GCC */
#define ADV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)   /* clang */
#define ADV_TSAN 1
#endif
#endif
/* fork() while a crew frees the same runs and their owner allocates (the
 * same_run case, in the main thread, which makes the threads: the blocks
 * glibc allocates for a thread it makes, and keeps in its stack cache, stay
 * in the main heap): every lock of the library, each run's notification,
 * may be held or under way at the fork, which another thread makes. The
 * child, with a 10 s alarm, allocates and frees blocks of every kind, then
 * exits 0. */
static atomic_int fork_stop;

static void *forker(void *arg) {
  size_t *forks = arg;
  while (!atomic_load(&fork_stop)) {
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
      alarm(10);
      uintptr_t *b[64];
      for (int i = 0; i < 64; i++) b[i] = LOCUS_API(malloc)((size_t)16 << (i % 18));   /* 16 B .. 2 MiB */
      for (int i = 0; i < 64; i++) {
        if (!b[i]) _exit(4);
        b[i][0] = (uintptr_t)i;
      }
      for (int i = 0; i < 64; i++) LOCUS_API(free)(b[i]);
      _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail("fork: child status %#x (a lock or a notification inherited from a thread it does not have?)", st);
    ++*forks;
    sleep_us(2000);
  }
  return NULL;
}

static size_t case_fork(void) {
#ifdef ADV_TSAN
  return 1;                            /* TSan's runtime and a multi-threaded fork: not this suite's subject */
#else
  size_t forks = 0;
  pthread_t t;
  atomic_store(&fork_stop, 0);
  if (pthread_create(&t, NULL, forker, &forks)) fail("pthread_create");
  size_t rounds = run_case_batches(SMALL_RUNS);
  atomic_store(&fork_stop, 1);
  pthread_join(t, NULL);
  printf("adversarial: fork       %zu children, each ended 0\n", forks);
  return forks && rounds ? rounds : 0;
#endif
}

/* ---- driver ------------------------------------------------------------------- */
static const struct {
  const char *name;
  size_t (*run)(void);
} cases[] = {
  {"same_run", case_same_run}, {"notify", case_notify}, {"medium", case_medium}, {"orphan", case_orphan},
  {"idle", case_idle},         {"cache_exit", case_cache_exit}, {"fork", case_fork},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* A case that does not end (a wait that never returns, a cycle followed)
 * fails with its name, not at the ctest timeout. */
static const char *running;
static void watchdog(int sig) {
  (void)sig;
  char msg[128];
  int n = snprintf(msg, sizeof msg, "adversarial: FAILED: case %s did not finish in time (hung?)\n", running);
  if (write(2, msg, (size_t)n) < 0) {
  }
  _exit(3);
}

static size_t in_use(void) {
  locus_stats_t st;
  locus_stats_get(&st);
  return (size_t)st.bytes_in_use;
}

static void run(size_t k) {
  locus_release();
  size_t use0 = in_use(), made0 = made, freed0 = freed, notes0 = notifications, slept0 = waits_slept();
  double t0 = now_s();
  running = cases[k].name;
  longest_round = 0;
  alarm((unsigned)(budget * 5) + 30);
  size_t rounds = cases[k].run();
  alarm(0);
  double secs = now_s() - t0;
  locus_release();
  size_t use1 = in_use(), m = made - made0, f = freed - freed0;
  printf("adversarial: %-10s %6zu rounds in %.2f s (longest %.1f ms), %9zu blocks made, %9zu freed, %7zu "
         "notifications, %zu waits slept, in use %zu -> %zu KiB\n", cases[k].name, rounds, secs, longest_round * 1e3,
         m, f, (size_t)(notifications - notes0), waits_slept() - slept0, use0 >> 10, use1 >> 10);
  if (m != f) fail("%s: %zu blocks made, %zu freed", cases[k].name, m, f);
  if (use1 > use0) locus_stats_print();   /* which heap or source holds it */
  if (use1 > use0) fail("%s: in use grew from %zu to %zu bytes: memory lost", cases[k].name, use0, use1);
  if (!rounds) fail("%s: no round ran", cases[k].name);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  small_notify_hook = hold_notification;
  signal(SIGALRM, watchdog);
  printf("adversarial: allocator %s, thread cache %s\n", T_ALLOCATOR_NAME,
         getenv("LOCUS_THREAD_CACHE") ? getenv("LOCUS_THREAD_CACHE") : "default");
  bool any = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      budget = atof(argv[++i]);
      continue;
    }
    size_t k = 0;
    while (k < NCASES && strcmp(cases[k].name, argv[i])) k++;
    if (k == NCASES) {
      fprintf(stderr, "adversarial: unknown case %s\n", argv[i]);
      return 2;
    }
    run(k);
    any = true;
  }
  if (!any)
    for (size_t k = 0; k < NCASES; k++) run(k);
  printf("adversarial: all cases passed\n");
  return 0;
}
