/* The hooks of liblocus-overlap.so (overlap/overlap.c, docs/overlap.md):
 * Commmama's protection layer (A. Lescouet, PhD thesis, 2021, "Memory management for operating systems and runtimes", Ch.3) needs
 * an allocator that places buffers on whole pages of memory-file regions
 * (so that a second, *shadow* view of the same pages can be given to the MPI
 * runtime while the program's view is protected), a fault engine shared
 * with next touch (one SIGSEGV handler, chained to the program's), and a
 * word before a block in transfer is freed. These functions are that
 * interface; liblocus.so itself knows nothing of MPI. */
#include <errno.h>
#include <stdint.h>

#include "heap/heap.h"
#include "os/os.h"

LOCUS_EXPORT int locus_overlap_enable(size_t min_bytes) {
  locus_init();
  if (min_bytes && min_bytes < PAGE_SIZE) min_bytes = PAGE_SIZE;
  atomic_store(&file_overlap_min, min_bytes);
  if (!min_bytes) file_keep_flush();
  return 0;
}

LOCUS_EXPORT int locus_overlap_span(const void *p, size_t len, locus_overlap_span_t *out) {
  uintptr_t a = (uintptr_t)p, b;
  region_t *r = p && len ? registry_lookup(p) : NULL;
  if (!r || r->kind != REGION_LARGE || !(r->flags & REGION_FILE) || __builtin_add_overflow(a, len, &b)) {
    errno = EINVAL;
    return -1;
  }
  large_t *l = (large_t *)r;
  uintptr_t start = (uintptr_t)l + l->user_off, pages = (uintptr_t)r + PAGE_SIZE;
  if (l->magic != LARGE_LIVE || a < start || b > start + large_usable(l)) {
    errno = EINVAL;
    return -1;
  }
  size_t kp = os_page_size();
  uintptr_t pa = a & ~(uintptr_t)(kp - 1), pb = align_up(b, kp);
  if (pa < pages || pb > pages + file_info(r)->flen) {   /* the file's pages only, never the header */
    errno = EINVAL;
    return -1;
  }
  char *sh = file_region_shadow(r);
  if (!sh) {                           /* frozen (fork, locus_cow_copy): no shadow any more */
    errno = EINVAL;
    return -1;
  }
  out->start = (void *)pa;
  out->len = pb - pa;
  out->shadow = sh + (pa - pages);
  return 0;
}

LOCUS_EXPORT int locus_overlap_protect(void *start, size_t len, int prot) {
  if (prot != 0 && prot != 1 && prot != 3) {
    errno = EINVAL;
    return -1;
  }
  return os_protect_mode(start, len, prot) ? 0 : -1;
}

static int (*_Atomic overlap_fault)(void *addr, int access_error);
static bool fault_adapter(void *addr, bool access_error) {
  int (*f)(void *, int) = atomic_load_explicit(&overlap_fault, memory_order_acquire);
  return f && f(addr, access_error);
}

LOCUS_EXPORT int locus_overlap_hooks(int (*fault)(void *addr, int access_error),
                                     void (*quiesce)(void *start, size_t len)) {
  locus_init();
  atomic_store(&overlap_fault, fault);
  atomic_store(&file_quiesce_hook, quiesce);
  if (fault && !os_fault_handler_install(fault_adapter)) return -1;
  return 0;
}
