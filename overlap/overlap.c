/* liblocus-overlap.so: blocking MPI point-to-point calls run in the
 * background, kept correct by page protection. This is Commmama (A. Lescouet,
 * PhD thesis, 2021, "Memory management for operating systems and runtimes",
 * Ch.3) built on locus: the same three layers, written anew.
 *
 * - Interception (PMPI): MPI_Send, MPI_Ssend, MPI_Rsend, MPI_Recv,
 *   MPI_Sendrecv and MPI_Sendrecv_replace start the non-blocking equivalent
 *   and return at once when their buffers can be guarded; every other MPI
 *   call this library wraps (drain_wrappers.inc: waits, tests, probes,
 *   collectives, communicator and window calls, MPI_Finalize...) first
 *   completes everything pending (ov_drain). Requests are posted in program
 *   order, so MPI's own non-overtaking rule keeps the order of messages.
 *   MPI_Send / MPI_Recv of at most ov_direct_max bytes go straight to PMPI
 *   (direct(): nothing to overlap, and the guarded path costs 25 times the
 *   call).
 * - Offload: one progress thread tests the pending requests (MPI_Testsome),
 *   with a short backoff while they are pending and asleep on a condition
 *   when nothing is. A drain takes the requests over between two of its
 *   tests and completes them itself (complete_all): no hand-off on the way
 *   of a blocking call.
 * - Protection: a buffer inside a memory-file-backed large block of locus
 *   (from MPI_Init on, locus_overlap_enable makes blocks of at least
 *   LOCUS_OVERLAP_MIN bytes such blocks) has its pages made read-only (send) or inaccessible
 *   (receive) while the transfer runs; MPI gets the same pages through a
 *   shadow view with normal permissions (locus_overlap_span), so the
 *   runtime never faults. A page shared by several pending requests gets
 *   the intersection of their permissions (the thesis's merged request);
 *   an access of the program faults, and the handler (chained in locus's
 *   SIGSEGV handler, locus_overlap_hooks) waits for the requests on that
 *   page, whose completion restores the permissions. A request whose bytes
 *   overlap a pending request that writes them (or a receive overlapping
 *   anything pending) waits for it first (the thesis's serialisation).
 *
 * Buffers that cannot be guarded (stack, globals, small blocks, another
 * allocator's memory, a block frozen by fork): a send of at most
 * LOCUS_OVERLAP_COPY_MAX bytes is copied into a private buffer and sent
 * from there; anything else, and every receive whose status the program
 * asks for (the status is written before the call returns), blocks as
 * without this library, after completing what is pending.
 *
 * Errors: argument errors come from the non-blocking call at the place the
 * blocking call would have returned them (same error handler). An error
 * found at completion (truncation, a failed peer) is raised through the
 * communicator's error handler at the next call that completes pending
 * requests, and returned by it. docs/overlap.md has the rest: thread
 * levels, system calls on guarded buffers, free, fork, costs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "locus.h"

#define EXPORT __attribute__((visibility("default")))
#define LOCUS_OV_TLS __thread __attribute__((tls_model("initial-exec")))
#define OV_MAX 1024                    /* requests pending at once; more: the call blocks */

enum { OV_BEFORE, OV_ON, OV_OFF, OV_DONE };
static _Atomic int ov_state = OV_BEFORE;

typedef struct {
  _Atomic uint32_t gen;                /* odd: pending. Fields change only while even. */
  _Atomic uintptr_t ua, ub;            /* the request's bytes in the program's view */
  _Atomic uintptr_t pa, pb;            /* the pages it protects, or 0, 0 */
  int prot;                            /* 1 read-only (send), 0 none (receive) */
  int writes;                          /* a receive: its bytes change */
  atomic_bool reserved;                /* taken by a poster, not pending yet */
  MPI_Request req;
  MPI_Comm comm;
  void *copy;                          /* a private copy sent instead of the buffer: freed at completion */
  size_t copy_len;
} ov_req_t;

static ov_req_t reqs[OV_MAX];
static _Atomic int ov_high;            /* entries in use are below this */
static pthread_mutex_t ov_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ov_work = PTHREAD_COND_INITIALIZER, ov_done = PTHREAD_COND_INITIALIZER;
static _Atomic int ov_pending;         /* pending entries (written under ov_lock) */
static int ov_waiters;                 /* threads in ov_drain (under ov_lock) */
static _Atomic int ov_urgent;          /* fault handlers and syscall guards waiting */
static _Atomic int ov_busy;            /* completions between unpublishing and unprotecting */
static _Atomic uint64_t ov_epoch;      /* bumped after each unprotect */
static int ov_err;                     /* first error found at completion (under ov_lock) */
static MPI_Comm ov_err_comm;
static bool ov_stop;
static bool ov_testing;                /* the progress thread is in MPI_Testsome (under ov_lock) */
static bool ov_owned;                  /* a drain owns the pending requests (under ov_lock) */
static pthread_t ov_thread;
static int ov_asked = MPI_THREAD_SINGLE;   /* the level the program asked for */
static size_t ov_min = 64 * 1024, ov_copy_max = 512 * 1024;   /* locus's defaults (README) */
/* MPI_Send / MPI_Recv of at most this many bytes go straight to the runtime
 * (direct()): nothing to overlap below the runtime's eager limit (Open MPI's
 * shared-memory one is 4 KiB with its header), and the guarded or copied
 * path costs 8-10 us per call against 0.3 us for the call itself. */
static size_t ov_direct_max = 4000;
static bool ov_stats;                  /* LOCUS_OVERLAP_STATS */
static long ov_poll_us = 50;           /* the progress thread's longest sleep while requests are pending */
static size_t ov_page = 4096;
static LOCUS_OV_TLS int ov_self;       /* this thread is the progress thread */
static LOCUS_OV_TLS int ov_completing; /* this thread completes requests (a drain in MPI_Waitall) */
static LOCUS_OV_TLS int ov_internal;   /* this thread sets protections itself (apply_prot) */
static LOCUS_OV_TLS struct { uintptr_t page; uint64_t epoch; } ov_last_retry;

/* Statistics, printed at MPI_Finalize with LOCUS_OVERLAP_STATS=1. */
static _Atomic size_t st_guarded, st_copied, st_blocked, st_faults, st_drains, st_syscall_waits;

static void ov_warn(const char *msg) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "locus-overlap: %s\n", msg);
  if (n > 0) {
    ssize_t (*w)(int, const void *, size_t) = dlsym(RTLD_NEXT, "write");
    if (w && w(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1) < 0) return;
  }
}

static inline bool ov_active(void) { return atomic_load_explicit(&ov_state, memory_order_acquire) == OV_ON; }

/* ov_lock in a program thread: every signal held meanwhile. A handler of
 * the program touching a guarded page while this thread held the lock
 * would wait for the progress thread, which would wait for the lock. */
typedef struct { sigset_t old; } held_t;
static void lock_prog(held_t *h) {
  sigset_t all;
  sigfillset(&all);
  sigdelset(&all, SIGSEGV);            /* a fault while a signal is blocked kills the process */
  sigdelset(&all, SIGBUS);
  pthread_sigmask(SIG_BLOCK, &all, &h->old);
  pthread_mutex_lock(&ov_lock);
}
static void unlock_prog(held_t *h) {
  pthread_mutex_unlock(&ov_lock);
  pthread_sigmask(SIG_SETMASK, &h->old, NULL);
}

/* A private copy's memory: aligned beyond a page, so that locus serves it
 * from its ordinary heaps, not from a memory file (locus_overlap_enable
 * applies to blocks aligned to a page at most): a copy is never guarded, and
 * a memory file per copy would cost a memfd_create and two mmaps. */
#define OV_COPY_TOTAL ((size_t)64 << 20)   /* bytes of copies pending at most: beyond, sends block */
static _Atomic size_t ov_copy_bytes;
static void *copy_alloc(size_t n) {
  void *p = NULL;
  if (atomic_fetch_add(&ov_copy_bytes, n) + n > OV_COPY_TOTAL || locus_posix_memalign(&p, 2 * ov_page, n) != 0) {
    atomic_fetch_sub(&ov_copy_bytes, n);
    return NULL;
  }
  return p;
}
static void copy_free(void *p, size_t n) {
  if (!p) return;
  atomic_fetch_sub(&ov_copy_bytes, n);
  free(p);
}

