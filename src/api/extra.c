/* The locus-specific API of locus.h, and glibc extensions that map onto it. */
#include <errno.h>

#include "heap/heap.h"
#include "source/source.h"
#include "config/options.h"

#define STR2(x) #x
#define STR(x) STR2(x)

/* Built from the header's macros: the version has one source. */
LOCUS_EXPORT const char *locus_version(void) {
  return STR(LOCUS_VERSION_MAJOR) "." STR(LOCUS_VERSION_MINOR) "." STR(LOCUS_VERSION_PATCH);
}

LOCUS_EXPORT int locus_set_profile(const char *name) {
  return locus_option_set("profile", name);
}

LOCUS_EXPORT const char *locus_get_profile(void) {
  locus_init();
  return profile_name(atomic_load(&locus_opt.profile));
}

/* The calling thread's heap, its placed sub-heaps and its parts of user
 * heaps: their thread caches go back to the runs, blocks other threads
 * freed into them come back, empty chunks go to their sources. */
static void collect_all(heap_t *h) {
  if (!h) return;
  heap_collect_full(h);
  for (int i = 0; i <= PLACE_INTERLEAVE; i++)
    if (h->placed[i]) heap_collect_full(h->placed[i]);
  /* Under the heap list's lock, which a user heap's destroy holds: a part
   * of a heap destroyed meanwhile holds nothing and is skipped. */
  heaps_lock_all();
  for (heap_t *s = h->usubs; s; s = s->next_usub)
    if (s->user) heap_collect_full(s);
  heaps_unlock_all();
}

LOCUS_EXPORT size_t locus_release(void) {
  locus_init();
  collect_all(heap_thread_main());
  heaps_collect_orphans(true);
  return source_release_all();
}

LOCUS_EXPORT size_t locus_cached_bytes(void) { return source_cached_total(); }

LOCUS_EXPORT void locus_collect(void) {
  collect_all(heap_thread_main());
  heaps_collect_orphans(true);
}

LOCUS_EXPORT int locus_heap_check(void) {
  locus_init();
  heap_t *h = heap_thread_main();
  if (h) {
    heap_validate(h);
    for (int i = 0; i <= PLACE_INTERLEAVE; i++)
      if (h->placed[i]) heap_validate(h->placed[i]);
  }
  sources_validate();
  return 0;
}

#ifndef LOCUS_NO_OVERRIDE
/* glibc's malloc_trim: give memory back to the OS; 1 if some was released. */
LOCUS_EXPORT int malloc_trim(size_t pad) { return locus_release() > 0; }
#endif
