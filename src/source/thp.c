/* The huge-page controller (LOCUS_THP=auto). The rule:
 *
 *  - Cost of a huge page now: the first touch of every advised fresh mapping
 *    faults its first huge page (the region header lives there, so nothing
 *    is touched that would not be); its thread CPU time is the sample.
 *  - Cost of the base pages it replaces: the first touch of a 4 KiB page
 *    (the second page of a fresh mapping left unadvised, or a 4-page probe
 *    mapping of its own when the figure is missing or older than
 *    THP_BASE_STALE_NS), times the number of base pages in a huge page.
 *  - Advising: a mapping whose huge-page fault costs more than THP_OFF_RATIO
 *    times those base faults has its advice withdrawn before the rest of it
 *    is touched; THP_OFF_CONFIRM such samples in a row stop the advice for
 *    every fresh mapping (a warm fault slowed by an interrupt or by the
 *    host descheduling the CPU is rarely followed by another); resumes when a probe costs no more than
 *    THP_ON_RATIO times them. While advice is off, one fresh mapping per
 *    probe gap is advised as the probe; the gap starts at THP_PROBE_MIN_NS
 *    and doubles after each probe that fails, up to THP_PROBE_MAX_NS.
 *
 * What a huge page saves beyond the faults (TLB misses) cannot be measured
 * without counters; the band between the two ratios is its credit, and the
 * hysteresis keeps one noisy sample from flipping the choice back and forth.
 *
 * State: atomics, relaxed; two threads deciding at once may both probe or
 * both measure, which costs one sample more and changes nothing else. */
#include "source/thp.h"

#include <stdatomic.h>

#include "os/os.h"
#include "types.h"
#include "config/options.h"

static struct {
  atomic_bool off;             /* advice stopped */
  _Atomic uint64_t huge_ns;    /* latest huge-page fault sample */
  _Atomic uint64_t base_ns;    /* base-page fault figure (smoothed), 0 unknown */
  _Atomic uint64_t base_at;    /* when it was last sampled */
  _Atomic uint64_t next_probe; /* advice off: when the next probe is due */
  _Atomic uint64_t gap;        /* current probe gap */
  atomic_bool probing;         /* a probe mapping was handed out and not yet sampled */
  atomic_uint costly;          /* costly samples in a row while advising */
  atomic_size_t huge_samples, base_samples, stops, resumes, probes, withdrawn;
} st;

bool thp_adaptive(void) {
  return atomic_load_explicit(&locus_opt.thp, memory_order_relaxed) == THP_OPT_AUTO &&
         (os_features.thp == THP_MADVISE || os_features.thp == THP_ALWAYS) && os_features.huge_page_size;
}

/* Base pages per huge page (512 with 4 KiB and 2 MiB pages). */
static uint64_t per_huge(void) {
  size_t base = os_page_size();
  return base && os_features.huge_page_size > base ? os_features.huge_page_size / base : 512;
}

bool thp_advising(void) { return !atomic_load_explicit(&st.off, memory_order_relaxed); }

void thp_base_sample(uint64_t ns, uint64_t now) {
  if (!ns) ns = 1;
  uint64_t b = atomic_load_explicit(&st.base_ns, memory_order_relaxed);
  /* A sample far off the figure (a preemption, an interrupt) moves it at
   * most 4x; then 1/4 of the way, as a smoothed mean. */
  if (b) {
    if (ns > 4 * b) ns = 4 * b;
    if (ns < b / 4) ns = b / 4;
    ns = b + ns / 4 - b / 4;
  }
  atomic_store_explicit(&st.base_ns, ns ? ns : 1, memory_order_relaxed);
  atomic_store_explicit(&st.base_at, now, memory_order_relaxed);
  atomic_fetch_add_explicit(&st.base_samples, 1, memory_order_relaxed);
}

/* The base figure, measured first when missing or stale. */
static uint64_t base_figure(uint64_t now) {
  uint64_t b = atomic_load_explicit(&st.base_ns, memory_order_relaxed);
  if (!b || atomic_load_explicit(&st.base_at, memory_order_relaxed) + THP_BASE_STALE_NS < now) {
    uint64_t ns = os_base_fault_ns();
    if (ns) thp_base_sample(ns, now);
    b = atomic_load_explicit(&st.base_ns, memory_order_relaxed);
  }
  return b;
}