/* ---- protection ---------------------------------------------------------- */
/* Sets the pages of [a, b) to the intersection of the permissions of the
 * pending requests covering each of them (read-write where none does).
 * ov_lock held. The boundaries of the covering requests split [a, b). */
static int cmp_cut(const void *x, const void *y) {
  uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
  return a < b ? -1 : a > b;
}

/* The protections the program itself gave pages of guardable blocks
 * (mprotect, interposed below): completion restores those, not read-write.
 * Ranges of whole pages, later ones taking precedence over none (a new
 * mprotect trims what it covers first); at most OV_PPROT of them (beyond,
 * the protection of the newest is not kept: docs/overlap.md). Under
 * pp_lock, taken with the program's signals held (a handler may call
 * mprotect), inside ov_lock when both are. */
#define OV_PPROT 64
static struct { uintptr_t a, b; int prot; } pprot[OV_PPROT];
static _Atomic int npprot;
static pthread_mutex_t pp_lock = PTHREAD_MUTEX_INITIALIZER;

static void pp_acquire(held_t *h) {
  sigset_t all;
  sigfillset(&all);
  sigdelset(&all, SIGSEGV);
  sigdelset(&all, SIGBUS);
  pthread_sigmask(SIG_BLOCK, &all, &h->old);
  pthread_mutex_lock(&pp_lock);
}
static void pp_release(held_t *h) {
  pthread_mutex_unlock(&pp_lock);
  pthread_sigmask(SIG_SETMASK, &h->old, NULL);
}

/* Removes [a, b) from the table (pp_lock held). */
static void pp_trim(uintptr_t a, uintptr_t b) {
  int n = atomic_load_explicit(&npprot, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    uintptr_t x = pprot[i].a, y = pprot[i].b;
    if (y <= a || x >= b) continue;
    if (x < a && y > b) {              /* split: the right part in a new entry if there is room */
      if (n < OV_PPROT) {
        pprot[n] = pprot[i];
        pprot[n].a = b;
        n++;
      }
      pprot[i].b = a;
    } else if (x < a) {
      pprot[i].b = a;
    } else if (y > b) {
      pprot[i].a = b;
    } else {
      pprot[i--] = pprot[--n];
    }
  }
  atomic_store_explicit(&npprot, n, memory_order_release);
}

/* The program's protection of [x, y) (a range no entry's end cuts), as the
 * library's values: 3 read-write (no entry), 1 read-only, 0 none. */
