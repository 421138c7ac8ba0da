/* The C allocation API. Fast paths (small malloc, local small free) are
 * inlined here; everything else goes to the heap, medium and large modules.
 *
 * Every function exists as locus_<name>; the standard names are aliases
 * unless LOCUS_NO_OVERRIDE is defined. */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "heap/heap.h"
#include "heap/user.h"
#include "os/os.h"
#include "config/options.h"
#include "config/trace.h"

/* Sizes at or above this can never be satisfied (glibc uses the same bound). */
#define MAX_REQUEST ((size_t)PTRDIFF_MAX - 2 * PAGE_SIZE)

static NOINLINE void *fail_enomem(void) {
  errno = ENOMEM;
  return NULL;
}

/* Reached in the pop window: a page of the current run carved there, or
 * the slow path under the lock. A carve counts as a slow-path operation
 * (heap_debug_tick: the adaptive controller's tick, the debug build's
 * validation), outside the window, where the validator expects the heap. */
static NOINLINE void *small_slow(heap_t *h, unsigned cls) {
  void *p = small_carve_pop(h, cls);
  heap_pop_leave(h);
  if (likely(p)) {
    heap_debug_tick(h);
    return p;
  }
  p = small_alloc_slow(h, cls);
  return p ? p : fail_enomem();
}

/* The thread cache first (only the owner touches it: no pop window), then
 * the current run. */
static ALWAYS_INLINE void *small_alloc(heap_t *h, unsigned cls) {
  tcache_t *t = &h->cache[cls];
  void **b = t->head;
  if (likely(b)) {
    t->head = b[0];
    t->room++;
    b[1] = NULL;                       /* clears the freed-block tag */
    return b;
  }
  heap_pop_enter(h);                   /* a remote free must not take cur[cls] back now */
  run_t *run = heap_cur(h, cls);
  b = run->free;
  if (likely(b)) {
    run->free = b[0];
    run_used_inc(run);
    b[1] = NULL;                       /* clears the freed-block tag */
    heap_pop_leave(h);
    return b;
  }
  return small_slow(h, cls);            /* still in the pop window */
}

/* Medium or large; align is a power of two >= 16. */
static NOINLINE void *big_alloc_in(heap_t *h, size_t size, size_t align, bool zero) {
  if (unlikely(size > MAX_REQUEST)) return fail_enomem();
  if (unlikely(h->place == PLACE_CAPTURE)) return uheap_captured_alloc(h, size, align, zero);
  void *p;
  /* Overlap on (docs/overlap.md): blocks the overlap library may protect
   * are memory-file regions, so that the MPI runtime can use a shadow view. */
  size_t ovmin = atomic_load_explicit(&file_overlap_min, memory_order_relaxed);
  if (unlikely(ovmin) && size >= ovmin && align <= PAGE_SIZE && h->place == PLACE_MAIN &&
      (p = large_overlap_alloc(h, size, zero)) != NULL)
    return p;
  if (size <= locus_opt.large_threshold && align <= locus_opt.large_threshold / 4 &&
      size + align <= locus_opt.large_threshold)
    p = medium_alloc(h, size, align, zero);
  else
    p = large_alloc(h, size, align, zero);
  return p ? p : fail_enomem();
}

static inline void *big_alloc(size_t size, size_t align, bool zero) {
  return big_alloc_in(heap_get(), size, align, zero);
}

/* malloc from a given heap (a placed sub-heap): the same paths as malloc. */
void *heap_malloc(heap_t *h, size_t size) {
  if (likely(size <= SMALL_MAX)) return small_alloc(h, size_class(size));
  return big_alloc_in(h, size, ALIGN_MIN, false);
}

/* malloc without a heap yet, or of a medium or large block. The heap
 * first: getting the thread its first heap initialises locus, the class
 * table included, and the first call of the process may come before locus's
 * constructor (from another library's: lifecycle_first_alloc). With the
 * class looked up as an argument beside heap_get(), GCC read the table
 * first: an empty table, class 0, a 16-byte block for any small request. */
