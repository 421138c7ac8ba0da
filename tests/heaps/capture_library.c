/* Capture around a third-party library (docs/heaps.md): while this thread
 * has captured the heap, the library's own malloc, strdup and calloc land
 * in it; the library frees them with plain free(). After the capture ends
 * the library allocates from the default heaps again. */
#include <locus.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

struct third_record { char *label; double *values; size_t n; };   /* libthird's */
struct third_record *third_record_new(const char *label, size_t n);
void third_record_free(struct third_record *r);

int main(void) {
  locus_heap_config_t cfg = LOCUS_HEAP_CONFIG_INIT;
  cfg.name = "library";
  locus_heap_t *h = locus_heap_create(&cfg);
  CHECK(h);

  locus_heap_t *prev = locus_heap_capture(h);   /* this thread's allocations go to h */
  struct third_record *a = third_record_new("mesh", 10);
  struct third_record *b = third_record_new("solver", 500000);   /* 4 MB: a large block */
  locus_heap_capture(prev);                     /* back to what it was (the default heaps) */
  CHECK(prev == NULL);

  CHECK(locus_heap_of(a) == h && locus_heap_of(a->label) == h && locus_heap_of(a->values) == h);
  CHECK(locus_heap_of(b) == h && locus_heap_of(b->label) == h && locus_heap_of(b->values) == h);
  CHECK(a->values[9] == 0 && b->values[499999] == 0);

  struct third_record *c = third_record_new("after", 10);
  CHECK(locus_heap_of(c) == NULL && locus_heap_of(c->label) == NULL);

  locus_stats_t st;
  CHECK(locus_heap_stats(h, &st) == 0 && st.cache_hits == 6);    /* the library's 6 allocations */
  third_record_free(a);                         /* the library frees them itself */
  third_record_free(c);
  locus_heap_destroy(h);                        /* b goes with the heap */
  printf("libthird's blocks made under capture were in heap '%s'\n", cfg.name);
  return 0;
}
