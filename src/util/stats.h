/* Process-wide statistics: relaxed atomic counters kept off the fast paths
 * (sources and the OS layer); the report (api/stats.c) reads them. */
#ifndef LOCUS_STATS_H
#define LOCUS_STATS_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct {
  atomic_size_t in_use, cached, peak;
  atomic_size_t mmaps, munmaps, mremaps, madvises;
  atomic_size_t hits, misses, returned;
  atomic_size_t huge;              /* bytes of whole huge pages in live huge-advised regions */
  atomic_size_t decayed, pressured; /* auto profile: bytes released by decay, by pressure */
} stats_t;

extern stats_t locus_stats;

static inline void stat_add(atomic_size_t *c, size_t n) {
  atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}
static inline void stat_sub(atomic_size_t *c, size_t n) {
  atomic_fetch_sub_explicit(c, n, memory_order_relaxed);
}
void stats_update_peak(void);

#endif /* LOCUS_STATS_H */
