/* The page-sharing API of locus.h (docs/sharing.md): same-page merging
 * advice, shareable blocks and their copy-on-write copies (S. Valat, PhD
 * thesis, 2014, Ch.6). */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "heap/heap.h"
#include "os/os.h"

/* The whole pages of [p, p + len) when they lie in one region of locus that
 * is not the user's memory; false (EINVAL) otherwise. */
static bool merge_range(void *p, size_t len, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t a = (uintptr_t)p, b;
  size_t page = os_page_size();
  region_t *r = p ? registry_lookup(p) : NULL;
  if (!r || !len || __builtin_add_overflow(a, len, &b) || b > (uintptr_t)r + r->size ||
      (r->flags & (REGION_USER | REGION_FILE))) {
    errno = EINVAL;
    return false;
  }
  *lo = align_up(a, page);
  *hi = b & ~(uintptr_t)(page - 1);
  if (*lo >= *hi) {                    /* no whole page inside */
    errno = EINVAL;
    return false;
  }
  return true;
}

static int merge(void *p, size_t len, bool on) {
  locus_init();
  uintptr_t lo, hi;
  if (!merge_range(p, len, &lo, &hi)) return -1;
  int e = os_merge((void *)lo, hi - lo, on);
  if (e) {
    errno = e;
    return -1;
  }
  return 0;
}

LOCUS_EXPORT int locus_merge(void *p, size_t len) { return merge(p, len, true); }
LOCUS_EXPORT int locus_unmerge(void *p, size_t len) { return merge(p, len, false); }

LOCUS_EXPORT void *locus_malloc_shareable(size_t size) {
  locus_init();
  heap_t *h = heap_get()->main;
  return large_file_alloc(h, size);
}

/* The shareable block holding [src, src + len), or NULL (EINVAL). */
static large_t *shareable_of(const void *src, size_t len) {
  region_t *r = src ? registry_lookup(src) : NULL;
  uintptr_t a = (uintptr_t)src, b;
  if (!r || r->kind != REGION_LARGE || !(r->flags & REGION_FILE) || !len || __builtin_add_overflow(a, len, &b))
    return NULL;
  large_t *l = (large_t *)r;
  uintptr_t start = (uintptr_t)l + l->user_off;
  if (l->magic != LARGE_LIVE || a < start || b > start + large_usable(l)) return NULL;
  return l;
}

LOCUS_EXPORT void *locus_cow_copy(const void *src, size_t len) {
  locus_init();
  large_t *l = shareable_of(src, len);
  if (!l) {
    errno = EINVAL;
    return NULL;
  }
  return large_file_copy(heap_get()->main, l, src, len);
}

void *locus_shareable_realloc(void *p, size_t usable, size_t size) {
  if (size <= usable && size > usable / 2) return p;
  /* A block that overlap made a memory file (docs/overlap.md) is an
   * ordinary malloc block to the program: its new block is what malloc
   * gives (a memory file only within the cap of 256 and from
   * LOCUS_OVERLAP_MIN bytes), not a shareable block outside the cap. */
  region_t *r = registry_lookup(p);
  void *q = r && file_info(r)->overlap ? locus_malloc(size) : locus_malloc_shareable(size);
  if (!q) return NULL;
  memcpy(q, p, usable < size ? usable : size);
  locus_free_checked(p, "realloc");
  return q;
}
