/* Diagnostic: the CPU cost of LOCUS_KSM=auto's sampler (docs/sharing.md,
 * "LOCUS_KSM=auto against large"): 2000 ticks with a clock of its own (a
 * second apart: every block due) over N blocks of 8 MiB, each tick hashing
 * KSM_AUTO_BUDGET pages; prints the cost per page and per second at the
 * sampler's bound (10 ticks a second).
 *   LOCUS_KSM=auto bench_ksm_sampler [N (64)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "locus.h"
#include "source/ksm.h"
#include "os/os.h"
/* CPU time of the thread: the host may be busy with other work. */
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  if (!ksm_auto()) {
    fprintf(stderr, "bench_ksm_sampler: run with LOCUS_KSM=auto\n");
    return 2;
  }
  int nb = argc > 1 ? atoi(argv[1]) : 64;
  ksm_thread_off = true;
  char **b = malloc(nb * sizeof *b);
  for (int i = 0; i < nb; i++) { b[i] = malloc(8 << 20); memset(b[i], i + 1, 8 << 20); }
  uint64_t t = os_clock_coarse_ns() + 100ull * 1000000000;
  ksm_auto_stats_t s0, s1;
  ksm_auto_stats(&s0);
  double t0 = now();
  int ticks = 2000;
  for (int i = 0; i < ticks; i++) ksm_tick(t += KSM_AUTO_PERIOD_NS);
  double dt = now() - t0;
  ksm_auto_stats(&s1);
  size_t pages = s1.pages_hashed - s0.pages_hashed;
  printf("%d blocks: %d ticks, %zu pages hashed, %.3f s of CPU: %.0f ns per page, %.1f us per tick; at 10 ticks/s: %.3f ms of CPU per second\n",
         nb, ticks, pages, dt, dt * 1e9 / pages, dt * 1e6 / ticks, dt * 1e3 / ticks * 10);
  return 0;
}
