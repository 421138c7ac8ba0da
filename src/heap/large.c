/* Large blocks (above the large threshold): one region each, straight from the
 * memory source of the thread's node. The header sits at the region start;
 * the payload starts at a random multiple of 64 bytes within the first page
 * (large arrays aligned on the same power of two share cache sets: Valat,
 * PhD thesis, 2014, Ch.3).
 * realloc resizes with mremap: the kernel moves page-table entries, no copy. */
#include <errno.h>
#include <string.h>

#include "heap/heap.h"
#include "heap/user.h"
#include "numa/next_touch.h"
#include "source/ksm.h"
#include "os/os.h"
#include "config/options.h"
#include "config/trace.h"

#define HDR_ROOM 64u

/* Offsets follow a multiplicative (Weyl) sequence: successive blocks land far
 * apart among the 63 line offsets. The sequence starts at 1, not 0, so the
 * first block is offset like every other one. */
static size_t color_offset(void) {
  static atomic_size_t counter;
  if (!locus_opt.color) return 0;
  size_t n = atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed) + 1;
  size_t x = n * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return (x % (PAGE_SIZE / 64 - 1)) * 64;   /* header + offset stay within the first page */
}

/* Large blocks of THP_MIN or more get huge pages (LOCUS_THP): below it a
 * block holds at most one whole huge page beside its 4 KiB header page and
 * tail, and the 2 MiB alignment would cost more address space than it gains.
 * eco, which gives every block back at once, takes them only with the
 * kernel's page reuse (which pools whole 2 MiB pages, kernel/0003): without
 * it each huge page would be cleared again at every allocation. */
#define THP_MIN (4 * MiB)

static bool eco_reuse(void) {
  return os_features.page_reuse && atomic_load_explicit(&locus_opt.page_reuse, memory_order_relaxed);
}

static bool want_huge(size_t total) {
  if (total < THP_MIN || !os_features.huge_page_size) return false;
  thp_opt_t t = atomic_load_explicit(&locus_opt.thp, memory_order_relaxed);
  if (t == THP_OPT_ON) return true;
  if (t == THP_OPT_OFF) return false;
  return (os_features.thp == THP_MADVISE || os_features.thp == THP_ALWAYS) &&
         (atomic_load_explicit(&locus_opt.profile, memory_order_relaxed) != PROFILE_ECO || eco_reuse());
}

/* A huge block's region is rounded up to whole huge pages when that adds at
 * most 1/8 of it: its tail is then backed by a huge page too, and its cached
 * segment keeps whole huge pages. The padding is touched only when the tail
 * is (a huge page is committed whole): at most 12.5 % more committed memory,
 * about 3 % on average for blocks of 4-32 MiB. */
static size_t huge_round(size_t total) {
  size_t r = align_up(total, os_features.huge_page_size);
  return r - total <= total / 8 ? r : total;
}

static size_t region_bytes(size_t off, size_t size) {
  size_t n = align_up(off + size, PAGE_SIZE);
  return n < SLICE_SIZE ? SLICE_SIZE : n;
}

/* The payload's offset before alignment: past the header (and, in a user
 * heap, its list links). */
static size_t head_room(const heap_t *h) { return h->place == PLACE_USER ? LARGE_USER_ROOM : HDR_ROOM; }
_Static_assert(sizeof(large_t) <= HDR_ROOM && sizeof(large_user_t) <= LARGE_USER_ROOM, "large block headers fit");

size_t large_region_bytes(const heap_t *h, size_t size, size_t align) {
  size_t room = head_room(h);
  size_t off = align <= 64 ? room + PAGE_SIZE : align_up(room, align);   /* the colour offset: under a page */
  return region_bytes(off + (align > os_page_size() ? align : 0), size);
}

static void *large_alloc_in(heap_t *h, source_t *src, size_t total, bool huge, size_t off, size_t slack,
                            size_t room, size_t size, size_t align, bool zero, size_t *got);

/* LOCUS_KSM=auto: a live block of a system source enters the sampler's
 * watch, and the sampler gets its tick (source/ksm.c). */
static void large_ksm_watch(large_t *l) {
  ksm_watch(&l->r);
  ksm_tick(os_clock_coarse_ns());
}