bool thp_should_advise(uint64_t now) {
  if (!atomic_load_explicit(&st.off, memory_order_relaxed)) {
    base_figure(now);
    return true;
  }
  uint64_t due = atomic_load_explicit(&st.next_probe, memory_order_relaxed);
  if (now < due) return false;
  uint64_t gap = atomic_load_explicit(&st.gap, memory_order_relaxed);
  /* Invariant: while advice is off the probe gap lies in [min, max]. */
  LOCUS_ASSERT(gap >= THP_PROBE_MIN_NS && gap <= THP_PROBE_MAX_NS);
  if (!atomic_compare_exchange_strong(&st.next_probe, &due, now + gap)) return false;  /* another thread probes */
  base_figure(now);
  atomic_store_explicit(&st.probing, true, memory_order_relaxed);
  atomic_fetch_add_explicit(&st.probes, 1, memory_order_relaxed);
  return true;
}

bool thp_huge_sample(uint64_t ns, uint64_t now) {
  atomic_store_explicit(&st.huge_ns, ns, memory_order_relaxed);
  atomic_fetch_add_explicit(&st.huge_samples, 1, memory_order_relaxed);
  bool probe = atomic_exchange_explicit(&st.probing, false, memory_order_relaxed);
  uint64_t b = atomic_load_explicit(&st.base_ns, memory_order_relaxed);
  if (!b) return true;                 /* nothing to compare with: keep the kernel's choice */
  uint64_t replaced = b * per_huge();
  bool off = atomic_load_explicit(&st.off, memory_order_relaxed);
  if (!off && ns > THP_OFF_RATIO * replaced) {
    /* That mapping's advice goes at once; the choice changes on the
     * THP_OFF_CONFIRM-th costly sample in a row (one outlier does not). */
    atomic_fetch_add_explicit(&st.withdrawn, 1, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&st.costly, 1, memory_order_relaxed) + 1 < THP_OFF_CONFIRM) return false;
    atomic_store_explicit(&st.costly, 0, memory_order_relaxed);
    atomic_store_explicit(&st.gap, THP_PROBE_MIN_NS, memory_order_relaxed);
    atomic_store_explicit(&st.next_probe, now + THP_PROBE_MIN_NS, memory_order_relaxed);
    atomic_store_explicit(&st.off, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&st.stops, 1, memory_order_relaxed);
    return false;
  }
  if (!off) atomic_store_explicit(&st.costly, 0, memory_order_relaxed);
  if (off && ns <= THP_ON_RATIO * replaced) {
    atomic_store_explicit(&st.off, false, memory_order_relaxed);
    atomic_fetch_add_explicit(&st.resumes, 1, memory_order_relaxed);
    return true;
  }
  if (off && probe) {                  /* a failed probe: wait twice as long before the next one */
    uint64_t gap = atomic_load_explicit(&st.gap, memory_order_relaxed);
    gap = gap * 2 > THP_PROBE_MAX_NS ? THP_PROBE_MAX_NS : gap * 2;
    atomic_store_explicit(&st.gap, gap, memory_order_relaxed);
    atomic_store_explicit(&st.next_probe, now + gap, memory_order_relaxed);
  }
  if (off) atomic_fetch_add_explicit(&st.withdrawn, 1, memory_order_relaxed);
  return !off;
}

void thp_report(thp_report_t *r) {
  r->active = thp_adaptive();
  r->advising = !atomic_load(&st.off);
  r->huge_ns = atomic_load(&st.huge_ns);
  r->base_ns = atomic_load(&st.base_ns);
  uint64_t replaced = r->base_ns * per_huge();
  r->ratio_pct = replaced && r->huge_ns ? (unsigned)(r->huge_ns * 100 / replaced) : 0;
  r->huge_samples = atomic_load(&st.huge_samples);
  r->base_samples = atomic_load(&st.base_samples);
  r->stops = atomic_load(&st.stops);
  r->resumes = atomic_load(&st.resumes);
  r->probes = atomic_load(&st.probes);
  r->withdrawn = atomic_load(&st.withdrawn);
}

void thp_reset(void) {
  atomic_store(&st.off, false);
  atomic_store(&st.huge_ns, 0);
  atomic_store(&st.base_ns, 0);
  atomic_store(&st.base_at, 0);
  atomic_store(&st.next_probe, 0);
  atomic_store(&st.gap, THP_PROBE_MIN_NS);
  atomic_store(&st.probing, false);
  atomic_store(&st.costly, 0);
  atomic_store(&st.huge_samples, 0);
  atomic_store(&st.base_samples, 0);
  atomic_store(&st.stops, 0);
  atomic_store(&st.resumes, 0);
  atomic_store(&st.probes, 0);
  atomic_store(&st.withdrawn, 0);
}
