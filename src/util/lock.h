/* Locks and waits.
 *
 * lock_t: a lock for the short critical sections off the fast paths (memory
 * sources, heap lists). It never allocates, and a fork handler can reset it,
 * which a pthread mutex held by a vanished thread would not allow. A waiter
 * spins a little, yields, then sleeps on a futex that the release wakes
 * (v: 0 free, 1 held, 2 held and someone may sleep on it): a holder that is
 * preempted, or a waiter of a higher real-time priority on the holder's
 * CPU, costs a sleep, never a livelock.
 *
 * The lock registry: every lock of the library belongs to a class with a
 * rank (lock_rank_t). Locks are taken in increasing rank (a blocking take of
 * a lock ranked below one held is a bug: the debug build aborts naming
 * both); a try (lock_try) may take any lock, since it never waits. Two locks
 * of one rank are held at once only under that rank's guard (heap locks
 * under heaps_lock: lock_rank_guard). fork() takes every registered lock in
 * rank order in its prepare handler (locks_fork_prepare), so no lock is
 * held by a thread the child does not have.
 *
 * waitq_t: the bounded wait for a state that another thread ends (a run's
 * notification, the library's initialisation): spin a little, yield, then
 * sleep on a futex that the ender wakes, with a timeout as a safety net. */
#ifndef LOCUS_LOCK_H
#define LOCUS_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ranks, taken in increasing order; the gaps leave room for new classes.
 * Where each lock nests (docs/design.md, "Locks and waits"):
 *   stats print       -> heaps, options file (locus_stats_print)
 *   trace open        -> nothing of the allocator (opens the file, reads maps)
 *   next-touch ranges -> fault handler install (if it is ever taken inside)
 *   heaps             -> heap (adopt, abandon, orphan collection)
 *   user heap         -> its heap, the sources, its user source (the
 *                        allocation path of a user heap; destroy, reset)
 *   heap              -> another heap (only under heaps: an orphan collected
 *                        by a thread holding its own heap's lock), source,
 *                        registry spares; heaps with a try only (a heap about
 *                        to take a new chunk collects orphans if it can)
 *   source            -> nothing
 *   user source       -> nothing (the user's map is called outside it)
 *   registry spares, options file: leaves */
typedef enum {
  LOCK_RANK_NONE = 0,                  /* unregistered: the debug build aborts on its use */
  LOCK_RANK_STATS_PRINT = 10,
  LOCK_RANK_TRACE_OPEN = 20,
  LOCK_RANK_NEXT_TOUCH = 30,
  LOCK_RANK_FAULT = 35,
  LOCK_RANK_HEAPS = 40,
  LOCK_RANK_USER_HEAP = 45,            /* a user heap's lock: growth, new sub-heaps, drop (heap/user.c) */
  LOCK_RANK_HEAP = 50,
  LOCK_RANK_SOURCE = 60,
  LOCK_RANK_KSM = 62,                  /* LOCUS_KSM=auto's watched blocks (source/ksm.c): a leaf */
  LOCK_RANK_USER_SOURCE = 65,          /* a user heap's memory (source/user.c) */
  LOCK_RANK_REGISTRY_SPARE = 70,
  LOCK_RANK_OPTIONS_FILE = 80,
  LOCK_RANK_SHARED_TABLE = 85,         /* the process's shared tables (api/shared.c): a leaf */
  LOCK_RANK_TEST = 200,                /* locks of the test programs (locus_internal) */
} lock_rank_t;

typedef struct {
  atomic_int v;                        /* 0 free, 1 held, 2 held with possible sleepers */
  uint8_t rank;                        /* lock_rank_t */
} lock_t;
#define LOCK_INIT(r) {0, (r)}
static inline void lock_init(lock_t *l, lock_rank_t r) {
  atomic_store_explicit(&l->v, 0, memory_order_relaxed);
  l->rank = (uint8_t)r;
}

#ifdef LOCUS_TLS_DYNAMIC
#define LOCK_TLS __thread __attribute__((tls_model("global-dynamic")))
#else
#define LOCK_TLS __thread __attribute__((tls_model("initial-exec")))
#endif
/* True in the forking thread from the end of the prepare handler to the
 * start of the parent's or child's: it holds every lock of the library
 * then, and its takes and releases do nothing. Other libraries' fork
 * handlers registered before locus's (a constructor that ran first) run
 * inside that window (prepare handlers run in reverse order of
 * registration, the others in order) and may allocate: without this, their
 * first slow path waited for a lock its own thread held, forever. */
extern LOCK_TLS bool lock_fork_holder;

void lock_acquire(lock_t *l);
void lock_wake(lock_t *l);             /* the release found a sleeper */
#ifdef LOCUS_DEBUG
/* The debug build tracks the locks each thread holds (order checks). */
bool lock_try(lock_t *l);
void lock_release(lock_t *l);
/* Whether the calling thread holds l (debug build only). */
bool lock_held(const lock_t *l);
#else
static inline bool lock_try(lock_t *l) {
  if (__builtin_expect(lock_fork_holder, 0)) return true;
  int z = 0;
  return atomic_compare_exchange_strong_explicit(&l->v, &z, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}
static inline void lock_release(lock_t *l) {
  if (__builtin_expect(lock_fork_holder, 0)) return;
  if (__builtin_expect(atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2, 0)) lock_wake(l);
}
#endif

/* ---- the registry ----------------------------------------------------------
 * A class is one lock (`lock`) or many of one rank (`each` calls its
 * argument on every one; it runs with every lower-ranked class held, so a
 * list guarded by one of those may be walked). Classes are registered from
 * constructors, before main and before locus's own constructor registers
 * the fork handlers. */
typedef struct lock_class_s {
  const char *name;
  lock_rank_t rank;
  lock_t *lock;
  void (*each)(void (*fn)(lock_t *));
  /* Optional: run by fork's prepare handler once this class's locks are
   * held (and every lower-ranked one), and in the child after the reset. A
   * module whose state must be made fork-safe under its own lock hooks here
   * rather than registering a pthread_atfork handler of its own, which would
   * take the lock a second time. */
  void (*fork_prepare)(void);
  void (*fork_child)(void);
  struct lock_class_s *next;           /* the registry's list, by rank */
} lock_class_t;
void lock_class_register(lock_class_t *c);
/* Defines a static lock of rank r and registers it under `what`. */
#define LOCK_STATIC(var, r, what)                                                            \
  static lock_t var = LOCK_INIT(r);                                                          \
  static lock_class_t var##_class = {.name = (what), .rank = (r), .lock = &var};             \
  __attribute__((constructor(101))) static void var##_register(void) { lock_class_register(&var##_class); }
/* The same, with fork hooks (lock_class_t's fork_prepare and fork_child). */
#define LOCK_STATIC_FORK(var, r, what, prepare, child)                                       \
  static lock_t var = LOCK_INIT(r);                                                          \
  static lock_class_t var##_class = {.name = (what), .rank = (r), .lock = &var,              \
                                     .fork_prepare = (prepare), .fork_child = (child)};      \
  __attribute__((constructor(101))) static void var##_register(void) { lock_class_register(&var##_class); }
/* The classes in rank order (tests, reports). */
const lock_class_t *lock_classes(void);
/* fork(): prepare takes every lock of every class in rank order (running a
 * class's fork_prepare once its locks are held); the parent releases them,
 * the child resets them (its other threads are gone), then runs the
 * classes' fork_child hooks. */
void locks_fork_prepare(void);
void locks_fork_parent(void);
void locks_fork_child(void);

/* ---- bounded waits --------------------------------------------------------- */
typedef struct {
  atomic_int seq;                      /* bumped at each wake: the futex word */
  atomic_int waiters;                  /* threads at the sleeping stage */
} waitq_t;
/* Waits until ended(arg): spins, yields, then sleeps on q. ended must read
 * with acquire (or stronger) loads. */
void waitq_wait(waitq_t *q, bool (*ended)(const void *), const void *arg);
/* Called by the thread that ended the state (after the store that ends it):
 * wakes the sleepers, if any. Costs a fence and a load when there are none. */
void waitq_wake(waitq_t *q);
/* fork() child: the sleepers were other threads; without the reset every
 * wake would make a system call. */
static inline void waitq_reset(waitq_t *q) { atomic_store_explicit(&q->waiters, 0, memory_order_relaxed); }
/* Lock and queue waits that reached the sleeping stage so far (tests). */
size_t waits_slept(void);

#endif /* LOCUS_LOCK_H */
