/* The C API: every function, sizes across all three tiers, and bad input. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"

static const size_t sizes[] = {0, 1, 8, 15, 16, 17, 100, 128, 129, 1000, 4096, 8192, 8193,
                               20000, 100000, 500000, 1 << 20, (1 << 20) + 1, 3 << 20, 40 << 20};
#define NS (sizeof sizes / sizeof sizes[0])

static void test_malloc_free(void) {
  void *p[NS];
  for (size_t i = 0; i < NS; i++) {
    p[i] = malloc(sizes[i]);
    CHECK(p[i], "malloc(%zu)", sizes[i]);
    CHECK((uintptr_t)p[i] % 16 == 0, "malloc(%zu) = %p not 16-aligned", sizes[i], p[i]);
    CHECK(malloc_usable_size(p[i]) >= sizes[i], "usable %zu < %zu", malloc_usable_size(p[i]), sizes[i]);
    fill(p[i], sizes[i]);
  }
  for (size_t i = 0; i < NS; i++) {
    CHECK(verify(p[i], sizes[i]), "content of malloc(%zu) changed", sizes[i]);
    free(p[i]);
  }
  /* malloc(0): unique, freeable pointers */
  void *a = malloc(0), *b = malloc(0);
  CHECK(a && b && a != b, "malloc(0) must return unique pointers");
  free(a);
  free(b);
  free(NULL);
}

static void test_calloc(void) {
  for (int round = 0; round < 3; round++)
    for (size_t i = 0; i < NS; i++) {
      unsigned char *p = calloc(1, sizes[i]);
      CHECK(p, "calloc(%zu)", sizes[i]);
      for (size_t j = 0; j < sizes[i]; j++) CHECK(p[j] == 0, "calloc(%zu)[%zu] = %d", sizes[i], j, p[j]);
      memset(p, 0xAB, sizes[i]);       /* dirty it: the next round gets recycled memory */
      free(p);
    }
  errno = 0;
  CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "calloc overflow must fail with ENOMEM");
  errno = 0;
  CHECK(calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM, "calloc overflow");
}

