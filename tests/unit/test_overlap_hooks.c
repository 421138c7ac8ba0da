/* locus's side of liblocus-overlap.so (docs/overlap.md), without MPI:
 * locus_overlap_enable puts large enough blocks on memory files (and only
 * those: smaller, over-aligned and after disabling are not); the shadow of
 * locus_overlap_span is the same memory; locus_overlap_protect with a
 * fault hook chained in locus's SIGSEGV handler (a write to a read-only
 * page and a read of an inaccessible one reach the hook, which restores
 * access, and the access completes); the quiesce hook runs before such a
 * block is freed and before it is frozen (locus_cow_copy); after a fork the
 * blocks of both sides have no shadow (new ones do); freed blocks' regions
 * kept and reused (calloc cleared); at most 256 memory files live; bad input. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "locus.h"
#include "unit/check.h"

static char *guarded;                  /* the protected span the hook knows about */
static size_t guarded_len;
static atomic_int faults, quiesced;
static void *quiesce_at;

static size_t align_up_pages(size_t n, size_t kp) { return (n + kp - 1) / kp * kp; }

static int fault_hook(void *addr, int access_error) {
  char *a = addr;
  if (!access_error || !guarded || a < guarded || a >= guarded + guarded_len) return 0;
  atomic_fetch_add(&faults, 1);
  locus_overlap_protect(guarded, guarded_len, 3);
  return 1;
}

static void quiesce_hook(void *start, size_t len) {
  atomic_fetch_add(&quiesced, 1);
  quiesce_at = start;
  (void)len;
}

