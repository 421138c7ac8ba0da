/* Migrate-on-next-touch (locus_next_touch): the pages of a range move to the
 * node of the next thread that touches them, the Auto-Next-Touch of ALMOS
 * (G. Almaless, PhD thesis, 2014, §4.4.3) in user space. Linux has no lazy
 * migrate-on-fault for user space (MPOL_MF_LAZY is refused), so: the range
 * is made inaccessible; the first access to it faults; the fault handler
 * moves a *group* of pages around the address to the faulting thread's node
 * with batched move_pages calls, makes the group accessible again, and the
 * access is retried. A range is split into at most NT_GROUPS groups: one
 * fault per group, not per page, and few VMA splits (a per-page mprotect
 * would shatter the range into thousands of VMAs).
 *
 * The protocol (docs/design.md, "Next touch", says why it is correct):
 *
 * - A slot of the table holds one range. Its two state words, `claim` and
 *   `done`, carry the slot's generation in their high 32 bits and one bit
 *   per group in the low 32. An odd generation is a live slot, an even one a
 *   free slot. start/end/group are written only while the slot is free and
 *   read by handlers as a seqlock: generation, fields, generation again.
 * - Slots change generation (are published or freed) only under nt_lock,
 *   never in the handler. A slot is freed only when every group is done.
 * - A handler owns a group after a compare-and-swap that sets its `claim`
 *   bit *in the generation it read the fields in*: a slot freed and reused in
 *   between makes the CAS fail, so no handler acts on a reused slot's fields.
 *   The owner moves the pages, makes them accessible, bumps nt_epoch, then
 *   sets the `done` bit. Other faulting threads find the claim bit and retry
 *   their access (after a yield when the group is not done yet).
 * - Invariant: a page locus made inaccessible is covered by a live slot whose
 *   group for it is not done. Pages are protected after the slot is
 *   published, while the marker owns every group (so no group of the range
 *   can be finished before the protection is in place), and made accessible
 *   before the group is marked done (and so before the slot can be freed).
 * - A fault (access error) at an address in no live slot may be ours all the
 *   same: its slot was finished and freed after the fault and before the
 *   handler read the table. The page is then accessible, and nt_epoch moved
 *   past the value it had at the fault. The handler retries such a fault once
 *   per epoch value (a per-thread record of page and epoch): the same thread
 *   faulting on the same page with the same epoch is not ours.
 *
 * Ranges lie inside one large block. A block freed or resized while ranges
 * are pending gets them cancelled first (made accessible, no migration),
 * after waiting for handlers that own one of its groups.
 *
 * The handler is async-signal-safe: atomics and system calls only, no lock,
 * frames of about 600 bytes in all (gcc -fstack-usage: migrate_group 288,
 * move_batches 96, the rest under 100 each), so that a 16 KiB alternate signal stack holds
 * them with the kernel's signal frame and the program's chained handler.
 *
 * The userfaultfd engine (engine_uffd, docs/numa.md) uses the same slots and
 * claims: instead of protecting the range, a mark moves its pages aside into
 * a stash and registers the range for missing-page faults, so that kernel
 * accesses (system calls) wait too; a locus thread (uffd_thread) serves the
 * faults, and the owner of a group puts its pages back (uffd_finish). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "numa/next_touch.h"

#include "config/options.h"
#include "os/os.h"
#include "os/topology.h"
#include "util/lock.h"

#define NT_SLOTS 256
#define NT_GROUPS 32                   /* one bit each in the low half of a state word */
#define NT_BATCH 32                    /* pages per move_pages call: 512 bytes of handler frame */
#define NT_BITS 0xffffffffull

typedef struct {
  _Atomic uint64_t claim;              /* generation << 32 | groups claimed (being handled or handled) */
  _Atomic uint64_t done;               /* generation << 32 | groups accessible again */
  _Atomic uintptr_t start, end;        /* written only while the generation is even (free) */
  _Atomic size_t group;                /* bytes per group, a page multiple */
  _Atomic uintptr_t stash;             /* userfaultfd engine: where the pages wait; 0: protection engine */
  region_t *owner;                     /* under nt_lock only */
} nt_slot_t;

static nt_slot_t slots[NT_SLOTS];
/* Serialises publishing, freeing and cancelling; never taken by the handler.
 * In the lock registry: fork's prepare handler takes it in rank order, then
 * runs nt_fork_prepare (below) with it held. */