static NOINLINE void *malloc_other(size_t size) {
  if (size <= SMALL_MAX) {
    heap_t *h = heap_get();
    return small_alloc(h, size_class(size));
  }
  return big_alloc(size, ALIGN_MIN, false);
}

/* Both exits of the fast path are tail jumps: no stack frame. */
LOCUS_EXPORT void *locus_malloc(size_t size) {
  heap_t *h = locus_tls_heap;
  if (likely(size <= SMALL_MAX && h)) return small_alloc(h, size_class(size));
  return malloc_other(size);
}

/* Smallest class at least `size` whose blocks are all `align`-aligned: runs
 * start on page boundaries, so a class is aligned when its size is a
 * multiple of align. Returns NUM_CLASSES when none fits. */
static unsigned aligned_class(size_t size, size_t align) {
  if (align > os_page_size()) return NUM_CLASSES;   /* runs start on page boundaries */
  size = align_up(size ? size : 1, align);
  if (size > SMALL_MAX) return NUM_CLASSES;
  unsigned c = size_class(size);
  while (c < NUM_CLASSES && locus_class_size[c] % align) c++;
  return c;
}

void *heap_alloc(heap_t *h, size_t size, size_t align, bool zero) {
  if (unlikely(size > MAX_REQUEST)) return fail_enomem();
  unsigned c = align <= ALIGN_MIN ? (size <= SMALL_MAX ? size_class(size) : NUM_CLASSES) : aligned_class(size, align);
  if (c < NUM_CLASSES) {
    void *p = small_alloc(h, c);
    if (p && zero) memset(p, 0, size);
    return p;
  }
  return big_alloc_in(h, size, align < ALIGN_MIN ? ALIGN_MIN : align, zero);
}

void *locus_alloc_aligned(size_t size, size_t align) {
  if (align <= ALIGN_MIN) return locus_malloc(size);
  /* heap_get() first: it initialises the class table, see malloc_other */
  return heap_alloc(heap_get(), size, align, false);
}

LOCUS_EXPORT void *locus_calloc(size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) return fail_enomem();
  if (likely(n <= SMALL_MAX)) {
    heap_t *h = heap_get();            /* first: it initialises the class table, see malloc_other */
    void *p = small_alloc(h, size_class(n));
    if (p) memset(p, 0, n);
    return p;
  }
  return big_alloc(n, ALIGN_MIN, true);
}

/* ---- free ------------------------------------------------------------------ */

/* A medium block freed by another thread: onto its heap's stack. */
static void remote_push(heap_t *owner, void *p) {
  void **b = p;
  b[1] = (void *)block_tag(b);
  void *head = atomic_load_explicit(&owner->remote, memory_order_relaxed);
  do {
    b[0] = head;
  } while (!atomic_compare_exchange_weak_explicit(&owner->remote, &head, b, memory_order_release,
                                                  memory_order_relaxed));
}

static NOINLINE void bad_small(const void *p, const char *fn, bool interior) {
  if (interior) locus_fatal("%s(): invalid pointer %p (not the start of a block allocated by locus)", fn, p);
  locus_fatal("%s(): double free of %p (small block already freed)", fn, p);
}

/* Checks a small block pointer; returns its run and block index. Blocks
 * never carved (or in a retired run, whose carved count is 0) are only
 * checked by the owner, the one writer of `carved`. */
static ALWAYS_INLINE run_t *small_check(chunk_t *c, const void *p, const char *fn, size_t *idx) {
  size_t off;
  run_t *run = chunk_run_of(c, p, &off);
  *idx = run_index(run, off);
  if (unlikely(*idx >= run->capacity)) bad_small(p, fn, true);
  if (unlikely(((const uintptr_t *)p)[1] == block_tag(p))) bad_small(p, fn, false);
  return run;
}

