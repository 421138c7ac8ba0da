/* liblocus_sample.so: which large arrays a program uses together, by
 * page-protection sampling (the method of S. Valat, PhD thesis, 2014, §3.6,
 * with a timer in place of function instrumentation). Preloaded beside
 * liblocus.so by `locus align`; not part of the allocator (it uses libc freely).
 *
 * locus tells it of every large allocation, resize and free as they happen,
 * through the weak reference locus_trace_observer (src/config/trace.c; needs
 * LOCUS_TRACE_FILE). Every period of CPU time (a POSIX CPU-time timer, SIGPROF) the
 * timer handler closes a sampling window — it records the set of arrays
 * touched since the previous tick — and opens the next one: every live
 * array's whole pages are made inaccessible (PROT_NONE). The first access
 * to an array in the window faults; the SIGSEGV handler marks the array
 * touched and makes it accessible again, so each array costs at most one
 * fault per window. Arrays touched in the same windows are used by the same
 * loops. Only whole pages inside the array are protected: the page holding
 * the array's start (and locus's block header) stays accessible.
 *
 * At exit it writes LOCUS_SAMPLE_FILE:
 *   S pid period_us windows
 *   W count seq seq ...     `count` consecutive windows touched exactly these
 *                           arrays (seq: the allocation's number in the trace)
 *
 * Limits (documented in docs/tools.md): a system call given a protected
 * array (read(2) into it) fails with EFAULT instead of faulting; protection
 * is per process, so with several threads a window holds the arrays of every
 * thread; a fault the handler does not own goes to the previous handler. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARR 1024
#define PAGE 4096u
#define WBUF_WORDS (1u << 20)          /* window log: 8 MiB */

typedef struct {
  unsigned long seq;
  uintptr_t p, lo, hi;                 /* block start; protected pages [lo, hi) */
  int live;
  int prot;                            /* PROT_NONE now */
  int touched;                         /* in the current window */
} arr_t;

static arr_t arrs[MAX_ARR];
static int narr;                       /* slots in use: [0, narr) */
static atomic_flag lock = ATOMIC_FLAG_INIT;
static int active;
static long period_us = 2000;
static unsigned long windows;          /* windows closed */
static uint64_t *wbuf;                 /* records: count, n, seq[n] */
static size_t wlen, wlast = (size_t)-1;
static int wfull;
static struct sigaction old_segv;
static timer_t timer;

static void lock_on(void) {
  while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {
  }
}
static void lock_off(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }

static void unprotect(arr_t *a) {
  if (a->prot) mprotect((void *)a->lo, a->hi - a->lo, PROT_READ | PROT_WRITE);
  a->prot = 0;
}

/* Appends the current window's set to the log (merging a repeat of the last
 * set), then clears the marks. Under the lock. */
static void close_window(void) {
  uint64_t set[MAX_ARR];
  size_t n = 0;
  for (int i = 0; i < narr; i++)
    if (arrs[i].live && arrs[i].touched) set[n++] = arrs[i].seq;
  for (int i = 0; i < narr; i++) arrs[i].touched = 0;
  windows++;
  if (!wbuf || wfull) return;
  if (wlast != (size_t)-1 && wbuf[wlast + 1] == n && !memcmp(&wbuf[wlast + 2], set, n * sizeof *set)) {
    wbuf[wlast]++;
    return;
  }
  if (wlen + 2 + n > WBUF_WORDS) {
    wfull = 1;
    return;
  }
  wlast = wlen;
  wbuf[wlen++] = 1;
  wbuf[wlen++] = n;
  memcpy(&wbuf[wlen], set, n * sizeof *set);
  wlen += n;
}

static void on_tick(int sig) {
  (void)sig;
  int saved = errno;
  lock_on();
  if (active) {
    close_window();
    for (int i = 0; i < narr; i++) {
      arr_t *a = &arrs[i];
      if (a->live && !a->prot && a->hi > a->lo && mprotect((void *)a->lo, a->hi - a->lo, PROT_NONE) == 0)
        a->prot = 1;
    }
  }
  lock_off();
  errno = saved;
}

static void on_segv(int sig, siginfo_t *si, void *ctx) {
  uintptr_t addr = (uintptr_t)si->si_addr;
  int saved = errno, ours = 0;
  lock_on();
  for (int i = 0; i < narr; i++) {
    arr_t *a = &arrs[i];
    if (addr >= a->lo && addr < a->hi && (a->live || a->prot)) {
      if (a->live) a->touched = 1;
      unprotect(a);                    /* or already done by another thread: retry the access */
      ours = 1;
      break;
    }
  }
  lock_off();
  errno = saved;
  if (ours) return;
  if (old_segv.sa_flags & SA_SIGINFO) {
    if (old_segv.sa_sigaction) {
      old_segv.sa_sigaction(sig, si, ctx);
      return;
    }
  } else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
    old_segv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);            /* a real fault: the access repeats and kills the process */
}