static void nt_fork_prepare(void);
static void nt_fork_child(void);
LOCK_STATIC_FORK(nt_lock, LOCK_RANK_NEXT_TOUCH, "next-touch ranges", nt_fork_prepare, nt_fork_child)
static atomic_size_t nt_moved, nt_faults;
/* Bumped each time locus makes a protected group accessible, before the
 * group is marked done: a handler that finds no slot for a fault compares it
 * with the value it saw at the thread's previous such fault. */
static _Atomic uint64_t nt_epoch;
/* Test hook: run the engine even when the kernel has no NUMA support. */
static atomic_bool nt_forced;
/* More than one node to move to (set at each mark): with one, the handler
 * skips move_pages, which costs even when nothing moves (it drains the
 * per-CPU page lists of every CPU). */
static atomic_bool nt_can_move;

typedef struct { uintptr_t page; uint64_t epoch; } nt_retry_t;
static LOCUS_TLS nt_retry_t nt_last_retry;

/* A thread that owns groups (a mark moving pages aside or protecting them,
 * a resolve, a cancel, fork's prepare handler) must not run a signal handler
 * meanwhile: a handler touching one of those groups would wait for its own
 * thread (userfaultfd: forever; protection: SIGSEGV may be blocked there,
 * and the kernel then kills the process). Such windows block every signal;
 * a signal arriving meanwhile is delivered when they end. (locus's SIGSEGV
 * handler blocks them through its sa_mask, os.c.) */
static void signals_hold(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, old);
}
static void signals_release(const sigset_t *old) {
  int e = errno;
  pthread_sigmask(SIG_SETMASK, old, NULL);
  errno = e;
}

static inline uint32_t gen_of(uint64_t w) { return (uint32_t)(w >> 32); }
static inline bool gen_live(uint32_t g) { return g & 1; }
static inline uint64_t all_groups(size_t n) { return n >= 32 ? NT_BITS : ((uint64_t)1 << n) - 1; }

/* move_pages batches: each call drains the page lists of every CPU, so
 * larger batches cost fewer calls. A few buffers of NT_BATCH pages are
 * shared, claimed with an atomic bit (async-signal-safe); a mover that finds
 * none free uses NT_SMALL pages on its own stack, which keeps the handler's
 * frame small enough for a 16 KiB alternate signal stack. */
#define NT_BUFS 8
#define NT_SMALL 16
typedef struct {
  void *pages[NT_BATCH];
  int nodes[NT_BATCH], status[NT_BATCH];
} nt_buf_t;
static nt_buf_t nt_bufs[NT_BUFS];
static atomic_uint nt_bufs_used;

static void move_batches(uintptr_t a, uintptr_t b, int node, void **pages, int *nodes, int *status, size_t max) {
  size_t page = os_page_size(), n = 0;
  for (uintptr_t x = a; x < b; x += page) {
    pages[n] = (void *)x;
    nodes[n] = node;
    if (++n == max || x + page >= b) {
      if (os_move_pages(pages, n, nodes, status))   /* pages never touched: -ENOENT, nothing to move */
        for (size_t i = 0; i < n; i++) nt_moved += status[i] == node;
      n = 0;
    }
  }
}

/* Moves [a, b) to node (node < 0: no move). */
static void migrate_group(uintptr_t a, uintptr_t b, int node) {
  if (node < 0 || !os_features.numa || !atomic_load_explicit(&nt_can_move, memory_order_relaxed)) return;
  unsigned used = atomic_load_explicit(&nt_bufs_used, memory_order_relaxed);
  for (int i = 0; i < NT_BUFS; i++) {
    unsigned bit = 1u << i;
    if (used & bit) continue;
    if (!(atomic_fetch_or_explicit(&nt_bufs_used, bit, memory_order_acquire) & bit)) {
      nt_buf_t *buf = &nt_bufs[i];
      move_batches(a, b, node, buf->pages, buf->nodes, buf->status, NT_BATCH);
      atomic_fetch_and_explicit(&nt_bufs_used, ~bit, memory_order_release);
      return;
    }
  }
  void *pages[NT_SMALL];
  int nodes[NT_SMALL], status[NT_SMALL];
  move_batches(a, b, node, pages, nodes, status, NT_SMALL);
}

/* Makes [a, b) accessible again; the caller then marks the group done. A
 * failure (mprotect only fails for lack of kernel VMAs here) would leave a
 * page that faults forever: stop with a message instead. */
