/* LD_PRELOAD shim for the kernel-steady measurements: counts mmap, munmap
 * and madvise calls and the wall time spent in them (CLOCK_MONOTONIC), per
 * process, printed to stderr at exit as one SHIM line per call kind. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { K_MMAP, K_MUNMAP, K_MADV_DONTNEED, K_MADV_OTHER, K_N };
static const char *names[K_N] = {"mmap", "munmap", "madv_dontneed", "madv_other"};
static _Atomic unsigned long cnt[K_N], ns[K_N], maxns[K_N];

static unsigned long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long)t.tv_sec * 1000000000ul + (unsigned long)t.tv_nsec;
}
static void rec(int k, unsigned long d) {
  atomic_fetch_add(&cnt[k], 1);
  atomic_fetch_add(&ns[k], d);
  unsigned long m = atomic_load(&maxns[k]);
  while (d > m && !atomic_compare_exchange_weak(&maxns[k], &m, d)) {}
}
void *mmap(void *a, size_t l, int p, int f, int fd, off_t o) {
  static void *(*real)(void *, size_t, int, int, int, off_t);
  if (!real) real = dlsym(RTLD_NEXT, "mmap");
  unsigned long t = now_ns();
  void *r = real(a, l, p, f, fd, o);
  rec(K_MMAP, now_ns() - t);
  return r;
}
int munmap(void *a, size_t l) {
  static int (*real)(void *, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "munmap");
  unsigned long t = now_ns();
  int r = real(a, l);
  rec(K_MUNMAP, now_ns() - t);
  return r;
}
int madvise(void *a, size_t l, int adv) {
  static int (*real)(void *, size_t, int);
  if (!real) real = dlsym(RTLD_NEXT, "madvise");
  unsigned long t = now_ns();
  int r = real(a, l, adv);
  rec(adv == MADV_DONTNEED ? K_MADV_DONTNEED : K_MADV_OTHER, now_ns() - t);
  return r;
}
__attribute__((destructor)) static void report(void) {
  char buf[256];
  for (int k = 0; k < K_N; k++) {
    int n = snprintf(buf, sizeof buf, "SHIM %s calls=%lu total_ms=%.1f max_ms=%.2f\n", names[k], cnt[k],
                     ns[k] / 1e6, maxns[k] / 1e6);
    if (write(2, buf, (size_t)n) < 0) return;
  }
}
