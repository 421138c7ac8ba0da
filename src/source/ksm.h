/* LOCUS_KSM=auto (docs/sharing.md): same-page merging advised only where it
 * pays (S. Valat, PhD thesis, 2014, Ch.6: the allocator tells ksmd what is
 * worth scanning). Large blocks are watched: a low-rate sampler hashes a few
 * fixed pages of each, and advises a block MADV_MERGEABLE once its sampled
 * pages stayed unchanged over KSM_AUTO_STABLE samples (or were all zero
 * twice); an advised block whose pages change again loses the advice and
 * must stay unchanged twice as long to get it back. The sampler ticks on
 * the large blocks' paths, the heaps' slow-path tick and a thread of its own
 * (started with the first block watched: a simulation's time steps may not
 * call the allocator for seconds), at most every KSM_AUTO_TICK_NS, hashing
 * at most KSM_AUTO_BUDGET pages per tick. Nothing on the fast path: small
 * and medium blocks never see it. */
#ifndef LOCUS_KSM_H
#define LOCUS_KSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

#define KSM_AUTO_TICK_NS (100ull * 1000000)     /* the sampler runs at most this often */
#define KSM_AUTO_PERIOD_NS (1000ull * 1000000)  /* a block is sampled at most this often */
#define KSM_AUTO_SAMPLES 16                     /* pages hashed per sample of a block */
#define KSM_AUTO_BUDGET 64                      /* pages hashed per tick: <= 640 pages (2.5 MiB) per second */
#define KSM_AUTO_STABLE 3                       /* unchanged samples (after the first) before the advice */
#define KSM_AUTO_ZERO 2                         /* all-zero samples in a row before the advice */
#define KSM_AUTO_STABLE_MAX 48                  /* the back-off's ceiling */
#define KSM_AUTO_SLOTS 512                      /* blocks watched at once; more are left alone */

/* The unit test samples with a clock of its own: no sampler thread. */
extern bool ksm_thread_off;
/* Whether LOCUS_KSM=auto. */
bool ksm_auto(void);
/* A live large block of a system source (not the user's memory, not a
 * shareable block) enters the watch: REGION_KSM_WATCH. No-op unless auto,
 * or when the table is full. */
void ksm_watch(region_t *r);
/* The block leaves the table (waits for a sample of it in progress);
 * its advice, if the sampler gave one (REGION_KSM_AUTO), stays with it
 * (realloc, in-place resize: watched again after); source_free unmaps a
 * segment with that flag rather than cache it. No-op for a region not
 * watched. */
void ksm_unwatch(region_t *r);
/* The block leaves the sampler's hands for good (locus_next_touch): out of
 * the table, and the sampler's advice withdrawn (the program's own, from
 * locus_merge, stays). */
void ksm_disown(region_t *r);
/* The sampler: runs when its tick is due (now: coarse ns); a try-lock, so a
 * thread finding another one sampling returns at once. */
void ksm_tick(uint64_t now);

/* The classification of one block from its samples (exposed for the unit
 * test): its history, and the verdict after a sample whose pages `changed`
 * since the previous one and were all `zero`, for a block `advised` or not.
 * Advise after `need` unchanged samples in a row (KSM_AUTO_STABLE at
 * first), or after need - 1 all-zero ones (KSM_AUTO_ZERO at first);
 * withdraw on the first change after the advice, and double `need` (up to
 * KSM_AUTO_STABLE_MAX). */
typedef enum { KSM_VERDICT_WAIT = 0, KSM_VERDICT_ADVISE, KSM_VERDICT_WITHDRAW } ksm_verdict_t;
typedef struct {
  uint8_t nsamp;               /* samples taken (saturating) */
  uint8_t same;                /* unchanged samples in a row */
  uint8_t zeros;               /* all-zero samples in a row */
  uint8_t need;                /* unchanged samples needed now */
} ksm_track_t;
static inline unsigned ksm_zero_need(const ksm_track_t *t) { return t->need - (KSM_AUTO_STABLE - KSM_AUTO_ZERO); }
ksm_verdict_t ksm_judge(ksm_track_t *t, bool changed, bool zero, bool advised);

/* Figures for the report (LOCUS_STATS, locus_stats_json). */
typedef struct {
  size_t watched;              /* blocks watched now */
  size_t advised;              /* of them advised now */
  size_t advised_bytes;        /* their bytes */
  size_t advices, withdrawals; /* over the run */
  size_t zero_advices;         /* advices on all-zero samples */
  size_t pages_hashed;         /* over the run */
  size_t samples;              /* block samples over the run */
  size_t full;                 /* blocks not watched: the table was full */
} ksm_auto_stats_t;
void ksm_auto_stats(ksm_auto_stats_t *s);

#endif /* LOCUS_KSM_H */