static void unprotect(uintptr_t a, uintptr_t b) {
  if (!os_protect((void *)a, b - a, true))
    locus_fatal("next touch: cannot make %p-%p accessible again (mprotect failed: vm.max_map_count?)",
                (void *)a, (void *)b);
  atomic_fetch_add(&nt_epoch, 1);
}

typedef enum { NT_MISS, NT_BUSY, NT_DONE, NT_OWN } nt_claim_t;
typedef struct { uintptr_t a, b, stash; uint64_t bit; } nt_group_t;

/* ---- the userfaultfd engine's state --------------------------------------- */
static int uffd = -1;                  /* set once under nt_lock, before any uffd slot is published */
static os_fd_id_t uffd_id;             /* its file: the program may close the number and reuse it */
static bool uffd_tid;                  /* fault messages carry the faulting thread's id */
static atomic_int engine;              /* 0: not decided yet, 1: userfaultfd, 2: protection only */

/* Reads slot r as a seqlock and, when x lies in its range, claims x's group.
 * NT_OWN: the caller owns group *g (bounds and bit filled) and must finish
 * it (finish_group). NT_BUSY: another thread owns it. NT_DONE: it is
 * accessible again. NT_MISS: r is free or its range does not hold x. */
static nt_claim_t claim_in(nt_slot_t *r, uintptr_t x, nt_group_t *g, bool want_uffd) {
  for (;;) {
    uint64_t w = atomic_load_explicit(&r->claim, memory_order_acquire);
    uint32_t gen = gen_of(w);
    if (!gen_live(gen)) return NT_MISS;
    uintptr_t s = atomic_load_explicit(&r->start, memory_order_relaxed);
    uintptr_t e = atomic_load_explicit(&r->end, memory_order_relaxed);
    size_t size = atomic_load_explicit(&r->group, memory_order_relaxed);
    uintptr_t stash = atomic_load_explicit(&r->stash, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (gen_of(atomic_load_explicit(&r->claim, memory_order_relaxed)) != gen) continue;   /* rewritten */
    if (x < s || x >= e || (stash != 0) != want_uffd) return NT_MISS;
    LOCUS_ASSERT(size && (e - s + size - 1) / size <= NT_GROUPS);
    size_t k = (x - s) / size;
    g->bit = (uint64_t)1 << k;
    g->a = s + k * size;
    g->b = g->a + size < e ? g->a + size : e;
    g->stash = stash ? stash + (g->a - s) : 0;
    for (;;) {
      if (gen_of(w) != gen) break;                          /* freed (and maybe reused): read again */
      if (w & g->bit) {
        uint64_t d = atomic_load_explicit(&r->done, memory_order_acquire);
        if (gen_of(d) != gen) break;
        return d & g->bit ? NT_DONE : NT_BUSY;
      }
      if (atomic_compare_exchange_weak_explicit(&r->claim, &w, w | g->bit, memory_order_acq_rel,
                                                memory_order_acquire))
        return NT_OWN;
    }
  }
}

/* The program closed locus's userfaultfd (close_range), so the kernel
 * dropped the range's registration with the file: the group's pages come
 * back by a copy from the stash, the resident ones (a hole stays a hole),
 * rather than being lost. Accesses meanwhile saw zero pages (docs/numa.md). */
static void uffd_lost_restore(const nt_group_t *g) {
  size_t page = os_page_size(), len = g->b - g->a;
  for (size_t off = 0; off < len; off += page)
    if (os_page_resident((void *)(g->stash + off))) memcpy((void *)(g->a + off), (void *)(g->stash + off), page);
  os_release((void *)g->stash, len);
  atomic_fetch_add(&nt_epoch, 1);
}

/* The userfaultfd engine's owner of a group: the group's pages wait in the
 * stash; move them to the node, then back into the range (page tables, no
 * copy; a page the kernel will not move, shared with a fork child, is
 * copied), stop watching the group (which wakes every thread waiting on
 * it), and drop the stash's part. Never touches the range itself. */
static void uffd_finish(const nt_group_t *g, int node) {
  size_t page = os_page_size(), len = g->b - g->a, off = 0;
  if (!os_fd_is(uffd, &uffd_id)) {     /* the program closed locus's descriptor: no userfaultfd any more */
    uffd_lost_restore(g);
    return;
  }
  migrate_group(g->stash, g->stash + len, node);
  while (off < len) {
    long m = os_uffd_move(uffd, (void *)(g->a + off), (void *)(g->stash + off), len - off);
    if (m > 0) off += (size_t)m;
    else if (m != -EAGAIN) break;
  }
  for (off = off / page * page; off < len; off += page)   /* what UFFDIO_MOVE refused */
    if (!os_uffd_copy(uffd, (void *)(g->a + off), (void *)(g->stash + off), page))
      locus_fatal("next touch: cannot put back the page at %p (userfaultfd: errno %d)", (void *)(g->a + off), errno);
  /* Unregistering wakes the threads waiting in the group; afterwards its
   * holes fault as usual (zero pages). It fails only when the kernel cannot
   * split the mapping (vm.max_map_count): the group's faults would then wait
   * forever, so stop with a message. */
  if (!os_uffd_unregister(uffd, (void *)g->a, len))
    locus_fatal("next touch: cannot unregister %p-%p from the userfaultfd, errno %d (vm.max_map_count?)",
                (void *)g->a, (void *)g->b, errno);
  os_release((void *)g->stash, len);
  atomic_fetch_add(&nt_epoch, 1);
}

/* The owner of a group: move it, make it accessible, then mark it done (in
 * that order: a done group is accessible, and only a slot whose groups are
 * all done is freed). */
static void finish_group(nt_slot_t *r, const nt_group_t *g, int node) {
  if (g->stash) {
    uffd_finish(g, node);
  } else {
    migrate_group(g->a, g->b, node);
    unprotect(g->a, g->b);
  }
  LOCUS_DEBUG_ONLY(uint64_t d =) atomic_fetch_or_explicit(&r->done, g->bit, memory_order_release);
  LOCUS_ASSERT(gen_live(gen_of(d)) && !(d & g->bit));
}

/* A fault that may be ours although no pending group holds it now: its
 * group was made accessible (or its slot freed) after the fault. Then
 * nt_epoch moved past its value at the fault, which is at least the value
 * recorded at this thread's previous retry: retry. The same page faulting
 * again with the epoch unchanged is not ours (a program's own protection of
 * a page locus once handled). */
static bool retry_once(uintptr_t x) {
  uint64_t epoch = atomic_load(&nt_epoch);
  uintptr_t page = x & ~(uintptr_t)(os_page_size() - 1);
  nt_retry_t *last = &nt_last_retry;
  if (last->page == page && last->epoch == epoch) {
    last->page = 0;
    return false;
  }
  last->page = page;
  last->epoch = epoch;
  return true;
}

/* Test hooks (next_touch_test_hooks): called in the handler before it reads
 * the table, and in a mark between publishing a range and protecting it
 * (userfaultfd: and making its groups claimable). */
static void (*_Atomic hook_fault)(void *addr);
static void (*_Atomic hook_mark)(void);

static bool nt_fault(void *addr, bool access_error) {
  uintptr_t x = (uintptr_t)addr;
  if (!access_error) return false;     /* PROT_NONE pages give access errors only */
  void (*hook)(void *) = atomic_load_explicit(&hook_fault, memory_order_relaxed);
  if (unlikely(hook != NULL)) hook(addr);
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_group_t g;
    switch (claim_in(&slots[i], x, &g, false)) {
    case NT_MISS:
      continue;
    case NT_OWN:
      nt_faults++;
      finish_group(&slots[i], &g, os_current_node());
      return true;
    case NT_BUSY:
      os_yield();                      /* its owner is moving it: retry the access after */
      return true;
    case NT_DONE:
      return retry_once(x);            /* accessible again since the fault, or not ours */
    }
  }
  return retry_once(x);                /* in no live range: finished and freed since the fault? */
}

