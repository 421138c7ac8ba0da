/* Transparent huge pages for large blocks (LOCUS_THP): placement on 2 MiB
 * boundaries with the colour offset kept, backing checked in
 * /proc/self/smaps (AnonHugePages of the block's mapping), huge pages kept by
 * recycling (reuse, split, growth, calloc), the off switch, eco, and the
 * counter, under LOCUS_THP=on (auto's measured choice: test_thp_adapt).
 * Skipped when the kernel's THP mode is "never" or absent. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "arch/arch.h"
#include "check.h"
#include "smaps.h"
#include "locus.h"

#define MB ((size_t)1 << 20)
#define HP (2 * MB)

static char thp_mode[32];


static long minflt(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static uint64_t stat_huge(void) {
  locus_stats_t st;
  locus_stats_get(&st);
  return st.bytes_huge;
}

static void touch(char *p, size_t n, int v) { memset(p, v, n); }

/* Under qemu-user the mappings and /proc/self/smaps are the emulator's (it
 * does not pass MADV_HUGEPAGE on): placement is checked, backing is not. */
static bool backing_checked = true;
#define CHECK_HUGE(cond, ...)                  \
  do {                                         \
    if (backing_checked) CHECK(cond, __VA_ARGS__); \
  } while (0)

static void test_placement_and_backing(void) {
  locus_set_profile("uma");
  locus_release();
  size_t offs[4];
  char *v[4];
  for (int i = 0; i < 4; i++) {
    v[i] = malloc(32 * MB);
    CHECK(v[i], "malloc");
    offs[i] = (uintptr_t)v[i] & (HP - 1);
    /* The colour offset stays within the first page of the largest granule
     * locus assumes (4 KiB on x86-64, 64 KiB on aarch64). */
    CHECK(offs[i] < ARCH_PAGE_MAX, "block %d starts %zu bytes past a 2 MiB boundary (colour offset within the first page)", i, offs[i]);
    touch(v[i], 32 * MB, i + 1);
    size_t h = huge_bytes(v[i]);
    CHECK_HUGE(h >= 32 * MB * 9 / 10, "block %d: %zu KiB of 32 MiB backed by huge pages", i, h / 1024);
  }
  CHECK(offs[0] != offs[1] || offs[1] != offs[2] || offs[2] != offs[3], "colour offsets vary");
  CHECK(stat_huge() >= 4 * 30 * MB, "counter: %lu MiB", (unsigned long)(stat_huge() / MB));
  for (int i = 0; i < 4; i++) free(v[i]);
  CHECK(stat_huge() == 0, "counter back to 0 after free (%lu)", (unsigned long)stat_huge());
}

static void test_recycled_keeps_huge_pages(void) {
  locus_set_profile("uma");
  locus_release();
  char *a = malloc(32 * MB);
  touch(a, 32 * MB, 1);
  free(a);
  long f0 = minflt();
  char *b = malloc(32 * MB);             /* the same segment, from the cache */
  touch(b, 32 * MB, 2);
  long faults = minflt() - f0;
  CHECK(faults < 64, "reuse faulted %ld times", faults);
  CHECK_HUGE(huge_bytes(b) >= 32 * MB * 9 / 10, "recycled: %zu KiB huge", huge_bytes(b) / 1024);
  free(b);
  /* split: a smaller request takes the head on a 2 MiB boundary; the rest keeps its huge pages */
  char *c = malloc(8 * MB + 12345);
  char *d = malloc(16 * MB);
  CHECK(((uintptr_t)c & (HP - 1)) < ARCH_PAGE_MAX && ((uintptr_t)d & (HP - 1)) < ARCH_PAGE_MAX, "split pieces on 2 MiB boundaries (%p %p)", (void *)c, (void *)d);
  f0 = minflt();
  touch(c, 8 * MB, 3);
  touch(d, 16 * MB, 4);
  faults = minflt() - f0;
  CHECK(faults < 64, "split pieces faulted %ld times", faults);
  CHECK_HUGE(huge_bytes(d) >= 16 * MB * 9 / 10, "split rest: %zu KiB huge", huge_bytes(d) / 1024);
  free(d);
  /* growth: realloc far beyond, moved on a 2 MiB boundary if it moves */
  c = realloc(c, 40 * MB);
  CHECK(c && ((uintptr_t)c & (HP - 1)) < ARCH_PAGE_MAX, "grown block on a 2 MiB boundary (%p)", (void *)c);
  for (size_t i = 0; i < 8 * MB; i += 4096) CHECK(c[i] == 3, "content kept at %zu", i);
  touch(c, 40 * MB, 5);
  CHECK_HUGE(huge_bytes(c) >= 40 * MB * 9 / 10, "grown: %zu KiB huge", huge_bytes(c) / 1024);
  free(c);
  /* calloc of a recycled huge segment: zero, and still huge */
  unsigned char *z = calloc(1, 32 * MB);
  for (size_t i = 0; i < 32 * MB; i += 997) CHECK(z[i] == 0, "calloc byte %zu", i);
  touch((char *)z, 32 * MB, 6);
  CHECK_HUGE(huge_bytes(z) >= 32 * MB * 9 / 10, "calloc recycled: %zu KiB huge", huge_bytes(z) / 1024);
  free(z);
  CHECK(locus_heap_check() == 0, "heap check");
}