static NOINLINE void free_other(void *p, region_t *r, const char *fn) {
  if (unlikely(!r))
    locus_fatal("%s(): invalid pointer %p (not allocated by locus, or already freed)", fn, p);
  if (r->kind == REGION_MEDIUM) {
    chunk_t *c = (chunk_t *)r;
    heap_t *owner = c->r.heap;
    bool local = owner->main == locus_tls_heap;   /* the thread's main heap or one of its placed heaps */
    medium_check(c, p, fn, local);
    if (unlikely(owner->place == PLACE_USER)) uheap_free_check(owner, p, fn);
    if (local) medium_free_local(owner, c, p);
    else remote_push(owner, p);
    return;
  }
  if (r->kind == REGION_ARENA) {          /* arena blocks go only with their heap's reset or destroy */
    arena_usable(p, fn);
    uheap_free_check(r->heap, p, fn);
    locus_fatal("%s(): %p is a block of an arena heap", fn, p);
  }
  if (r->kind == REGION_LARGE) {
    large_t *l = large_check(r, p, fn);
    if (unlikely(l->r.heap->place == PLACE_USER)) uheap_free_check(l->r.heap, p, fn);
    large_free(l);
    return;
  }
  locus_fatal("%s(): invalid pointer %p (region %p has unknown kind %u: heap corrupted?)", fn, p, r,
              (unsigned)r->kind);
}

/* A small-block free that failed a check: says which (never returns).
 * Reached by a tail jump, so the fast paths need no stack frame: GCC must
 * not learn that it does not return (it would call it, and the fast path
 * would need a frame for the call). */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_IPA __attribute__((noipa))
#else
#define NO_IPA NOINLINE
#endif
static NO_IPA void free_small_bad(chunk_t *c, void *p, const char *fn) {
  size_t idx;
  run_t *run = small_check(c, p, fn, &idx);
  if (!run_carved(run, idx)) bad_small(p, fn, true);
  locus_fatal("%s(): invalid pointer %p (small block check failed)", fn, p);
}

/* A small block of another heap than h that free_small did not cache: a
 * placed sub-heap of the thread's (local), a block to check and report, or
 * another thread's block for a full cache or for its run (small_free_foreign).
 * A tail jump from free_small, with few arguments (no stack frame there). */
static NOINLINE void free_small_other(heap_t *h, run_t *run, size_t idx, void *p, const char *fn) {
  chunk_t *c = (chunk_t *)small_chunk_of(p);
  heap_t *owner = c->r.heap;
  if (owner->main == h) {              /* h != NULL: a main heap is its own main */
    if (unlikely(!run_carved(run, idx))) {
      free_small_bad(c, p, fn);
      return;
    }
    if (unlikely(owner->place == PLACE_USER)) uheap_free_check(owner, p, fn);
    small_free_local(owner, c, run, p, block_tag(p));
    return;
  }
  if (unlikely(!run_carved_shared(run, idx))) {
    free_small_bad(c, p, fn);
    return;
  }
  if (unlikely(owner->place == PLACE_USER)) uheap_free_check(owner, p, fn);
  small_free_foreign(h, owner, run, p);
}

/* The free of a block of small chunk c, by any thread (h: its heap, or
 * NULL). Checks, each a tail jump to free_small_bad: the offset is a block
 * start (reciprocal multiply), not tagged freed (double free), a carved
 * block (run_carved for the owner, run_carved_shared for another thread,
 * which implies below the capacity). The owner's block goes to its thread
 * cache; another live main heap's block of the same node too, while the
 * class's list has room (small_free_foreign): the same push, inline; the
 * rest through free_small_other. */
static ALWAYS_INLINE void free_small(heap_t *h, chunk_t *c, void *p, const char *fn) {
  size_t off;
  run_t *run = chunk_run_of(c, p, &off);
  size_t idx = (off * run->recip) >> 32;
  if (unlikely(idx * run->bsize != off)) {
    free_small_bad(c, p, fn);
    return;
  }
  uintptr_t tag = block_tag(p);
  if (unlikely(((const uintptr_t *)p)[1] == tag)) {
    free_small_bad(c, p, fn);
    return;
  }
  heap_t *owner = c->r.heap;
  if (likely(owner == h)) {
    if (unlikely(!run_carved(run, idx))) {
      free_small_bad(c, p, fn);
      return;
    }
    small_free_local(h, c, run, p, tag);
    return;
  }
  if (likely(h) && small_foreign_cacheable(h, owner)) {
    tcache_t *t = &h->cache[run->cls];
    if (likely(t->room) && likely(run_carved_shared(run, idx))) {
      h->cache_foreign = true;
      tcache_push(t, p, tag);
      return;
    }
  }
  free_small_other(h, run, idx, p, fn);
}