/* Debug build: the slot invariants, nt_lock held. Live slots whose range is
 * not finished are pairwise disjoint and overlap no other live slot; every
 * slot's done bits are among its claimed bits, in the same generation. */
static void nt_validate(void) {
#ifdef LOCUS_DEBUG
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_slot_t *r = &slots[i];
    /* done first: handlers add claims then done bits, so done read before
     * claim is a subset of it (the other order could race with a handler). */
    uint64_t d = atomic_load(&r->done);
    uint64_t c = atomic_load(&r->claim);
    LOCUS_ASSERT(gen_of(c) == gen_of(d));
    LOCUS_ASSERT((d & ~c & NT_BITS) == 0);
    if (!gen_live(gen_of(c))) continue;
    uintptr_t s = atomic_load(&r->start), e = atomic_load(&r->end);
    LOCUS_ASSERT(s < e && r->owner);
    bool finished = (d & NT_BITS) == NT_BITS;
    for (int j = 0; j < NT_SLOTS; j++) {
      nt_slot_t *q = &slots[j];
      if (j == i || !gen_live(gen_of(atomic_load(&q->claim)))) continue;
      LOCUS_ASSERT(finished || atomic_load(&q->end) <= s || atomic_load(&q->start) >= e);
    }
  }
#endif
}

