/* Settings from LOCUS_* environment variables. A malformed or out-of-range
 * value prints one warning naming the variable and the value, and the default
 * stays in force. */
#include <string.h>

#include "internal.h"

options_t locus_opt = {
  .profile = PROFILE_UMA,
  .cache_max = 500 * MiB,
  .cache_max_segment = 256 * MiB,
  .large_threshold = 1 * MiB,
  .lazy_release = false,
  .color = true,
};

static const char *const profile_names[] = {"eco", "uma", "numa"};

const char *profile_name(profile_t p) { return profile_names[p]; }

bool profile_parse(const char *s, profile_t *out) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, profile_names[i])) { *out = (profile_t)i; return true; }
  return false;
}

/* "512M", "2G", "64k", "1048576"; binary multiples. */
static bool parse_size(const char *s, size_t *out) {
  if (!*s) return false;
  size_t v = 0;
  const char *p = s;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (SIZE_MAX - 9) / 10) return false;
    v = v * 10 + (size_t)(*p - '0');
  }
  if (p == s) return false;
  int shift = 0;
  switch (*p) {
  case 0: break;
  case 'k': case 'K': shift = 10; p++; break;
  case 'm': case 'M': shift = 20; p++; break;
  case 'g': case 'G': shift = 30; p++; break;
  case 't': case 'T': shift = 40; p++; break;
  default: return false;
  }
  if (shift && (*p == 'i' || *p == 'I')) p++;
  if (shift && (*p == 'b' || *p == 'B')) p++;
  if (*p) return false;
  if (shift && v > (SIZE_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  if (!strcmp(s, "1") || !strcmp(s, "yes") || !strcmp(s, "on") || !strcmp(s, "true")) { *out = true; return true; }
  if (!strcmp(s, "0") || !strcmp(s, "no") || !strcmp(s, "off") || !strcmp(s, "false")) { *out = false; return true; }
  return false;
}

static void opt_size(const char *name, size_t *dst, size_t lo, size_t hi) {
  const char *s = os_getenv(name);
  size_t v;
  if (!s) return;
  if (!parse_size(s, &v) || v < lo || v > hi)
    locus_warn("%s=\"%s\" is not a size in [%zu, %zu] (suffixes k, M, G allowed); using the default %zu",
               name, s, lo, hi, *dst);
  else
    *dst = v;
}

static void opt_bool(const char *name, bool *dst) {
  const char *s = os_getenv(name);
  if (s && !parse_bool(s, dst))
    locus_warn("%s=\"%s\" is not a boolean (0/1, yes/no, on/off); using the default %s", name, s,
               *dst ? "1" : "0");
}

/* Bytes each profile keeps when LOCUS_CACHE_MAX does not say otherwise. */
static bool cache_max_explicit;
static size_t cache_max_user;

size_t options_profile_cache_max(profile_t p) {
  if (cache_max_explicit) return cache_max_user;
  return p == PROFILE_ECO ? (locus_opt.lazy_release ? 500 * MiB : 0) : 500 * MiB;
}

void options_init(void) {
  const char *s = os_getenv("LOCUS_PROFILE");
  profile_t p;
  if (s && !profile_parse(s, &p))
    locus_warn("LOCUS_PROFILE=\"%s\" is not one of eco, uma, numa; using the default uma", s);
  else if (s)
    locus_opt.profile = p;
  opt_bool("LOCUS_LAZY_RELEASE", &locus_opt.lazy_release);
  opt_bool("LOCUS_COLOR", &locus_opt.color);
  opt_bool("LOCUS_STATS", &locus_opt.stats);
  opt_bool("LOCUS_VERBOSE", &locus_opt.verbose);
  size_t cm = SIZE_MAX;
  opt_size("LOCUS_CACHE_MAX", &cm, 0, (size_t)1 << 46);
  if (cm != SIZE_MAX) { cache_max_explicit = true; cache_max_user = cm; }
  locus_opt.cache_max = options_profile_cache_max(locus_opt.profile);
  opt_size("LOCUS_CACHE_MAX_SEGMENT", &locus_opt.cache_max_segment, PAGE_SIZE, (size_t)1 << 46);
  opt_size("LOCUS_LARGE_THRESHOLD", &locus_opt.large_threshold, 2 * SMALL_MAX, 32 * MiB);
  s = os_getenv("LOCUS_STATS_FILE");
  if (s) {
    if (strlen(s) >= sizeof locus_opt.stats_file)
      locus_warn("LOCUS_STATS_FILE is longer than %zu bytes; writing statistics to stderr",
                 sizeof locus_opt.stats_file - 1);
    else
      strcpy(locus_opt.stats_file, s);
  }
}
