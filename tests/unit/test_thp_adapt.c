/* The huge-page controller of LOCUS_THP=auto (src/source/thp.c), driven with
 * synthetic fault costs: a huge-page fault that costs more than
 * THP_OFF_RATIO times the base-page faults it replaces loses its mapping's
 * advice, THP_OFF_CONFIRM of them in a row stop the advice, it probes again
 * after THP_PROBE_MIN_NS with a gap that doubles up to THP_PROBE_MAX_NS, and
 * resumes when a probe costs no more than THP_ON_RATIO times them; between
 * the two ratios nothing changes. Then through malloc: a mapping whose huge
 * page costs too much has its advice withdrawn before the rest is touched,
 * a probe that pays brings the advice back, and a block grown with mremap
 * whose new huge page costs too much loses the advice (backing checked in
 * /proc/self/smaps when the kernel's THP mode allows). */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "smaps.h"
#include "locus.h"
#include "os/os.h"
#include "source/thp.h"

#define MB ((size_t)1 << 20)
#define MS 1000000ull

static thp_report_t rep(void) {
  thp_report_t r;
  thp_report(&r);
  return r;
}

/* Base pages per huge page, as the controller counts them. */
static uint64_t per_huge(void) {
  return os_features.huge_page_size > os_page_size() ? os_features.huge_page_size / os_page_size() : 512;
}

static void test_rule(void) {
  thp_reset();
  uint64_t t = 10000 * MS;               /* synthetic clock: no real probe while the figure is fresh */
  thp_base_sample(1000, t);              /* 1 us per base page */
  uint64_t replaced = 1000 * per_huge();
  CHECK(rep().base_ns == 1000, "first base sample taken as is (%llu)", (unsigned long long)rep().base_ns);
  CHECK(thp_should_advise(t), "advising at start");
  CHECK(thp_huge_sample(replaced / 5, t), "a huge page at 0.2x its base faults pays");
  CHECK(thp_huge_sample(replaced * 3 / 2, t), "1.5x: between the ratios, advice kept");
  CHECK(rep().advising && rep().stops == 0, "still advising");
  CHECK(!thp_huge_sample(replaced * 3, t), "3x: that mapping's advice withdrawn");
  CHECK(rep().advising && rep().withdrawn == 1, "one costly sample does not stop the advice");
  CHECK(thp_huge_sample(replaced / 5, t), "a cheap sample in between");
  CHECK(!thp_huge_sample(replaced * 3, t) && rep().advising, "costly again, but not twice in a row");
  CHECK(!thp_huge_sample(replaced * 3, t), "second costly sample in a row");
  thp_report_t r = rep();
  CHECK(!r.advising && r.stops == 1 && r.withdrawn == 3 && r.ratio_pct == 300, "stopped (ratio %u, withdrawn %zu)",
        r.ratio_pct, r.withdrawn);
  /* probes: the first one THP_PROBE_MIN_NS later, one thread only */
  CHECK(!thp_should_advise(t + THP_PROBE_MIN_NS - MS), "no probe before the gap");
  uint64_t t1 = t + THP_PROBE_MIN_NS;
  CHECK(thp_should_advise(t1), "probe due");
  CHECK(!thp_should_advise(t1), "one probe at a time");
  CHECK(rep().probes == 1, "one probe counted");
  CHECK(!thp_huge_sample(replaced * 3 / 2, t1), "probe at 1.5x: stays off (resumes at 1x only)");
  /* the gap doubled */
  CHECK(!thp_should_advise(t1 + 2 * THP_PROBE_MIN_NS - MS), "gap doubled: not yet");
  uint64_t t2 = t1 + 2 * THP_PROBE_MIN_NS;
  thp_base_sample(1000, t2);             /* keep the figure fresh */
  CHECK(thp_should_advise(t2), "second probe after twice the gap");
  /* the gap stops doubling at THP_PROBE_MAX_NS */
  uint64_t tn = t2;
  for (int i = 0; i < 12; i++) {
    CHECK(!thp_huge_sample(replaced * 10, tn), "failed probe %d", i);
    uint64_t gap = THP_PROBE_MIN_NS << (i + 2 > 20 ? 20 : i + 2);
    if (gap > THP_PROBE_MAX_NS) gap = THP_PROBE_MAX_NS;
    CHECK(!thp_should_advise(tn + gap - MS), "probe %d: not before %llu ms", i, (unsigned long long)(gap / MS));
    tn += gap;
    thp_base_sample(1000, tn);
    CHECK(thp_should_advise(tn), "probe %d due after %llu ms", i, (unsigned long long)(gap / MS));
  }
  CHECK(rep().base_ns == 1000, "steady base figure");
  /* a probe that pays: advice resumes, and the gap starts again from the minimum */
  CHECK(thp_huge_sample(replaced, tn), "probe at 1x: resumed");
  r = rep();
  CHECK(r.advising && r.resumes == 1, "advising again (resumes %zu)", r.resumes);
  CHECK(thp_should_advise(tn), "every mapping advised again");
  CHECK(!thp_huge_sample(replaced * 5, tn + MS) && !thp_huge_sample(replaced * 5, tn + MS) && !rep().advising,
        "stops again");
  CHECK(!thp_should_advise(tn + MS + THP_PROBE_MIN_NS - MS) && thp_should_advise(tn + MS + THP_PROBE_MIN_NS),
        "gap back to the minimum after a resume");
  /* base figure: an outlier moves it at most 4x, then 1/4 of the way */
  thp_reset();
  thp_base_sample(1000, t);
  thp_base_sample(1000000, t);           /* a preempted sample */
  CHECK(rep().base_ns == 1750, "outlier clamped (%llu)", (unsigned long long)rep().base_ns);
  /* no base figure: the huge sample alone does not decide */
  thp_reset();
  CHECK(thp_huge_sample(1000000000ull, t) && rep().advising, "no base figure: advice kept");
  /* a stale figure is measured again (a real 4-page probe) */
  thp_reset();
  thp_base_sample(1, 1);
  size_t n = rep().base_samples;
  CHECK(thp_should_advise(1 + THP_BASE_STALE_NS + MS), "advising");
  CHECK(rep().base_samples == n + 1 && rep().base_ns >= 1, "stale base figure measured again");
}


