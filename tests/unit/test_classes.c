/* The small size classes: increasing multiples of 16 up to SMALL_MAX; every
 * request gets the smallest class that holds it (the class table and
 * malloc_usable_size agree); the internal waste stays within the bounds of
 * docs/design.md (15 B up to 128 B, under 12.5 % from 257 B to 1 KiB, under
 * 20 % elsewhere). */
#include <malloc.h>
#include <stdlib.h>

#include "check.h"
#include "heap/heap.h"

int main(void) {
  free(malloc(1));                     /* locus is initialised: the table is filled */
  for (unsigned c = 0; c < NUM_CLASSES; c++) {
    uint32_t s = locus_class_size[c];
    CHECK(s % 16 == 0, "class %u: %u B is not a multiple of 16", c, s);
    CHECK(c == 0 || s > locus_class_size[c - 1], "class %u: %u B after %u B", c, s, locus_class_size[c - 1]);
  }
  CHECK(locus_class_size[0] == 16 && locus_class_size[NUM_CLASSES - 1] == SMALL_MAX, "classes %u .. %u B",
        locus_class_size[0], locus_class_size[NUM_CLASSES - 1]);
  for (size_t n = 1; n <= SMALL_MAX; n++) {
    unsigned c = size_class(n);
    uint32_t s = locus_class_size[c];
    CHECK(s >= n && (c == 0 || locus_class_size[c - 1] < n), "%zu B: class %u (%u B) is not the smallest that fits",
          n, c, s);
    size_t waste = s - n;
    if (n <= 128)
      CHECK(waste <= 15, "%zu B in %u B", n, s);
    else if (n > 256 && n <= 1024)
      CHECK(waste * 8 < s, "%zu B in %u B: 12.5 %% or more wasted", n, s);
    else
      CHECK(waste * 5 < s, "%zu B in %u B: 20 %% or more wasted", n, s);
    if (n % 7 == 1 || n == SMALL_MAX) {  /* a sample through malloc */
      void *p = malloc(n);
      CHECK(p && malloc_usable_size(p) == s, "malloc(%zu): %zu usable bytes, class of %u B", n,
            p ? malloc_usable_size(p) : 0, s);
      free(p);
    }
  }
  return TEST_DONE();
}
