/* A known case for `locus pages`: two arrays whose physical page colours are
 * chosen, so that the estimator's distribution can be checked exactly.
 *
 *   pages_case COLORS SAME UNIFORM_PER_COLOR
 *
 * maps a pool of pages, reads their frame numbers from /proc/self/pagemap,
 * and moves chosen pages (mremap keeps a page's frame) into two contiguous
 * ranges:
 *   same     SAME pages, all of colour 0 (colour = frame mod COLORS);
 *   uniform  COLORS * UNIFORM_PER_COLOR pages, colours 0, 1, ..., COLORS-1
 *            repeated: exactly UNIFORM_PER_COLOR pages of each colour.
 * Then prints "ready PID same=ADDR:LEN uniform=ADDR:LEN" and waits until its
 * standard input closes. Exit 77 (skip) when the frame numbers read as zero
 * (not root: the kernel hides them), 1 on another failure. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096ul

static uint64_t frame(int fd, uintptr_t addr) {
  uint64_t e = 0;
  if (pread(fd, &e, sizeof e, (off_t)(addr / PAGE * sizeof e)) != (ssize_t)sizeof e) return 0;
  if (!(e >> 63 & 1)) return 0;        /* not present */
  return e & ((1ull << 55) - 1);
}

static int fail(const char *what) {
  perror(what);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: pages_case COLORS SAME UNIFORM_PER_COLOR\n");
    return 2;
  }
  unsigned long colors = strtoul(argv[1], NULL, 10), same = strtoul(argv[2], NULL, 10),
                per = strtoul(argv[3], NULL, 10);
  if (!colors || !same || !per) return 2;
  /* enough pages that every colour has more than `same + per` of them */
  unsigned long pool_pages = colors * (same + per) * 4 + 1024;
  char *pool = mmap(NULL, pool_pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pool == MAP_FAILED) return fail("mmap pool");
  madvise(pool, pool_pages * PAGE, MADV_NOHUGEPAGE);
  for (unsigned long i = 0; i < pool_pages; i++) pool[i * PAGE] = (char)i;
  int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) {
    perror("/proc/self/pagemap");
    return 77;
  }
  uint64_t *pfn = malloc(pool_pages * sizeof *pfn);
  if (!pfn) return fail("malloc");
  int any = 0;
  for (unsigned long i = 0; i < pool_pages; i++) any |= (pfn[i] = frame(fd, (uintptr_t)(pool + i * PAGE))) != 0;
  if (!any) {
    fprintf(stderr, "pages_case: /proc/self/pagemap shows no frame numbers (needs root)\n");
    return 77;
  }
  unsigned long n_uni = colors * per;
  char *dst_same = mmap(NULL, same * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *dst_uni = mmap(NULL, n_uni * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (dst_same == MAP_FAILED || dst_uni == MAP_FAILED) return fail("mmap destination");
  char *taken = calloc(pool_pages, 1);
  if (!taken) return fail("calloc");
  /* same: the first `same` pages of colour 0 */
  unsigned long got = 0;
  for (unsigned long i = 0; i < pool_pages && got < same; i++)
    if (!taken[i] && pfn[i] % colors == 0) {
      if (mremap(pool + i * PAGE, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, dst_same + got * PAGE) == MAP_FAILED)
        return fail("mremap");
      taken[i] = 1;
      got++;
    }
  if (got < same) {
    fprintf(stderr, "pages_case: only %lu pages of colour 0 in the pool\n", got);
    return 1;
  }
  /* uniform: colour k at page k mod colors */
  for (unsigned long j = 0; j < n_uni; j++) {
    unsigned long want = j % colors, i = 0;
    while (i < pool_pages && (taken[i] || pfn[i] % colors != want)) i++;
    if (i == pool_pages) {
      fprintf(stderr, "pages_case: the pool ran out of pages of colour %lu\n", want);
      return 1;
    }
    if (mremap(pool + i * PAGE, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, dst_uni + j * PAGE) == MAP_FAILED)
      return fail("mremap");
    taken[i] = 1;
  }
  /* the moved pages keep their frames: check, then report */
  for (unsigned long j = 0; j < same; j++)
    if (frame(fd, (uintptr_t)(dst_same + j * PAGE)) % colors != 0) {
      fprintf(stderr, "pages_case: page %lu of 'same' changed colour after mremap\n", j);
      return 1;
    }
  for (unsigned long j = 0; j < n_uni; j++)
    if (frame(fd, (uintptr_t)(dst_uni + j * PAGE)) % colors != j % colors) {
      fprintf(stderr, "pages_case: page %lu of 'uniform' changed colour after mremap\n", j);
      return 1;
    }
  printf("ready %d same=0x%lx:%lu uniform=0x%lx:%lu\n", (int)getpid(), (unsigned long)dst_same, same * PAGE,
         (unsigned long)dst_uni, n_uni * PAGE);
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}
