/* Explicit placement (locus.h, "NUMA placement"): blocks on a given node, or
 * interleaved, from placed sub-heaps of the calling thread whose chunks and
 * large segments come from the node's (or the interleaved) memory source, so
 * small blocks are placed as well as large ones. The seed of the idea is
 * MPC's sctk_malloc_on_node (Pérache, habilitation thesis, 2015, Ch.3). */
#include <errno.h>
#include <stdint.h>

#include "heap/heap.h"
#include "numa/next_touch.h"
#include "source/ksm.h"
#include "os/topology.h"
#include "os/os.h"

/* Sizes at or above this can never be satisfied (as in malloc.c). */
#define MAX_REQUEST ((size_t)PTRDIFF_MAX - 2 * PAGE_SIZE)

static void *placed_malloc(size_t size, int place) {
  if (size > MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  heap_t *h = heap_get()->main;       /* (a capture trampoline's is the thread's main heap) */
  heap_t *sub = h == &locus_oom_heap ? NULL : heap_placed(h, place);
  if (!sub) {
    errno = ENOMEM;
    return NULL;
  }
  return heap_malloc(sub, size);
}

LOCUS_EXPORT void *locus_malloc_on_node(size_t size, int node) {
  locus_init();
  if (!topology_node_allowed(node)) {
    errno = EINVAL;
    return NULL;
  }
  return placed_malloc(size, node);
}

LOCUS_EXPORT void *locus_malloc_interleaved(size_t size) {
  locus_init();
  return placed_malloc(size, PLACE_INTERLEAVE);
}

LOCUS_EXPORT int locus_node_of(const void *p) {
  locus_init();
  void *page = (void *)((uintptr_t)p & ~(uintptr_t)(os_page_size() - 1));
  int status = -1;
  if (!p || !os_page_nodes(&page, 1, &status)) return topology_nodes() == 1 && p ? 0 : -1;
  return status >= 0 ? status : -1;
}

LOCUS_EXPORT int locus_thread_node(void) {
  heap_t *h = heap_get()->main;
  return h == &locus_oom_heap ? topology_thread_node() : h->node;
}

LOCUS_EXPORT int locus_rebind(void) { return heap_rebind(); }

/* ---- migrate on next touch (numa/next_touch.c) ---------------------------- */

LOCUS_EXPORT int locus_next_touch(void *p, size_t len) {
  locus_init();
  uintptr_t a = (uintptr_t)p, b;
  region_t *r = p ? registry_lookup(p) : NULL;
  /* The user's memory (a user heap's segment or source) is never moved: its
   * pages may be shared, pinned or a file's. */
  if (!r || r->kind != REGION_LARGE || (r->flags & (REGION_USER | REGION_FILE)) || !len || __builtin_add_overflow(a, len, &b) ||
      b > (uintptr_t)r + r->size) {
    errno = EINVAL;                    /* not inside one large block of locus */
    return -1;
  }
  large_t *l = (large_t *)r;
  if (l->magic != LARGE_LIVE || a < (uintptr_t)r + l->user_off) {
    errno = EINVAL;
    return -1;
  }
  size_t page = os_page_size();
  a &= ~(uintptr_t)(page - 1);         /* whole pages: they belong to this block only */
  b = align_up(b, page);
  if (r->flags & (REGION_KSM_WATCH | REGION_KSM_AUTO)) ksm_disown(r);   /* out of LOCUS_KSM=auto's hands */
  return next_touch_range(r, a, b);
}

LOCUS_EXPORT int locus_next_touch_resolve(void *p, size_t len) {
  uintptr_t a = (uintptr_t)p, b;
  if ((!p && len) || __builtin_add_overflow(a, len, &b)) {
    errno = EINVAL;
    return -1;
  }
  if (len) next_touch_resolve(a, b);
  return 0;
}