static arr_t *find(uintptr_t p) {
  for (int i = 0; i < narr; i++)
    if (arrs[i].live && arrs[i].p == p) return &arrs[i];
  return NULL;
}

static arr_t *new_slot(void) {
  for (int i = 0; i < narr; i++)
    if (!arrs[i].live && !arrs[i].prot) return &arrs[i];
  return narr < MAX_ARR ? &arrs[narr++] : NULL;
}

/* Called by liblocus.so (src/config/trace.c): after an allocation ('A') or a
 * resize ('R', old -> p), before a free ('F'). */
__attribute__((visibility("default"))) void locus_trace_observer(int kind, unsigned long seq, const void *ptr,
                                                                 size_t size, const void *old) {
  sigset_t block, prev;
  sigemptyset(&block);
  sigaddset(&block, SIGPROF);
  pthread_sigmask(SIG_BLOCK, &block, &prev);
  lock_on();
  uintptr_t p = (uintptr_t)ptr;
  arr_t *a = NULL;
  if (kind == 'F' || kind == 'R') {
    a = find(kind == 'F' ? p : (uintptr_t)old);
    if (a) {
      int was = a->prot;
      unprotect(a);                    /* the allocator may reuse the pages */
      a->live = 0;
      if (kind == 'R' && was && p != (uintptr_t)old)   /* mremap moved the pages with their protection */
        mprotect((void *)((p + PAGE - 1) & ~(uintptr_t)(PAGE - 1)), (a->hi - a->lo), PROT_READ | PROT_WRITE);
    }
  }
  if (kind == 'A' || kind == 'R') {
    if (!a) a = new_slot();
    if (a) {
      a->seq = seq;
      a->p = p;
      a->lo = (p + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
      a->hi = (p + size) & ~(uintptr_t)(PAGE - 1);
      if (a->hi < a->lo) a->hi = a->lo;
      a->prot = 0;
      a->touched = 0;
      a->live = 1;
    }
  }
  lock_off();
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
}

__attribute__((constructor)) static void sample_start(void) {
  const char *out = getenv("LOCUS_SAMPLE_FILE");
  if (!out || !*out) return;
  const char *per = getenv("LOCUS_SAMPLE_PERIOD_US");
  if (per && atol(per) >= 100) period_us = atol(per);
  void *m = mmap(NULL, WBUF_WORDS * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  wbuf = m == MAP_FAILED ? NULL : m;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGPROF);
  sigaction(SIGSEGV, &sa, &old_segv);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_tick;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGPROF, &sa, NULL);
  /* A POSIX timer, not setitimer: an interval timer survives execve and its
   * SIGPROF would kill the next program (a shell script's interpreter, say)
   * before its own copy of this library installs the handler. */
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGPROF;
  struct itimerspec it = {{period_us / 1000000, period_us % 1000000 * 1000},
                          {period_us / 1000000, period_us % 1000000 * 1000}};
  if (timer_create(CLOCK_PROCESS_CPUTIME_ID, &ev, &timer) != 0) return;
  active = 1;
  timer_settime(timer, 0, &it, NULL);
}

__attribute__((destructor)) static void sample_stop(void) {
  const char *out = getenv("LOCUS_SAMPLE_FILE");
  if (!active || !out) return;
  timer_delete(timer);
  sigset_t block, prev;
  sigemptyset(&block);
  sigaddset(&block, SIGPROF);
  pthread_sigmask(SIG_BLOCK, &block, &prev);
  lock_on();
  active = 0;
  close_window();                      /* the last, partial window */
  for (int i = 0; i < narr; i++) unprotect(&arrs[i]);
  lock_off();
  FILE *f = fopen(out, "a");
  if (!f) return;
  fprintf(f, "S %d %ld %lu%s\n", (int)getpid(), period_us, windows, wfull ? " truncated" : "");
  for (size_t i = 0; wbuf && i < wlen;) {
    uint64_t count = wbuf[i], n = wbuf[i + 1];
    fprintf(f, "W %llu", (unsigned long long)count);
    for (uint64_t k = 0; k < n; k++) fprintf(f, " %llu", (unsigned long long)wbuf[i + 2 + k]);
    fputc('\n', f);
    i += 2 + n;
  }
  fclose(f);
}