static int pp_prot(uintptr_t x, uintptr_t y) {
  int n = atomic_load_explicit(&npprot, memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (pprot[i].a < y && pprot[i].b > x) return pprot[i].prot;
  return 3;
}

static void apply_prot_locked(uintptr_t a, uintptr_t b);
static void apply_prot(uintptr_t a, uintptr_t b) {
  ov_internal++;                       /* locus's mprotect calls come back through ours */
  apply_prot_locked(a, b);
  ov_internal--;
}

static void apply_prot_locked(uintptr_t a, uintptr_t b) {
  /* Room for both ends of every entry (under ov_lock, so one array): a
   * cut left out would give a page the protection of a neighbour. */
  static uintptr_t cut[2 * OV_MAX + 2 * OV_PPROT + 2];
  int n = 0, high = atomic_load(&ov_high);
  held_t h;
  bool pp = atomic_load_explicit(&npprot, memory_order_acquire) > 0;
  if (pp) pp_acquire(&h);
  cut[n++] = a;
  cut[n++] = b;
  for (int i = 0, np = pp ? atomic_load_explicit(&npprot, memory_order_relaxed) : 0; i < np; i++) {
    if (pprot[i].a > a && pprot[i].a < b) cut[n++] = pprot[i].a;
    if (pprot[i].b > a && pprot[i].b < b) cut[n++] = pprot[i].b;
  }
  for (int i = 0; i < high; i++) {
    ov_req_t *r = &reqs[i];
    if (!(atomic_load(&r->gen) & 1)) continue;
    uintptr_t pa = atomic_load(&r->pa), pb = atomic_load(&r->pb);
    if (pa >= b || pb <= a || pa == pb) continue;
    if (pa > a) cut[n++] = pa;
    if (pb < b) cut[n++] = pb;
  }
  if (n > 16) qsort(cut, (size_t)n, sizeof *cut, cmp_cut);
  else
    for (int i = 1; i < n; i++)        /* insertion sort: few cuts */
      for (int j = i; j > 0 && cut[j] < cut[j - 1]; j--) {
        uintptr_t t = cut[j];
        cut[j] = cut[j - 1];
        cut[j - 1] = t;
      }
  for (int k = 0; k + 1 < n; k++) {
    uintptr_t x = cut[k], y = cut[k + 1];
    if (x >= y) continue;
    int prot = 3;
    for (int i = 0; i < high; i++) {
      ov_req_t *r = &reqs[i];
      if (!(atomic_load(&r->gen) & 1)) continue;
      uintptr_t pa = atomic_load(&r->pa), pb = atomic_load(&r->pb);
      if (pa < y && pb > x && r->prot < prot) prot = r->prot;
    }
    if (pp) prot &= pp_prot(x, y);     /* and within what the program allowed */
    if (locus_overlap_protect((void *)x, y - x, prot) != 0) {
      /* Only for lack of kernel VMAs (vm.max_map_count): a page left
       * protected would fault for ever. Stop with a message. */
      ov_warn("mprotect failed (vm.max_map_count?): aborting");
      abort();
    }
  }
  if (pp) pp_release(&h);
}

/* ---- waiting for requests (fault handler, free, system calls) ------------- */
static void pause_short(unsigned *spins) {
  if (++*spins < 64) {
    sched_yield();
  } else {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* Waits until no request pending now covers [a, b) (pages when `pages`,
 * else the request's bytes). Async-signal-safe: atomics, sched_yield and
 * nanosleep. Returns whether it found one. */
static bool wait_covering_below(uintptr_t a, uintptr_t b, bool pages, int below);
static bool wait_covering(uintptr_t a, uintptr_t b, bool pages) { return wait_covering_below(a, b, pages, 4); }

/* The same, for the requests whose protection is below `below` only (1:
 * those that make their pages inaccessible, the receives). */
static bool wait_covering_below(uintptr_t a, uintptr_t b, bool pages, int below) {
  bool found = false;
  int high = atomic_load_explicit(&ov_high, memory_order_acquire);
  for (int i = 0; i < high; i++) {
    ov_req_t *r = &reqs[i];
    uint32_t g = atomic_load_explicit(&r->gen, memory_order_acquire);
    if (!(g & 1)) continue;
    uintptr_t x = pages ? atomic_load_explicit(&r->pa, memory_order_relaxed) : atomic_load_explicit(&r->ua, memory_order_relaxed);
    uintptr_t y = pages ? atomic_load_explicit(&r->pb, memory_order_relaxed) : atomic_load_explicit(&r->ub, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    int prot = r->prot;
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&r->gen, memory_order_relaxed) != g) continue;   /* completed meanwhile */
    if (x >= b || y <= a || x == y || prot >= below) continue;
    found = true;
    atomic_fetch_add(&ov_urgent, 1);
    unsigned spins = 0;
    while (atomic_load_explicit(&r->gen, memory_order_acquire) == g) pause_short(&spins);
    atomic_fetch_sub(&ov_urgent, 1);
  }
  unsigned spins = 0;
  while (atomic_load_explicit(&ov_busy, memory_order_acquire)) pause_short(&spins);   /* an unprotect in flight */
  return found;
}

/* Whether a pending request whose protection is below `below` covers pages
 * of [a, b) (no wait; 4: any request, 1: the receives). */
static bool covering_test_below(uintptr_t a, uintptr_t b, int below) {
  int high = atomic_load_explicit(&ov_high, memory_order_acquire);
  for (int i = 0; i < high; i++) {
    ov_req_t *r = &reqs[i];
    if (!(atomic_load_explicit(&r->gen, memory_order_acquire) & 1)) continue;
    uintptr_t x = atomic_load_explicit(&r->pa, memory_order_relaxed), y = atomic_load_explicit(&r->pb, memory_order_relaxed);
    if (x < b && y > a && x != y && r->prot < below) return true;
  }
  return false;
}
static bool wait_covering_test(uintptr_t a, uintptr_t b) { return covering_test_below(a, b, 4); }

/* locus's SIGSEGV handler asks here (after next touch) about each fault. */
static _Atomic size_t st_unguarded;

static int ov_fault(void *addr, int access_error) {
  if (!access_error) return 0;         /* protected pages give access errors only */
  uintptr_t page = (uintptr_t)addr & ~(uintptr_t)(ov_page - 1);
  if (ov_self || ov_completing) {
    /* The runtime, progressing in this thread, touched a guarded page at
     * the program's own address: the buffer of one of the program's own
     * non-blocking requests shares a page with an intercepted call's. Only
     * this thread completes requests now, so it cannot wait: the page is
     * made accessible (its guard is lost until those requests complete). */
    if (!wait_covering_test(page, page + ov_page)) return 0;
    locus_overlap_protect((void *)page, ov_page, 3);
    atomic_fetch_add_explicit(&st_unguarded, 1, memory_order_relaxed);
    return 1;
  }
  if (wait_covering(page, page + ov_page, true)) {
    atomic_fetch_add_explicit(&st_faults, 1, memory_order_relaxed);
    return 1;
  }
  /* No request covers it now: maybe one did at the fault and completed
   * before we looked (then ov_epoch moved and the page is accessible).
   * Retried once per epoch value, as next touch does. */
  uint64_t epoch = atomic_load(&ov_epoch);
  if (ov_last_retry.page == page && ov_last_retry.epoch == epoch) {
    ov_last_retry.page = 0;
    return 0;
  }
  ov_last_retry.page = page;
  ov_last_retry.epoch = epoch;
  return 1;
}

/* locus calls this before a memory-file block is freed or frozen. */
static void ov_quiesce(void *start, size_t len) {
  if (atomic_load_explicit(&npprot, memory_order_acquire)) {   /* the block's pages are no longer the program's */
    held_t h;
    pp_acquire(&h);
    pp_trim((uintptr_t)start, (uintptr_t)start + len);
    pp_release(&h);
  }
  if (ov_self || !atomic_load_explicit(&ov_pending, memory_order_acquire)) return;
  wait_covering((uintptr_t)start, (uintptr_t)start + len, true);
  wait_covering((uintptr_t)start, (uintptr_t)start + len, false);
}

/* ---- the progress thread --------------------------------------------------- */
/* Request i completed (ov_lock held): unpublish, restore permissions, free. */
static void finish(int i, const MPI_Status *st) {
  ov_req_t *r = &reqs[i];
  atomic_fetch_add(&ov_busy, 1);
  atomic_fetch_add(&r->gen, 1);        /* even: no longer pending (handlers stop waiting once ov_busy drops) */
  uintptr_t pa = atomic_load(&r->pa), pb = atomic_load(&r->pb);
  if (pa != pb) apply_prot(pa, pb);
  atomic_fetch_add(&ov_epoch, 1);
  atomic_fetch_sub(&ov_busy, 1);
  if (st && st->MPI_ERROR != MPI_SUCCESS && !ov_err) {
    ov_err = st->MPI_ERROR;
    ov_err_comm = r->comm;
  }
  void *copy = r->copy;
  r->copy = NULL;
  atomic_fetch_sub(&ov_pending, 1);
  copy_free(copy, r->copy_len);
}

static void *progress(void *arg) {
  (void)arg;
  ov_self = 1;
  sigset_t all;                        /* the program's signals go to its own threads; */
  sigfillset(&all);                    /* faults stay deliverable (a blocked SIGSEGV kills) */
  sigdelset(&all, SIGSEGV);
  sigdelset(&all, SIGBUS);
  sigdelset(&all, SIGFPE);
  sigdelset(&all, SIGILL);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  static MPI_Request rq[OV_MAX];
  static int map[OV_MAX], idx[OV_MAX];
  static MPI_Status st[OV_MAX];
  unsigned idle = 0;
  pthread_mutex_lock(&ov_lock);
  for (;;) {
    /* Asleep while nothing is pending, or while a drain owns the requests
     * or waits to take them over (it must not starve behind new tests). */
    while ((!atomic_load(&ov_pending) || ov_owned || ov_waiters) && !ov_stop)
      pthread_cond_wait(&ov_work, &ov_lock);
    if (ov_stop && (!atomic_load(&ov_pending) || ov_owned || ov_waiters)) break;
    int n = 0, high = atomic_load(&ov_high);
    for (int i = 0; i < high; i++)
      if (atomic_load(&reqs[i].gen) & 1) {
        map[n] = i;
        rq[n++] = reqs[i].req;
      }
    ov_testing = true;
    pthread_mutex_unlock(&ov_lock);
    int out = 0;
    int rc = PMPI_Testsome(n, rq, &out, idx, st);
    pthread_mutex_lock(&ov_lock);
    ov_testing = false;
    if (ov_waiters) pthread_cond_broadcast(&ov_done);   /* a drain waits for the end of this test */
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      /* The runtime could not test them (the error handler returned):
       * report it, and consider them done rather than spin for ever. */
      if (!ov_err) {
        ov_err = rc;
        ov_err_comm = reqs[map[0]].comm;
      }
      for (int k = 0; k < n; k++) finish(map[k], NULL);
      out = n;
    } else if (out != MPI_UNDEFINED && out > 0) {
      for (int k = 0; k < out; k++) finish(map[idx[k]], rc == MPI_ERR_IN_STATUS ? &st[k] : NULL);
    }
    if (out > 0 && out != MPI_UNDEFINED) {
      idle = 0;
      pthread_cond_broadcast(&ov_done);
      continue;
    }
    /* Nothing completed: back off, unless someone waits for these. */
    if (ov_waiters || atomic_load(&ov_urgent)) {
      pthread_mutex_unlock(&ov_lock);
      sched_yield();
      pthread_mutex_lock(&ov_lock);
      continue;
    }
    idle++;
    long us = idle < 8 ? 0 : (long)1 << (idle - 8 < 10 ? idle - 8 : 10);
    if (us > ov_poll_us) us = ov_poll_us;
    if (!us) {
      pthread_mutex_unlock(&ov_lock);
      sched_yield();
      pthread_mutex_lock(&ov_lock);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += us * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&ov_work, &ov_lock, &ts);
  }
  pthread_mutex_unlock(&ov_lock);
  return NULL;
}

/* MPI_Waitall of n requests, made of MPI_Testsome: Open MPI's
 * MPI_Waitall under MPI_THREAD_MULTIPLE intermittently never returns when
 * one of them ended in error (a truncated receive, t_trunc), and
 * MPI_Testsome leaves such a request allocated and active (it reports it
 * again on every call): it is dropped from the set once reported. Returns
 * MPI_SUCCESS, MPI_ERR_IN_STATUS (st[k].MPI_ERROR set for every k) or the
 * error of a call that could not test them. */
static int complete_all(int n, MPI_Request *rq, MPI_Status *st) {
  static int idx[OV_MAX];
  static MPI_Status got[OV_MAX];
  int rc = MPI_SUCCESS, left = n;
  for (int k = 0; k < n; k++) st[k].MPI_ERROR = MPI_SUCCESS;
  while (left > 0) {
    int out = 0;
    int r = PMPI_Testsome(n, rq, &out, idx, got);
    if (r != MPI_SUCCESS && r != MPI_ERR_IN_STATUS) return r;
    if (out == MPI_UNDEFINED) break;   /* none active any more */
    for (int k = 0; k < out; k++) {
      st[idx[k]] = got[k];
      if (r != MPI_ERR_IN_STATUS) st[idx[k]].MPI_ERROR = MPI_SUCCESS;
      else if (got[k].MPI_ERROR != MPI_SUCCESS) {
        rc = MPI_ERR_IN_STATUS;
        rq[idx[k]] = MPI_REQUEST_NULL;   /* left allocated by the runtime: not reported twice */
      }
    }
    left -= out;
    if (left > 0 && out == 0) sched_yield();
  }
  return rc;
}

/* Completes everything pending; returns (and raises through the
 * communicator's error handler) an error found at completion. */
static int ov_drain(const char *who) {
  (void)who;
  if (!ov_active() || ov_self) return MPI_SUCCESS;
  held_t h;
  lock_prog(&h);
  if (atomic_load(&ov_pending)) {
    /* The draining thread completes the requests itself (no hand-off to
     * the progress thread and back on the way of a blocking call): it takes
     * them over between two tests of the progress thread (a request is
     * completed by one thread at a time), waits for all, gives them back. */
    atomic_fetch_add_explicit(&st_drains, 1, memory_order_relaxed);
    ov_waiters++;
    while (ov_testing) pthread_cond_wait(&ov_done, &ov_lock);
    ov_owned = true;
    static MPI_Request rq[OV_MAX];
    static int map[OV_MAX];
    static MPI_Status st[OV_MAX];
    int n = 0, high = atomic_load(&ov_high);
    for (int i = 0; i < high; i++)
      if (atomic_load(&reqs[i].gen) & 1) {
        map[n] = i;
        rq[n++] = reqs[i].req;
      }
    unlock_prog(&h);                   /* the program's signals while it waits */
    ov_completing = 1;
    int rc = complete_all(n, rq, st);
    ov_completing = 0;
    lock_prog(&h);
    for (int k = 0; k < n; k++)
      finish(map[k], rc == MPI_ERR_IN_STATUS ? &st[k] : NULL);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS && !ov_err) {
      ov_err = rc;
      ov_err_comm = reqs[map[0]].comm;
    }
    ov_owned = false;
    ov_waiters--;
    pthread_cond_broadcast(&ov_done);
    pthread_cond_signal(&ov_work);
  }
  int e = ov_err;
  MPI_Comm c = ov_err_comm;
  ov_err = 0;
  unlock_prog(&h);
  if (e) PMPI_Comm_call_errhandler(c, e);
  return e;
}

/* ---- posting ------------------------------------------------------------- */
typedef struct {
  uintptr_t a, b;                      /* the bytes the datatype touches */
  bool ok;                             /* extent known */
  bool dense;                          /* the data fill [a, b): no holes between elements or fields */
} span_t;

/* Whether dt's data is one run of bytes per element by construction: a
 * predefined type, or contiguous/dup/resized of such. Sizes alone cannot
 * tell: a send type may repeat a block, so that its size equals its true
 * extent while it skips bytes (a struct of {page 0, page 0, page 2}). */
static bool type_dense(MPI_Datatype dt, int depth) {
  int ni, na, nd, comb;
  if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS) return false;
  if (comb == MPI_COMBINER_NAMED) return true;
  if (depth > 8 || nd != 1 || ni > 1 || na > 2 ||
      (comb != MPI_COMBINER_CONTIGUOUS && comb != MPI_COMBINER_DUP && comb != MPI_COMBINER_RESIZED))
    return false;
  int ints[1];
  MPI_Aint addrs[2];
  MPI_Datatype inner;
  if (PMPI_Type_get_contents(dt, ni, na, nd, ints, addrs, &inner) != MPI_SUCCESS) return false;
  int ii, ia, id, ic;
  bool dense = type_dense(inner, depth + 1);
  if (PMPI_Type_get_envelope(inner, &ii, &ia, &id, &ic) == MPI_SUCCESS && ic != MPI_COMBINER_NAMED)
    PMPI_Type_free(&inner);
  return dense;
}