/* NULL, a medium or large block, or no block of locus. */
static NOINLINE void free_not_small(void *p, const char *fn) {
  if (!p) return;
  free_other(p, registry_lookup(p), fn);
}

/* Frees whose chunk the frame table does not hold: a small chunk whose
 * entry another chunk took (the registry's `cover` entry of its slice names
 * it: registry_cover), or not a small block. */
static NOINLINE void free_slow(heap_t *h, void *p, const char *fn) {
  uintptr_t c = small_chunk_of(p);
  if (likely(registry_cover(p) == (c | REGION_SMALL))) {
    free_small(h, (chunk_t *)c, p, fn);
    return;
  }
  free_not_small(p, fn);
}

/* Small blocks are known by their address: the chunk is the address masked
 * (small chunks are aligned on their size), the frame table says it is a
 * small chunk, its header names the owner. */
static ALWAYS_INLINE void free_impl(void *p, const char *fn) {
  uintptr_t c = small_chunk_of(p);
  if (likely(small_frame_holds(c))) {
    free_small(locus_tls_heap, (chunk_t *)c, p, fn);
    return;
  }
  free_slow(locus_tls_heap, p, fn);
}

LOCUS_EXPORT void locus_free(void *p) { free_impl(p, "free"); }
void locus_free_checked(void *p, const char *fn) { free_impl(p, fn); }
LOCUS_EXPORT void locus_free_sized(void *p, size_t size) { free_impl(p, "free_sized"); }
LOCUS_EXPORT void locus_free_aligned_sized(void *p, size_t align, size_t size) {
  free_impl(p, "free_aligned_sized");
}

/* ---- sizes and realloc ----------------------------------------------------- */

/* Usable bytes of a live block; aborts on a pointer locus does not own. */
static size_t usable_checked(const void *p, region_t *r, const char *fn) {
  if (!r) locus_fatal("%s(): invalid pointer %p (not allocated by locus, or already freed)", fn, p);
  switch (r->kind) {
  case REGION_SMALL: {
    size_t idx;
    return small_check((chunk_t *)r, p, fn, &idx)->bsize;
  }
  case REGION_MEDIUM:
    medium_check((chunk_t *)r, p, fn, ((chunk_t *)r)->r.heap->main == locus_tls_heap);
    return medium_usable(p);
  case REGION_LARGE: return large_usable(large_check(r, p, fn));
  case REGION_ARENA: return arena_usable(p, fn);
  }
  locus_fatal("%s(): invalid pointer %p (unknown region kind)", fn, p);
}

LOCUS_EXPORT size_t locus_usable_size(const void *p) {
  if (!p) return 0;
  return usable_checked(p, registry_lookup(p), "malloc_usable_size");
}

/* A moved block keeps its placement: a block of a placed heap moves to the
 * calling thread's heap of the same place. */
static void *realloc_move(void *p, int place, size_t old_usable, size_t size) {
  void *q;
  if (place == PLACE_MAIN) {
    heap_t *h = heap_get()->main;      /* not a captured heap: the block stays in the default heaps */
    q = h == &locus_oom_heap ? locus_malloc(size) : heap_malloc(h, size);
  } else {
    heap_t *h = heap_get()->main;
    heap_t *sub = h == &locus_oom_heap ? NULL : heap_placed(h, place);
    q = sub ? heap_malloc(sub, size) : fail_enomem();
  }
  if (!q) return NULL;
  memcpy(q, p, old_usable < size ? old_usable : size);
  free_impl(p, "realloc");
  return q;
}

