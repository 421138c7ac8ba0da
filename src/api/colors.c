/* locus_page_colors: the physical page colours of a range of the calling
 * process, from /proc/self/pagemap through the OS layer (`locus pages` does
 * the same for another process, from the command line; docs/tools.md). */
#include <errno.h>

#include "os/os.h"
#include "types.h"

#define BATCH 512                      /* pagemap entries read at a time (4 KiB of stack) */
#define PM_PRESENT (1ull << 63)
#define PM_FRAME ((1ull << 55) - 1)

LOCUS_EXPORT long locus_page_colors(const void *p, size_t len, unsigned colors, size_t *counts) {
  if (!p || !counts || !colors) {
    errno = EINVAL;
    return -1;
  }
  locus_init();                        /* the page size */
  size_t page = os_page_size();
  uintptr_t first = (uintptr_t)p / page;
  uintptr_t end = ((uintptr_t)p + len + page - 1) / page;
  if (!len) return 0;
  uint64_t e[BATCH];
  long counted = 0;
  bool any_frame = false;
  for (uintptr_t pg = first; pg < end;) {
    size_t n = end - pg < BATCH ? (size_t)(end - pg) : BATCH;
    long got = os_pagemap_read(pg, n, e);
    if (got <= 0) return -1;
    for (long i = 0; i < got; i++) {
      if (!(e[i] & PM_PRESENT)) continue;
      uint64_t frame = e[i] & PM_FRAME;
      any_frame |= frame != 0;
      counts[frame % colors]++;
      counted++;
    }
    pg += (uintptr_t)got;
  }
  if (counted && !any_frame) {         /* every frame reads 0: hidden, not real; undo */
    counts[0] -= (size_t)counted;
    errno = EPERM;
    return -1;
  }
  return counted;
}
