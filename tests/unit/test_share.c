/* Page sharing (docs/sharing.md): locus_merge/unmerge, shareable blocks and
 * copy-on-write copies (snapshot semantics both ways on 10^4 random writes,
 * copies of copies, fork), bad input. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "locus.h"
#include "unit/check.h"

#define MiB ((size_t)1 << 20)

static uint64_t rnd(uint64_t *s) {
  *s = *s * 6364136223846793005u + 1442695040888963407u;
  return *s >> 17;
}

/* Pages of [p, p+len) the process shares with another mapping: those
 * /proc/self/pagemap shows as file pages (bit 61), present. */
static size_t file_pages(const void *p, size_t len) {
  FILE *f = fopen("/proc/self/pagemap", "r");
  if (!f) return (size_t)-1;
  size_t n = 0;
  for (uintptr_t a = (uintptr_t)p & ~4095ul; a < (uintptr_t)p + len; a += 4096) {
    uint64_t e = 0;
    if (fseek(f, (long)(a / 4096 * 8), SEEK_SET) || fread(&e, 8, 1, f) != 1) break;
    if ((e >> 63 & 1) && (e >> 61 & 1)) n++;
  }
  fclose(f);
  return n;
}

static void snapshot_both_ways(void) {
  size_t len = 8 * MiB;
  unsigned char *a = locus_malloc_shareable(len);
  CHECK(a, "shareable: %s", strerror(errno));
  CHECK(malloc_usable_size(a) >= len && malloc_usable_size(a) < len + 4096, "usable %zu", malloc_usable_size(a));
  for (size_t i = 0; i < len; i++) CHECK(!a[i], "fresh shareable is zero");
  for (size_t i = 0; i < len; i += 64) a[i] = (unsigned char)(i / 64);
  unsigned char *b = locus_cow_copy(a, len);
  CHECK(b, "copy: %s", strerror(errno));
  CHECK(memcmp(a, b, len) == 0, "copy equals source");
  size_t shared = file_pages(b, len);
  if (shared != (size_t)-1) CHECK(shared >= len / 4096 - 1, "copy shares the file's pages (%zu)", shared);
  unsigned char *ref_a = malloc(len), *ref_b = malloc(len);
  memcpy(ref_a, a, len);
  memcpy(ref_b, b, len);
  uint64_t s = 42;
  for (int i = 0; i < 10000; i++) {     /* random writes to either side, seen by that side only */
    size_t off = rnd(&s) % len;
    unsigned char v = (unsigned char)rnd(&s);
    if (rnd(&s) & 1) a[off] = v, ref_a[off] = v;
    else b[off] = v, ref_b[off] = v;
  }
  CHECK(memcmp(a, ref_a, len) == 0, "source sees only its own writes");
  CHECK(memcmp(b, ref_b, len) == 0, "copy sees only its own writes");
  /* a copy of the (now private, changed) source, and of a range of the copy */
  unsigned char *c = locus_cow_copy(a + 5000, 3 * MiB);
  CHECK(c && memcmp(c, ref_a + 5000, 3 * MiB) == 0, "copy of a changed source");
  unsigned char *d = locus_cow_copy(b + 123, 100000);
  CHECK(d && memcmp(d, ref_b + 123, 100000) == 0, "copy of a copy's range");
  a[5000] ^= 0xff;
  CHECK(c[0] == ref_a[5000], "source write after the second copy not seen");
  c[1] ^= 0x55;
  CHECK(a[5001] == ref_a[5001], "copy write not seen by the source");
  free(a);                               /* copies outlive the source */
  CHECK(memcmp(b, ref_b, len) == 0 && d[0] == ref_b[123], "copies after the source is freed");
  /* realloc keeps it shareable */
  unsigned char *e = realloc(d, 300000);
  CHECK(e && memcmp(e, ref_b + 123, 100000) == 0, "realloc keeps data");
  unsigned char *f = locus_cow_copy(e, 300000);
  CHECK(f, "realloc'd block is still shareable");
  free(b), free(c), free(e), free(f), free(ref_a), free(ref_b);
}

static void fork_semantics(void) {
  size_t len = MiB;
  volatile unsigned char *a = locus_malloc_shareable(len);
  a[100] = 1;
  pid_t pid = fork();
  if (pid == 0) {
    a[100] = 2;                          /* must not reach the parent */
    a[200] = 3;
    _exit(a[100] == 2 ? 0 : 1);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
  CHECK(a[100] == 1 && a[200] == 0, "a child's writes to a shareable block stay in the child");
  pid = fork();
  if (pid == 0) _exit(a[100] == 1 && a[300] == 0 ? 0 : 1);
  a[300] = 9;                            /* nor the parent's in the child */
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the parent's writes after fork stay in the parent");
  free((void *)a);
}

static void merge_api(void) {
  char *big = malloc(4 * MiB);
  int r = locus_merge(big, 4 * MiB);
  if (r != 0) CHECK(errno == ENOSYS, "merge: %s", strerror(errno));
  else CHECK(locus_unmerge(big, 4 * MiB) == 0, "unmerge");
  errno = 0;
  CHECK(locus_merge(big + 10, 100) == -1 && errno == EINVAL, "no whole page inside");
  char stack[8192];
  errno = 0;
  CHECK(locus_merge(stack, sizeof stack) == -1 && errno == EINVAL, "foreign range");
  errno = 0;
  CHECK(locus_merge(big, 64 * MiB) == -1 && errno == EINVAL, "past the block");
  errno = 0;
  CHECK(locus_merge(NULL, 4096) == -1 && errno == EINVAL, "NULL");
  free(big);
}

static void bad_copies(void) {
  char *plain = malloc(2 * MiB);
  errno = 0;
  CHECK(!locus_cow_copy(plain, 4096) && errno == EINVAL, "copy of a block that is not shareable");
  char *a = locus_malloc_shareable(100000);
  errno = 0;
  CHECK(!locus_cow_copy(a, 200000) && errno == EINVAL, "range past the end");
  errno = 0;
  CHECK(!locus_cow_copy(a, 0) && errno == EINVAL, "empty range");
  errno = 0;
  CHECK(!locus_cow_copy(a - 4096, 10) && errno == EINVAL, "before the block");
  free(a);
  errno = 0;
  CHECK(!locus_cow_copy(a, 10) && errno == EINVAL, "freed block");
  free(plain);
  void *z = locus_malloc_shareable(0);
  CHECK(z && malloc_usable_size(z) >= 1, "size 0");
  free(z);
}

int main(void) {
  snapshot_both_ways();
  fork_semantics();
  merge_api();
  bad_copies();
  return TEST_DONE();
}