static void test_realloc(void) {
  for (size_t i = 0; i < NS; i++)
    for (size_t j = 0; j < NS; j++) {
      if (!sizes[i] || !sizes[j]) continue;
      char *p = malloc(sizes[i]);
      fill(p, sizes[i]);
      size_t keep = sizes[i] < sizes[j] ? sizes[i] : sizes[j];
      char *q = realloc(p, sizes[j]);
      CHECK(q, "realloc %zu -> %zu", sizes[i], sizes[j]);
      for (size_t k = 0; k < keep; k++)
        CHECK((unsigned char)q[k] == pat(p, sizes[i], k), "realloc %zu->%zu lost byte %zu", sizes[i], sizes[j], k);
      CHECK(malloc_usable_size(q) >= sizes[j], "usable after realloc");
      free(q);
    }
  /* growing realloc of a large block keeps content (mremap) */
  size_t n = 2 << 20;
  char *p = malloc(n);
  memset(p, 7, n);
  for (; n < (64u << 20); n *= 2) {
    p = realloc(p, n * 2);
    CHECK(p && p[n - 1] == 7 && p[0] == 7, "growing realloc to %zu", n * 2);
    memset(p + n, 7, n);
  }
  free(p);
  CHECK(realloc(NULL, 10) != NULL, "realloc(NULL) acts as malloc");
  p = malloc(10);
  CHECK(realloc(p, 0) == NULL, "realloc(p, 0) frees and returns NULL (glibc)");
  errno = 0;
  p = malloc(100);
  CHECK(realloc(p, SIZE_MAX) == NULL && errno == ENOMEM, "realloc(SIZE_MAX)");
  free(p);
  errno = 0;
  p = malloc(100);
  CHECK(reallocarray(p, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM, "reallocarray overflow");
  p = reallocarray(p, 10, 20);
  CHECK(p && malloc_usable_size(p) >= 200, "reallocarray");
  free(p);
}

static void test_impossible(void) {
  size_t bad[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX};
  for (size_t i = 0; i < 4; i++) {
    errno = 0;
    CHECK(malloc(bad[i]) == NULL && errno == ENOMEM, "malloc(%zu)", bad[i]);
    void *p = (void *)1;
    CHECK(posix_memalign(&p, 64, bad[i]) == ENOMEM && p == (void *)1, "posix_memalign huge");
  }
  /* The allocator keeps working. */
  void *p = malloc(1000);
  CHECK(p, "malloc after failures");
  free(p);
}

static void test_aligned(void) {
  size_t aligns[] = {8, 16, 32, 64, 128, 256, 4096, 8192, 65536, 1 << 21};
  for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
    for (size_t i = 0; i < NS; i++) {
      void *p = NULL;
      CHECK(posix_memalign(&p, aligns[a], sizes[i]) == 0, "posix_memalign(%zu, %zu)", aligns[a], sizes[i]);
      CHECK((uintptr_t)p % aligns[a] == 0, "posix_memalign(%zu, %zu) = %p", aligns[a], sizes[i], p);
      CHECK(malloc_usable_size(p) >= sizes[i], "usable");
      fill(p, sizes[i]);
      void *q = aligned_alloc(aligns[a], sizes[i]);
      CHECK(q && (uintptr_t)q % aligns[a] == 0, "aligned_alloc(%zu, %zu)", aligns[a], sizes[i]);
      void *r = memalign(aligns[a], sizes[i]);
      CHECK(r && (uintptr_t)r % aligns[a] == 0, "memalign");
      CHECK(verify(p, sizes[i]), "aligned block content");
      free(p);
      free(q);
      free(r);
    }
  void *p = (void *)1;
  CHECK(posix_memalign(&p, 0, 16) == EINVAL, "alignment 0");
  CHECK(posix_memalign(&p, 3, 16) == EINVAL, "alignment 3");
  CHECK(posix_memalign(&p, 24, 16) == EINVAL, "alignment 24");
  CHECK(posix_memalign(&p, 4, 16) == EINVAL, "alignment 4 < sizeof(void*)");
  CHECK(p == (void *)1, "output untouched on error");
  /* glibc 2.36: memalign/aligned_alloc round a non-power-of-two alignment up */
  void *q = memalign(24, 100);
  CHECK(q && (uintptr_t)q % 32 == 0, "memalign(24) rounds up to 32");
  free(q);
  q = aligned_alloc(3, 10);
  CHECK(q && (uintptr_t)q % 4 == 0, "aligned_alloc(3)");
  free(q);
  errno = 0;
  CHECK(memalign(SIZE_MAX / 2 + 2, 16) == NULL && errno == EINVAL, "memalign huge alignment");
  errno = 0;
  CHECK(memalign(SIZE_MAX / 2 + 1, 16) == NULL && errno == ENOMEM, "memalign(2^63) cannot be met");
  CHECK(posix_memalign(&p, (size_t)1 << 62, 16) == ENOMEM, "posix_memalign(2^62)");
  long pg = sysconf(_SC_PAGESIZE);
  q = valloc(10);
  CHECK(q && (uintptr_t)q % pg == 0, "valloc");
  free(q);
  q = pvalloc(10);
  CHECK(q && (uintptr_t)q % pg == 0 && malloc_usable_size(q) >= (size_t)pg, "pvalloc rounds to a page");
  free(q);
}

static void test_locus_api(void) {
  char ver[32];
  snprintf(ver, sizeof ver, "%d.%d.%d", LOCUS_VERSION_MAJOR, LOCUS_VERSION_MINOR, LOCUS_VERSION_PATCH);
  CHECK(strcmp(locus_version(), ver) == 0, "version %s, header says %s", locus_version(), ver);
  CHECK(locus_set_profile("bogus") == -1 && errno == EINVAL, "unknown profile");
  CHECK(locus_set_profile("uma") == 0 && strcmp(locus_get_profile(), "uma") == 0, "uma");
  void *big = malloc(64 << 20);
  memset(big, 1, 64 << 20);
  free(big);
  CHECK(locus_cached_bytes() >= (64u << 20), "uma caches a freed 64 MiB block (cached %zu)", locus_cached_bytes());
  size_t rel = locus_release();
  /* a 4 MiB chunk may have been carved from the cached block since */
  CHECK(rel >= (56u << 20) && locus_cached_bytes() == 0, "release returned %zu", rel);
  CHECK(locus_set_profile("eco") == 0, "eco");
  big = malloc(64 << 20);
  free(big);
  CHECK(locus_cached_bytes() == 0, "eco keeps nothing");
  locus_set_profile("uma");
  char json[4096];
  size_t n = locus_stats_json(json, sizeof json);
  CHECK(n < sizeof json && json[0] == '{' && json[n - 1] == '}' && strstr(json, "\"mmap_calls\":"), "json: %s", json);
  CHECK(locus_stats_json(json, 10) == n && strlen(json) == 9, "json truncation reports the full length");
  locus_stats_t st;
  locus_stats_get(&st);
  CHECK(st.mmap_calls > 0 && st.heaps_live >= 1, "stats");
}

int main(void) {
  test_malloc_free();
  test_calloc();
  test_realloc();
  test_impossible();
  test_aligned();
  test_locus_api();
  return TEST_DONE();
}