void *large_alloc(heap_t *h, size_t size, size_t align, bool zero) {
  if (align > PTRDIFF_MAX / 4) {      /* no address space has room for it */
    errno = ENOMEM;
    return NULL;
  }
  if (unlikely(h == &locus_oom_heap)) {
    errno = ENOMEM;
    return NULL;
  }
  source_t *src = heap_source(h);
  size_t room = head_room(h);
  size_t off = align <= 64 ? room + color_offset() : align_up(room, align);
  size_t slack = align > os_page_size() ? align : 0;   /* regions are only page-aligned */
  if (size > PTRDIFF_MAX - off - slack - PAGE_SIZE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t total = region_bytes(off + slack, size);
  bool huge = !src->user && want_huge(total);      /* the user's memory is never advised */
  /* eco too (its huge blocks exist only with the kernel's page reuse): a
   * tail left in 4 KiB pages costs a fault and a zap per page at every
   * allocation, about 256 pages per block, where a pooled huge page costs
   * one of each; huge_round() bounds the extra footprint to 1/8. */
  if (huge) total = huge_round(total);
  if (unlikely(h->place == PLACE_USER)) {   /* under a limit, reserved until counted */
    if (!heap_room(h, total)) {
      errno = ENOMEM;
      return NULL;
    }
    size_t got = 0;
    void *p = large_alloc_in(h, src, total, huge, off, slack, room, size, align, zero, &got);
    heap_room_done(h, total, got);
    return p;
  }
  return large_alloc_in(h, src, total, huge, off, slack, room, size, align, zero, NULL);
}

/* *got (when not NULL): the bytes of the region, once counted. */
static void *large_alloc_in(heap_t *h, source_t *src, size_t total, bool huge, size_t off, size_t slack,
                            size_t room, size_t size, size_t align, bool zero, size_t *got) {
  region_t *r = source_alloc(src, total, (huge ? SRC_HUGE : 0) | (h->limited ? SRC_EXACT : 0));
  if (!r) {
    errno = ENOMEM;
    return NULL;
  }
  char *base = (char *)r;
  total = r->size;
  bool zeroed = r->zeroed;
  source_advise_merge(r, false);
  if (slack) off = align_up((uintptr_t)base + room, align) - (uintptr_t)base;
  large_t *l = (large_t *)base;
  l->r.kind = REGION_LARGE;
  l->r.heap = h;
  l->r.node = (uint8_t)(src->node < 0 ? NODE_NONE : src->node);
  l->user_off = off;
  l->user_size = size;
  l->magic = LARGE_LIVE;
  if (!registry_add(&l->r)) {          /* no memory for the registry: give the region back */
    source_free(&l->r);
    errno = ENOMEM;
    return NULL;
  }
  atomic_fetch_add_explicit(&h->st_large_bytes, total, memory_order_relaxed);
  if (got) *got = total;
  heap_stat_add(&h->st_large_allocs, 1);
  if (h->place == PLACE_USER) uheap_large_link(h, l);
  else if (unlikely(ksm_auto())) large_ksm_watch(l);
  char *p = base + off;
  if (zero && (r->flags & REGION_USER)) {
    memset(p, 0, size);                /* the user's pages are never dropped (a shared mapping keeps its data) */
  } else if (zero && !zeroed) {
    /* Recycled: clear the rest of the header page, then the pages that hold data (os_zero_recycled). */
    size_t head = PAGE_SIZE - off % PAGE_SIZE;
    char *page = p + head;
    memset(p, 0, head < size ? head : size);
    if (page < base + total) os_zero_recycled(page, (size_t)(base + total - page), r->flags & REGION_HUGE);
  }
  if (unlikely(locus_trace_on)) trace_alloc(p, size);
  return p;
}

large_t *large_check(region_t *r, const void *p, const char *fn) {
  large_t *l = (large_t *)r;
  if ((const char *)p != (char *)l + l->user_off)
    locus_fatal("%s(): invalid pointer %p (inside a large block at %p, not its start)", fn, p,
                (char *)l + l->user_off);
  if (l->magic != LARGE_LIVE) locus_fatal("%s(): double free of %p (large block)", fn, p);
  return l;
}

/* A file region becomes a large block of h: header, registry, statistics. */
static void *file_block(heap_t *h, region_t *r, size_t off, size_t size) {
  large_t *l = (large_t *)r;
  l->r.kind = REGION_LARGE;
  l->r.heap = h;
  l->user_off = off;
  l->user_size = size;
  l->magic = LARGE_LIVE;
  if (!registry_add(&l->r)) {
    file_region_free(&l->r);
    errno = ENOMEM;
    return NULL;
  }
  atomic_fetch_add_explicit(&h->st_large_bytes, l->r.size, memory_order_relaxed);
  heap_stat_add_shared(&h->st_large_allocs, 1);
  char *p = (char *)l + off;
  if (unlikely(locus_trace_on)) trace_alloc(p, size);
  return p;
}

void *large_file_alloc(heap_t *h, size_t size) {
  if (size > PTRDIFF_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  region_t *r = file_region_new(size);
  return r ? file_block(h, r, PAGE_SIZE, size) : NULL;
}

void *large_overlap_alloc(heap_t *h, size_t size, bool zero) {
  if (size > PTRDIFF_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  region_t *r = file_region_take(size);
  bool kept = r != NULL;
  if (!r) r = file_region_new_overlap(size);
  void *p = r ? file_block(h, r, PAGE_SIZE, size) : NULL;
  if (p && kept && zero) memset(p, 0, size);
  return p;
}

void *large_file_copy(heap_t *h, large_t *from, const void *src, size_t len) {
  size_t inpage;
  region_t *r = file_region_copy(&from->r, (uintptr_t)src, len, &inpage);
  return r ? file_block(h, r, PAGE_SIZE + inpage, len) : NULL;
}

void large_free(large_t *l) {
  if (unlikely(locus_trace_on)) trace_free((char *)l + l->user_off);
  if (unlikely(l->r.flags & REGION_FILE)) {     /* a shareable block: not the sources' memory */
    file_quiesce(&l->r);                        /* overlap: its transfers end first */
    l->magic = 0;
    atomic_fetch_sub_explicit(&l->r.heap->st_large_bytes, l->r.size, memory_order_relaxed);
    registry_remove(&l->r);
    file_region_free(&l->r);
    return;
  }
  if (unlikely(l->r.flags & REGION_NEXT_TOUCH)) next_touch_cancel(&l->r);
  if (l->r.heap->place == PLACE_USER) uheap_large_unlink(l), heap_released(l->r.heap, l->r.size);
  if (unlikely(l->r.flags & REGION_KSM_WATCH)) ksm_unwatch(&l->r);   /* the sampler is not reading it */
  l->magic = 0;
  atomic_fetch_sub_explicit(&l->r.heap->st_large_bytes, l->r.size, memory_order_relaxed);
  registry_remove(&l->r);
  source_free(&l->r);
}

static void record(region_t *r, registry_resv_t *rv) {
  bool ok = registry_add_reserved(r, rv);
  LOCUS_ASSERT(ok);
  (void)ok;
}

/* Returns the moved or resized block, or NULL (errno ENOMEM) leaving p intact.
 * Growth first takes the cached segment right behind the block, if any (no
 * copy, no fault); then looks for a cached segment that holds the new size: copying
 * into pages already resident costs less than faulting the fresh tail pages
 * that mremap would add (a buffer grown step by step would otherwise fault
 * its whole final size every time it is rebuilt). Else mremap, no copy. */
/* Grows l in place over the cached segment behind it, or copies it into a
 * cached segment that holds the new size; NULL when neither exists (or the
 * registry cannot record the copy), l untouched. The addresses are known
 * before anything changes, so the registry leaves are made first. */
static bool large_extend(large_t *l, size_t size, size_t total) {
  size_t before = l->r.size;
  unsigned exact = l->r.heap->limited ? SRC_EXACT : 0;
  if (!registry_prepare((uintptr_t)l, total + SLICE_SIZE) || !source_extend(&l->r, total, exact)) return false;
  record(&l->r, NULL);                 /* covers the new slices; the old ones are rewritten alike */
  atomic_fetch_add_explicit(&l->r.heap->st_large_bytes, l->r.size - before, memory_order_relaxed);
  l->user_size = size;
  return true;
}

static void *large_grow_cached(large_t *l, void *p, size_t size, size_t total) {
  size_t off = l->user_off;
  if (large_extend(l, size, total)) return p;
  large_t *n = (large_t *)source_alloc(l->r.source, total, SRC_CACHED_ONLY);
  if (!n) return NULL;
  n->r.kind = REGION_LARGE;
  n->r.heap = l->r.heap;
  n->r.node = l->r.node;
  n->user_off = off;
  n->user_size = size;
  n->magic = LARGE_LIVE;
  if (!registry_add(&n->r)) {
    source_free(&n->r);
    return NULL;
  }
  atomic_fetch_add_explicit(&n->r.heap->st_large_bytes, n->r.size, memory_order_relaxed);
  if (n->r.heap->place == PLACE_USER) uheap_large_link(n->r.heap, n);
  else if (unlikely(ksm_auto())) large_ksm_watch(n);
  memcpy((char *)n + off, p, large_usable(l));   /* the caller may use all usable bytes */
  large_free(l);
  return (char *)n + off;
}

/* Resizes l with mremap, which may move it anywhere: the registry leaves the
 * new address may need are set aside first, so that nothing can fail once
 * the block has moved. NULL (ENOMEM) with l intact on failure. */
static void *large_remap(large_t *l, size_t size, size_t total) {
  registry_resv_t rv;
  if (!registry_reserve(&rv, (total > l->r.size ? total : l->r.size) + SLICE_SIZE)) {
    errno = ENOMEM;
    return NULL;
  }
  size_t off = l->user_off, old = l->r.size;
  registry_remove(&l->r);
  large_t *n = (large_t *)source_resize(&l->r, total);
  if (!n) {
    record(&l->r, &rv);                /* its leaves exist: it was recorded before */
    registry_unreserve(&rv);
    errno = ENOMEM;
    return NULL;
  }
  atomic_fetch_add_explicit(&n->r.heap->st_large_bytes, total - old, memory_order_relaxed);  /* modular */
  n->user_size = size;
  n->r.zeroed = false;
  record(&n->r, &rv);
  registry_unreserve(&rv);
  return (char *)n + off;
}

static void *large_realloc_in(large_t *l, void *p, size_t size);

static void *large_realloc_in(large_t *l, void *p, size_t size);

/* realloc of a large block: in place when the new size fits, else large_move.
 * LOCUS_KSM=auto: a watched block leaves the sampler's table while it is
 * resized (the sampler may change its flags and mapping number, which a
 * resize reads; mremap may move it) and comes back at its new place,
 * sampled anew (an advice given stays with the kernel's mapping). */
void *large_realloc(large_t *l, void *p, size_t size) {
  if (likely(!(l->r.flags & REGION_KSM_WATCH))) return large_realloc_in(l, p, size);
  size_t off = l->user_off;
  ksm_unwatch(&l->r);
  void *q = large_realloc_in(l, p, size);
  /* a block copied elsewhere was watched on its way (large_grow_cached) */
  large_t *n = (large_t *)((char *)(q ? q : p) - off);
  if (!(n->r.flags & REGION_KSM_WATCH)) ksm_watch(&n->r);
  return q;
}

static void *large_realloc_in(large_t *l, void *p, size_t size) {
  if (unlikely(l->r.flags & REGION_NEXT_TOUCH)) next_touch_cancel(&l->r);
  size_t off = l->user_off;
  if (size > PTRDIFF_MAX - off - PAGE_SIZE - SLICE_SIZE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t total = region_bytes(off, size);
  if (total <= l->r.size && total + SLICE_SIZE > l->r.size) {   /* fits, and shrinking frees under a slice */
    l->user_size = size;
    return p;
  }
  if (total > l->r.size) {
    void *q = large_grow_cached(l, p, size, total);
    if (q) return q;
  }
  return large_remap(l, size, total);
}

static void *large_resize_in_place_in(large_t *l, void *p, size_t size);

void *large_resize_in_place(large_t *l, void *p, size_t size) {
  if (likely(!(l->r.flags & REGION_KSM_WATCH))) return large_resize_in_place_in(l, p, size);
  ksm_unwatch(&l->r);                  /* as for large_realloc: out of the table while it grows */
  void *q = large_resize_in_place_in(l, p, size);
  ksm_watch(&l->r);
  return q;
}

static void *large_resize_in_place_in(large_t *l, void *p, size_t size) {
  size_t off = l->user_off;
  if (size > PTRDIFF_MAX - off - PAGE_SIZE - SLICE_SIZE) return NULL;
  size_t total = region_bytes(off, size);
  if (total <= l->r.size) {            /* shrinking keeps the pages: the heap is dropped whole later */
    l->user_size = size;
    return p;
  }
  size_t more = total - l->r.size, before = l->r.size;
  if (!heap_room(l->r.heap, more)) return NULL;
  bool ok = large_extend(l, size, total);
  heap_room_done(l->r.heap, more, ok ? l->r.size - before : 0);
  return ok ? p : NULL;
}
