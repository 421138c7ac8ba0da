/* Clearing recycled memory for calloc (src/os/zero.c), with what this host
 * can do (it has no swap and does not page out; the guest test
 * calloc_swap_guest pages out for real):
 *  - the pagemap entry of a page -> its state (present, swapped, empty);
 *  - the plan for given page states: present runs written, or dropped when
 *    long (on whole huge pages only with keep_huge), swapped pages dropped
 *    with the empty pages between them, empty pages left alone;
 *  - os_zero_recycled on a real range of present and never-touched pages,
 *    as the kernel says (no swap), as if there were swap (pagemap read), as
 *    if pagemap could not be opened, and as if swap were turned on during
 *    the call (with and without pagemap): every byte zero, and an empty page
 *    stays empty except where it cannot be classified (then it is dropped,
 *    one madvise per run, never faulted in);
 *  - calloc of recycled large blocks returns zeroes in those modes. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "os/os.h"
#include "util/stats.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)

typedef struct {
  int kind[64];
  uintptr_t start[64];
  size_t len[64];
  int n;
} record_t;

static void rec(void *ctx, int kind, char *start, size_t len) {
  record_t *r = ctx;
  CHECK(r->n < 64, "too many actions");
  r->kind[r->n] = kind;
  r->start[r->n] = (uintptr_t)start;
  r->len[r->n] = len;
  r->n++;
}

static size_t page;

/* Plans the states given as a string (. empty, P present, S swapped) for
 * pages from base. */
static record_t plan(uintptr_t base, const char *states, bool keep_huge) {
  static unsigned char st[8192];
  size_t n = strlen(states);
  for (size_t i = 0; i < n; i++)
    st[i] = states[i] == 'P' ? OS_ZERO_PRESENT : states[i] == 'S' ? OS_ZERO_SWAPPED : OS_ZERO_EMPTY;
  record_t r = {.n = 0};
  os_zero_plan((char *)base, n, st, keep_huge, rec, &r);
  return r;
}

/* A string of n copies of c followed by the rest. */
static const char *rep(char *buf, size_t n, char c, const char *rest) {
  memset(buf, c, n);
  strcpy(buf + n, rest);
  return buf;
}

static void test_page_state(void) {
  CHECK(os_zero_page_state(0) == OS_ZERO_EMPTY, "no bit: empty");
  CHECK(os_zero_page_state(1ull << 63) == OS_ZERO_PRESENT, "bit 63: present");
  CHECK(os_zero_page_state((1ull << 63) | 12345) == OS_ZERO_PRESENT, "present with a frame number");
  CHECK(os_zero_page_state(1ull << 62) == OS_ZERO_SWAPPED, "bit 62: swapped");
  CHECK(os_zero_page_state((1ull << 62) | (3ull << 5) | 7) == OS_ZERO_SWAPPED, "swapped with type and offset");
  CHECK(os_zero_page_state(1ull << 61) == OS_ZERO_EMPTY, "bit 61 (file page) alone is no data here");
  CHECK(os_zero_page_state(1ull << 55) == OS_ZERO_EMPTY, "soft-dirty alone is no data");
}