int main(void) {
  size_t kp = (size_t)sysconf(_SC_PAGESIZE);
  locus_overlap_span_t s;
  /* Off: an ordinary block has no span. */
  char *plain = malloc(1 << 20);
  CHECK(locus_overlap_span(plain, 100, &s) == -1 && errno == EINVAL, "span of an ordinary block");
  CHECK(locus_overlap_enable(64 * 1024) == 0, "enable");
  CHECK(locus_overlap_hooks(fault_hook, quiesce_hook) == 0, "hooks: %s", strerror(errno));

  char *b = malloc(300 * 1000);
  CHECK(b && ((uintptr_t)b & (kp - 1)) == 0, "a guarded block starts on a page: %p", (void *)b);
  CHECK(locus_overlap_span(b + 5, 10000, &s) == 0, "span: %s", strerror(errno));
  CHECK(s.start == b && s.len == align_up_pages(10005, kp), "span covers the pages: %p %zu", s.start, s.len);
  char *sh = s.shadow;
  CHECK(sh && sh != b, "a shadow");
  memset(b, 7, 300 * 1000);
  CHECK(sh[123] == 7, "the shadow sees the program's writes");
  sh[4000] = 9;
  CHECK(b[4000] == 9, "the program sees the shadow's writes");
  CHECK(locus_overlap_span(b + locus_usable_size(b) - 10, 20, &s) == -1, "a span past the block is refused");
  CHECK(locus_overlap_span(NULL, 10, &s) == -1 && locus_overlap_span(b, 0, &s) == -1, "NULL or empty");
  char small[64];
  CHECK(locus_overlap_span(small, 10, &s) == -1, "the stack is not locus's");
  char *tiny = malloc(1000);
  CHECK(locus_overlap_span(tiny, 10, &s) == -1, "small blocks are not guarded");
  void *over = NULL;
  /* above locus's mapping granule (64 KiB on aarch64, whatever the kernel's page) */
  CHECK(posix_memalign(&over, 128 * 1024, 200 * 1000) == 0 && locus_overlap_span(over, 10, &s) == -1,
        "over-aligned blocks are not memory-file-backed");
  CHECK(locus_overlap_protect(b, kp, 2) == -1 && errno == EINVAL, "prot 2 refused");

  /* Protection: a write to a read-only page, then a read of an inaccessible one. */
  CHECK(locus_overlap_span(b, 3 * kp, &s) == 0, "span 3 pages");
  guarded = b;
  guarded_len = 3 * kp;
  CHECK(locus_overlap_protect(b, 3 * kp, 1) == 0, "read-only");
  CHECK(b[10] == 7, "reads of a read-only page do not fault");
  ((volatile char *)b)[kp + 1] = 3;
  CHECK(faults == 1 && b[kp + 1] == 3, "the write faulted once (%d) and went through", faults);
  sh[2 * kp] = 4;                      /* the shadow never faults */
  CHECK(locus_overlap_protect(b, 3 * kp, 0) == 0, "inaccessible");
  sh[5] = 6;
  CHECK(((volatile char *)b)[5] == 6 && faults == 2, "the read faulted and sees the shadow's write");
  guarded = NULL;

  /* quiesce before free and before a copy-on-write copy freezes the file. */
  int q = quiesced;
  void *c = locus_cow_copy(b, 100 * 1000);
  CHECK(c && quiesced == q + 1 && quiesce_at == b, "quiesce before the freeze");
  CHECK(locus_overlap_span(b, 10, &s) == -1, "a frozen block has no shadow any more");
  free(c);
  q = quiesced;
  char *d = malloc(1 << 20);
  free(d);
  CHECK(quiesced == q + 1 && quiesce_at == d, "quiesce before free");
  free(b);

  /* fork: the child's views are private, no span. */
  char *e = malloc(1 << 20);
  CHECK(locus_overlap_span(e, 10, &s) == 0, "span before fork");
  pid_t pid = fork();
  if (pid == 0) _exit(locus_overlap_span(e, 10, &s) == -1 ? 0 : 1);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "no span in the child");
  /* fork froze the parent's files too (a shared view would be the child's
   * as well): existing blocks take the safe path, new ones are guardable. */
  CHECK(locus_overlap_span(e, 10, &s) == -1, "no span in the parent after fork");
  char *e2 = malloc(1 << 20);
  CHECK(locus_overlap_span(e2, 10, &s) == 0, "a new block after fork has a span");
  free(e2);
  free(e);

  /* Kept for reuse: the same region again, calloc cleared, a shadow still. */
  char *k1 = malloc(500 * 1000);
  memset(k1, 0x5a, 500 * 1000);
  free(k1);
  char *k2 = malloc(480 * 1000);
  CHECK(k2 == k1, "a freed overlap block's region is reused: %p %p", (void *)k1, (void *)k2);
  CHECK(locus_overlap_span(k2, 100, &s) == 0 && ((char *)s.shadow)[50] == 0x5a, "kept region: same memory, shadow");
  free(k2);
  unsigned char *k3 = calloc(1, 500 * 1000);
  size_t nz = 0;
  for (size_t i = 0; i < 500 * 1000; i++) nz += k3[i] != 0;
  CHECK(k3 == (unsigned char *)k1 && nz == 0, "calloc on a kept region clears it (%zu non-zero)", nz);
  free(k3);
  char *k4 = malloc(200 * 1000);
  CHECK(k4 != k1, "a kept region is not given to a block of less than half its size");
  free(k4);

  /* At most 256 memory files live (descriptors): later blocks are ordinary. */
  static char *many[300];
  int spans = 0;
  for (int i = 0; i < 300; i++) {
    many[i] = malloc(70 * 1000 + (size_t)i * 4096);   /* sizes apart: no kept region fits twice */
    spans += locus_overlap_span(many[i], 10, &s) == 0;
  }
  CHECK(spans <= 256 && spans >= 200, "%d of 300 blocks guardable", spans);
  for (int i = 0; i < 300; i++) free(many[i]);
  char *again = malloc(3 << 20);
  CHECK(locus_overlap_span(again, 10, &s) == 0, "guardable again once freed");
  free(again);

  /* Disabled again: blocks are ordinary. */
  CHECK(locus_overlap_enable(0) == 0, "disable");
  char *f = malloc(1 << 20);
  CHECK(locus_overlap_span(f, 10, &s) == -1, "disabled: ordinary blocks");
  free(f);
  free(plain);
  free(tiny);
  free(over);
  locus_overlap_hooks(NULL, NULL);
  return TEST_DONE();
}