/* Frees a live slot whose groups are all done (nt_lock held): the next
 * generation, even, with every bit set so that no claim succeeds. */
static void slot_free(nt_slot_t *r) {
  uint64_t w = atomic_load(&r->claim);
  LOCUS_ASSERT(gen_live(gen_of(w)) && (atomic_load(&r->done) & NT_BITS) == NT_BITS);
  uint64_t next = (uint64_t)(uint32_t)(gen_of(w) + 1) << 32 | NT_BITS;
  atomic_store(&r->claim, next);
  atomic_store(&r->done, next);
  atomic_thread_fence(memory_order_release);   /* seqlock: the fields change after this */
  atomic_store_explicit(&r->stash, 0, memory_order_relaxed);
  r->owner = NULL;
}

/* Claims every group of live slot r not claimed yet (nt_lock held), makes
 * them accessible where they are and marks them done, then waits for the
 * handlers that own the other groups. Afterwards the slot may be freed. */
static void slot_cancel(nt_slot_t *r) {
  uint64_t w = atomic_load(&r->claim);
  uint64_t mine = ~w & NT_BITS;
  while (!atomic_compare_exchange_weak(&r->claim, &w, w | NT_BITS)) mine = ~w & NT_BITS;
  uintptr_t s = atomic_load(&r->start), e = atomic_load(&r->end);
  size_t size = atomic_load(&r->group);
  uintptr_t stash = atomic_load(&r->stash);
  for (size_t k = 0; k < NT_GROUPS; k++) {
    if (!(mine >> k & 1)) continue;
    uintptr_t a = s + k * size, b = a + size < e ? a + size : e;
    if (a >= e) continue;
    if (stash) uffd_finish(&(nt_group_t){a, b, stash + (a - s), 0}, -1);
    else unprotect(a, b);
  }
  atomic_fetch_or(&r->done, mine);
  while ((atomic_load(&r->done) & NT_BITS) != NT_BITS) os_yield();   /* handlers finishing their groups */
}

static bool slot_finished(nt_slot_t *r) { return (atomic_load(&r->done) & NT_BITS) == NT_BITS; }

/* ---- the userfaultfd engine ------------------------------------------------ */
/* The thread that serves the faults of the userfaultfd ranges: it claims the
 * group like the SIGSEGV handler does and finishes it towards the faulting
 * thread's node. A group another thread owns (a resolve, a cancel, the mark
 * that is still moving the pages aside) is waited for: its owner's
 * unregistering wakes the faulting thread. A fault in no pending group
 * (its group came back and was unregistered since, which woke the thread)
 * only gets a wake-up: never a zero page, which could land in a range
 * marked again meanwhile, in place of a page waiting in its stash. */
static void uffd_serve(uintptr_t x, long tid) {
  size_t page = os_page_size();
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_group_t g;
    nt_claim_t c;
    while ((c = claim_in(&slots[i], x, &g, true)) == NT_BUSY) os_yield();
    if (c == NT_MISS) continue;
    if (c == NT_OWN) {
      int node = -1;
      if (atomic_load_explicit(&nt_can_move, memory_order_relaxed)) {
        int cpu = uffd_tid && tid > 0 ? os_tid_cpu(tid) : -1;
        node = cpu >= 0 ? topology_cpu_node(cpu) : os_current_node();
      }
      nt_faults++;
      finish_group(&slots[i], &g, node);
      return;
    }
    break;                             /* NT_DONE */
  }
  os_uffd_wake(uffd, (void *)(x & ~(uintptr_t)(page - 1)), page);
}

static void nt_resolve_all(void);

/* The userfaultfd server: started with every signal blocked (the program's
 * signals go to its own threads); idle for a second, it checks whether the
 * program's threads are all gone: then it ends the process, after putting
 * back every pending range (the exit handlers run on this thread, which
 * could not serve their faults). It reads only while the descriptor is
 * still its file. */
