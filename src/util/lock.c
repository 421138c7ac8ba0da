/* A test-and-test-and-set lock for the short critical sections off the fast
 * paths (memory sources, heap lists). It never allocates, and a fork handler
 * can reset it, which a pthread mutex held by a vanished thread would not allow. */
#include <sched.h>

#include "arch/arch.h"
#include "internal.h"

void lock_acquire(lock_t *l) {
  for (unsigned spins = 0;; spins++) {
    if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 && lock_try(l)) return;
    if (spins < 64) arch_pause();
    else sched_yield();
  }
}
