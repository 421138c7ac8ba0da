/* Settings at run time (locus.h, "Options"): the table and its parsing are
 * in config/options.c; a change of the profile or of the cache bound is
 * applied to the memory sources here, above both. */
#include "config/options.h"
#include "source/source.h"
#include "types.h"

LOCUS_EXPORT int locus_option_get(const char *name, char *buf, size_t len) {
  locus_init();
  return options_get(name, buf, len);
}

LOCUS_EXPORT int locus_option_set(const char *name, const char *value) {
  locus_init();
  int r = options_set(name, value);
  if (r > 0) sources_apply_bound();
  return r < 0 ? -1 : 0;
}
