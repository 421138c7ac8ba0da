/*
 * Unit-style checks of the locus API, written to run under ASan+UBSan (and
 * TSan) with locus linked statically under its own names (locus_*), so that
 * the sanitizer's allocator and locus live side by side. Also built and run in
 * the ordinary build (ctest san_checks).
 *
 * Each CHECK that fails prints the line and the expression and the program
 * exits 1 at the end.
 */
#define _GNU_SOURCE 1
#include "locus_test_api.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "san_checks: %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                                \
    }                                                                            \
  } while (0)

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed);
}
static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 31u + seed)) return 0;
  return 1;
}
static int zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

static const size_t sizes[] = { 0, 1, 7, 8, 15, 16, 17, 24, 48, 100, 255, 256, 257, 1000, 1024, 4095,
                                4096, 4097, 10000, 32768, 65535, 65536, 65537, 100000, 262144, 500000,
                                1 << 20, (1 << 20) + 1, 3 << 20, (8 << 20) + 123 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void check_basic(void) {
  void *ptrs[NSIZES];
  for (size_t i = 0; i < NSIZES; i++) {
    unsigned char *p = locus_malloc(sizes[i]);
    CHECK(p != NULL || sizes[i] == 0);
    if (!p) { ptrs[i] = NULL; continue; }
    size_t u = locus_usable_size(p);
    CHECK(u >= sizes[i]);
    CHECK((uintptr_t)p % (sizes[i] >= 16 ? 16 : 8) == 0 || sizes[i] < 8);
    fill(p, u, (unsigned)i);
    ptrs[i] = p;
  }
  for (size_t i = 0; i < NSIZES; i++) {
    if (!ptrs[i]) continue;
    CHECK(same(ptrs[i], locus_usable_size(ptrs[i]), (unsigned)i));
    if (i % 2) locus_free_sized(ptrs[i], sizes[i]);
    else locus_free(ptrs[i]);
  }
  locus_free(NULL);
  locus_free_sized(NULL, 0);
  CHECK(locus_usable_size(NULL) == 0);
}

static void check_calloc(void) {
  for (int round = 0; round < 3; round++) { /* later rounds get recycled memory */
    for (size_t i = 0; i < NSIZES; i++) {
      unsigned char *p = locus_calloc(1, sizes[i]);
      CHECK(p != NULL || sizes[i] == 0);
      if (!p) continue;
      CHECK(zero(p, sizes[i]));
      memset(p, 0xee, locus_usable_size(p));
      locus_free(p);
    }
  }
  unsigned char *q = locus_calloc(1000, 1000);
  CHECK(q && zero(q, 1000000));
  locus_free(q);
  errno = 0;
  CHECK(locus_calloc(SIZE_MAX / 2 + 1, 2) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(locus_calloc(SIZE_MAX, SIZE_MAX) == NULL && errno == ENOMEM);
}

static void check_realloc(void) {
  for (size_t i = 0; i < NSIZES; i++) {
    for (size_t j = 0; j < NSIZES; j++) {
      unsigned char *p = locus_malloc(sizes[i]);
      if (!p) continue;
      fill(p, sizes[i], 7);
      unsigned char *q = locus_realloc(p, sizes[j]);
      if (sizes[j] == 0) { /* glibc semantics: freed, NULL */
        CHECK(q == NULL);
        continue;
      }
      CHECK(q != NULL);
      if (!q) { locus_free(p); continue; }
      CHECK(same(q, sizes[i] < sizes[j] ? sizes[i] : sizes[j], 7));
      CHECK(locus_usable_size(q) >= sizes[j]);
      locus_free(q);
    }
  }
  unsigned char *p = locus_reallocarray(NULL, 10, 100);
  CHECK(p && locus_usable_size(p) >= 1000);
  fill(p, 1000, 3);
  errno = 0;
  CHECK(locus_reallocarray(p, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
  CHECK(same(p, 1000, 3)); /* untouched */
  p = locus_reallocarray(p, 300, 10);
  CHECK(p && same(p, 1000, 3));
  locus_free(p);
  errno = 0;
  CHECK(locus_malloc(SIZE_MAX) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(locus_malloc((size_t)PTRDIFF_MAX + 1) == NULL && errno == ENOMEM);
}

static void check_aligned(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t a = sizeof(void *); a <= ((size_t)4 << 20); a *= 2) {
    for (size_t k = 0; k < 4; k++) {
      size_t s = k == 0 ? 1 : k == 1 ? a : k == 2 ? 3 * a + 5 : 100000;
      void *p = (void *)1;
      CHECK(locus_posix_memalign(&p, a, s) == 0);
      CHECK(p && (uintptr_t)p % a == 0 && locus_usable_size(p) >= s);
      if (p) memset(p, 1, s);
      locus_free(p);
      unsigned char *q = locus_aligned_alloc(a, s);
      CHECK(q && (uintptr_t)q % a == 0 && locus_usable_size(q) >= s);
      if (q) memset(q, 2, s);
      locus_free(q);
      q = locus_memalign(a, s);
      CHECK(q && (uintptr_t)q % a == 0 && locus_usable_size(q) >= s);
      if (q) memset(q, 3, s);
      if (q) locus_free_aligned_sized(q, a, s);
    }
  }
  void *p = (void *)1;
  CHECK(locus_posix_memalign(&p, 0, 16) == EINVAL && p == (void *)1);
  CHECK(locus_posix_memalign(&p, 24, 16) == EINVAL && p == (void *)1);
  CHECK(locus_posix_memalign(&p, sizeof(void *) / 2, 16) == EINVAL && p == (void *)1);
  unsigned char *v = locus_valloc(100);
  CHECK(v && (uintptr_t)v % page == 0);
  locus_free(v);
  v = locus_pvalloc(page + 1);
  CHECK(v && (uintptr_t)v % page == 0 && locus_usable_size(v) >= 2 * page);
  if (v) memset(v, 4, 2 * page);
  locus_free(v);
}

static void check_profiles_and_stats(void) {
  const char *v = locus_version();
  CHECK(v && strlen(v) >= 5);
  const char *old = locus_get_profile();
  CHECK(old != NULL);
  errno = 0;
  CHECK(locus_set_profile("no-such-profile") == -1 && errno == EINVAL);
  static const char *const names[] = { "eco", "numa", "auto", "uma" };
  for (int i = 0; i < 4; i++) {
    CHECK(locus_set_profile(names[i]) == 0);
    const char *now = locus_get_profile();
    CHECK(now && strcmp(now, names[i]) == 0);
  }
  /* big blocks freed under "uma" are cached; release gives them back */
  void *big[4];
  for (int i = 0; i < 4; i++) big[i] = locus_malloc((size_t)(4 + i) << 20);
  locus_stats_t st;
  locus_stats_get(&st);
  CHECK(st.bytes_in_use >= (size_t)(4 + 5 + 6 + 7) << 20);
  CHECK(st.peak_footprint >= st.bytes_in_use + st.bytes_cached);
  for (int i = 0; i < 4; i++) locus_free(big[i]);
  (void)locus_release();
  CHECK(locus_cached_bytes() == 0);
  locus_stats_get(&st);
  CHECK(st.bytes_cached == 0);

  char small[8];
  size_t need = locus_stats_json(NULL, 0);
  CHECK(need > 2);
  memset(small, 'x', sizeof small);
  size_t r = locus_stats_json(small, sizeof small);
  CHECK(r >= sizeof small);
  CHECK(memchr(small, '\0', sizeof small) != NULL);
  char *buf = locus_malloc(need + 64);
  if (buf) {
    size_t r2 = locus_stats_json(buf, need + 64);
    CHECK(strlen(buf) == r2);
    CHECK(buf[0] == '{' && r2 > 0 && buf[r2 - 1] == '}');
    locus_free(buf);
  }
  CHECK(locus_set_profile(old ? old : "uma") == 0);
}

/* Blocks made by a thread that then exits, freed here; blocks made here, freed there. */
static void *maker(void *arg) {
  void **out = arg;
  for (int i = 0; i < 64; i++) {
    out[i] = locus_malloc((size_t)(i * 977) % 300000 + 1);
    if (out[i]) memset(out[i], i, locus_usable_size(out[i]));
  }
  return NULL;
}
static void *freer(void *arg) {
  void **in = arg;
  for (int i = 0; i < 64; i++) locus_free(in[i]);
  locus_collect();
  return NULL;
}

static void check_threads(void) {
  void *blocks[64];
  for (int round = 0; round < 4; round++) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, maker, blocks) == 0);
    pthread_join(t, NULL);
    for (int i = 0; i < 64; i++) {
      unsigned char *p = blocks[i];
      CHECK(p != NULL);
      if (p) CHECK(p[0] == (unsigned char)i);
      locus_free(p);
    }
    for (int i = 0; i < 64; i++) blocks[i] = locus_calloc(1, (size_t)(i * 1531) % 200000 + 1);
    CHECK(pthread_create(&t, NULL, freer, blocks) == 0);
    pthread_join(t, NULL);
    locus_collect();
  }
}

/* The OpenMP pattern, small: 4 owners allocate, wait, then free another
 * owner's blocks (reverse mapping: every free remote) while that owner is
 * idle or, every other round, allocating now and then. Remote frees take
 * back idle owners' current runs (the pop window against membarrier) and
 * try the owners' locks: the sanitizers see those paths race the owners'. */
#define OMP_T 4
#define OMP_N 20000
static void *omp_blk[OMP_T][OMP_N];
static pthread_barrier_t omp_bar;
static int omp_bad[OMP_T];
static void *omp_worker(void *arg) {
  int t = (int)(intptr_t)arg, o = OMP_T - 1 - t;
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < OMP_N; i++) {
      omp_blk[t][i] = locus_malloc(64 + (size_t)((i * 37 + t) % 961));
      if (omp_blk[t][i]) *(int *)omp_blk[t][i] = i;
      else omp_bad[t]++;
    }
    pthread_barrier_wait(&omp_bar);
    for (int i = OMP_N - 1; i >= 0; i--) {
      /* owners idle for longer than HEAP_IDLE_NS (10 ms) in the second half:
       * their current runs are taken back (runs faster than that would not) */
      if (i == OMP_N / 2) usleep(20 * 1000);
      if (!omp_blk[o][i]) continue;
      if (*(int *)omp_blk[o][i] != i) omp_bad[t]++;
      locus_free(omp_blk[o][i]);
      if ((round & 1) && i % 1000 == 0) locus_free(locus_malloc(80));
    }
    pthread_barrier_wait(&omp_bar);
  }
  return NULL;
}
static void check_omp_pattern(void) {
  pthread_t th[OMP_T];
  CHECK(pthread_barrier_init(&omp_bar, NULL, OMP_T) == 0);
  for (int t = 0; t < OMP_T; t++) CHECK(pthread_create(&th[t], NULL, omp_worker, (void *)(intptr_t)t) == 0);
  for (int t = 0; t < OMP_T; t++) {
    pthread_join(th[t], NULL);
    CHECK(omp_bad[t] == 0);
  }
  pthread_barrier_destroy(&omp_bar);
}

int main(void) {
  check_basic();
  check_calloc();
  check_realloc();
  check_aligned();
  check_profiles_and_stats();
  check_threads();
  check_omp_pattern();
  if (failures) {
    fprintf(stderr, "san_checks: %d check(s) FAILED\n", failures);
    return 1;
  }
  printf("san_checks: all checks passed (%s)\n", T_ALLOCATOR_NAME);
  return 0;
}