static void test_plan(void) {
  const uintptr_t base = (uintptr_t)1 << 40;    /* 1 TiB: huge-aligned, never touched */
  char buf[8192];
  record_t r = plan(base, "........", false);
  CHECK(r.n == 0, "empty pages: nothing to do (%d actions)", r.n);

  r = plan(base, "..PP..P.", false);
  CHECK(r.n == 2 && r.kind[0] == OS_ZERO_WRITE && r.start[0] == base + 2 * page && r.len[0] == 2 * page &&
            r.kind[1] == OS_ZERO_WRITE && r.start[1] == base + 6 * page && r.len[1] == page,
        "short present runs written (%d actions)", r.n);

  size_t drop_pages = 256 * KB / page;          /* the drop threshold */
  r = plan(base, rep(buf, drop_pages, 'P', ""), false);
  CHECK(r.n == 1 && r.kind[0] == OS_ZERO_DROP && r.len[0] == 256 * KB, "a 256 KiB present run dropped");
  r = plan(base, rep(buf, drop_pages - 1, 'P', ""), false);
  CHECK(r.n == 1 && r.kind[0] == OS_ZERO_WRITE, "a present run under 256 KiB written");

  r = plan(base, "S..S.S...", false);
  CHECK(r.n == 1 && r.kind[0] == OS_ZERO_DROP && r.start[0] == base && r.len[0] == 6 * page,
        "swapped pages dropped with the empty ones between them, not the trailing ones (%d, %zu)", r.n,
        r.len[0] / page);
  r = plan(base, ".SPS", false);
  CHECK(r.n == 3 && r.kind[0] == OS_ZERO_DROP && r.start[0] == base + page && r.len[0] == page &&
            r.kind[1] == OS_ZERO_WRITE && r.start[1] == base + 2 * page && r.kind[2] == OS_ZERO_DROP &&
            r.start[2] == base + 3 * page,
        "a present page between swapped ones is written, not dropped (%d actions)", r.n);
  r = plan(base, "S", false);
  CHECK(r.n == 1 && r.kind[0] == OS_ZERO_DROP && r.len[0] == page, "one swapped page: dropped, not written");

  size_t hp = os_features.huge_page_size;
  if (hp && hp / page + 2 < sizeof buf) {
    /* present from page 1 to one page past the first huge page and a half */
    size_t n = hp / page + hp / page / 2;
    r = plan(base, rep(buf, n, 'P', ""), true);
    CHECK(r.n == 2 && r.kind[0] == OS_ZERO_DROP && r.start[0] == base && r.len[0] == hp && r.kind[1] == OS_ZERO_WRITE &&
              r.start[1] == base + hp && r.len[1] == hp / 2,
          "keep_huge: the whole huge page dropped, the tail written (%d actions)", r.n);
    r = plan(base + page, rep(buf, hp / page, 'P', ""), true);
    CHECK(r.n == 1 && r.kind[0] == OS_ZERO_WRITE && r.len[0] == hp, "keep_huge: no whole huge page, written");
    r = plan(base + page, rep(buf, hp / page, 'P', ""), false);
    CHECK(r.n == 1 && r.kind[0] == OS_ZERO_DROP, "without keep_huge the same run is dropped");
  }
}

/* A 4 MiB range: pages 0-3 and 10 written, the others never touched
 * (empty); runs short enough that present pages are written, not dropped. */