LOCUS_EXPORT void *locus_realloc(void *p, size_t size) {
  if (!p) return locus_malloc(size);
  if (size == 0) {                     /* glibc: free and return NULL */
    free_impl(p, "realloc");
    return NULL;
  }
  if (unlikely(size > MAX_REQUEST)) return fail_enomem();
  region_t *r = registry_lookup(p);
  size_t usable = usable_checked(p, r, "realloc");
  if (unlikely(r->heap->place == PLACE_USER)) return locus_heap_realloc_in(r->heap->user, p, r, usable, size);
  if (unlikely(r->flags & REGION_FILE)) return locus_shareable_realloc(p, usable, size);
  switch (r->kind) {
  case REGION_SMALL:
    /* Stay while the block is at most twice what is needed. */
    if (size <= usable && size >= usable / 2) return p;
    break;
  case REGION_MEDIUM: {
    chunk_t *c = (chunk_t *)r;
    if (size > SMALL_MAX && size <= locus_opt.large_threshold && c->r.heap->main == locus_tls_heap &&
        medium_resize_in_place(c->r.heap, c, p, size))
      return p;
    break;
  }
  case REGION_LARGE:
    if (size > locus_opt.large_threshold) {
      void *q = large_realloc((large_t *)r, p, size);
      if (unlikely(locus_trace_on) && q) trace_realloc(p, q, size);
      if (q) return q;                 /* else mremap could not: copy below */
    }
    break;
  }
  return realloc_move(p, r->heap->place, usable, size);
}

LOCUS_EXPORT void *locus_reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return fail_enomem();
  return locus_realloc(p, n);
}

/* ---- aligned allocation ---------------------------------------------------- */

LOCUS_EXPORT int locus_posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || !is_pow2(align)) return EINVAL;
  int saved = errno;
  void *p = locus_alloc_aligned(size, align);
  if (!p) {
    errno = saved;                     /* POSIX: report through the return value */
    return ENOMEM;
  }
  *out = p;
  return 0;
}

/* glibc 2.36 semantics for memalign and aligned_alloc: an alignment that is
 * not a power of two is rounded up to the next one; one above SIZE_MAX/2+1
 * cannot be met (EINVAL). */
LOCUS_EXPORT void *locus_memalign(size_t align, size_t size) {
  if (align > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return NULL;
  }
  if (!is_pow2(align)) align = align <= 1 ? 1 : (size_t)1 << (log2_floor(align - 1) + 1);
  return locus_alloc_aligned(size, align);
}

LOCUS_EXPORT void *locus_aligned_alloc(size_t align, size_t size) { return locus_memalign(align, size); }
LOCUS_EXPORT void *locus_valloc(size_t size) {
  locus_init();
  return locus_alloc_aligned(size, os_page_size());
}
LOCUS_EXPORT void *locus_pvalloc(size_t size) {
  if (size > MAX_REQUEST) return fail_enomem();
  locus_init();
  size_t page = os_page_size();
  return locus_alloc_aligned(size ? align_up(size, page) : page, page);
}

/* ---- the standard names ---------------------------------------------------- */
#ifndef LOCUS_NO_OVERRIDE
#define ALIAS(name, target) __typeof__(target) name LOCUS_EXPORT __attribute__((alias(#target)))
ALIAS(malloc, locus_malloc);
ALIAS(calloc, locus_calloc);
ALIAS(realloc, locus_realloc);
ALIAS(reallocarray, locus_reallocarray);
ALIAS(free, locus_free);
ALIAS(cfree, locus_free);
ALIAS(free_sized, locus_free_sized);
ALIAS(free_aligned_sized, locus_free_aligned_sized);
ALIAS(posix_memalign, locus_posix_memalign);
ALIAS(aligned_alloc, locus_aligned_alloc);
ALIAS(memalign, locus_memalign);
ALIAS(valloc, locus_valloc);
ALIAS(pvalloc, locus_pvalloc);
ALIAS(malloc_usable_size, locus_usable_size);
/* glibc's internal names, for programs and libraries that call them directly. */
ALIAS(__libc_malloc, locus_malloc);
ALIAS(__libc_calloc, locus_calloc);
ALIAS(__libc_realloc, locus_realloc);
ALIAS(__libc_free, locus_free);
ALIAS(__libc_memalign, locus_memalign);
ALIAS(__libc_valloc, locus_valloc);
ALIAS(__libc_pvalloc, locus_pvalloc);
ALIAS(__posix_memalign, locus_posix_memalign);
#endif