static span_t span_of(const void *buf, int count, MPI_Datatype dt) {
  span_t s = {0, 0, false, false};
  if (count < 0 || dt == MPI_DATATYPE_NULL) return s;
  if (count == 0) {
    s.ok = s.dense = true;
    return s;
  }
  MPI_Aint lb, ext, tlb, text;
  if (PMPI_Type_get_extent(dt, &lb, &ext) != MPI_SUCCESS || PMPI_Type_get_true_extent(dt, &tlb, &text) != MPI_SUCCESS)
    return s;
  if (ext < 0 || text < 0) return s;
  s.a = (uintptr_t)buf + (intptr_t)tlb;
  s.b = s.a + (uintptr_t)((MPI_Aint)(count - 1) * ext + text);
  s.ok = s.b >= s.a;
  /* Only the data of a datatype with holes may be read: the copy path
   * (memcpy of [a, b)) is for dense ones; a hole may be an inaccessible
   * page (a struct of absolute addresses over separate mappings). */
  int sz;
  s.dense = PMPI_Type_size(dt, &sz) == MPI_SUCCESS && (MPI_Aint)sz == text && (count == 1 || ext == text) &&
            type_dense(dt, 0);
  return s;
}

/* A free entry, reserved for the caller without a lock (a compare-and-swap
 * on its flag: only the reserver publishes an entry, only the completer
 * unpublishes it); -1 when the table is full. */
static int reserve_slot(void) {
  for (;;) {
    int high = atomic_load(&ov_high);
    for (int i = 0; i < high; i++) {
      bool no = false;
      if (!(atomic_load(&reqs[i].gen) & 1) && !atomic_load(&reqs[i].reserved) &&
          atomic_compare_exchange_strong(&reqs[i].reserved, &no, true)) {
        if (!(atomic_load(&reqs[i].gen) & 1)) return i;
        atomic_store(&reqs[i].reserved, false);   /* published between the two reads: not free */
      }
    }
    if (high == OV_MAX) return -1;
    atomic_compare_exchange_strong(&ov_high, &high, high + 1);   /* one more entry, then look again */
  }
}

static void release_slot(int i) { atomic_store(&reqs[i].reserved, false); }

/* Publishes request i (posted already) and protects its pages. */
static void publish(int i, MPI_Request req, MPI_Comm comm, span_t s, const locus_overlap_span_t *g, int prot,
                    bool writes, void *copy, size_t copy_len) {
  ov_req_t *r = &reqs[i];
  held_t h;
  lock_prog(&h);
  r->req = req;
  r->comm = comm;
  r->prot = prot;
  r->writes = writes;
  r->copy = copy;
  r->copy_len = copy_len;
  atomic_store(&r->ua, s.a);
  atomic_store(&r->ub, s.b);
  atomic_store(&r->pa, g ? (uintptr_t)g->start : 0);
  atomic_store(&r->pb, g ? (uintptr_t)g->start + g->len : 0);
  atomic_fetch_add_explicit(&r->gen, 1, memory_order_release);   /* odd: pending */
  atomic_store(&r->reserved, false);
  atomic_fetch_add(&ov_pending, 1);
  if (g) apply_prot((uintptr_t)g->start, (uintptr_t)g->start + g->len);
  pthread_cond_signal(&ov_work);
  unlock_prog(&h);
}

/* The thesis's serialisation: a new request waits for the pending ones
 * whose bytes it reads while they write them, or writes while they use. */
static void wait_conflicts(span_t s, bool writes) {
  if (s.a == s.b) return;
  int high = atomic_load(&ov_high);
  for (int i = 0; i < high; i++) {
    ov_req_t *r = &reqs[i];
    uint32_t g = atomic_load(&r->gen);
    if (!(g & 1) || atomic_load(&r->ua) >= s.b || atomic_load(&r->ub) <= s.a || (!writes && !r->writes)) continue;
    atomic_fetch_add(&ov_urgent, 1);
    unsigned spins = 0;
    while (atomic_load(&r->gen) == g) pause_short(&spins);
    atomic_fetch_sub(&ov_urgent, 1);
  }
  unsigned spins = 0;
  while (atomic_load(&ov_busy)) pause_short(&spins);
}

/* How a buffer is used: guarded (pages protected, MPI gets the shadow),
 * copied (send only), or not at all (the call blocks). */
typedef enum { WAY_BLOCK, WAY_GUARD, WAY_COPY, WAY_EMPTY } way_t;

static way_t choose(const void *buf, span_t s, bool send, locus_overlap_span_t *g) {
  if (!s.ok) return WAY_BLOCK;
  if (s.a == s.b) return WAY_EMPTY;
  if (locus_overlap_span((const void *)s.a, s.b - s.a, g) == 0) return WAY_GUARD;
  if (send && s.b - s.a <= ov_copy_max && s.dense) return WAY_COPY;
  return WAY_BLOCK;
}

typedef int (*isend_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);

