/* A program that uses an installed locus: built by tests/install/run.sh with
 * pkg-config, and with find_package(locus) against locus::locus and
 * locus::locus-static. Usage: consumer override|no-override
 * Prints "locus-consumer ok <version> malloc=<locus|other>" and exits 0, or
 * says what is wrong and exits 1. */
#include <locus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG ((size_t)64 << 20)

static int fail(const char *what) {
  fprintf(stderr, "locus-consumer: FAIL: %s\n", what);
  return 1;
}

static uint64_t in_use(void) {
  locus_stats_t st;
  locus_stats_get(&st);
  return st.bytes_in_use;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "override") && strcmp(argv[1], "no-override")))
    return fail("usage: consumer override|no-override");
  int want_override = !strcmp(argv[1], "override");

  /* The header and the library are of the same version. */
  char hv[64];
  snprintf(hv, sizeof hv, "%d.%d.%d", LOCUS_VERSION_MAJOR, LOCUS_VERSION_MINOR, LOCUS_VERSION_PATCH);
  const char *lv = locus_version();
  if (!lv || strcmp(lv, hv)) {
    fprintf(stderr, "locus-consumer: header %s, library %s\n", hv, lv ? lv : "(null)");
    return fail("version mismatch");
  }

  /* The locus_* API. */
  char *p = locus_malloc(1000);
  if (!p || locus_usable_size(p) < 1000) return fail("locus_malloc(1000)");
  memset(p, 0x5a, 1000);
  p = locus_realloc(p, 300000);
  if (!p || p[999] != 0x5a || locus_usable_size(p) < 300000) return fail("locus_realloc");
  locus_free(p);
  uint64_t before = in_use();
  char *q = locus_malloc(BIG);
  if (!q || in_use() < before + BIG) return fail("locus_malloc(64 MiB) not in locus_stats");
  locus_free(q);

  /* Is malloc locus? A 64 MiB malloc shows in locus's statistics only then. */
  before = in_use();
  char *m = malloc(BIG);
  if (!m) return fail("malloc(64 MiB)");
  m[0] = m[BIG - 1] = 1;
  int is_locus = in_use() >= before + BIG;
  if (is_locus) {
    /* then locus knows its blocks, big and small */
    char *s = malloc(100);
    if (!s || locus_usable_size(s) < 100 || locus_usable_size(m) < BIG) return fail("locus_usable_size(malloc())");
    free(s);
  }
  free(m);
  if (is_locus != want_override)
    return fail(want_override ? "malloc is not locus" : "malloc is locus in a LOCUS_NO_OVERRIDE build");

  printf("locus-consumer ok %s malloc=%s\n", lv, is_locus ? "locus" : "other");
  return 0;
}
