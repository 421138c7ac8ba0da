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
#define ADAPT_WINDOW_MAX_NS (500ull * 1000000)  /* ... and a large segment at most this long without reuse */
#define ADAPT_CHUNK_WINDOW_MAX_NS (2000ull * 1000000)  /* ... a heap chunk at most this long */
#define ADAPT_REGRET_NS (1000ull * 1000000)     /* a kind re-mapped within its window, at least this, after a decay: a regret */
#define ADAPT_CHUNK_GRACE_NS ADAPT_WINDOW_MIN_NS  /* a stale chunk goes only when still stale this much later */
#define ADAPT_WINDOW_FACTOR 4                   /* window = factor x observed reuse distance */
#define ADAPT_TICK_NS (10ull * 1000000)         /* a source looks for stale segments at most this often */
#define ADAPT_SAMPLE_NS (250ull * 1000000)      /* pressure files read at most 4 times per second */
#define ADAPT_PSI_HIGH 100                      /* PSI memory "some avg10" >= 1.00 %: release at once */
#define ADAPT_RESERVE ((size_t)64 << 20)        /* headroom kept free (or 1/8 of a smaller cgroup limit) */

/* The kinds of cached memory, learnt apart: heap chunks (small and medium
 * objects, all of one size, any heap of the source takes any of them) and
 * large segments (the blocks themselves, of every size). */
typedef enum { ADAPT_LARGE = 0, ADAPT_CHUNK = 1, ADAPT_KINDS } adapt_kind_t;

/* Per kind of a source, under the source's lock but for the report's atomics. */
typedef struct {
  uint64_t reuse_ns;           /* decaying maximum of the observed reuse distances */
  uint64_t last_decay_ns;      /* time of the latest decay release */
  size_t last_decay_bytes;     /* bytes released lately and not yet taken back (regret horizon) */
  uint64_t last_decay_cached_ns; /* ... and when the oldest of it had been cached */
  size_t run_decayed, run_regretted;  /* the ledger: bytes released, bytes of them taken back */
  _Atomic uint64_t window_ns;  /* current decay window (report) */
  atomic_size_t regrets;       /* misses that took back released bytes within the regret horizon (report) */
} adapt_learn_t;

/* Per-source state; the fields the report reads are atomics. Other fields
 * change under the source's lock. */
typedef struct {
  adapt_learn_t k[ADAPT_KINDS];
  atomic_size_t bound;         /* bytes the source may keep now (report) */
  atomic_size_t decayed;       /* bytes released because they were not reused in time */
  atomic_size_t pressured;     /* bytes released under memory pressure */
} adapt_t;

struct source_s;

bool adapt_active(void);                /* the profile is auto */
uint64_t adapt_now(void);               /* coarse monotonic ns, no system call */
/* Caller holds the source's lock. A cached segment of the source, cached at
 * `cached_ns`, is handed out again for a request of kind k. */
void adapt_hit(adapt_t *a, adapt_kind_t k, uint64_t cached_ns, uint64_t now);
/* Caller holds the lock: a request of kind k for `size` bytes found nothing
 * cached (or grows a segment by `size` bytes). */
void adapt_miss(adapt_t *a, adapt_kind_t k, size_t size, uint64_t now);
/* Caller holds the lock: a decay released `bytes` of kind k, the oldest of
 * them cached at `cached_ns`. */
void adapt_released(adapt_t *a, adapt_kind_t k, size_t bytes, uint64_t cached_ns, uint64_t now);
/* Caller holds the lock, once per tick of the source: the reuse distances
 * decay, except a kind's whose releases came back (the ledger, adapt.c). */
void adapt_age(adapt_t *a);
/* The bytes the source may keep now (at most LOCUS_CACHE_MAX). */
size_t adapt_bound(adapt_t *a);
uint64_t adapt_window(const adapt_t *a, adapt_kind_t k);
size_t adapt_regrets(const adapt_t *a);  /* both kinds, for the report */
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
