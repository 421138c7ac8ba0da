/* Clearing a recycled range for calloc (os_zero_recycled): which pages of
 * the range hold data, and the cheapest way to clear each.
 *
 * A page of private anonymous memory is in one of three states:
 *   empty    no page and no swap entry: it faults in zero (nothing to do);
 *   present  mapped: written with zeroes, or, in a long run, dropped with
 *            MADV_DONTNEED (cheaper than writing; the next touch faults in a
 *            zero page);
 *   swapped  a swap entry (disk, zram, zswap): it faults back in with its old
 *            contents, so it must be cleared too; dropped with MADV_DONTNEED,
 *            which frees the swap slot without reading it back.
 * mincore() tells present from the rest but reports a swapped page that is
 * not in the swap cache as not resident, exactly like an empty one (mm/
 * mincore.c); /proc/self/pagemap tells them apart (bit 63 present, bit 62
 * swapped; readable without privileges, which only hides frame numbers).
 *
 * The rule, in batches of 4,096 pages (ending on multiples of 4,096 pages
 * in the address space, so that no huge page straddles two):
 *  1. mincore: resident pages are present (a swapped page in the swap cache
 *     counts as resident: writing it or dropping it clears it either way).
 *     If mincore fails, every page is treated as present.
 *  2. If the system had no swap before the call's first mincore and has none
 *     after its last (sysinfo's totalswap, which also counts the entries of
 *     a device being swapped off), no swap entry existed at either instant,
 *     so the non-resident pages are empty: left alone. (Only a swapon, the
 *     page-out of one of these pages and a complete swapoff, all within the
 *     call, escape this.) Two sysinfo calls per call, one when every page
 *     was resident. If swap appeared during the call, the range is done
 *     again as in 3.
 *  3. Else pagemap classifies the non-resident pages (one pread per 512).
 *     Where pagemap cannot be read (restricted /proc, seccomp), a
 *     non-resident page is taken as swapped: dropped, never assumed zero.
 * The pagemap file is opened once per call and closed before returning: a
 * descriptor kept open would read the parent's pagemap in a forked child,
 * and a program that closes every descriptor could hand its number to
 * another file. Everything here is async-signal-safe system calls.
 *
 * With the kernel's page reuse (os_page_reuse_maps() != 0) a dropped or
 * empty page may fault in the process's old data: every page is written.
 * (Valat, PhD thesis, 2014, Ch.5: clearing only what is resident.) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "os/os.h"

#include "types.h"
#include "util/stats.h"

enum { BATCH = 4096, PM_CHUNK = 512, DROP_MIN_BYTES = 256 * 1024 };
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)

static atomic_int test_mode;             /* os_zero_test_mode() */

void os_zero_test_mode(int mode) { atomic_store(&test_mode, mode); }

static int mode_now(void) { return atomic_load_explicit(&test_mode, memory_order_relaxed); }

/* False only when the kernel says no swap entry exists now; `first`: the
 * check before a call's first mincore (the test hook's late swap says no to
 * it only). */
static bool swap_possible(bool first) {
  int mode = mode_now();
  if (mode & OS_ZERO_SWAP_LATE) return !first;
  if (mode & (OS_ZERO_SWAP | OS_ZERO_NO_PAGEMAP)) return true;
  struct sysinfo si;
  return sysinfo(&si) != 0 || si.totalswap != 0;
}

unsigned char os_zero_page_state(uint64_t entry) {
  if (entry & PM_PRESENT) return OS_ZERO_PRESENT;
  if (entry & PM_SWAPPED) return OS_ZERO_SWAPPED;
  return OS_ZERO_EMPTY;
}

typedef struct {
  int fd;                                /* /proc/self/pagemap, or -1 */
  bool tried;
} pagemap_t;

static bool pagemap_read(pagemap_t *pm, uintptr_t first, size_t n, uint64_t *e) {
  if (!pm->tried) {
    pm->tried = true;
    pm->fd = (mode_now() & OS_ZERO_NO_PAGEMAP) ? -1 : os_open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
  }
  if (pm->fd < 0) return false;
  size_t got = 0;
  while (got < n) {
    long r = os_pread(pm->fd, (char *)e + got * 8, (n - got) * 8, (int64_t)((first + got) * 8));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || r % 8) return false;
    got += (size_t)r / 8;
  }
  return true;
}

/* st[0..n) for the n pages at base (see the rule above). swap: false when
 * the system had no swap before this mincore; non-resident pages are then
 * left empty and *pending set, for the caller's check after the mincore. */