static LOCUS_TLS bool in_uffd_server;
static void *uffd_thread(void *arg) {
  (void)arg;
  in_uffd_server = true;
  os_uffd_fault_t ev[16];
  for (;;) {
    int n = os_uffd_read(uffd, &uffd_id, ev, 16, 1000);
    if (n == 0 && os_internal_exit_due()) {
      nt_resolve_all();
      os_internal_exit();
    }
    if (n < 0 && errno != EINTR && errno != EAGAIN) {
      /* Most likely the program closed every descriptor (close_range): the
       * kernel dropped the registrations with the last reference, so the
       * pending ranges read as zeros until their pages are copied back from
       * the stash, now (uffd_lost_restore; docs/numa.md). Later marks use
       * page protection rather than a descriptor number that may now name
       * another file of the program's. */
      int err = errno;
      atomic_store(&engine, 2);
      nt_resolve_all();
      locus_warn("next touch: locus's userfaultfd descriptor is gone (errno %d; closed by the program?): "
                 "pending ranges read as zeros until now, their contents copied back; later marks use page "
                 "protection", err);
      os_internal_thread_gone();
      return NULL;
    }
    for (int i = 0; i < n; i++) uffd_serve(ev[i].addr, ev[i].tid);
  }
}

/* fork: the child inherits neither the registrations nor the thread, so the
 * pages of pending userfaultfd groups come back first (where they are). The
 * lock registry's prepare handler runs this with nt_lock held and keeps it
 * held across the fork, so that no range is marked meanwhile; the child
 * opens its own userfaultfd at its first mark. */
static void nt_fork_prepare(void) {
  sigset_t held;
  signals_hold(&held);
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_slot_t *r = &slots[i];
    if (!gen_live(gen_of(atomic_load(&r->claim))) || !atomic_load(&r->stash)) continue;
    slot_cancel(r);
    slot_free(r);
  }
  signals_release(&held);
}
/* Every pending range back, as at fork (no program thread is left). */
static void nt_resolve_all(void) {
  lock_acquire(&nt_lock);
  nt_fork_prepare();
  lock_release(&nt_lock);
}
static void nt_fork_child(void) {
  os_internal_fork_child();            /* the server thread is not in the child */
  if (uffd >= 0 && os_fd_is(uffd, &uffd_id)) os_close(uffd);   /* a number the program reused stays its */
  uffd = -1;
  atomic_store(&engine, 0);
}

/* Decides the engine once (nt_lock held): userfaultfd when LOCUS_NEXT_TOUCH
 * allows it and the process may use it (its descriptor handles kernel faults
 * too), else page protection. */
static bool engine_uffd(void) {
  int e = atomic_load(&engine);
  if (e) return e == 1;
  next_touch_opt_t opt = atomic_load(&locus_opt.next_touch);
  if (opt != NT_OPT_PROTECT) {
    int fd = os_uffd_open(&uffd_tid);
    int err = errno;
    if (fd >= 0 && !os_fd_id(fd, &uffd_id)) {
      err = errno;
      os_close(fd);
      fd = -1;
    }
    if (fd >= 0) {
      uffd = fd;
      err = os_internal_thread_start(uffd_thread, NULL);
      if (!err) {
        atomic_store(&engine, 1);
        return true;
      }
      os_close(fd);
      uffd = -1;
    }
    if (opt == NT_OPT_UFFD)
      locus_warn("LOCUS_NEXT_TOUCH=uffd: userfaultfd cannot be used here (errno %d); next touch uses page "
                 "protection: system calls into pending ranges fail with EFAULT (locus_next_touch_resolve)", err);
  }
  atomic_store(&engine, 2);
  return false;
}