/* Arguments a send is not overlapped with: the runtime sees them as the
 * program gave them (it returns its error code, or sends nothing to
 * MPI_PROC_NULL), and the library reads no byte of the buffer before it
 * has checked them (a copy of a NULL buffer would crash). */
static int ov_tag_ub = 32767;          /* MPI_TAG_UB, read at start() */
static bool send_unusual(int dest, int tag, MPI_Comm comm, span_t s) {
  if (!s.ok || comm == MPI_COMM_NULL || dest == MPI_PROC_NULL || tag < 0 || tag > ov_tag_ub) return true;
  if (s.a != s.b && s.a < ov_page) return true;   /* a NULL buffer (MPI_BOTTOM with absolute addresses is above) */
  int inter = 0, n = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS) return true;
  if ((inter ? PMPI_Comm_remote_size(comm, &n) : PMPI_Comm_size(comm, &n)) != MPI_SUCCESS) return true;
  return dest < 0 || dest >= n;
}

/* The overlapped send: MPI_SUCCESS or an error of the non-blocking call;
 * 1 when the caller must block instead. */
static int post_send(isend_fn isend, const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  span_t s = span_of(buf, count, dt);
  if (send_unusual(dest, tag, comm, s)) return 1;   /* the blocking call reports it */
  locus_overlap_span_t g;
  way_t w = choose(buf, s, true, &g);
  if (w == WAY_BLOCK) return 1;
  wait_conflicts(s, false);
  int i = reserve_slot();
  if (i < 0) return 1;
  void *copy = NULL;
  const void *from = buf;
  if (w == WAY_GUARD) {
    from = (const char *)g.shadow + ((uintptr_t)buf - (uintptr_t)g.start);
  } else if (w == WAY_COPY) {
    copy = copy_alloc(s.b - s.a);
    if (!copy) {
      release_slot(i);
      return 1;
    }
    memcpy(copy, (const void *)s.a, s.b - s.a);
    from = (const char *)copy + ((uintptr_t)buf - s.a);
  }
  MPI_Request req;
  int rc = isend(from, count, dt, dest, tag, comm, &req);
  size_t clen = s.b - s.a;
  if (rc != MPI_SUCCESS) {
    release_slot(i);
    copy_free(copy, clen);
    return rc;
  }
  if (w == WAY_EMPTY || w == WAY_COPY) s.a = s.b = 0;   /* nothing of the program's is in use */
  publish(i, req, comm, s, w == WAY_GUARD ? &g : NULL, 1, false, copy, clen);
  atomic_fetch_add_explicit(w == WAY_COPY ? &st_copied : &st_guarded, 1, memory_order_relaxed);
  return MPI_SUCCESS;
}

static int post_recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm) {
  span_t s = span_of(buf, count, dt);
  locus_overlap_span_t g;
  way_t w = choose(buf, s, false, &g);
  if (w == WAY_BLOCK) return 1;
  wait_conflicts(s, true);
  int i = reserve_slot();
  if (i < 0) return 1;
  void *into = w == WAY_GUARD ? (char *)g.shadow + ((uintptr_t)buf - (uintptr_t)g.start) : buf;
  MPI_Request req;
  int rc = PMPI_Irecv(into, count, dt, src, tag, comm, &req);
  if (rc != MPI_SUCCESS) {
    release_slot(i);
    return rc;
  }
  publish(i, req, comm, s, w == WAY_GUARD ? &g : NULL, 0, true, NULL, 0);
  atomic_fetch_add_explicit(&st_guarded, 1, memory_order_relaxed);
  return MPI_SUCCESS;
}

/* ---- the intercepted calls --------------------------------------------------- */
static int isend_std(const void *b, int c, MPI_Datatype d, int p, int t, MPI_Comm m, MPI_Request *r) {
  return PMPI_Isend(b, c, d, p, t, m, r);
}
static int isend_sync(const void *b, int c, MPI_Datatype d, int p, int t, MPI_Comm m, MPI_Request *r) {
  return PMPI_Issend(b, c, d, p, t, m, r);
}
static int isend_ready(const void *b, int c, MPI_Datatype d, int p, int t, MPI_Comm m, MPI_Request *r) {
  return PMPI_Irsend(b, c, d, p, t, m, r);
}

/* ---- small messages: straight to the runtime ------------------------------------ */
/* Whether a MPI_Send / MPI_Recv of count elements of dt is small enough to
 * go straight to PMPI: no copy, no progress thread, no drain. Posting order
 * is matching order in MPI, so a blocking call posted after pending
 * non-blocking ones keeps the non-overtaking rule; errors found at completion
 * of those are still reported by the next call that completes them. Unusual
 * arguments (negative count, null datatype) take the usual path, which
 * passes them to the runtime too. */
static inline bool direct(int count, MPI_Datatype dt) {
  if (count == 0) return true;
  if (count < 0 || (size_t)count > ov_direct_max || dt == MPI_DATATYPE_NULL) return false;
  int sz;
  if (dt == MPI_BYTE || dt == MPI_CHAR || dt == MPI_UNSIGNED_CHAR || dt == MPI_SIGNED_CHAR) sz = 1;   /* no call for the usual ones */
  else if (dt == MPI_INT || dt == MPI_FLOAT) sz = 4;
  else if (dt == MPI_DOUBLE || dt == MPI_LONG_LONG || dt == MPI_INT64_T) sz = 8;
  else if (PMPI_Type_size(dt, &sz) != MPI_SUCCESS || sz < 0) return false;
  return (size_t)count * (size_t)sz <= ov_direct_max;
}

/* Before a direct call while requests are pending: the pending requests on
 * the buffer's pages or bytes complete first (as a fault would wait for
 * them), so the runtime never meets a guard of those on the buffer; this
 * thread is then marked as completing requests (ov_completing), so that a
 * guarded page the runtime touches on behalf of the program's own
 * non-blocking requests is unguarded rather than waited for (the progress
 * thread may need a lock the runtime holds in this thread). */
static void direct_prepare(const void *buf, int count, MPI_Datatype dt, bool writes) {
  span_t s = span_of(buf, count, dt);
  if (!s.ok || s.a == s.b) return;
  /* a send only reads: read-only guards (pending sends) do not stop it */
  wait_covering_below(s.a & ~(uintptr_t)(ov_page - 1), s.b, true, writes ? 4 : 1);
  wait_conflicts(s, writes);
}

static int direct_send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  if (atomic_load_explicit(&ov_pending, memory_order_relaxed)) direct_prepare(buf, count, dt, false);
  ov_completing = 1;
  int rc = PMPI_Send(buf, count, dt, dest, tag, comm);
  ov_completing = 0;
  return rc;
}

static int direct_recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Status *status) {
  if (atomic_load_explicit(&ov_pending, memory_order_relaxed)) direct_prepare(buf, count, dt, true);
  ov_completing = 1;
  int rc = PMPI_Recv(buf, count, dt, src, tag, comm, status);
  ov_completing = 0;
  return rc;
}

static int blocked(void) {
  atomic_fetch_add_explicit(&st_blocked, 1, memory_order_relaxed);
  return ov_drain("block");
}

typedef int (*send_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm);

/* A send started in the background, or (post_send returned 1: a case it
 * does not take) the blocking call after a drain, its error first. */
static int send_started(isend_fn start, send_fn block, const void *buf, int count, MPI_Datatype dt, int dest,
                        int tag, MPI_Comm comm) {
  int rc = post_send(start, buf, count, dt, dest, tag, comm);
  if (rc != 1) return rc;
  int e = blocked();
  rc = block(buf, count, dt, dest, tag, comm);
  return rc == MPI_SUCCESS ? e : rc;
}

EXPORT int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  if (ov_active() && !ov_self) {
    if (dest == MPI_PROC_NULL || direct(count, dt)) return direct_send(buf, count, dt, dest, tag, comm);
    return send_started(isend_std, PMPI_Send, buf, count, dt, dest, tag, comm);
  }
  return PMPI_Send(buf, count, dt, dest, tag, comm);
}

EXPORT int MPI_Ssend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  if (ov_active() && !ov_self && dest != MPI_PROC_NULL)     /* MPI_PROC_NULL: nothing to send */
    return send_started(isend_sync, PMPI_Ssend, buf, count, dt, dest, tag, comm);
  return PMPI_Ssend(buf, count, dt, dest, tag, comm);
}

