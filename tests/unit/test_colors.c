/* locus_page_colors: counts of present pages per physical colour, checked
 * against this test's own reading of /proc/self/pagemap; bad arguments;
 * pages never touched are not counted. Without CAP_SYS_ADMIN the kernel
 * hides frame numbers: the call must then fail with EPERM. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"

#define COLORS 16u

static int pagemap_counts(const void *p, size_t len, size_t *counts) {
  int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return -1;
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  int n = 0;
  for (uintptr_t a = (uintptr_t)p / pg * pg; a < (uintptr_t)p + len; a += pg) {
    uint64_t e;
    if (pread(fd, &e, 8, (off_t)(a / pg * 8)) != 8) break;
    if (!(e >> 63)) continue;
    counts[(e & ((1ull << 55) - 1)) % COLORS]++;
    n++;
  }
  close(fd);
  return n;
}

int main(void) {
  size_t counts[COLORS] = {0}, want[COLORS] = {0};
  errno = 0;
  CHECK(locus_page_colors(NULL, 4096, COLORS, counts) == -1 && errno == EINVAL, "NULL pointer");
  errno = 0;
  CHECK(locus_page_colors(counts, 4096, 0, counts) == -1 && errno == EINVAL, "0 colours");
  errno = 0;
  CHECK(locus_page_colors(counts, 4096, COLORS, NULL) == -1 && errno == EINVAL, "NULL counts");
  CHECK(locus_page_colors(counts, 0, COLORS, counts) == 0, "empty range");

  size_t pg = (size_t)sysconf(_SC_PAGESIZE), npages = 256, len = npages * pg;
  char *p = locus_malloc(len);
  CHECK(p != NULL, "locus_malloc(%zu)", len);
  for (size_t i = 0; i < len; i += pg) p[i] = 1;
  long r = locus_page_colors(p, len, COLORS, counts);
  if (r < 0) {
    CHECK(errno == EPERM, "locus_page_colors failed with errno %d, expected EPERM (hidden frames)", errno);
    size_t zero = 0;
    for (unsigned c = 0; c < COLORS; c++) zero += counts[c];
    CHECK(zero == 0, "counts changed by a failing call");
    printf("test_colors: frame numbers hidden (not root): EPERM as documented\n");
    locus_free(p);
    return TEST_DONE();
  }
  int n = pagemap_counts(p, len, want);
  CHECK(r == n, "counted %ld pages, the pagemap shows %d present", r, n);
  CHECK(r >= (long)npages, "counted %ld pages of a %zu-page block all touched", r, npages);
  for (unsigned c = 0; c < COLORS; c++) CHECK(counts[c] == want[c], "colour %u: %zu pages, expected %zu", c,
                                             counts[c], want[c]);
  /* a byte inside one page counts that page only */
  size_t one[COLORS] = {0};
  CHECK(locus_page_colors(p + pg + 100, 1, COLORS, one) == 1, "one byte: one page");
  /* pages never touched are not present: not counted */
  char *fresh = mmap(NULL, 64 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(fresh != MAP_FAILED, "mmap");
  size_t none[COLORS] = {0};
  CHECK(locus_page_colors(fresh, 64 * pg, COLORS, none) == 0, "untouched pages counted");
  munmap(fresh, 64 * pg);
  locus_free(p);
  return TEST_DONE();
}
