/* A test-and-test-and-set lock for the short critical sections off the fast
 * paths (memory sources, heap lists). It never allocates, and a fork handler
 * can reset it, which a pthread mutex held by a vanished thread would not allow. */
#ifndef LOCUS_LOCK_H
#define LOCUS_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct { atomic_int v; } lock_t;

void lock_acquire(lock_t *l);
static inline bool lock_try(lock_t *l) {
  int z = 0;
  return atomic_compare_exchange_strong_explicit(&l->v, &z, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}
static inline void lock_release(lock_t *l) { atomic_store_explicit(&l->v, 0, memory_order_release); }

#endif /* LOCUS_LOCK_H */
