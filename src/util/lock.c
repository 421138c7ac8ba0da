#include "util/lock.h"

#include <limits.h>

#include "arch/arch.h"
#include "os/sys.h"
#include "util/error.h"

/* The stages of every wait: WAIT_SPINS pauses (a holder on another CPU is
 * usually out within them), then WAIT_YIELDS yields (a holder preempted on
 * this CPU, of the same priority, gets it), then sleeps of at most
 * WAIT_SLEEP_NS (a holder of a lower real-time priority runs only when the
 * waiter sleeps; the bound is a safety net: the ender wakes the sleepers). */
#define WAIT_SPINS 100u
#define WAIT_YIELDS 8u
#define WAIT_SLEEP_NS (2u * 1000 * 1000)

/* ---- the lock ------------------------------------------------------------- */

static atomic_size_t sleeps;           /* waits that reached the sleeping stage (tests) */
size_t waits_slept(void) { return atomic_load_explicit(&sleeps, memory_order_relaxed); }

static inline bool raw_try(lock_t *l) {
  int z = 0;
  return atomic_compare_exchange_strong_explicit(&l->v, &z, 1, memory_order_acquire, memory_order_relaxed);
}

static void raw_acquire(lock_t *l) {
  for (unsigned i = 0; i < WAIT_SPINS + WAIT_YIELDS; i++) {
    if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 && raw_try(l)) return;
    if (i < WAIT_SPINS) arch_pause();
    else os_yield();
  }
  /* Sleeping: 2 says so to the release. Taken with 2 (the previous value was
   * 0): the release may wake nobody, which costs a system call only. */
  while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0) {
    atomic_fetch_add_explicit(&sleeps, 1, memory_order_relaxed);
    os_futex_wait(&l->v, 2, WAIT_SLEEP_NS);
  }
}

static inline void raw_release(lock_t *l) {
  if (atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2) lock_wake(l);
}

void lock_wake(lock_t *l) { os_futex_wake(&l->v, 1); }

/* ---- the registry ----------------------------------------------------------- */

static lock_class_t *classes;          /* by rank; written by constructors only */

void lock_class_register(lock_class_t *c) {
  lock_class_t **link = &classes;
  while (*link && (*link)->rank <= c->rank) link = &(*link)->next;
  c->next = *link;
  *link = c;
}

const lock_class_t *lock_classes(void) { return classes; }

#define MAX_CLASSES 32

static void class_apply(lock_class_t *c, void (*fn)(lock_t *)) {
  if (c->lock) fn(c->lock);
  else c->each(fn);
}

LOCK_TLS bool lock_fork_holder;

void locks_fork_prepare(void) {
  for (lock_class_t *c = classes; c; c = c->next) {
    class_apply(c, raw_acquire);
    if (c->fork_prepare) c->fork_prepare();
  }
  lock_fork_holder = true;
}

/* Releases go from the highest rank down: a class's `each` may walk a list
 * that a lower-ranked lock guards, still held then. */
static void fork_release_all(void (*fn)(lock_t *)) {
  lock_class_t *order[MAX_CLASSES];
  unsigned n = 0;
  for (lock_class_t *c = classes; c; c = c->next) {
    if (n == MAX_CLASSES) locus_fatal("internal error: more than %d lock classes", MAX_CLASSES);
    order[n++] = c;
  }
  while (n) class_apply(order[--n], fn);
}

void locks_fork_parent(void) {
  lock_fork_holder = false;
  fork_release_all(raw_release);
}

/* The child has one thread: nobody sleeps on a lock. */
static void reset_lock(lock_t *l) { atomic_store_explicit(&l->v, 0, memory_order_relaxed); }
void locks_fork_child(void) {
  lock_fork_holder = false;
  fork_release_all(reset_lock);
  for (lock_class_t *c = classes; c; c = c->next)
    if (c->fork_child) c->fork_child();
}

/* ---- order checks (debug build) ---------------------------------------------- */
#ifdef LOCUS_DEBUG
#define HELD_MAX 16
#define HELD_TLS LOCK_TLS
static HELD_TLS lock_t *held[HELD_MAX];
static HELD_TLS unsigned nheld;

