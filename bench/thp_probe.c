/* Diagnostic (issue 33, docs/adaptive.md "Huge pages that pay"): the cost of
 * the first touch of each page of a fresh anonymous mapping, huge pages
 * (MADV_HUGEPAGE, one touch per 2 MiB) or base pages (MADV_NOHUGEPAGE), in
 * rounds that each map, touch and unmap, with an optional pause between them.
 * On a VM with free page reporting (virtio-balloon), the 2 MiB blocks a
 * round frees are handed back to the host about 2 s later, and the next huge
 * fault that gets one waits for the host to populate it.
 *   bench_thp_probe [--mib N] [--rounds R] [--base] [--pause-ms MS]
 * Prints per round: faults, total, us per MiB, median / p10 / p90 / max per
 * fault (monotonic time), and the thread CPU time of the round. No allocator
 * involved: LD_PRELOAD does not matter. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  size_t mib = 256;
  int rounds = 3, huge = 1, pause_ms = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--pause-ms") && i + 1 < argc) pause_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--base")) huge = 0;
    else {
      fprintf(stderr, "usage: %s [--mib N] [--rounds R] [--base] [--pause-ms MS]\n", argv[0]);
      return 2;
    }
  }
  const size_t H = 2u << 20, size = mib << 20, step = huge ? H : 4096, n = size / step;
  double *t = malloc(n * sizeof *t);
  if (!t || !n) return 1;
  for (int r = 0; r < rounds; r++) {
    char *p = mmap(NULL, size + H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    char *q = (char *)(((uintptr_t)p + H - 1) & ~(uintptr_t)(H - 1));
    madvise(q, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    double c0 = ns(CLOCK_THREAD_CPUTIME_ID), t0 = ns(CLOCK_MONOTONIC);
    for (size_t i = 0; i < n; i++) {
      double a = ns(CLOCK_MONOTONIC);
      *(volatile char *)(q + i * step) = 1;
      t[i] = ns(CLOCK_MONOTONIC) - a;
    }
    double tot = ns(CLOCK_MONOTONIC) - t0, cpu = ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    qsort(t, n, sizeof *t, cmp);
    printf("round %d %s: %zu faults, %.1f ms (cpu %.1f ms) = %.1f us/MiB; per fault median %.1f us, p10 %.1f, "
           "p90 %.1f, max %.1f\n", r, huge ? "2 MiB" : "4 KiB", n, tot / 1e6, cpu / 1e6, tot / 1e3 / (double)mib,
           t[n / 2] / 1e3, t[n / 10] / 1e3, t[n * 9 / 10] / 1e3, t[n - 1] / 1e3);
    fflush(stdout);
    munmap(p, size + H);
    if (pause_ms && r + 1 < rounds) usleep((useconds_t)pause_ms * 1000);
  }
  free(t);
  return 0;
}