EXPORT int MPI_Rsend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  if (ov_active() && !ov_self && dest != MPI_PROC_NULL)     /* MPI_PROC_NULL: nothing to send */
    return send_started(isend_ready, PMPI_Rsend, buf, count, dt, dest, tag, comm);
  return PMPI_Rsend(buf, count, dt, dest, tag, comm);
}

EXPORT int MPI_Recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Status *status) {
  if (ov_active() && !ov_self) {
    if (src == MPI_PROC_NULL || direct(count, dt)) return direct_recv(buf, count, dt, src, tag, comm, status);
    /* The status is the program's once the call returns: only an ignored
     * one lets the receive go on after it. */
    if (status == MPI_STATUS_IGNORE) {
      int rc = post_recv(buf, count, dt, src, tag, comm);
      if (rc != 1) return rc;
    }
    int e = blocked();
    int rc = PMPI_Recv(buf, count, dt, src, tag, comm, status);
    return rc == MPI_SUCCESS ? e : rc;
  }
  return PMPI_Recv(buf, count, dt, src, tag, comm, status);
}

EXPORT int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf, int rcount,
                        MPI_Datatype rtype, int src, int rtag, MPI_Comm comm, MPI_Status *status) {
  if (ov_active() && !ov_self && status == MPI_STATUS_IGNORE) {
    span_t ss = span_of(sbuf, scount, stype), rs = span_of(rbuf, rcount, rtype);
    locus_overlap_span_t g1, g2;
    way_t ws = choose(sbuf, ss, true, &g1), wr = choose(rbuf, rs, false, &g2);
    bool apart = ss.b <= rs.a || rs.b <= ss.a || ss.a == ss.b || rs.a == rs.b;
    if (ws != WAY_BLOCK && wr != WAY_BLOCK && apart) {
      /* The send first: a copied send reads the program's view, which the
       * receive would make inaccessible, and the data it waits for may
       * depend on this very send. (The two directions of one MPI_Sendrecv
       * are not ordered against each other.) */
      int rc = post_send(isend_std, sbuf, scount, stype, dest, stag, comm);
      if (rc == MPI_SUCCESS) {
        rc = post_recv(rbuf, rcount, rtype, src, rtag, comm);
        if (rc == 1) {                 /* table full: the receive blocks, the send goes on */
          int e = blocked();
          rc = PMPI_Recv(rbuf, rcount, rtype, src, rtag, comm, MPI_STATUS_IGNORE);
          return rc == MPI_SUCCESS ? e : rc;
        }
        return rc;
      }
      if (rc != 1) return rc;
    }
  }
  int e = ov_active() && !ov_self ? blocked() : MPI_SUCCESS;
  int rc = PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, status);
  return rc == MPI_SUCCESS ? e : rc;
}

EXPORT int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int stag, int src, int rtag,
                                MPI_Comm comm, MPI_Status *status) {
  if (ov_active() && !ov_self && status == MPI_STATUS_IGNORE) {
    span_t s = span_of(buf, count, dt);
    locus_overlap_span_t g;
    if (choose(buf, s, false, &g) == WAY_GUARD) {
      /* The outgoing data goes from a private copy (as the runtime itself
       * would do); the incoming into the guarded buffer. */
      wait_conflicts(s, true);
      void *copy = copy_alloc(s.b - s.a);
      int i = copy ? reserve_slot() : -1;
      int j = i >= 0 ? reserve_slot() : -1;
      if (j >= 0) {
        memcpy(copy, (void *)s.a, s.b - s.a);
        MPI_Request rr, sr;
        void *into = (char *)g.shadow + ((uintptr_t)buf - (uintptr_t)g.start);
        int rc = PMPI_Irecv(into, count, dt, src, rtag, comm, &rr);
        if (rc == MPI_SUCCESS) {
          publish(i, rr, comm, s, &g, 0, true, NULL, 0);
          rc = PMPI_Isend((char *)copy + ((uintptr_t)buf - s.a), count, dt, dest, stag, comm, &sr);
          if (rc == MPI_SUCCESS) {
            publish(j, sr, comm, (span_t){0, 0, true, true}, NULL, 1, false, copy, s.b - s.a);
            atomic_fetch_add_explicit(&st_guarded, 1, memory_order_relaxed);
            return MPI_SUCCESS;
          }
          release_slot(j);
          copy_free(copy, s.b - s.a);
          return rc;                   /* the receive is pending; the send's error is the call's */
        }
        release_slot(i);
        release_slot(j);
        copy_free(copy, s.b - s.a);
        return rc;
      }
      if (i >= 0) release_slot(i);
      copy_free(copy, s.b - s.a);
    }
  }
  int e = ov_active() && !ov_self ? blocked() : MPI_SUCCESS;
  int rc = PMPI_Sendrecv_replace(buf, count, dt, dest, stag, src, rtag, comm, status);
  return rc == MPI_SUCCESS ? e : rc;
}

/* ---- initialisation, thread levels, finalisation ------------------------------ */
/* A setting, as locus parsed and checked it (LOCUS_OVERLAP_*, README's
 * option table): sizes come back with a k/M/G/T suffix. */
static size_t setting(const char *name, size_t dflt) {
  char buf[64];
  if (locus_option_get(name, buf, sizeof buf) < 0) return dflt;
  char *end;
  unsigned long long n = strtoull(buf, &end, 10);
  int shift = *end == 'k' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : *end == 'T' ? 40 : 0;
  return (size_t)(n << shift);
}

static void fork_prepare(void) {
  if (ov_active() && !ov_self) ov_drain("fork");
}
static void fork_child(void) {
  /* No progress thread in the child (MPI is not usable there anyway). */
  if (atomic_load(&ov_state) == OV_ON) atomic_store(&ov_state, OV_OFF);
}

__attribute__((constructor)) static void ov_ctor(void) {
  long pg = sysconf(_SC_PAGESIZE);
  if (pg > 0) ov_page = (size_t)pg;
  ov_min = setting("overlap_min", ov_min);
  ov_copy_max = setting("overlap_copy_max", ov_copy_max);
  ov_poll_us = (long)setting("overlap_poll_us", (size_t)ov_poll_us);
  ov_stats = setting("overlap_stats", 0) != 0;
  if (!setting("overlap", 1)) {
    atomic_store(&ov_state, OV_OFF);
    return;
  }
  pthread_atfork(fork_prepare, NULL, fork_child);
}

static void disable(const char *why) {
  atomic_store(&ov_state, OV_OFF);
  locus_overlap_enable(0);
  if (why) ov_warn(why);
}

/* Overlap just turned on: what the signal wrappers (below) do from now on,
 * done to the masks set before (they were the program's until then): the
 * calling thread's (threads it creates inherit it) and the installed
 * handlers' sa_mask. Other threads' masks are theirs (docs/overlap.md). */
static void keep_faults_now(void) {
  sigset_t f;
  sigemptyset(&f);
  sigaddset(&f, SIGSEGV);
  sigaddset(&f, SIGBUS);
  pthread_sigmask(SIG_UNBLOCK, &f, NULL);
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction sa;
    if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) != 0) continue;
    if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
    if (sigismember(&sa.sa_mask, SIGSEGV) == 1 || sigismember(&sa.sa_mask, SIGBUS) == 1)
      sigaction(sig, &sa, NULL);     /* our wrapper takes them out */
  }
}

/* After the runtime started: overlap on when it gives MPI_THREAD_MULTIPLE. */
static void start(int provided) {
  /* Test hook (tests/overlap): a runtime that gives less than asked. */
  const char *fake = getenv("OVERLAP_TEST_PROVIDED");
  if (fake && *fake >= '0' && *fake <= '3' && provided > *fake - '0') provided = *fake - '0';
  if (provided < MPI_THREAD_MULTIPLE) {
    disable("the MPI runtime does not provide MPI_THREAD_MULTIPLE: overlap disabled, blocking calls block");
    return;
  }
  int *ub = NULL, flag = 0;
  if (PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag && ub) ov_tag_ub = *ub;
  if (locus_overlap_hooks(ov_fault, ov_quiesce) != 0) {
    disable("cannot install the fault handler: overlap disabled");
    return;
  }
  if (pthread_create(&ov_thread, NULL, progress, NULL) != 0) {
    locus_overlap_hooks(NULL, NULL);
    disable("cannot start the progress thread: overlap disabled");
    return;
  }
  atomic_store(&ov_state, OV_ON);
  keep_faults_now();
}

