#include "util/lock.h"

#include "arch/arch.h"
#include "os/os.h"

void lock_acquire(lock_t *l) {
  for (unsigned spins = 0;; spins++) {
    if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 && lock_try(l)) return;
    if (spins < 64) arch_pause();
    else os_yield();
  }
}