static void classify(char *base, size_t n, unsigned char *st, pagemap_t *pm, bool swap, bool *pending) {
  size_t page = os_page_size();
  if (mincore(base, n * page, st) != 0) {
    memset(st, OS_ZERO_PRESENT, n);
    return;
  }
  for (size_t i = 0; i < n; i++) st[i] &= 1;   /* OS_ZERO_PRESENT or OS_ZERO_EMPTY */
  unsigned char *z = memchr(st, OS_ZERO_EMPTY, n);
  if (!z) return;
  if (!swap) {
    *pending = true;
    return;
  }
  size_t lo = (size_t)(z - st), hi = n;  /* the span of the non-resident pages */
  while (st[hi - 1] != OS_ZERO_EMPTY) hi--;
  uint64_t e[PM_CHUNK];
  uintptr_t first = (uintptr_t)base / page;
  for (size_t i = lo; i < hi; i += PM_CHUNK) {
    size_t k = hi - i < PM_CHUNK ? hi - i : PM_CHUNK;
    bool ok = pagemap_read(pm, first + i, k, e);
    for (size_t j = 0; j < k; j++)
      if (st[i + j] == OS_ZERO_EMPTY) st[i + j] = ok ? os_zero_page_state(e[j]) : OS_ZERO_SWAPPED;
  }
}

void os_zero_plan(char *base, size_t n, const unsigned char *st, bool keep_huge, os_zero_act_fn act, void *ctx) {
  size_t page = os_page_size(), huge = keep_huge ? os_features.huge_page_size : 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    if (st[i] == OS_ZERO_EMPTY) {
      i = j;
      continue;
    }
    char *q = base + i * page;
    if (st[i] == OS_ZERO_SWAPPED) {
      /* Swapped pages, and the empty ones between them (dropping those is
       * free), up to the last swapped one before a present page. A huge page
       * mapped whole has no swapped part, so none is split here. */
      size_t last = i;
      for (; j < n && st[j] != OS_ZERO_PRESENT; j++)
        if (st[j] == OS_ZERO_SWAPPED) last = j;
      j = last + 1;
      act(ctx, OS_ZERO_DROP, q, (j - i) * page);
      i = j;
      continue;
    }
    while (j < n && st[j] == OS_ZERO_PRESENT) j++;
    size_t len = (j - i) * page;
    char *lo = q, *hi = q + len;         /* the part dropped */
    if (huge) {                          /* whole huge pages only: none is split */
      lo = (char *)align_up((uintptr_t)q, huge);
      hi = (char *)((uintptr_t)(q + len) & ~(uintptr_t)(huge - 1));
      if (hi < lo) hi = lo;
    }
    if ((size_t)(hi - lo) >= DROP_MIN_BYTES) {
      if (lo > q) act(ctx, OS_ZERO_WRITE, q, (size_t)(lo - q));
      act(ctx, OS_ZERO_DROP, lo, (size_t)(hi - lo));
      if (q + len > hi) act(ctx, OS_ZERO_WRITE, hi, (size_t)(q + len - hi));
    } else {
      act(ctx, OS_ZERO_WRITE, q, len);
    }
    i = j;
  }
}

/* A drop the kernel refuses is written instead (a swapped page then comes
 * back from swap and is cleared: slower, still correct). */
static void apply(void *ctx, int kind, char *q, size_t len) {
  (void)ctx;
  if (kind == OS_ZERO_DROP) {
    stat_add(&locus_stats.madvises, 1);
    if (madvise(q, len, MADV_DONTNEED) == 0) return;
  }
  memset(q, 0, len);
}

/* os_zero_recycled without errno's restore: an open, mincore or madvise
 * that fails (no /proc; MADV_DONTNEED refused on mlock'd pages) sets it. */
static void zero_range(void *p, size_t size, bool keep_huge) {
  if (os_page_reuse_maps()) {            /* a dropped or empty page may fault in old data */
    memset(p, 0, size);
    return;
  }
  unsigned char st[BATCH];
  size_t page = os_page_size();
  char *base = p;
  size_t pages = size / page;
  pagemap_t pm = {.fd = -1, .tried = false};
  bool swap = swap_possible(true), pending = false;
  /* Batches end on multiples of BATCH pages in the address space: a huge
   * page (a divisor of that span) never straddles two batches, where each
   * part, shorter than a huge page, would be written instead of dropped. */
  for (int pass = 0; pass < 2; pass++) {
    for (size_t first = 0, n; first < pages; first += n) {
      n = BATCH - (size_t)((uintptr_t)(base + first * page) / page % BATCH);   /* 1..BATCH */
      if (n > pages - first) n = pages - first;
      classify(base + first * page, n, st, &pm, swap, &pending);
      os_zero_plan(base + first * page, n, st, keep_huge, apply, NULL);
    }
    /* No swap before the first mincore and none after the last: the pages
     * left alone were empty. Swap turned on meanwhile (rare): the whole
     * range again, with pagemap (a page cleared already is cleared again). */
    if (swap || !pending || !swap_possible(false)) break;
    swap = true;
  }
  if (pm.fd >= 0) os_close(pm.fd);
}

void os_zero_recycled(void *p, size_t size, bool keep_huge) {
  int saved = errno;                     /* a successful calloc leaves errno alone */
  zero_range(p, size, keep_huge);
  errno = saved;
}
