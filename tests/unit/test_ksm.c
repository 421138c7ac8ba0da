/* LOCUS_KSM (docs/sharing.md): which of locus's mappings carry the merge
 * advice (the "mg" flag of /proc/self/smaps), kept when a block is recycled
 * or grown. Run with LOCUS_KSM unset (off), =large and =all (ctest). KSM
 * itself need not run: this checks what locus advises, not what ksmd does. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "locus.h"
#include "unit/check.h"
#include "smaps.h"

#define MiB ((size_t)1 << 20)


int main(void) {
  if (getenv("LOCUS_TEST_EMULATOR")) {   /* qemu-user passes no merge advice to the kernel */
    printf("under an emulator: skipped\n");
    return 77;
  }
  const char *e = getenv("LOCUS_KSM");
  int mode = !e || !strcmp(e, "off") ? 0 : !strcmp(e, "large") ? 1 : 2;
  char *big = malloc(8 * MiB);
  memset(big, 1, 8 * MiB);
  int m = mergeable(big);
  if (m < 0) {
    printf("no VmFlags in smaps: skipped\n");
    return 77;
  }
  CHECK(m == (mode >= 1), "large block advised: %d (mode %d)", m, mode);
  free(big);
  char *again = malloc(6 * MiB);              /* from the cache: the advice is kept */
  CHECK(mergeable(again) == (mode >= 1), "recycled large block");
  char *grown = realloc(again, 40 * MiB);     /* grown or moved by mremap: the advice follows */
  CHECK(mergeable(grown) == (mode >= 1) && mergeable(grown + 39 * MiB) == (mode >= 1), "grown large block");
  free(grown);
  char *small = malloc(100);
  CHECK(mergeable(small) == (mode == 2), "heap chunk advised only with all (%d)", mergeable(small));
  free(small);
  /* explicit advice, whatever the option */
  char *t = malloc(4 * MiB);
  if (locus_merge(t, 4 * MiB) == 0) {
    CHECK(mergeable(t + MiB) == 1, "locus_merge");
    CHECK(locus_unmerge(t, 4 * MiB) == 0 && mergeable(t + MiB) == 0, "locus_unmerge");
  } else {
    CHECK(errno == ENOSYS, "locus_merge: %s", strerror(errno));
  }
  free(t);
  char json[8192];
  locus_stats_json(json, sizeof json);
  CHECK(strstr(json, "\"ksm\":{\"option\":\"") != NULL, "ksm in the JSON report");
  return TEST_DONE();
}
