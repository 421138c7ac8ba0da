/* A known case for `locus align`: four arrays of 4 MiB (ARRAYS, MIB) swept
 * together in one loop (d[i] = a[i] + b[i] + c[i]), then a fifth one alone.
 * Each array comes from its own malloc call (distinct source lines), so the
 * analyser must name four different allocation sites. With page-aligned
 * allocations (locus with LOCUS_COLOR=0, or glibc's mmap'ed blocks) the four
 * starts coincide modulo 4 KiB: a collision; with locus's random offsets they
 * do not. Usage: align_sweep [SECONDS] (CPU time spent in the loops). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N (4u << 20) / sizeof(double)

static double cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sweep(double *d, const double *a, const double *b, const double *c) {
  for (size_t i = 0; i < N; i++) d[i] = a[i] + b[i] + c[i];
}

static void alone(double *e) {
  for (size_t i = 0; i < N; i++) e[i] = e[i] * 0.5 + 1.0;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 0.5;
  double *a = malloc(N * sizeof(double));
  double *b = malloc(N * sizeof(double));
  double *c = malloc(N * sizeof(double));
  double *d = malloc(N * sizeof(double));
  if (!a || !b || !c || !d) return 1;
  for (size_t i = 0; i < N; i++) a[i] = 1, b[i] = 2, c[i] = 3;
  double t0 = cpu();
  while (cpu() - t0 < secs) sweep(d, a, b, c);
  double *e = malloc(N * sizeof(double));
  if (!e) return 1;
  for (size_t i = 0; i < N; i++) e[i] = 2;
  t0 = cpu();
  while (cpu() - t0 < secs / 2) alone(e);
  int ok = d[N - 1] == 6.0 && e[0] == 2.0;
  printf("align_sweep: %s (offsets mod 4096: %lu %lu %lu %lu %lu)\n", ok ? "ok" : "WRONG",
         (unsigned long)a % 4096, (unsigned long)b % 4096, (unsigned long)c % 4096, (unsigned long)d % 4096,
         (unsigned long)e % 4096);
  free(e);
  free(d);
  free(c);
  free(b);
  free(a);
  return !ok;
}
