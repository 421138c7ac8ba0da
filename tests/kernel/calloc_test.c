/* calloc through locus with the kernel's page reuse: run in the guest with
 * LD_PRELOAD=liblocus.so LOCUS_PROFILE=eco (tests/kernel/guest_tests.sh).
 *
 *   calloc_test patched|stock
 *
 * eco gives every freed large block back to the kernel; with page reuse the
 * next mapping's faults bring the old pages back uncleared, so calloc must
 * clear them itself.  Blocks are filled with a pattern, freed, and calloc'd
 * again in many sizes (small, medium, large, growing and shrinking); every
 * byte must be zero.  On the patched kernel the process must also have
 * received reused pages (page_reuse_hit in /proc/vmstat went up during the
 * run; PageReuseHits > 0 on the series before issue 27's second round), or
 * the test proved nothing. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long status_value(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == ':') { v = strtol(line + n + 1, NULL, 10); break; }
  fclose(f);
  return v;
}

/* Page-reuse hits: /proc/vmstat's page_reuse_hit (system-wide: the guest
 * runs one test at a time), or the older series' PageReuseHits status line;
 * -1 when absent (stock kernel). */
static long reuse_hits(void) {
  FILE *f = fopen("/proc/vmstat", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "page_reuse_hit ", 15)) { v = strtol(line + 15, NULL, 10); break; }
  if (f) fclose(f);
  return v >= 0 ? v : status_value("PageReuseHits");
}

/* Rss and AnonHugePages (kB) of the mappings overlapping [p, p + n), from
 * /proc/self/smaps (a block may span several vmas). */
static void smaps_of(const void *p, size_t n, long *rss, long *huge) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  int in = 0;
  *rss = *huge = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    long v;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p < hi && (uintptr_t)p + n > lo;
      continue;
    }
    if (in && sscanf(line, "Rss: %ld kB", &v) == 1) *rss += v;
    if (in && sscanf(line, "AnonHugePages: %ld kB", &v) == 1) *huge += v;
  }
  if (f) fclose(f);
}

/* eco with page reuse backs a large block with 2 MiB pages to its end: a
 * 15.5 MiB block (rounded up to 16 MiB, 1/32 more) written whole, then
 * written again after a free and a new malloc (from the pool), has no part
 * in 4 KiB pages (which would cost a fault and a zap per 4 KiB at every
 * allocation).  Needs free 2 MiB pages, as the kernel tests' huge test. */
static int huge_tail(void) {
  const size_t n = (31u << 20) / 2;
  long rss = -1, huge = -1;
  for (int round = 0; round < 2; round++) {
    char *p = malloc(n);
    if (!p) { printf("FAIL eco huge tail: malloc(%zu) failed\n", n); return 1; }
    /* Volatile stores: a memset of memory freed unread may be elided. */
    for (size_t k = 0; k < n; k += 4096) ((volatile char *)p)[k] = 0x5a;
    ((volatile char *)p)[n - 1] = 0x5a;
    smaps_of(p, n, &rss, &huge);
    free(p);
    if (rss < (long)(n >> 10) || rss - huge >= 512) {
      printf("FAIL eco huge tail: a %zu kB block has %ld kB resident, %ld kB of it in 2 MiB pages (round %d)\n",
             n >> 10, rss, huge, round);
      return 1;
    }
  }
  printf("PASS eco huge tail (a %zu kB block: %ld kB resident, %ld kB in 2 MiB pages)\n", n >> 10, rss, huge);
  return 0;
}

int main(int argc, char **argv) {
  int patched = argc > 1 && !strcmp(argv[1], "patched");
  static const size_t sizes[] = {24, 200, 3000, 40000, 300000, 1 << 20, (1 << 20) + 12345, 3 << 20, 8 << 20, 5 << 20, 2 << 20, 17 << 20};
  const size_t ns = sizeof sizes / sizeof *sizes;
  uint64_t seed = 88172645463325252ull;
  size_t bad = 0, checked = 0;
  long hits0 = reuse_hits();
  if (hits0 < 0) hits0 = 0;
  for (int round = 0; round < 60; round++) {
    void *held[12];
    for (size_t i = 0; i < ns; i++) {
      size_t n = sizes[(i + round) % ns];
      held[i] = malloc(n);
      if (!held[i]) { printf("FAIL calloc: malloc(%zu) failed\n", n); return 1; }
      memset(held[i], 0xA5 ^ (int)(round & 0x3f), n);
    }
    for (size_t i = 0; i < ns; i++) free(held[i]);
    for (size_t i = 0; i < ns; i++) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      size_t n = sizes[(i + round + seed % 3) % ns];
      unsigned char *p = calloc(1, n);
      if (!p) { printf("FAIL calloc: calloc(%zu) failed\n", n); return 1; }
      for (size_t k = 0; k < n; k++)
        if (p[k]) { bad++; break; }
      checked++;
      held[i] = p;
    }
    for (size_t i = 0; i < ns; i++) free(held[i]);
  }
  long hits = reuse_hits() - hits0;
  if (bad) { printf("FAIL calloc: %zu of %zu calloc'd blocks were not all zero (page reuse hits %ld)\n", bad, checked, hits); return 1; }
  if (patched && hits <= 0) { printf("FAIL calloc: the kernel reused no page (page reuse hits %ld): is locus marking eco's segments?\n", hits); return 1; }
  printf("PASS calloc (%zu blocks all zero, page reuse hits %ld)\n", checked, hits);
  return patched ? huge_tail() : 0;
}
