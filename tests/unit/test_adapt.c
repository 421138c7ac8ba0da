/* The auto profile's controller (source/adapt.c): memory not reused within
 * the window goes back to the OS, also when only small allocations run
 * (the heaps' slow-path tick); memory reused at a steady distance stays; a
 * reuse distance longer than the window is learnt (regrets widen it); the
 * report shows the decisions; the pressure reader finds the cgroup. */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"
#include "os/os.h"
#include "source/adapt.h"

#define MB ((size_t)1 << 20)

static locus_stats_t stats(void) {
  locus_stats_t s;
  locus_stats_get(&s);
  return s;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts)) {
  }
}

/* An integer field of the sources in the JSON report: the largest value
 * over the sources (the auto profile uses the node's source when the thread
 * is bound to one node, else the generic one). */
static long source_field(const char *key) {
  static char buf[65536];
  locus_stats_json(buf, sizeof buf);
  char *s = strstr(buf, "\"sources\":[");
  CHECK(s, "sources in the report");
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  long best = -1;
  for (char *k = strstr(s, pat); k; k = strstr(k + 1, pat)) {
    long v = strtol(k + strlen(pat), NULL, 10);
    if (v > best) best = v;
  }
  CHECK(best >= 0, "field %s in the report", key);
  return best;
}

static void test_profile_switch(void) {
  CHECK(locus_set_profile("auto") == 0, "set auto");
  CHECK(!strcmp(locus_get_profile(), "auto"), "profile is %s", locus_get_profile());
  char v[16];
  CHECK(locus_option_get("profile", v, sizeof v) > 0 && !strcmp(v, "auto"), "option reads %s", v);
}

static void test_decay_after_large_phase(void) {
  locus_set_profile("auto");
  locus_release();
  locus_stats_t s0 = stats();
  char *a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = malloc(16 * MB);
    memset(a[i], i, 16 * MB);
  }
  for (int i = 0; i < 4; i++) free(a[i]);
  CHECK(stats().bytes_cached >= 64 * MB, "freed blocks cached at first (%lu)", (unsigned long)stats().bytes_cached);
  sleep_ms(ADAPT_WINDOW_MAX_NS / 1000000 + 100);
  /* only small allocations now: the heap's slow path gives the tick */
  void **v = malloc(200000 * sizeof *v);
  for (int i = 0; i < 200000; i++) v[i] = malloc(48);
  for (int i = 0; i < 200000; i++) free(v[i]);
  free(v);
  locus_stats_t s1 = stats();
  CHECK(s1.bytes_cached < 16 * MB, "stale segments released (%lu cached)", (unsigned long)s1.bytes_cached);
  CHECK(s1.bytes_decayed - s0.bytes_decayed >= 64 * MB, "decay counted (%lu)", (unsigned long)(s1.bytes_decayed - s0.bytes_decayed));
  CHECK(source_field("decayed") >= (long)(64 * MB), "per-source decay in the report");
}

/* The same when the small phase never leaves the thread cache: a ring of
 * live blocks made before, the oldest replaced (bench_phased's small
 * phase). No slow path runs; the controller's only tick is the cache's
 * share (small_free_local, heap_cache_tick). */
static void test_decay_through_thread_cache(size_t size) {
  locus_set_profile("auto");
  locus_release();
  enum { RING = 4096 };
  static void *ring[RING];
  for (int i = 0; i < RING; i++) ring[i] = malloc(size);
  char *a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = malloc(16 * MB);
    memset(a[i], i, 16 * MB);
  }
  for (int i = 0; i < 4; i++) free(a[i]);
  locus_stats_t s0 = stats();
  CHECK(s0.bytes_cached >= 64 * MB, "freed blocks cached at first (%lu)", (unsigned long)s0.bytes_cached);
  sleep_ms(ADAPT_WINDOW_MAX_NS / 1000000 + 100);
  for (int i = 0; i < 64 * RING; i++) {
    free(ring[i % RING]);
    ring[i % RING] = malloc(size);
  }
  locus_stats_t s1 = stats();
  for (int i = 0; i < RING; i++) free(ring[i]);
  CHECK(s1.bytes_cached < 16 * MB, "%zu-byte blocks: stale segments released through the cache's tick (%lu cached)",
        size, (unsigned long)s1.bytes_cached);
  CHECK(s1.bytes_decayed - s0.bytes_decayed >= 64 * MB, "decay counted (%lu)",
        (unsigned long)(s1.bytes_decayed - s0.bytes_decayed));
}