static const char *rank_name(unsigned rank) {
  for (const lock_class_t *c = classes; c; c = c->next)
    if (c->rank == rank) return c->name;
  return "an unregistered lock";
}

/* The rank whose lock must be held for a second lock of `rank` to be taken. */
static unsigned rank_guard(unsigned rank) { return rank == LOCK_RANK_HEAP ? LOCK_RANK_HEAPS : 0; }

static bool holds_rank(unsigned rank) {
  for (unsigned i = 0; i < nheld; i++)
    if (held[i]->rank == rank) return true;
  return false;
}

static void check_order(const lock_t *l) {
  if (l->rank == LOCK_RANK_NONE) locus_fatal("internal error: lock %p has no rank (not in the lock registry)", (void *)l);
  for (unsigned i = 0; i < nheld; i++) {
    const lock_t *h = held[i];
    if (h == l) locus_fatal("internal error: lock order: %s (%p) taken again by its holder", rank_name(l->rank), (void *)l);
    if (h->rank < l->rank) continue;
    if (h->rank == l->rank && rank_guard(l->rank) && holds_rank(rank_guard(l->rank))) continue;
    locus_fatal("internal error: lock order: %s (rank %u) taken while %s (rank %u) is held", rank_name(l->rank),
                l->rank, rank_name(h->rank), h->rank);
  }
}

static void held_push(lock_t *l) {
  if (nheld == HELD_MAX) locus_fatal("internal error: a thread holds more than %d locks", HELD_MAX);
  held[nheld++] = l;
}

void lock_acquire(lock_t *l) {
  if (lock_fork_holder) return;        /* held by the fork handler: see lock.h */
  check_order(l);
  raw_acquire(l);
  held_push(l);
}

bool lock_try(lock_t *l) {
  if (lock_fork_holder) return true;
  if (l->rank == LOCK_RANK_NONE) locus_fatal("internal error: lock %p has no rank (not in the lock registry)", (void *)l);
  if (!raw_try(l)) return false;
  held_push(l);
  return true;
}

void lock_release(lock_t *l) {
  if (lock_fork_holder) return;
  for (unsigned i = nheld; i-- > 0;)
    if (held[i] == l) {
      held[i] = held[--nheld];
      break;
    }
  raw_release(l);
}

bool lock_held(const lock_t *l) {
  if (lock_fork_holder) return true;
  for (unsigned i = 0; i < nheld; i++)
    if (held[i] == l) return true;
  return false;
}
#else
void lock_acquire(lock_t *l) {
  if (__builtin_expect(lock_fork_holder, 0)) return;   /* held by the fork handler: see lock.h */
  raw_acquire(l);
}
#endif

/* ---- bounded waits ------------------------------------------------------------ */

void waitq_wait(waitq_t *q, bool (*ended)(const void *), const void *arg) {
  for (unsigned i = 0;; i++) {
    if (ended(arg)) return;
    if (i < WAIT_SPINS) {
      arch_pause();
    } else if (i < WAIT_SPINS + WAIT_YIELDS) {
      os_yield();
    } else {
      /* Counted, then the sequence read, then the state looked at again: an
       * ender that ends it after that look sees the count (both sides are
       * sequentially consistent) and bumps the sequence, so the sleep does
       * not start or is woken. */
      atomic_fetch_add(&q->waiters, 1);
      int seq = atomic_load(&q->seq);
      atomic_thread_fence(memory_order_seq_cst);
      if (!ended(arg)) {
        atomic_fetch_add_explicit(&sleeps, 1, memory_order_relaxed);
        os_futex_wait(&q->seq, seq, WAIT_SLEEP_NS);
      }
      atomic_fetch_sub(&q->waiters, 1);
    }
  }
}

void waitq_wake(waitq_t *q) {
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&q->waiters, memory_order_relaxed)) return;
  atomic_fetch_add(&q->seq, 1);
  os_futex_wake(&q->seq, -1);
}
