/* Linked with liblocus.a by symbols_exported.sh. This program defines, for its
 * own purposes, functions and a variable whose names locus uses internally.
 * liblocus.a localises those names, so the link must succeed (no "multiple
 * definition"), the program's calls must reach its own definitions, and
 * locus's malloc must keep working with its own. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus.h"

#ifdef CLASH_NO_OVERRIDE
#define ALLOC locus_malloc
#define FREE locus_free
#else
#define ALLOC malloc
#define FREE free
#endif

/* Internal names of locus (lock.c, os.c, registry.c, error.c, heap.c, stats.c),
 * with other signatures. noinline: the calls must go through the symbols. */
__attribute__((noinline)) int lock_acquire(int x) { return x + 1; }
__attribute__((noinline)) void *os_map(size_t n) { return (void *)(uintptr_t)(n * 2); }
__attribute__((noinline)) int registry_add(int a, int b) { return a * b; }
__attribute__((noinline)) const char *fmt_buf(void) { return "program's fmt_buf"; }
__attribute__((noinline)) long heap_get_slow(long v) { return -v; }
int locus_stats = 42;

static int failures;
#define CHECK(c)                                                   \
  do {                                                             \
    if (!(c)) {                                                    \
      fprintf(stderr, "static_clash: check failed: %s\n", #c);     \
      failures++;                                                  \
    }                                                              \
  } while (0)

int main(void) {
  CHECK(lock_acquire(41) == 42);
  CHECK(os_map(21) == (void *)42);
  CHECK(registry_add(6, 7) == 42);
  CHECK(strcmp(fmt_buf(), "program's fmt_buf") == 0);
  CHECK(heap_get_slow(-42) == 42);
  CHECK(locus_stats == 42);

  /* malloc is locus's: a 3 MiB block is a large segment, counted in use. */
  locus_stats_t before, after;
  locus_stats_get(&before);
  size_t big = 3u << 20;
  char *p = ALLOC(big);
  CHECK(p != NULL);
  if (p) {
    memset(p, 0x5a, big);
    locus_stats_get(&after);
    CHECK(after.bytes_in_use >= before.bytes_in_use + big);
    CHECK(locus_usable_size(p) >= big);
    FREE(p);
  }
  for (size_t n = 1; n <= (1u << 20); n *= 3) {
    char *q = ALLOC(n);
    CHECK(q != NULL);
    if (!q) break;
    q[0] = 1;
    q[n - 1] = 2;
    CHECK(locus_usable_size(q) >= n);
    FREE(q);
  }
  const char *prof = locus_get_profile();
  CHECK(prof != NULL && prof[0] != 0);
  printf("static_clash: locus %s, profile %s, %d failure(s)\n", locus_version(), prof ? prof : "?", failures);
  if (failures) return 1;
  printf("static_clash: ok\n");
  return 0;
}