static void test_off_and_eco(void) {
  int madvise_mode = strstr(thp_mode, "[madvise]") != NULL;
  CHECK(locus_option_set("thp", "off") == 0, "LOCUS_THP=off");
  locus_release();
  char *a = malloc(32 * MB);
  touch(a, 32 * MB, 1);
  CHECK(stat_huge() == 0, "off: counter %lu", (unsigned long)stat_huge());
  if (madvise_mode) CHECK_HUGE(huge_bytes(a) == 0, "off: %zu KiB huge", huge_bytes(a) / 1024);
  free(a);
  CHECK(locus_option_set("thp", "bogus") == -1, "bad value refused");
  CHECK(locus_option_set("thp", "auto") == 0, "LOCUS_THP=auto");
  locus_set_profile("eco");              /* auto: no huge pages for eco (unless the kernel has page reuse) */
  a = malloc(32 * MB);
  touch(a, 32 * MB, 1);
  CHECK(stat_huge() == 0, "eco: counter %lu", (unsigned long)stat_huge());
  if (madvise_mode) CHECK_HUGE(huge_bytes(a) == 0, "eco: %zu KiB huge", huge_bytes(a) / 1024);
  free(a);
  CHECK(locus_option_set("thp", "on") == 0, "LOCUS_THP=on");
  a = malloc(32 * MB);                   /* on: eco too */
  touch(a, 32 * MB, 1);
  CHECK_HUGE(huge_bytes(a) >= 32 * MB * 9 / 10, "eco, on: %zu KiB huge", huge_bytes(a) / 1024);
  free(a);
  /* below the 4 MiB threshold: no alignment asked */
  locus_set_profile("uma");
  a = malloc(2 * MB);
  touch(a, 2 * MB, 1);
  CHECK(stat_huge() == 0, "2 MiB block: counter %lu", (unsigned long)stat_huge());
  free(a);
}

/* The numa profile: the node source's policy and the advice together. */
static void test_numa_profile(void) {
  locus_option_set("thp", "on");
  locus_set_profile("numa");
  locus_release();
  char *a = malloc(32 * MB);
  touch(a, 32 * MB, 1);
  CHECK_HUGE(huge_bytes(a) >= 32 * MB * 9 / 10, "numa: %zu KiB huge", huge_bytes(a) / 1024);
  int node = locus_node_of(a + 16 * MB);
  CHECK(node >= 0, "page has a node (%d)", node);
  free(a);
  locus_set_profile("uma");
}

int main(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f || !fgets(thp_mode, sizeof thp_mode, f) || strstr(thp_mode, "[never]")) {
    printf("test_thp: SKIP (THP mode: %s)\n", f ? thp_mode : "absent");
    return 0;
  }
  fclose(f);
  if (getenv("LOCUS_TEST_EMULATOR")) {
    backing_checked = false;
    printf("test_thp: huge-page backing not checked under an emulator (LOCUS_TEST_EMULATOR is set)\n");
  }
  /* The mechanics, with the advice always given: under auto, a machine
   * whose free 2 MiB pages are expensive to fault (test_thp_adapt) would get
   * none. */
  CHECK(locus_option_set("thp", "on") == 0, "LOCUS_THP=on");
  test_placement_and_backing();
  test_recycled_keeps_huge_pages();
  test_off_and_eco();
  test_numa_profile();
  return TEST_DONE();
}
