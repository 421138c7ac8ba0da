/* The user-heap API of locus.h (heap/user.c holds the heaps; docs/heaps.md). */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "heap/user.h"
#include "config/options.h"

/* Sizes at or above this can never be satisfied (as malloc.c). */
#define MAX_REQUEST ((size_t)PTRDIFF_MAX - 2 * PAGE_SIZE)

/* The program holds handles (locus_heap_t *); every entry opens its handle
 * (uheap_open: aborts on a stale or foreign one) before using the heap. */

LOCUS_EXPORT locus_heap_t *locus_heap_create(const locus_heap_config_t *cfg) {
  return uheap_handle(uheap_create(cfg));
}

LOCUS_EXPORT void locus_heap_destroy(locus_heap_t *h) {
  uheap_drop(h, false, "locus_heap_destroy");
}

LOCUS_EXPORT void locus_heap_reset(locus_heap_t *h) {
  uheap_drop(h, true, "locus_heap_reset");
}

static void *heap_alloc_checked(uheap_t *u, size_t size, size_t align, bool zero) {
  if (size > MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  return uheap_alloc(u, size, align, zero);
}

LOCUS_EXPORT void *locus_heap_malloc(locus_heap_t *h, size_t size) {
  if (unlikely(size > MAX_REQUEST)) return heap_alloc_checked(uheap_open(h, "locus_heap_malloc"), size, ALIGN_MIN, false);
  return uheap_malloc(h, size);
}

LOCUS_EXPORT void *locus_heap_calloc(locus_heap_t *h, size_t n, size_t size) {
  uheap_t *u = uheap_open(h, "locus_heap_calloc");
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return heap_alloc_checked(u, bytes, ALIGN_MIN, true);
}

/* aligned_alloc's rule (as locus_memalign): a power of two, else EINVAL. */
LOCUS_EXPORT void *locus_heap_aligned_alloc(locus_heap_t *h, size_t align, size_t size) {
  uheap_t *u = uheap_open(h, "locus_heap_aligned_alloc");
  if (!is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return heap_alloc_checked(u, size, align < ALIGN_MIN ? ALIGN_MIN : align, false);
}

/* In place where the block's kind allows (a medium block grows into its free
 * right neighbour, by its sub-heap's thread only; a large one over the free
 * memory behind it), else moved within its heap; an arena's old block stays
 * until the reset (it cannot be freed). */
void *locus_heap_realloc_in(uheap_t *u, void *p, region_t *r, size_t usable, size_t size) {
  uheap_check(u, "realloc");
  if (size > MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  heap_t *sub = r->heap;
  void *q = NULL;
  switch (r->kind) {
  case REGION_SMALL:
    if (size <= usable && size >= usable / 2) q = p;
    break;
  case REGION_MEDIUM:
    if (size > SMALL_MAX && size <= locus_opt.large_threshold && uheap_owns(sub) &&
        medium_resize_in_place(sub, (chunk_t *)r, p, size))
      q = p;
    break;
  case REGION_ARENA:                   /* stays while it fits; else moved (the old block stays too) */
    if (size <= usable) q = p;
    break;
  case REGION_LARGE:                   /* never moved by mremap: its header is on its heap's list */
    if (size > locus_opt.large_threshold) q = large_resize_in_place((large_t *)r, p, size);
    break;
  }
  if (q) return q;
  q = uheap_alloc(u, size, ALIGN_MIN, false);
  if (!q) return NULL;
  memcpy(q, p, usable < size ? usable : size);
  if (!uheap_is_arena(u)) locus_free_checked(p, "realloc");
  return q;
}

LOCUS_EXPORT void *locus_heap_realloc(locus_heap_t *h, void *p, size_t size) {
  uheap_t *u = uheap_open(h, "locus_heap_realloc");
  if (!p) return locus_heap_malloc(h, size);
  region_t *r = registry_lookup(p);
  size_t usable = r ? locus_usable_size(p) : 0;   /* aborts, naming it, on a foreign pointer */
  if (!r) locus_fatal("locus_heap_realloc(): invalid pointer %p (not allocated by locus)", p);
  if (uheap_of_heap(r->heap) == u) {
    if (size == 0) size = 1;           /* a heap's block stays a block (no free-and-NULL) */
    return locus_heap_realloc_in(u, p, r, usable, size);
  }
  /* Another heap's block (or malloc's) moves into h. */
  void *q = heap_alloc_checked(u, size ? size : 1, ALIGN_MIN, false);
  if (!q) return NULL;
  memcpy(q, p, usable < size ? usable : size);
  uheap_t *from = uheap_of_heap(r->heap);
  if (!from || !uheap_is_arena(from)) locus_free_checked(p, "locus_heap_realloc");
  return q;
}

LOCUS_EXPORT locus_heap_t *locus_heap_of(const void *p) {
  if (!p) return NULL;
  region_t *r = registry_lookup(p);
  return r ? uheap_handle(uheap_of_heap(r->heap)) : NULL;
}

LOCUS_EXPORT locus_heap_t *locus_heap_capture(locus_heap_t *h) {
  locus_init();
  int err;
  uheap_t *prev = uheap_capture(h ? uheap_open(h, "locus_heap_capture") : NULL, &err);
  if (err) errno = err;
  return uheap_handle(prev);
}

LOCUS_EXPORT int locus_heap_stats(locus_heap_t *h, locus_stats_t *st) {
  if (!h || !st) {                     /* a stale handle aborts all the same */
    if (h) uheap_open(h, "locus_heap_stats");
    errno = EINVAL;
    return -1;
  }
  return uheap_stats(uheap_open(h, "locus_heap_stats"), st);
}

LOCUS_EXPORT const char *locus_heap_name(const locus_heap_t *h) {
  return uheap_name(uheap_open(h, "locus_heap_name"));
}
