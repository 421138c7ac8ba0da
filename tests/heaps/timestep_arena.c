/* A time-step arena (docs/heaps.md): the temporaries of each step come from
 * one arena heap and a single locus_heap_reset drops them all at the end of
 * the step, in time proportional to the heap's memory, not to its blocks.
 * The heap keeps its memory: from the second step on it holds no more than
 * after the first. */
#include <locus.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

struct particle { double x, v; struct particle *next; };

int main(void) {
  locus_heap_config_t cfg = LOCUS_HEAP_CONFIG_INIT;
  cfg.flags = LOCUS_HEAP_ARENA;                 /* blocks go only with the reset */
  cfg.name = "step temporaries";
  locus_heap_t *arena = locus_heap_create(&cfg);
  CHECK(arena);

  size_t held = 0, peak = 0;
  double total = 0;
  for (int step = 0; step < 50; step++) {
    struct particle *list = NULL;               /* 20,000 small blocks */
    for (int i = 0; i < 20000; i++) {
      struct particle *p = locus_heap_malloc(arena, sizeof *p);
      CHECK(p);
      p->x = i;
      p->v = step;
      p->next = list;
      list = p;
    }
    double *flux = locus_heap_calloc(arena, 100000, sizeof *flux);   /* 800 KB, medium */
    double *field = locus_heap_malloc(arena, (size_t)4 << 20);       /* 4 MiB, large */
    CHECK(flux && field && locus_heap_of(field) == arena);
    for (struct particle *p = list; p; p = p->next) flux[(size_t)p->x % 100000] += p->v;
    flux = realloc(flux, 200000 * sizeof *flux); /* works in an arena: the old block stays until the reset */
    CHECK(flux && locus_heap_of(flux) == arena && flux[19999] == step);
    field[0] = flux[0];
    total += field[0];

    locus_heap_reset(arena);                    /* every block of the step is gone at once */

    locus_stats_t st;
    CHECK(locus_heap_stats(arena, &st) == 0);
    if (step == 1) held = st.bytes_in_use, peak = st.peak_footprint;
    if (step > 1) CHECK(st.bytes_in_use == held && st.peak_footprint == peak);   /* reused, not grown */
  }
  printf("50 steps, %.0f; the arena holds %zu bytes between steps, at most %zu during one\n", total, held, peak);
  locus_heap_destroy(arena);                    /* and its memory goes back to the OS */
  return 0;
}
