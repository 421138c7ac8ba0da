/* The adaptive controller of LOCUS_PROFILE=auto: per memory source, how much
 * freed memory to keep and for how long, from what the allocator observes
 * (reuse distance of cached segments, misses that a longer window would have
 * served) and from the machine's memory pressure. No thread of its own: it
 * runs on the sources' slow paths and on the heaps' slow-path tick. The rule
 * and its constants are in docs/adaptive.md. */
#ifndef LOCUS_ADAPT_H
#define LOCUS_ADAPT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The constants of the rule (docs/adaptive.md has the measurements). */
#define ADAPT_WINDOW_MIN_NS (100ull * 1000000)  /* a cached segment lives at least this long */
#define ADAPT_WINDOW_MAX_NS (500ull * 1000000)  /* ... and at most this long without reuse */
#define ADAPT_WINDOW_FACTOR 4                   /* window = factor x observed reuse distance */
#define ADAPT_TICK_NS (10ull * 1000000)         /* a source looks for stale segments at most this often */
#define ADAPT_SAMPLE_NS (250ull * 1000000)      /* pressure files read at most 4 times per second */
#define ADAPT_PSI_HIGH 100                      /* PSI memory "some avg10" >= 1.00 %: release at once */
#define ADAPT_RESERVE ((size_t)64 << 20)        /* headroom kept free (or 1/8 of a smaller cgroup limit) */

/* Per-source state; the fields the report reads are atomics. Other fields
 * change under the source's lock. */
typedef struct {
  uint64_t reuse_ns;           /* decaying maximum of the observed reuse distances */
  uint64_t last_decay_ns;      /* time of the latest decay release */
  size_t last_decay_bytes;     /* bytes released by the decays of the latest window */
  uint64_t last_decay_cached_ns; /* ... and when the oldest of it had been cached */
  atomic_size_t bound;         /* bytes the source may keep now (report) */
  _Atomic uint64_t window_ns;  /* current decay window (report) */
  atomic_size_t decayed;       /* bytes released because they were not reused in time */
  atomic_size_t pressured;     /* bytes released under memory pressure */
  atomic_size_t regrets;       /* misses that the window had just released the memory for */
} adapt_t;

struct source_s;

bool adapt_active(void);                /* the profile is auto */
uint64_t adapt_now(void);               /* coarse monotonic ns, no system call */
/* Caller holds the source's lock. A cached segment of the source, cached at
 * `cached_ns`, is handed out again. */
void adapt_hit(adapt_t *a, uint64_t cached_ns, uint64_t now);
/* Caller holds the lock: a request of `size` bytes found nothing cached. */
void adapt_miss(adapt_t *a, size_t size, uint64_t now);
/* The bytes the source may keep now (at most LOCUS_CACHE_MAX). */
size_t adapt_bound(adapt_t *a);
uint64_t adapt_window(const adapt_t *a);
/* Before a fresh mapping of `size` bytes: true when the cached memory should
 * be released first (the mapping would eat into the reserve). */
bool adapt_fresh_needs_room(size_t size);
/* Runs the controller on every source if its tick is due: samples the
 * pressure (rate-limited), releases stale segments oldest first, and
 * everything under pressure. Cheap when nothing is due (a clock read and a
 * comparison per source). */
void adapt_tick(uint64_t now);
/* The pressure seen at the latest sample, for the report. */
typedef struct {
  int psi;                     /* hundredths of a percent, -1 unknown */
  size_t headroom;             /* bytes, SIZE_MAX unknown */
  int cg_version;
  size_t cg_limit;
  bool high;                   /* releasing at once */
} adapt_pressure_t;
void adapt_pressure_get(adapt_pressure_t *p);

#endif /* LOCUS_ADAPT_H */
