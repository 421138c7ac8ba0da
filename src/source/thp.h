/* The huge-page controller of LOCUS_THP=auto: whether a fresh mapping for a
 * large block is advised for transparent huge pages, from what a huge-page
 * fault costs this process now against the base-page faults it replaces.
 * The rule, its constants and the measurements behind them are in
 * docs/adaptive.md ("Huge pages that pay"). No thread of its own: it runs
 * when a source maps fresh memory for a large block (a system call anyway). */
#ifndef LOCUS_THP_H
#define LOCUS_THP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The constants of the rule. A huge-page fault is compared with the base
 * faults it replaces (huge page / base page of them: 512 on x86-64). */
#define THP_OFF_RATIO 2                          /* a sample above 2x their cost is costly */
#define THP_OFF_CONFIRM 2                        /* advice stops after 2 costly samples in a row */
#define THP_ON_RATIO 1                           /* advise again at or below 1x */
#define THP_PROBE_MIN_NS (250ull * 1000000)      /* first probe after advice stopped */
#define THP_PROBE_MAX_NS (4000ull * 1000000)     /* the gap doubles after each probe that fails, up to this */
#define THP_BASE_STALE_NS (1000ull * 1000000)    /* the base-page figure is measured again when older */

/* The controller applies (LOCUS_THP=auto, kernel THP in madvise or always mode). */
bool thp_adaptive(void);
/* A fresh mapping eligible for huge pages is about to be made: whether to
 * advise it. True while huge pages pay, and once per probe gap while they do
 * not (the mapping is then the probe). May measure a base-page fault first
 * (a 4-page mapping of its own) when that figure is missing or stale. */
bool thp_should_advise(uint64_t now);
/* The first huge page of an advised fresh mapping took `ns` (thread CPU time)
 * to fault. Returns false when huge pages do not pay now: the caller
 * withdraws the advice from that mapping (MADV_NOHUGEPAGE) before anything
 * else in it is touched. */
bool thp_huge_sample(uint64_t ns, uint64_t now);
/* Huge pages pay now (advice not stopped). */
bool thp_advising(void);
/* A 4 KiB first-touch fault took `ns`. */
void thp_base_sample(uint64_t ns, uint64_t now);

/* For the statistics report. Times in ns; a ratio in hundredths. */
typedef struct {
  bool active, advising;
  uint64_t huge_ns;            /* latest huge-page fault */
  uint64_t base_ns;            /* the base-page fault figure */
  unsigned ratio_pct;          /* huge_ns / (base_ns x base pages per huge page), x100 */
  size_t huge_samples, base_samples, stops, resumes, probes, withdrawn;
} thp_report_t;
void thp_report(thp_report_t *r);

/* Tests: forget every sample and advise again. */
void thp_reset(void);

#endif /* LOCUS_THP_H */