static int mark_range(region_t *owner, uintptr_t a, uintptr_t b) {
  /* The userfaultfd server marking (the exit handlers it runs when it ends
   * the process): it could not serve its own faults, so nothing is marked
   * and the pages stay where they are. */
  if (in_uffd_server) return 0;
  atomic_store_explicit(&nt_can_move, topology_allowed_count() > 1, memory_order_relaxed);
  size_t page = os_page_size();
  size_t pages = (b - a) / page;
  size_t per = (pages + NT_GROUPS - 1) / NT_GROUPS;
  size_t groups = (pages + per - 1) / per;
  lock_acquire(&nt_lock);
  bool use_uffd = engine_uffd();
  if (!use_uffd && !os_fault_handler_install(nt_fault)) {
    lock_release(&nt_lock);
    return -1;
  }
  nt_validate();
  nt_slot_t *slot = NULL, *finished = NULL;
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_slot_t *r = &slots[i];
    if (!gen_live(gen_of(atomic_load(&r->claim)))) {
      if (!slot) slot = r;
      continue;
    }
    bool overlaps = a < atomic_load(&r->end) && atomic_load(&r->start) < b;
    /* Every group claimed: their owners (handlers, the userfaultfd thread,
     * resolves; none takes nt_lock) are finishing them. A thread whose
     * access came back may find the last done bit not set yet (userfaultfd
     * wakes it before its owner marks the group done): wait, not EBUSY. */
    if (overlaps && (atomic_load(&r->claim) & NT_BITS) == NT_BITS)
      while (!slot_finished(r)) os_yield();
    if (slot_finished(r)) {
      /* Finished slots stay until needed (a late handler then finds its
       * group done); one overlapping the new range goes now. */
      if (overlaps) slot_free(r);
      if (!slot && !finished) finished = r;
      if (overlaps && !slot) slot = r;
    } else if (overlaps) {
      nt_validate();
      lock_release(&nt_lock);
      errno = EBUSY;                   /* overlaps a range not yet touched */
      return -1;
    }
  }
  if (!slot && finished) {
    slot_free(finished);
    slot = finished;
  }
  if (!slot) {
    lock_release(&nt_lock);
    errno = EAGAIN;                    /* too many ranges pending */
    return -1;
  }
  /* Set first: the header may be in the range, inaccessible afterwards
   * (and the marker must not touch the range while it owns every group). */
  owner->flags |= REGION_NEXT_TOUCH | REGION_MISPLACED;
  uintptr_t stash = use_uffd ? (uintptr_t)os_reserve(b - a) : 0;
  if (use_uffd && !stash && !os_fault_handler_install(nt_fault)) {
    lock_release(&nt_lock);
    return -1;
  }
  uint64_t w = atomic_load(&slot->claim);
  LOCUS_ASSERT(!gen_live(gen_of(w)));
  atomic_store_explicit(&slot->start, a, memory_order_relaxed);
  atomic_store_explicit(&slot->end, b, memory_order_relaxed);
  atomic_store_explicit(&slot->group, per * page, memory_order_relaxed);
  atomic_store_explicit(&slot->stash, stash, memory_order_relaxed);
  slot->owner = owner;
  uint64_t live = (uint64_t)(uint32_t)(gen_of(w) + 1) << 32 | (~all_groups(groups) & NT_BITS);
  atomic_store_explicit(&slot->done, live, memory_order_relaxed);
  bool ok;
  if (stash) {
    /* The marker owns every group while the pages move aside: a fault in
     * that window waits for it. Then the groups become claimable. */
    atomic_store_explicit(&slot->claim, live | NT_BITS, memory_order_release);
    bool reg = os_uffd_register(uffd, (void *)a, b - a);
    ok = reg && os_move_aside((void *)a, b - a, (void *)stash);
    void (*hook)(void) = atomic_load_explicit(&hook_mark, memory_order_relaxed);
    if (unlikely(hook != NULL)) hook();
    if (ok) {
      atomic_store_explicit(&slot->claim, live, memory_order_release);
    } else {                           /* nothing moved: stop watching, use protection */
      if (reg) os_uffd_unregister(uffd, (void *)a, b - a);
      os_release((void *)stash, b - a);
      atomic_store(&slot->done, live | NT_BITS);
      slot_free(slot);
      w = atomic_load(&slot->claim);
      live = (uint64_t)(uint32_t)(gen_of(w) + 1) << 32 | (~all_groups(groups) & NT_BITS);
      if (!os_fault_handler_install(nt_fault)) {
        lock_release(&nt_lock);
        return -1;
      }
      stash = 0;
      atomic_store_explicit(&slot->start, a, memory_order_relaxed);
      atomic_store_explicit(&slot->end, b, memory_order_relaxed);
      atomic_store_explicit(&slot->group, per * page, memory_order_relaxed);
      slot->owner = owner;
      atomic_store_explicit(&slot->done, live, memory_order_relaxed);
    }
  }
  if (!stash) {
    /* Published before protected, and with every group claimed by the
     * marker until the protection is in place: a handler late for an older
     * range on these pages would otherwise finish a group here before the
     * mprotect, which would then leave a done group inaccessible. */
    atomic_store_explicit(&slot->claim, live | NT_BITS, memory_order_release);
    void (*hook)(void) = atomic_load_explicit(&hook_mark, memory_order_relaxed);
    if (unlikely(hook != NULL)) hook();
    ok = os_protect((void *)a, b - a, false);
    if (ok) {
      atomic_store_explicit(&slot->claim, live, memory_order_release);
    } else {                           /* maybe partly applied: undo, then free the slot */
      unprotect(a, b);
      atomic_store(&slot->done, live | NT_BITS);
      slot_free(slot);
    }
  }
  nt_validate();
  lock_release(&nt_lock);
  if (!ok) errno = ENOMEM;             /* mprotect fails only for lack of VMAs */
  return ok ? 0 : -1;
}

