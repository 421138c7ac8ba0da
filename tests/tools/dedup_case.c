/* A known case for `locus dedup`: three page-aligned arrays of known page
 * contents, so that the counts of duplicated pages can be checked exactly.
 *
 *   dedup_case [HOLD_SECONDS [SEED]]
 *
 *   zero    300 pages written with zeros (memset: real pages, not the
 *           kernel's shared zero page);
 *   dup     200 pages: 10 distinct contents, 20 copies of each (page k holds
 *           content k mod 10);
 *   unique  100 pages, each with a content of its own.
 * The contents are 64-bit words derived from SEED (default: the process
 * id), so that no other page of the process holds them, and two processes
 * given the same SEED hold the same non-zero contents. The arrays
 * come from aligned_alloc(4096, ...) (under locus: large blocks starting on a
 * page, traced by LOCUS_TRACE_FILE with these addresses and sizes).
 * Prints "ready PID zero=ADDR:LEN dup=ADDR:LEN unique=ADDR:LEN", then waits
 * until its standard input closes, or HOLD_SECONDS when given and not 0:
 * meanwhile it rewrites a fourth array of 16 pages (64 KiB, malloc) with
 * new contents every 50 ms, pages whose contents never stay identical for
 * long. Frees the arrays and exits 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096ul

static void fill(char *page, uint64_t seed) {
  uint64_t *w = (uint64_t *)page;
  for (size_t i = 0; i < PAGE / sizeof *w; i++) w[i] = seed * 0x9e3779b97f4a7c15ull + i;
}

int main(int argc, char **argv) {
  const size_t nzero = 300, ndup = 200, ncontents = 10, nuniq = 100;
  char *zero = aligned_alloc(PAGE, nzero * PAGE);
  char *dup = aligned_alloc(PAGE, ndup * PAGE);
  char *uniq = aligned_alloc(PAGE, nuniq * PAGE);
  if (!zero || !dup || !uniq) {
    perror("aligned_alloc");
    return 1;
  }
  uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : (uint64_t)getpid();
  uint64_t base = (seed << 32) | 0x5eed0000u;
  memset(zero, 0, nzero * PAGE);
  for (size_t k = 0; k < ndup; k++) fill(dup + k * PAGE, base + k % ncontents);
  for (size_t k = 0; k < nuniq; k++) fill(uniq + k * PAGE, base + 1000 + k);
  printf("ready %d zero=0x%lx:%lu dup=0x%lx:%lu unique=0x%lx:%lu\n", (int)getpid(), (unsigned long)zero,
         nzero * PAGE, (unsigned long)dup, ndup * PAGE, (unsigned long)uniq, nuniq * PAGE);
  fflush(stdout);
  double s = argc > 1 ? atof(argv[1]) : 0;
  if (s > 0) {
    char *churn = malloc(16 * PAGE);
    if (!churn) return 1;
    for (long step = 0; step * 0.05 < s; step++) {
      for (size_t k = 0; k < 16; k++) fill(churn + k * PAGE, base + 100000 + (uint64_t)step * 16 + k);
      struct timespec ts = {0, 50 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    free(churn);
  } else {
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
  }
  free(uniq);
  free(dup);
  free(zero);
  return 0;
}