static void test_steady_reuse_stays(void) {
  locus_set_profile("auto");
  locus_release();
  locus_stats_t s0 = stats();
  int n = 40;
  for (int i = 0; i < n; i++) {
    char *p = malloc(24 * MB);
    memset(p, i, 24 * MB);
    free(p);
    sleep_ms(15);
  }
  locus_stats_t s1 = stats();
  size_t hits = s1.cache_hits - s0.cache_hits;
  CHECK(hits >= (size_t)n * 3 / 4, "reused every 15 ms: %zu hits of %d", hits, n);
  CHECK(s1.bytes_cached >= 24 * MB, "still cached after the loop (%lu)", (unsigned long)s1.bytes_cached);
}

/* Reuse every 250 ms: longer than the shortest window. The window must end
 * up covering it (learnt from the regrets, unless an earlier test under a
 * loaded machine already widened it) and the segment be reused. */
static void test_longer_distance_learnt(void) {
  locus_set_profile("auto");
  locus_release();
  long r0 = source_field("regrets"), w0 = source_field("auto_window_ms");
  size_t late_hits = 0;
  for (int i = 0; i < 8; i++) {
    locus_stats_t b = stats();
    char *p = malloc(8 * MB);
    if (i >= 4) late_hits += stats().cache_hits - b.cache_hits;
    memset(p, i, 8 * MB);
    free(p);
    sleep_ms(250);
  }
  long regrets = source_field("regrets") - r0;
  long w = source_field("auto_window_ms");
  if (w0 < 250) CHECK(regrets >= 1, "a miss after a decay is a regret (%ld; window was %ld ms)", regrets, w0);
  CHECK(w >= 250, "window widened to the reuse distance (%ld ms)", w);
  CHECK(late_hits >= 3, "reused once learnt (%zu of the last 4)", late_hits);
}

static void test_other_profiles_do_not_decay(void) {
  locus_set_profile("uma");
  locus_release();
  char *p = malloc(16 * MB);
  memset(p, 1, 16 * MB);
  free(p);
  locus_stats_t s0 = stats();
  sleep_ms(ADAPT_WINDOW_MAX_NS / 1000000 + 100);
  p = malloc(2 * MB);
  free(p);
  locus_stats_t s1 = stats();
  CHECK(s1.bytes_decayed == s0.bytes_decayed && s1.bytes_cached >= 14 * MB, "uma keeps its cache");
  locus_release();
}

static void test_pressure_reader(void) {
  os_pressure_t p;
  os_memory_pressure(&p);
  CHECK(p.mem_available != SIZE_MAX && p.mem_available > 0, "MemAvailable read");
  FILE *f = fopen("/proc/pressure/memory", "r");
  if (f) {
    CHECK(p.psi_some_avg10 >= 0, "PSI read (%d)", p.psi_some_avg10);
    fclose(f);
  }
  char buf[4096] = {0};
  f = fopen("/proc/self/cgroup", "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  if (strstr(buf, ":memory:")) CHECK(p.cg_version == 1, "cgroup v1 memory controller found (%d)", p.cg_version);
  if (p.cg_limit != SIZE_MAX) CHECK(p.cg_usage != SIZE_MAX && p.cg_usage > 0, "cgroup usage read");
}

int main(void) {
  test_profile_switch();
  test_pressure_reader();
  test_decay_after_large_phase();
  test_decay_through_thread_cache(48);
  test_decay_through_thread_cache(300);     /* a class whose budget is no multiple of 64 blocks */
  test_decay_through_thread_cache(3000);
  test_steady_reuse_stays();
  test_longer_distance_learnt();
  test_other_profiles_do_not_decay();
  CHECK(locus_heap_check() == 0, "heap check");
  return TEST_DONE();
}