/* Marks [a, b) with every signal held (signals_hold): the marker owns the
 * range's groups until the trap is in place. */
static int next_touch_mark(region_t *owner, uintptr_t a, uintptr_t b) {
  sigset_t held;
  signals_hold(&held);
  int r = mark_range(owner, a, b);
  signals_release(&held);
  return r;
}

void next_touch_cancel(region_t *owner) {
  sigset_t held;
  signals_hold(&held);
  lock_acquire(&nt_lock);
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_slot_t *r = &slots[i];
    if (!gen_live(gen_of(atomic_load(&r->claim))) || r->owner != owner) continue;
    slot_cancel(r);
    slot_free(r);
  }
  owner->flags &= (uint8_t)~REGION_NEXT_TOUCH;
  nt_validate();
  lock_release(&nt_lock);
  signals_release(&held);
}

/* Resolves every pending group that meets [a, b): the caller migrates the
 * unclaimed ones to its node, and waits for those another thread owns. */
static void resolve(uintptr_t a, uintptr_t b) {
  int node = os_current_node();
  for (int i = 0; i < NT_SLOTS; i++) {
    nt_slot_t *r = &slots[i];
    for (;;) {
      uint64_t w = atomic_load_explicit(&r->claim, memory_order_acquire);
      if (!gen_live(gen_of(w))) break;
      uintptr_t s = atomic_load_explicit(&r->start, memory_order_relaxed);
      uintptr_t e = atomic_load_explicit(&r->end, memory_order_relaxed);
      size_t size = atomic_load_explicit(&r->group, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (gen_of(atomic_load_explicit(&r->claim, memory_order_relaxed)) != gen_of(w)) continue;
      if (b <= s || a >= e) break;
      bool pending = false;
      for (uintptr_t x = a > s ? s + (a - s) / size * size : s; x < e && x < b; x += size) {
        nt_group_t g;
        nt_claim_t c = claim_in(r, x, &g, atomic_load_explicit(&r->stash, memory_order_relaxed) != 0);
        if (c == NT_OWN) finish_group(r, &g, node);
        else if (c == NT_BUSY) pending = true;
        else if (c == NT_MISS) break;  /* slot freed meanwhile: its pages were made accessible */
      }
      if (!pending) break;
      os_yield();                      /* other threads own groups here: wait until they are done */
    }
  }
}

size_t next_touch_moved_pages(void) { return nt_moved; }
size_t next_touch_faults(void) { return nt_faults; }
void next_touch_force(bool on) { atomic_store(&nt_forced, on); }
void next_touch_test_hooks(void (*fault)(void *addr), void (*mark)(void)) {
  atomic_store(&hook_fault, fault);
  atomic_store(&hook_mark, mark);
}
const char *next_touch_engine(void) {
  int e = atomic_load(&engine);
  return e == 1 ? "uffd" : e == 2 ? "protect" : "none";
}

/* Behind locus_next_touch (api/numa.c): [a, b), whole pages of the live
 * large block `owner`. A kernel without NUMA: pages have nowhere to go. */
int next_touch_range(region_t *owner, uintptr_t a, uintptr_t b) {
  if (!os_features.numa && !atomic_load(&nt_forced)) return 0;
  return next_touch_mark(owner, a, b);
}

/* Behind locus_next_touch_resolve (api/numa.c), with every signal held
 * (signals_hold): the resolver owns the groups it moves. */
void next_touch_resolve(uintptr_t a, uintptr_t b) {
  sigset_t held;
  signals_hold(&held);
  resolve(a, b);
  signals_release(&held);
}
