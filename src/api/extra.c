/* The locus-specific API of locus.h, and glibc extensions that map onto it. */
#include <errno.h>

#include "internal.h"

LOCUS_EXPORT const char *locus_version(void) { return "0.1.0"; }

LOCUS_EXPORT int locus_set_profile(const char *name) {
  profile_t p;
  locus_init();
  if (!name || !profile_parse(name, &p)) {
    errno = EINVAL;
    return -1;
  }
  locus_opt.profile = p;
  locus_opt.cache_max = options_profile_cache_max(p);
  sources_apply_profile();
  return 0;
}

LOCUS_EXPORT const char *locus_get_profile(void) {
  locus_init();
  return profile_name(locus_opt.profile);
}

LOCUS_EXPORT size_t locus_release(void) {
  locus_init();
  heap_t *h = locus_tls_heap;
  if (h) heap_collect(h);
  return source_release_all();
}

LOCUS_EXPORT size_t locus_cached_bytes(void) { return source_cached_total(); }

LOCUS_EXPORT void locus_collect(void) {
  heap_t *h = locus_tls_heap;
  if (h) heap_collect(h);
}

#ifndef LOCUS_NO_OVERRIDE
/* glibc's malloc_trim: give memory back to the OS; 1 if some was released. */
LOCUS_EXPORT int malloc_trim(size_t pad) { return locus_release() > 0; }
#endif
