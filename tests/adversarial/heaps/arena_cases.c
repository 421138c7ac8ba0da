/* Arena heaps (LOCUS_HEAP_ARENA): edge cases. Usage: arena_cases [case]
 * Run big_threshold with LOCUS_LARGE_THRESHOLD=8M (or more). */
#include "common.h"

static locus_heap_t *arena(void *seg, size_t sz, size_t limit) {
  return mkheap_cfg(seg, sz, limit, LOCUS_HEAP_ARENA, "arena");
}

/* Blocks between the 4 MiB arena chunk and the large threshold (> 4 MiB). */
static void big_threshold(void) {
  locus_heap_t *h = arena(NULL, 0, 0);
  locus_stats_t st;
  int fails = 0;
  for (int i = 0; i < 20; i++) {
    void *p = locus_heap_malloc(h, 5 * MiB);
    if (!p) fails++;
  }
  locus_heap_stats(h, &st);
  void *q = locus_heap_malloc(h, 100);
  printf("big_threshold: 20 x locus_heap_malloc(arena, 5 MiB): %d failed (errno %d); the heap holds %.1f MiB; "
         "small malloc after: %p\n", fails, errno, st.bytes_in_use / (double)MiB, q);
  if (fails) FAIL("arena blocks above the chunk size but below LOCUS_LARGE_THRESHOLD fail (and each failure costs a chunk: %.0f MiB held)",
                  st.bytes_in_use / (double)MiB);
  locus_heap_destroy(h);
  OK("big arena blocks");
}

/* A destroyed heap's dirty memory goes to locus's source cache: is calloc
 * (of another arena, of a plain heap, of malloc) still zero? */
static int dirty(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return (int)i + 1;
  return 0;
}
static void calloc_after_destroy(void) {
  int bad = 0;
  for (int round = 0; round < 20; round++) {
    locus_heap_t *a = arena(NULL, 0, 0);
    for (int i = 0; i < 60; i++) {
      void *p = locus_heap_malloc(a, 64 * 1024 + i * 16);
      memset(p, 0xab, 64 * 1024 + i * 16);
    }
    locus_heap_t *m = mkheap_cfg(NULL, 0, 0, 0, "plain");
    for (int i = 0; i < 60; i++) memset(locus_heap_malloc(m, 200000), 0xcd, 200000);
    for (int i = 0; i < 3000; i++) memset(locus_heap_malloc(m, 512), 0xcd, 512);
    locus_heap_destroy(a);
    locus_heap_destroy(m);
    locus_heap_t *b = arena(NULL, 0, 0);
    locus_heap_t *n = mkheap_cfg(NULL, 0, 0, 0, "plain2");
    for (int i = 0; i < 60; i++) {
      size_t s = 64 * 1024 + i * 16;
      unsigned char *p = locus_heap_calloc(b, 1, s);
      int d = dirty(p, s);
      if (d && bad++ < 3) NOTE("arena calloc %p byte %d = %#x", (void *)p, d - 1, p[d - 1]);
      p = locus_heap_calloc(n, 1, 200000);
      if ((d = dirty(p, 200000)) && bad++ < 3) NOTE("heap calloc %p byte %d = %#x", (void *)p, d - 1, p[d - 1]);
      p = calloc(1, 300000);
      if ((d = dirty(p, 300000)) && bad++ < 3) NOTE("calloc %p byte %d = %#x", (void *)p, d - 1, p[d - 1]);
      free(p);
    }
    for (int i = 0; i < 3000; i++) {
      unsigned char *p = locus_heap_calloc(n, 1, 512);
      int d = dirty(p, 512);
      if (d && bad++ < 3) NOTE("heap small calloc %p byte %d = %#x", (void *)p, d - 1, p[d - 1]);
    }
    locus_heap_destroy(b);
    locus_heap_destroy(n);
  }
  if (bad) FAIL("calloc after destroy: %d dirty blocks", bad);
  OK("calloc after destroy zero (20 rounds)");
}

/* Stale pointers after a reset are accepted (usable size of the old block;
 * realloc copies bytes of whatever block now lies there). */
static void stale_after_reset(void) {
  locus_heap_t *h = arena(NULL, 0, 0);
  char *p = locus_heap_malloc(h, 1000);
  strcpy(p, "old");
  locus_heap_reset(h);
  char *q = locus_heap_malloc(h, 10);   /* the bump starts over: q's block overlaps p's */
  strcpy(q, "new");
  size_t us = malloc_usable_size(p + 0); /* p is no block now: 16 bytes in q's */
  printf("stale_after_reset: p %p q %p usable(p) %zu heap_of(p) %p\n", (void *)p, (void *)q, us,
         (void *)locus_heap_of(p));
  locus_heap_destroy(h);
}

/* Interior pointers: usable size, heap_of, realloc. */
static void interior(void) {
  locus_heap_t *h = arena(NULL, 0, 0);
  char *p = locus_heap_malloc(h, 256);
  printf("interior: heap_of(p+8) %s\n", locus_heap_of(p + 8) == h ? "h" : "other");
  pid_t c = fork();
  if (!c) {
    alarm(5);
    size_t u = malloc_usable_size(p + 16);
    printf("interior: malloc_usable_size(p+16) = %zu (no abort)\n", u);
    _exit(0);
  }
  int st;
  waitpid(c, &st, 0);
  printf("interior: malloc_usable_size(p+16): %s\n", WIFSIGNALED(st) ? "aborted (expected)" : "returned");
  locus_heap_destroy(h);
}

/* Huge alignments and a segment arena. */
static void align_cases(void) {
  char *seg = guarded(8 * MiB);
  locus_heap_t *h = arena(seg, 8 * MiB, 0);
  size_t al[] = {16, 64, 4096, 8192, 65536, 1 << 20, 2 << 20};
  for (unsigned i = 0; i < sizeof al / sizeof *al; i++) {
    char *p = locus_heap_aligned_alloc(h, al[i], 100);
    printf("align %zu: %p %s %s\n", al[i], (void *)p, p && ((uintptr_t)p % al[i]) == 0 ? "aligned" : "NOT ALIGNED",
           p && (p < seg || p >= seg + 8 * MiB) ? "OUTSIDE SEGMENT" : "");
    if (p) memset(p, 1, 100);
  }
  locus_heap_reset(h);
  char *z = locus_heap_calloc(h, 1, 100);
  printf("calloc after reset: first byte %d\n", z[0]);
  locus_heap_destroy(h);
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  setvbuf(stdout, NULL, _IONBF, 0);
  if (!*c || !strcmp(c, "big_threshold")) big_threshold();
  if (!*c || !strcmp(c, "calloc_after_destroy")) calloc_after_destroy();
  if (!*c || !strcmp(c, "stale_after_reset")) stale_after_reset();
  if (!*c || !strcmp(c, "interior")) interior();
  if (!*c || !strcmp(c, "align")) align_cases();
  return 0;
}