static uint64_t stat_huge(void) {
  locus_stats_t st;
  locus_stats_get(&st);
  return st.bytes_huge;
}

static void test_through_malloc(bool backing) {
  locus_set_profile("uma");
  CHECK(locus_option_set("thp", "auto") == 0, "LOCUS_THP=auto");
  CHECK(thp_adaptive(), "the controller applies");
  locus_release();
  thp_reset();
  uint64_t now = os_clock_coarse_ns();
  thp_base_sample(1, now);               /* base faults of 1 ns: no huge page can pay */
  CHECK(!thp_huge_sample(1000000000ull, now) && rep().advising, "a first costly sample");
  char *a = malloc(32 * MB);
  CHECK(a, "malloc");
  thp_report_t r = rep();
  CHECK(!r.advising && r.stops == 1 && r.huge_samples == 2, "the mapping's huge page did not pay either: stopped");
  CHECK(stat_huge() == 0, "not counted as huge (%llu)", (unsigned long long)stat_huge());
  memset(a, 1, 32 * MB);
  if (backing) CHECK(huge_bytes(a) <= 2 * MB, "advice withdrawn: %zu KiB huge (the first page at most)",
                     huge_bytes(a) / 1024);
  char *b = malloc(24 * MB);             /* not advised, not a probe: a base sample */
  CHECK(b && rep().base_samples == r.base_samples + 1 && rep().huge_samples == 2, "base sample from an unadvised mapping");
  memset(b, 2, 24 * MB);
  if (backing) CHECK(huge_bytes(b) == 0, "unadvised: %zu KiB huge", huge_bytes(b) / 1024);
  /* base faults of a second each: any huge page pays; the probe comes after the gap */
  for (int i = 0; i < 64; i++) thp_base_sample(1000000000ull, os_clock_coarse_ns());
  struct timespec ts = {0, (long)(THP_PROBE_MIN_NS + 20 * MS)};
  nanosleep(&ts, NULL);
  char *c = malloc(32 * MB);
  r = rep();
  CHECK(c && r.advising && r.resumes == 1 && r.probes == 1, "the probe paid: advising again (probes %zu)", r.probes);
  memset(c, 3, 32 * MB);
  CHECK(stat_huge() >= 30 * MB, "counted as huge (%llu MiB)", (unsigned long long)(stat_huge() / MB));
  if (backing) CHECK(huge_bytes(c) >= 32 * MB * 9 / 10, "advised again: %zu KiB huge", huge_bytes(c) / 1024);
  /* growth by mremap: the new tail's first huge page is a sample; when it
   * does not pay the whole block's advice is withdrawn (its huge pages stay) */
  for (int i = 0; i < 200; i++) thp_base_sample(1, os_clock_coarse_ns());
  size_t stops = rep().stops;
  CHECK(!thp_huge_sample(1000000000ull, os_clock_coarse_ns()), "a first costly sample");
  char *g = realloc(c, 64 * MB);
  CHECK(g, "realloc");
  c = g;
  r = rep();
  CHECK(!r.advising && r.stops == stops + 1, "the grown tail's huge page did not pay (stops %zu)", r.stops);
  CHECK(stat_huge() == 0, "the grown block is no longer counted as huge (%llu)", (unsigned long long)stat_huge());
  for (size_t i = 0; i < 32 * MB; i += 4096) CHECK(c[i] == 3, "content kept at %zu", i);
  memset(c, 4, 64 * MB);
  if (backing) CHECK(huge_bytes(c) >= 30 * MB && huge_bytes(c) <= 36 * MB,
                     "the old huge pages stay, the tail is in base pages: %zu KiB huge", huge_bytes(c) / 1024);
  free(a);
  free(b);
  free(c);
  CHECK(locus_heap_check() == 0, "heap check");
  /* on and off are not measured */
  CHECK(locus_option_set("thp", "on") == 0 && !thp_adaptive(), "on: no controller");
  locus_option_set("thp", "auto");
}

int main(void) {
  test_rule();
  char mode[64] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f || !fgets(mode, sizeof mode, f) || strstr(mode, "[never]") || !os_features.huge_page_size) {
    printf("test_thp_adapt: through malloc SKIPPED (THP mode: %s)\n", f ? mode : "absent");
    if (f) fclose(f);
    return TEST_DONE();
  }
  fclose(f);
  test_through_malloc(!getenv("LOCUS_TEST_EMULATOR"));
  return TEST_DONE();
}