/* From MPI_Init on, blocks large enough to be worth guarding are memory-file
 * regions (those allocated before are not guarded; processes that never
 * start MPI, such as mpirun under `locus run --overlap`, are left alone). */
static void enable(void) { locus_overlap_enable(ov_min); }

EXPORT int MPI_Init(int *argc, char ***argv) {
  if (atomic_load(&ov_state) != OV_BEFORE) return PMPI_Init(argc, argv);
  enable();
  int provided = MPI_THREAD_SINGLE;
  int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc == MPI_SUCCESS) start(provided);
  else disable(NULL);
  return rc;
}

EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  if (atomic_load(&ov_state) != OV_BEFORE) return PMPI_Init_thread(argc, argv, required, provided);
  ov_asked = required;
  if (required >= MPI_THREAD_MULTIPLE) {
    /* Several threads of the program may call MPI at once: pending
     * requests would be completed by one while another posts. Not
     * supported: the program runs as without this library. */
    disable("the program asks for MPI_THREAD_MULTIPLE: overlap disabled, blocking calls block");
    return PMPI_Init_thread(argc, argv, required, provided);
  }
  enable();
  int got = MPI_THREAD_SINGLE;
  int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &got);
  if (rc != MPI_SUCCESS) {
    disable(NULL);
    return rc;
  }
  start(got);
  /* The program sees the level it would have got: what it asked for when
   * the runtime gives more, else the runtime's. */
  if (provided) *provided = got >= required ? required : got;
  return rc;
}

EXPORT int MPI_Query_thread(int *provided) {
  int got;
  int rc = PMPI_Query_thread(&got);
  if (rc == MPI_SUCCESS && provided) *provided = got > ov_asked && ov_active() ? ov_asked : got;
  return rc;
}

static void print_stats(void) {
  if (!ov_stats) return;
  char msg[300];
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  snprintf(msg, sizeof msg,
           "rank %d: %zu guarded, %zu copied, %zu blocked, %zu faults waited, %zu drains, %zu system calls waited%s",
           rank, atomic_load(&st_guarded), atomic_load(&st_copied), atomic_load(&st_blocked), atomic_load(&st_faults),
           atomic_load(&st_drains), atomic_load(&st_syscall_waits),
           atomic_load(&st_unguarded) ? ", pages unguarded for the runtime (see docs/overlap.md)" : "");
  ov_warn(msg);
}

EXPORT int MPI_Finalize(void) {
  if (ov_active() && !ov_self) {
    int e = ov_drain("MPI_Finalize");
    pthread_mutex_lock(&ov_lock);
    ov_stop = true;
    pthread_cond_signal(&ov_work);
    pthread_mutex_unlock(&ov_lock);
    pthread_join(ov_thread, NULL);
    print_stats();
    atomic_store(&ov_state, OV_DONE);
    int rc = PMPI_Finalize();
    return rc == MPI_SUCCESS ? e : rc;
  }
  if (atomic_load(&ov_state) == OV_BEFORE) atomic_store(&ov_state, OV_DONE);
  return PMPI_Finalize();
}

EXPORT int MPI_Abort(MPI_Comm comm, int code) { return PMPI_Abort(comm, code); }

/* ---- the other MPI calls: complete what is pending first ----------------------- */
#include "drain_wrappers.inc"

/* ---- system calls on guarded buffers ------------------------------------------- */
/* A system call that reads or writes a guarded page would fail with EFAULT
 * (the kernel does not raise SIGSEGV for it). The usual I/O calls of libc
 * are interposed: when requests are pending, those on the buffer's pages
 * complete first. Other system calls: docs/overlap.md. */
static void guard_io(const void *buf, size_t n, bool writes) {
  if (!atomic_load_explicit(&ov_pending, memory_order_relaxed) || !n) return;
  uintptr_t a = (uintptr_t)buf & ~(uintptr_t)(ov_page - 1), b = (uintptr_t)buf + n;
  /* A call that only reads the program's memory (write, send, ...) never
   * fails on a read-only page: the guards of pending sends do not stop it,
   * only those of pending receives (inaccessible pages) do. */
  int below = writes ? 4 : 1;
  if (ov_self || ov_completing) {
    /* The runtime, in the thread that completes the pending requests (the
     * progress thread, a drain, a small call), reads or writes the
     * program's memory for one of the program's own requests (a TCP
     * writev of its MPI_Isend buffer) on a page an intercepted call
     * guards: it cannot wait for itself. As ov_fault does for the same
     * access without a system call, the pages that stop the call are
     * unguarded (until those requests complete), as little as the call
     * needs (readable for a read: a pending send's guard stays), and the
     * call goes on. */
    for (uintptr_t p = a; p < b; p += ov_page)
      if (covering_test_below(p, p + ov_page, below)) {
        locus_overlap_protect((void *)p, ov_page, writes ? 3 : 1);
        atomic_fetch_add_explicit(&st_unguarded, 1, memory_order_relaxed);
      }
    return;
  }
  if (wait_covering_below(a, b, true, below)) atomic_fetch_add_explicit(&st_syscall_waits, 1, memory_order_relaxed);
}

/* writes: the call writes the buffers (readv), else it reads them (writev). */
static void guard_iov(const struct iovec *iov, int cnt, bool writes) {
  if (!atomic_load_explicit(&ov_pending, memory_order_relaxed)) return;
  for (int i = 0; i < cnt; i++) guard_io(iov[i].iov_base, iov[i].iov_len, writes);
}

#define NEXT(name) \
  static __typeof__(name) *_Atomic real_##name; \
  if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

EXPORT ssize_t write(int fd, const void *buf, size_t n) {
  NEXT(write);
  guard_io(buf, n, false);
  return real_write(fd, buf, n);
}
EXPORT ssize_t read(int fd, void *buf, size_t n) {
  NEXT(read);
  guard_io(buf, n, true);
  return real_read(fd, buf, n);
}
EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  NEXT(pwrite);
  guard_io(buf, n, false);
  return real_pwrite(fd, buf, n, off);
}
EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off) {
  NEXT(pread);
  guard_io(buf, n, true);
  return real_pread(fd, buf, n, off);
}
EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
  NEXT(pwrite64);
  guard_io(buf, n, false);
  return real_pwrite64(fd, buf, n, off);
}
EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off) {
  NEXT(pread64);
  guard_io(buf, n, true);
  return real_pread64(fd, buf, n, off);
}
EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  NEXT(writev);
  guard_iov(iov, cnt, false);
  return real_writev(fd, iov, cnt);
}
EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
  NEXT(readv);
  guard_iov(iov, cnt, true);
  return real_readv(fd, iov, cnt);
}
EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) {
  NEXT(preadv);
  guard_iov(iov, cnt, true);
  return real_preadv(fd, iov, cnt, off);
}
EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
  NEXT(pwritev);
  guard_iov(iov, cnt, false);
  return real_pwritev(fd, iov, cnt, off);
}
EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off) {
  NEXT(preadv64);
  guard_iov(iov, cnt, true);
  return real_preadv64(fd, iov, cnt, off);
}
EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
  NEXT(pwritev64);
  guard_iov(iov, cnt, false);
  return real_pwritev64(fd, iov, cnt, off);
}
EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
  NEXT(sendmsg);
  if (m) guard_iov(m->msg_iov, (int)m->msg_iovlen, false);
  return real_sendmsg(fd, m, flags);
}
EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int flags) {
  NEXT(recvmsg);
  if (m) guard_iov(m->msg_iov, (int)m->msg_iovlen, true);
  return real_recvmsg(fd, m, flags);
}
EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags) {
  NEXT(send);
  guard_io(buf, n, false);
  return real_send(fd, buf, n, flags);
}
EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags) {
  NEXT(recv);
  guard_io(buf, n, true);
  return real_recv(fd, buf, n, flags);
}
EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to, socklen_t tl) {
  NEXT(sendto);
  guard_io(buf, n, false);
  return real_sendto(fd, buf, n, flags, to, tl);
}
EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fl) {
  NEXT(recvfrom);
  guard_io(buf, n, true);
  return real_recvfrom(fd, buf, n, flags, from, fl);
}
/* The program's own mprotect of a buffer in flight: the transfers on its
 * pages complete first (else PROT_READ on a receive guard would show the
 * old data). On pages of guardable blocks the program's protection is
 * recorded (pprot), so that later guards and completions keep within it
 * instead of making the pages read-write. The library's own changes
 * (apply_prot, the unguarding of a completing thread) go straight through. */
