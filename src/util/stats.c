/* Process-wide counters, kept with relaxed atomics off the fast paths (the
 * sources and the OS layer); api/stats.c reports them. */
#include "util/stats.h"

stats_t locus_stats;

void stats_update_peak(void) {
  size_t now = atomic_load_explicit(&locus_stats.in_use, memory_order_relaxed) +
               atomic_load_explicit(&locus_stats.cached, memory_order_relaxed);
  size_t peak = atomic_load_explicit(&locus_stats.peak, memory_order_relaxed);
  while (now > peak &&
         !atomic_compare_exchange_weak_explicit(&locus_stats.peak, &peak, now, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}
