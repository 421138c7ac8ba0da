/* Migrate-on-next-touch (locus_next_touch): the pages of a range move to the
 * node of the next thread that touches them, the Auto-Next-Touch of ALMOS
 * (Almaless, PhD thesis, 2014, §4.4.3) in user space. Linux has no lazy
 * migrate-on-fault for user space (MPOL_MF_LAZY is refused), so: the range
 * is made inaccessible; the first access to it faults; the fault handler
 * moves a *group* of pages around the address to the faulting thread's node
 * with one batched move_pages call, makes the group accessible again, and the
 * access is retried. A range is split into at most 64 groups: one fault per
 * group, not per page, and one VMA split per group at most (a per-page
 * mprotect would shatter the range into thousands of VMAs).
 *
 * Ranges lie inside one large block. A block freed or resized while ranges
 * are pending gets them cancelled first (made accessible, no migration).
 *
 * The handler is async-signal-safe: it reads the range table with atomics,
 * claims a group with one atomic OR (two threads touching the same group:
 * the second retries its access until the first is done), and makes only
 * system calls. Faults outside every range go to the program's own handler. */
#include <errno.h>

#include "numa/next_touch.h"

#include "heap/heap.h"
#include "numa/topology.h"
#include "os/os.h"
#include "util/lock.h"

#define NT_SLOTS 256
#define NT_GROUPS 64
#define NT_BATCH 128                   /* pages per move_pages call */

typedef struct {
  _Atomic uintptr_t start;             /* 0: free slot; written last when a range is published */
  uintptr_t end;
  size_t group;                        /* bytes per group, a page multiple */
  _Atomic uint64_t claimed, done;      /* per group: being handled, accessible again */
  region_t *owner;
} nt_range_t;

static nt_range_t ranges[NT_SLOTS];
LOCK_STATIC(nt_lock, LOCK_RANK_NEXT_TOUCH, "next-touch ranges") /* publishing and cancelling, never the handler */
static atomic_size_t nt_moved, nt_faults;

static inline uint64_t all_groups(size_t n) { return n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1; }

/* Moves [a, b) to node in batches, then makes it accessible. */
static void migrate_group(uintptr_t a, uintptr_t b, int node) {
  size_t page = os_page_size();
  void *pages[NT_BATCH];
  int nodes[NT_BATCH], status[NT_BATCH];
  if (node >= 0) {
    size_t n = 0;
    for (uintptr_t x = a; x < b; x += page) {
      pages[n] = (void *)x;
      nodes[n] = node;
      if (++n == NT_BATCH || x + page >= b) {
        os_move_pages(pages, n, nodes, status);   /* pages never touched report -ENOENT: nothing to move */
        for (size_t i = 0; i < n; i++) nt_moved += status[i] == node;
        n = 0;
      }
    }
  }
  os_protect((void *)a, b - a, true);
}

static bool nt_fault(void *addr) {
  uintptr_t x = (uintptr_t)addr;
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_range_t *r = &ranges[i];
    uintptr_t s = atomic_load_explicit(&r->start, memory_order_acquire);
    if (!s || x < s || x >= r->end) continue;
    size_t g = (x - s) / r->group;
    uint64_t bit = (uint64_t)1 << g;
    if (atomic_load(&r->done) & bit) return true;          /* just made accessible: retry */
    if (atomic_fetch_or(&r->claimed, bit) & bit) {          /* another thread moves it now */
      os_yield();
      return true;
    }
    nt_faults++;
    uintptr_t a = s + g * r->group, b = a + r->group < r->end ? a + r->group : r->end;
    migrate_group(a, b, os_current_node());
    uint64_t done = atomic_fetch_or(&r->done, bit) | bit;
    if (done == ~(uint64_t)0) atomic_store(&r->start, 0);  /* every group handled: slot free */
    return true;
  }
  return false;
}

int next_touch_mark(region_t *owner, uintptr_t a, uintptr_t b) {
  if (!os_fault_handler_install(nt_fault)) return -1;
  size_t page = os_page_size();
  size_t pages = (b - a) / page;
  size_t per = (pages + NT_GROUPS - 1) / NT_GROUPS;
  size_t groups = (pages + per - 1) / per;
  lock_acquire(&nt_lock);
  nt_range_t *slot = NULL;
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_range_t *r = &ranges[i];
    uintptr_t s = atomic_load(&r->start);
    if (!s) {
      if (!slot) slot = r;
    } else if (a < r->end && s < b) {
      lock_release(&nt_lock);
      errno = EBUSY;                   /* overlaps a range not yet touched */
      return -1;
    }
  }
  if (!slot) {
    lock_release(&nt_lock);
    errno = EAGAIN;                    /* too many ranges pending */
    return -1;
  }
  slot->end = b;
  slot->group = per * page;
  slot->owner = owner;
  atomic_store(&slot->claimed, ~all_groups(groups));
  atomic_store(&slot->done, ~all_groups(groups));
  /* Set now: the header may be inaccessible when the handler runs. */
  owner->flags |= REGION_NEXT_TOUCH | REGION_MISPLACED;
  atomic_store_explicit(&slot->start, a, memory_order_release);   /* published before protected */
  bool ok = os_protect((void *)a, b - a, false);
  if (!ok) atomic_store(&slot->start, 0);
  lock_release(&nt_lock);
  if (!ok) errno = ENOMEM;             /* mprotect fails only for lack of VMAs */
  return ok ? 0 : -1;
}

void next_touch_cancel(region_t *owner) {
  lock_acquire(&nt_lock);
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_range_t *r = &ranges[i];
    uintptr_t s = atomic_load(&r->start);
    if (!s || r->owner != owner) continue;
    uint64_t mine = ~atomic_fetch_or(&r->claimed, ~(uint64_t)0);
    for (size_t g = 0; g < NT_GROUPS; g++) {
      if (!(mine >> g & 1)) continue;
      uintptr_t a = s + g * r->group, b = a + r->group < r->end ? a + r->group : r->end;
      os_protect((void *)a, b - a, true);
    }
    atomic_fetch_or(&r->done, mine);
    while (atomic_load(&r->done) != ~(uint64_t)0) os_yield();   /* handlers finishing their groups */
    atomic_store(&r->start, 0);
  }
  owner->flags &= (uint8_t)~REGION_NEXT_TOUCH;
  lock_release(&nt_lock);
}

size_t next_touch_moved_pages(void) { return nt_moved; }
size_t next_touch_faults(void) { return nt_faults; }

LOCUS_EXPORT int locus_next_touch(void *p, size_t len) {
  locus_init();
  uintptr_t a = (uintptr_t)p, b;
  region_t *r = p ? registry_lookup(p) : NULL;
  if (!r || r->kind != REGION_LARGE || !len || __builtin_add_overflow(a, len, &b) ||
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
  if (!os_features.numa) return 0;     /* a kernel without NUMA: pages have nowhere to go */
  return next_touch_mark(r, a, b);
}