EXPORT int mprotect(void *addr, size_t len, int prot) {
  NEXT(mprotect);
  bool prog = !ov_internal && !ov_self && !ov_completing && len && ov_active();
  if (prog) guard_io(addr, len, true);
  int rc = real_mprotect(addr, len, prot);
  if (prog && rc == 0) {
    uintptr_t a = (uintptr_t)addr, b = ((uintptr_t)addr + len + ov_page - 1) & ~(uintptr_t)(ov_page - 1);
    int p = prot & PROT_WRITE ? 3 : prot & PROT_READ ? 1 : 0;
    locus_overlap_span_t g;
    bool block = p != 3 && (locus_overlap_span(addr, 1, &g) == 0 || locus_overlap_span((char *)b - 1, 1, &g) == 0);
    if (block || atomic_load_explicit(&npprot, memory_order_acquire)) {
      held_t h;
      pp_acquire(&h);
      pp_trim(a, b);
      int n = atomic_load_explicit(&npprot, memory_order_relaxed);
      if (block && n < OV_PPROT) {
        pprot[n].a = a;
        pprot[n].b = b;
        pprot[n].prot = p;
        atomic_store_explicit(&npprot, n + 1, memory_order_release);
      }
      pp_release(&h);
    }
  }
  return rc;
}
/* Advice that discards or replaces the data of a buffer in flight
 * (MADV_REMOVE punches a hole in the memory file: the shadow the runtime
 * sends from reads zeros), or that touches its pages (MADV_POPULATE_*:
 * the kernel refuses it on a guarded page with EINVAL): the transfers on
 * its pages complete first, as for mprotect. Other advice goes straight
 * through. */
#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
static bool advice_waits(int advice) {
  return advice == MADV_REMOVE || advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_DONTNEED_LOCKED ||
         advice == MADV_POPULATE_READ || advice == MADV_POPULATE_WRITE;
}
EXPORT int madvise(void *addr, size_t len, int advice) {
  NEXT(madvise);
  if (len && !ov_internal && !ov_self && !ov_completing && advice_waits(advice)) guard_io(addr, len, true);
  return real_madvise(addr, len, advice);
}
/* stdio writes a large buffer straight from the program's memory. */
EXPORT size_t fwrite(const void *buf, size_t size, size_t n, FILE *f) {
  NEXT(fwrite);
  guard_io(buf, size * n, false);
  return real_fwrite(buf, size, n, f);
}
EXPORT size_t fread(void *buf, size_t size, size_t n, FILE *f) {
  NEXT(fread);
  guard_io(buf, size * n, true);
  return real_fread(buf, size, n, f);
}

/* ---- the allocator ---------------------------------------------------------------
 * Preloaded alone, this library comes before liblocus.so in the dynamic
 * linker's search order, but so do the program's own libraries (libc among
 * them): liblocus.so, loaded as this library's dependency, would not be the
 * process's malloc. So the allocator's names are defined here and forward to
 * locus's own (include/locus.h), and sigaction/signal to locus's (its
 * SIGSEGV handler must see the program's and the MPI runtime's changes). */
EXPORT void *malloc(size_t n) { return locus_malloc(n); }
EXPORT void free(void *p) { locus_free(p); }
EXPORT void cfree(void *p) { locus_free(p); }
EXPORT void *calloc(size_t c, size_t n) { return locus_calloc(c, n); }
EXPORT void *realloc(void *p, size_t n) { return locus_realloc(p, n); }
EXPORT void *reallocarray(void *p, size_t c, size_t n) { return locus_reallocarray(p, c, n); }
EXPORT int posix_memalign(void **out, size_t a, size_t n) { return locus_posix_memalign(out, a, n); }
EXPORT void *aligned_alloc(size_t a, size_t n) { return locus_aligned_alloc(a, n); }
EXPORT void *memalign(size_t a, size_t n) { return locus_memalign(a, n); }
EXPORT void *valloc(size_t n) { return locus_valloc(n); }
EXPORT void *pvalloc(size_t n) { return locus_pvalloc(n); }
EXPORT size_t malloc_usable_size(void *p) { return locus_usable_size(p); }
EXPORT void free_sized(void *p, size_t n) { locus_free_sized(p, n); }
EXPORT void free_aligned_sized(void *p, size_t a, size_t n) { locus_free_aligned_sized(p, a, n); }

/* locus's own definition of a name this library also defines. */
static void *locus_sym(const char *name) {
  Dl_info info;
  if (!dladdr((void *)locus_malloc, &info) || !info.dli_fname) return NULL;
  void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  return h ? dlsym(h, name) : NULL;
}

/* A thread with SIGSEGV blocked that touches a guarded page is killed by
 * the kernel (a synchronous fault is never held): workers that block every
 * signal (sigfillset) and handlers with a full sa_mask are common. Blocking
 * SIGSEGV/SIGBUS has no other effect on faults, so with overlap on they
 * are taken out of the masks the program sets (a SIGSEGV sent with kill()
 * is then delivered rather than held: the one difference). */
static bool keep_faults(void) { return ov_active(); }   /* processes that are not ranks (yet) keep their masks */
static const sigset_t *no_faults(int how, const sigset_t *set, sigset_t *tmp) {
  if (!set || how == SIG_UNBLOCK || !keep_faults()) return set;
  *tmp = *set;
  sigdelset(tmp, SIGSEGV);
  sigdelset(tmp, SIGBUS);
  return tmp;
}

EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
  static int (*_Atomic real)(int, const sigset_t *, sigset_t *);
  if (!real) real = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "pthread_sigmask");
  if (!real) return ENOSYS;
  sigset_t tmp;
  return real(how, no_faults(how, set, &tmp), old);
}

EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
  static int (*_Atomic real)(int, const sigset_t *, sigset_t *);
  if (!real) real = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "sigprocmask");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  sigset_t tmp;
  return real(how, no_faults(how, set, &tmp), old);
}

/* A thread created with this attribute starts with its mask (glibc 2.32):
 * the same as pthread_sigmask. */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
EXPORT int pthread_attr_setsigmask_np(pthread_attr_t *attr, const sigset_t *set) {
  static int (*_Atomic real)(pthread_attr_t *, const sigset_t *);
  if (!real) real = (int (*)(pthread_attr_t *, const sigset_t *))dlsym(RTLD_NEXT, "pthread_attr_setsigmask_np");
  if (!real) return ENOSYS;
  sigset_t tmp;
  return real(attr, no_faults(SIG_SETMASK, set, &tmp));
}
#endif

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  static int (*_Atomic real)(int, const struct sigaction *, struct sigaction *);
  if (!real) real = (int (*)(int, const struct sigaction *, struct sigaction *))locus_sym("sigaction");
  if (!real) {                         /* cannot happen: liblocus.so is a dependency */
    errno = ENOSYS;
    return -1;
  }
  struct sigaction tmp;
  if (act && keep_faults() && (sigismember(&act->sa_mask, SIGSEGV) == 1 || sigismember(&act->sa_mask, SIGBUS) == 1)) {
    tmp = *act;                        /* a handler with a full sa_mask: its faults stay deliverable */
    sigdelset(&tmp.sa_mask, SIGSEGV);
    sigdelset(&tmp.sa_mask, SIGBUS);
    act = &tmp;
  }
  return real(sig, act, old);
}

EXPORT sighandler_t signal(int sig, sighandler_t h) {
  static sighandler_t (*_Atomic real)(int, sighandler_t);
  if (!real) real = (sighandler_t(*)(int, sighandler_t))locus_sym("signal");
  if (!real) return SIG_ERR;
  return real(sig, h);
}