static void test_range(int mode) {
  const size_t n = 1024, span = 4096 * page;   /* within one batch (4,096 pages, aligned): runs are not cut */
  char *m = mmap(NULL, n * page + span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  char *p = (char *)(((uintptr_t)m + span - 1) & ~(uintptr_t)(span - 1));
  madvise(p, n * page, MADV_NOHUGEPAGE);       /* page granularity: a huge page would fill every page */
  memset(p, 0x5a, 4 * page);
  memset(p + 10 * page, 0xa5, page);
  unsigned char vec[1024];
  os_zero_test_mode(mode);
  size_t before = atomic_load(&locus_stats.madvises);
  os_zero_recycled(p, n * page, false);
  size_t madvises = atomic_load(&locus_stats.madvises) - before;
  os_zero_test_mode(OS_ZERO_REAL);
  CHECK(mincore(p, n * page, vec) == 0, "mincore");
  size_t resident = 0;
  for (size_t i = 0; i < n; i++) resident += vec[i] & 1;
  CHECK(resident == 5, "mode %d: %zu pages resident after clearing, want the 5 written (no empty page faulted in)", mode,
        resident);
  for (size_t i = 0; i < n * page; i++) CHECK(p[i] == 0, "mode %d: byte %zu is %d", mode, i, p[i]);
  if (mode & OS_ZERO_NO_PAGEMAP)
    CHECK(madvises == 2, "no pagemap: the 2 runs of unclassified pages dropped (%zu madvises)", madvises);
  else
    CHECK(madvises == 0, "mode %d: empty pages are left alone (%zu madvises)", mode, madvises);
  munmap(m, n * page + span);
}

/* keep_huge across a batch boundary (batches are 4,096 pages): a range
 * starting one page into a huge page, every page present. Only the first,
 * partial huge page is written; every whole huge page is dropped, the one a
 * batch of 4,096 pages counted from the range's start would cut included
 * (each part was written: the pages stayed resident). */
static void test_batch_edge(void) {
  size_t hp = os_features.huge_page_size, span = 4096 * page;
  if (!hp || hp > span / 2) return;             /* (64 KiB pages: 512 MiB huge pages) */
  size_t len = span + 4 * hp;
  char *m = mmap(NULL, len + hp, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  char *p = (char *)(((uintptr_t)m + hp - 1) & ~(uintptr_t)(hp - 1));
  madvise(p, len, MADV_NOHUGEPAGE);             /* base pages: the plan goes by addresses all the same */
  memset(p, 0x5a, len);
  os_zero_recycled(p + page, len - page, true);
  static unsigned char vec[8192];
  CHECK(len / page <= sizeof vec && mincore(p, len, vec) == 0, "mincore");
  size_t resident = 0;
  for (size_t i = 0; i < len / page; i++) resident += vec[i] & 1;
  CHECK(resident == hp / page, "%zu pages resident, want %zu (the first huge page, partly in the range)", resident,
        hp / page);
  CHECK(p[0] == 0x5a, "the page before the range is not cleared");
  for (size_t i = page; i < len; i++) CHECK(p[i] == 0, "byte %zu is %d", i, p[i]);
  munmap(m, len + hp);
}

/* errno as it was: on mlock'd pages MADV_DONTNEED fails (EINVAL) and the
 * run is written instead; calloc succeeds, so errno must not change. */
static void test_errno(void) {
  const size_t len = 1 * MB;                    /* a run long enough to be dropped */
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED, "mmap");
  memset(p, 0x5a, len);
  if (mlock(p, len) == 0) {                     /* (RLIMIT_MEMLOCK may refuse it: nothing to test) */
    errno = 4242;
    os_zero_recycled(p, len, false);
    CHECK(errno == 4242, "errno %d after clearing mlock'd pages, want it unchanged", errno);
    for (size_t i = 0; i < len; i++) CHECK(p[i] == 0, "mlock'd: byte %zu is %d", i, p[i]);
  }
  munmap(p, len);
}

/* calloc of a recycled large block (the same size again: the cached segment). */
static void test_calloc(int mode) {
  static const size_t sizes[] = {2 * MB, 3 * MB + 12345, 24 * MB};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    unsigned char *p = malloc(n);
    CHECK(p, "malloc(%zu)", n);
    memset(p, 0xee, n / 3);                     /* part resident, part never touched */
    free(p);
    os_zero_test_mode(mode);
    unsigned char *q = calloc(1, n);
    os_zero_test_mode(OS_ZERO_REAL);
    CHECK(q, "calloc(%zu)", n);
    for (size_t i = 0; i < n; i++) CHECK(q[i] == 0, "mode %d: calloc(%zu)[%zu] = %d", mode, n, i, q[i]);
    free(q);
  }
}

int main(void) {
  free(malloc(1));                              /* initialises locus: os_features */
  page = os_page_size();
  test_page_state();
  test_plan();
  test_batch_edge();
  test_errno();
  static const int modes[] = {OS_ZERO_REAL, OS_ZERO_SWAP, OS_ZERO_NO_PAGEMAP, OS_ZERO_SWAP_LATE,
                              OS_ZERO_SWAP_LATE | OS_ZERO_NO_PAGEMAP};
  for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
    test_range(modes[m]);
    test_calloc(modes[m]);
  }
  return TEST_DONE();
}
