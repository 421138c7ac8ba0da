/* calloc of a recycled segment whose pages were swapped out: run in a guest
 * with swap (swap_init.sh), with LD_PRELOAD=liblocus.so LOCUS_PROFILE=uma.
 *
 *   swap_calloc [--no-proc] [MiB]
 *
 * A large block is filled with a pattern and freed: uma keeps the segment,
 * still mapped. MADV_PAGEOUT then writes its pages to swap (the whole block,
 * then in a second round every other 64 KiB, so that present, swapped and
 * dropped pages alternate; without an argument, a third round pages out a
 * whole 40 MiB block, more than one batch of the clearing; --no-proc hides
 * /proc from the process first, so that locus cannot read pagemap); /proc/self/pagemap must show them swapped and
 * not present, and mincore not resident (what a mincore-only calloc saw).
 * calloc of the same size must return the same address (the recycled
 * segment: else the test proves nothing) and every word zero. Exit 0 when
 * every round passed, 1 on a wrong byte, 2 when the set-up failed (no swap,
 * no page-out, another address). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)

static size_t page;
enum { MAX_PAGES = 64 << 8 };           /* 64 MiB of 4 KiB pages */
static uint64_t entries[MAX_PAGES];     /* static: no allocation between the free and the calloc */
static unsigned char vec[MAX_PAGES];
static int pm_fd = -1;                  /* /proc/self/pagemap, opened before --no-proc hides /proc */

/* Pages of [lo, hi) swapped and not present, resident per mincore. */
static void count(char *lo, char *hi, size_t *swapped, size_t *resident) {
  size_t n = (size_t)(hi - lo) / page;
  uint64_t *e = entries;
  *swapped = *resident = 0;
  if (n > MAX_PAGES) exit(2);
  ssize_t got = pread(pm_fd, e, n * 8, (off_t)((uintptr_t)lo / page * 8));
  if (got != (ssize_t)(n * 8)) {
    printf("swap_calloc: pagemap: read %zd of %zu bytes: %m\n", got, n * 8);
    exit(2);
  }
  if (mincore(lo, n * page, vec) != 0) {
    printf("swap_calloc: mincore(%p, %zu): %m\n", (void *)lo, n * page);
    exit(2);
  }
  for (size_t i = 0; i < n; i++) {
    if ((e[i] & PM_SWAPPED) && !(e[i] & PM_PRESENT)) (*swapped)++;
    if (vec[i] & 1) (*resident)++;
  }
}

/* --no-proc: a tmpfs over /proc in a mount namespace of this process's own,
 * so that locus cannot open /proc/self/pagemap (as under a restricted /proc)
 * and must fall back to dropping every non-resident page. */
static int hide_proc(void) {
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("none", "/proc", "tmpfs", 0, NULL) != 0) {
    printf("swap_calloc: FAIL setup: cannot hide /proc: %m\n");
    return 2;
  }
  int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd >= 0) {
    printf("swap_calloc: FAIL setup: /proc/self/pagemap still opens\n");
    return 2;
  }
  printf("swap_calloc: /proc hidden: /proc/self/pagemap cannot be opened (%m)\n");
  return 0;
}

/* AnonHugePages of the process, kB (/proc/self/smaps_rollup), or -1. */
static long huge_kb(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

/* One round: 0 the whole block paged out, 1 every other 64 KiB of it. */
static int round_of(size_t n, int mode) {
  uint64_t *p = malloc(n);
  if (!p) { printf("swap_calloc: FAIL setup: malloc(%zu)\n", n); return 2; }
  for (size_t i = 0; i < n / 8; i++) ((volatile uint64_t *)p)[i] = 0xa5a5a5a500000000ull | i;
  long huge = huge_kb();
  uintptr_t at = (uintptr_t)p;          /* freed: kept as a number */
  void (*volatile release)(void *) = free;   /* (gcc's use-after-free warning cannot see that) */
  release(p);
  char *lo = (char *)((at + page - 1) & ~(page - 1));
  char *hi = (char *)((at + n) & ~(page - 1));
  size_t step = mode == 0 ? (size_t)(hi - lo) : 64 << 10;
  size_t want = 0;
  for (char *q = lo; q < hi; q += 2 * step) {
    size_t len = (size_t)(hi - q) < step ? (size_t)(hi - q) : step;
    if (madvise(q, len, MADV_PAGEOUT) != 0) { perror("swap_calloc: MADV_PAGEOUT"); return 2; }
    want += len / page;
  }
  size_t swapped, resident;
  count(lo, hi, &swapped, &resident);
  printf("swap_calloc: %zu MiB, round %d: %ld kB in huge pages before; %zu of %zu pages paged out: %zu swapped and "
         "not present, %zu resident (mincore)\n",
         n >> 20, mode, huge, want, (size_t)(hi - lo) / page, swapped, resident);
  if (swapped < want / 2) {
    printf("swap_calloc: FAIL setup: the kernel swapped out %zu of %zu pages (is swap on?)\n", swapped, want);
    return 2;
  }
  uint64_t *q = calloc(1, n);
  if (((uintptr_t)q & ~(page - 1)) != (at & ~(page - 1))) {   /* the offset in the first page varies */
    printf("swap_calloc: FAIL setup: calloc returned %p, not the recycled %#lx (LOCUS_PROFILE=uma?)\n", (void *)q,
           (unsigned long)at);
    return 2;
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n / 8; i++)
    if (((volatile uint64_t *)q)[i] != 0 && !bad++) first = i;
  if (bad) {
    printf("swap_calloc: FAIL %zu MiB, round %d: calloc returned %zu non-zero words of %zu, the first at word %zu: %#llx\n", n >> 20, mode,
           bad, n / 8, first, (unsigned long long)q[first]);
    free(q);
    return 1;
  }
  printf("swap_calloc: PASS %zu MiB, round %d: %zu words, all zero\n", n >> 20, mode, n / 8);
  free(q);
  return 0;
}

int main(int argc, char **argv) {
  page = (size_t)sysconf(_SC_PAGESIZE);
  int no_proc = argc > 1 && !strcmp(argv[1], "--no-proc");
  if (no_proc) argc--, argv++;
  size_t n = (size_t)(argc > 1 ? atoi(argv[1]) : 16) << 20;
  if (n / page > MAX_PAGES || n < (2u << 20)) { printf("swap_calloc: size 2 to 64 MiB\n"); return 2; }
  pm_fd = open("/proc/self/pagemap", O_RDONLY);
  if (pm_fd < 0) { perror("swap_calloc: /proc/self/pagemap"); return 2; }
  if (no_proc && hide_proc() != 0) return 2;
  /* The first printf allocates stdio's buffer: before the block is freed, so
   * that the new small chunk does not take the freed segment. */
  printf("swap_calloc: %zu MiB blocks\n", n >> 20);
  int st[3] = {round_of(n, 0), round_of(n, 1), 0};
  /* More than one batch of os_zero_recycled (4,096 pages) */
  if (argc <= 1) st[2] = round_of(40u << 20, 0);
  for (int i = 0; i < 3; i++)
    if (st[i]) return st[i];
  return 0;
}
