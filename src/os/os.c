/* The OS layer: memory, processes, files. Every system call of locus is in
 * src/os/: this file, features.c, pressure.c, topology.c, sys.c (futex, yield, stderr),
 * zero.c (calloc's clearing), shm.c (shared tables' files). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <linux/membarrier.h>
#include <linux/mempolicy.h>
#include <linux/userfaultfd.h>

#include "os/os.h"

#include "arch/arch.h"
#include "types.h"
#include "util/lock.h"
#include "util/stats.h"

extern char **environ;

static atomic_int inject_map_failures;

void os_inject_map_failures(int n) { atomic_store(&inject_map_failures, n); }

static void *map_anon(size_t size, int extra_flags) {
  if (unlikely(atomic_load_explicit(&inject_map_failures, memory_order_relaxed) > 0) &&
      atomic_fetch_sub(&inject_map_failures, 1) > 0) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  stat_add(&locus_stats.mmaps, 1);
  LOCUS_ASSERT(p == MAP_FAILED || ((uintptr_t)p & (os_page_size() - 1)) == 0);
  return p == MAP_FAILED ? NULL : p;
}

void *os_map(size_t size) { return map_anon(size, 0); }

/* Once non-zero, stays so: some mapping may fault in uncleared pages. */
static atomic_size_t reuse_maps;

void *os_map_reusable(size_t size, bool *zeroed) {
  *zeroed = true;
  if (!os_features.page_reuse) return map_anon(size, 0);
  void *p = map_anon(size, OS_MAP_PAGE_REUSE);
  if (p) {
    atomic_fetch_add_explicit(&reuse_maps, 1, memory_order_relaxed);
    *zeroed = false;
  }
  return p;
}

size_t os_page_reuse_maps(void) { return atomic_load_explicit(&reuse_maps, memory_order_relaxed); }

bool os_unmap(void *p, size_t size) {
  LOCUS_ASSERT(((uintptr_t)p & (os_page_size() - 1)) == 0 && size % os_page_size() == 0);
  stat_add(&locus_stats.munmaps, 1);
  stat_add(&locus_stats.returned, size);
  return munmap(p, size) == 0;
}

void *os_remap(void *p, size_t old_size, size_t new_size, bool may_move) {
  LOCUS_ASSERT(old_size % PAGE_SIZE == 0 && new_size % PAGE_SIZE == 0);
  stat_add(&locus_stats.mremaps, 1);
  void *q = mremap(p, old_size, new_size, may_move ? MREMAP_MAYMOVE : 0);
  return q == MAP_FAILED ? NULL : q;
}

static void *map_aligned(size_t size, size_t align, int extra_flags) {
  size_t page = os_page_size();
  LOCUS_ASSERT(is_pow2(align) && align > page && size % page == 0);
  char *p = map_anon(size + align - page, extra_flags);
  if (!p) return NULL;
  char *q = (char *)align_up((uintptr_t)p, align);
  size_t head = (size_t)(q - p), tail = align - page - head;
  if (head) munmap(p, head);             /* trims of our own fresh mapping: not "returned" memory */
  if (tail) munmap(q + size, tail);
  return q;
}

void *os_map_aligned(size_t size, size_t align) { return map_aligned(size, align, 0); }

void *os_map_aligned_reusable(size_t size, size_t align, bool *zeroed) {
  *zeroed = true;
  if (!os_features.page_reuse) return map_aligned(size, align, 0);
  void *p = map_aligned(size, align, OS_MAP_PAGE_REUSE);
  if (p) {
    atomic_fetch_add_explicit(&reuse_maps, 1, memory_order_relaxed);
    *zeroed = false;
  }
  return p;
}

void *os_slab_take(os_slab_t *s, size_t size, size_t len) {
  if ((size_t)(s->end - s->next) < size) {
    char *p = os_map(len);
    if (!p) return NULL;
    s->next = p;
    s->end = p + len;
  }
  void *r = s->next;
  s->next += size;
  return r;
}

bool os_advise_huge(void *p, size_t size) {
  stat_add(&locus_stats.madvises, 1);
  return madvise(p, size, MADV_HUGEPAGE) == 0;
}

bool os_advise_nohuge(void *p, size_t size) {
  stat_add(&locus_stats.madvises, 1);
  return madvise(p, size, MADV_NOHUGEPAGE) == 0;
}

static uint64_t clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t os_touch_ns(void *p, bool cpu) {
  clockid_t c = cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  uint64_t t0 = clock_ns(c);
  __asm__ volatile("" ::: "memory");
  *(volatile char *)p = 0;
  __asm__ volatile("" ::: "memory");
  uint64_t t = clock_ns(c) - t0;
  return t ? t : 1;
}

uint64_t os_base_fault_ns(void) {
  size_t page = os_page_size();
  char *p = map_anon(4 * page, 0);
  if (!p) return 0;
  *(volatile char *)p = 0;
  uint64_t best = UINT64_MAX;
  for (int i = 1; i < 4; i++) {
    uint64_t t = os_touch_ns(p + (size_t)i * page, false);
    if (t < best) best = t;
  }
  stat_add(&locus_stats.munmaps, 1);
  munmap(p, 4 * page);                   /* a probe of our own: not memory given back */
  return best;
}

uint64_t os_clock_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void *os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align) {
  stat_add(&locus_stats.mremaps, 1);
  void *q = mremap(p, old_size, new_size, 0);
  if (q != MAP_FAILED) return q;
  char *dst = os_map_aligned(new_size, align);   /* a place to move to; mremap replaces it */
  if (!dst) return NULL;
  q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
  if (q != MAP_FAILED) return q;
  munmap(dst, new_size);
  return NULL;
}

bool os_free_lazily(void *p, size_t size) {
  stat_add(&locus_stats.madvises, 1);
  if (os_features.madv_free && madvise(p, size, MADV_FREE) == 0) return true;
  return madvise(p, size, MADV_DONTNEED) == 0;
}

/* ---- NUMA: raw system calls (glibc has no wrappers; libnuma would allocate) */
static const int policy_modes[] = {MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE};

bool os_set_policy(void *p, size_t size, os_policy_t policy, const uint64_t *nodes) {
  if (!os_features.numa) return policy == OS_POLICY_DEFAULT;
  unsigned long mask[OS_NODE_WORDS] = {0};
  if (nodes)
    for (int i = 0; i < OS_NODE_WORDS; i++) mask[i] = nodes[i];
  long r = syscall(SYS_mbind, p, size, policy_modes[policy], policy == OS_POLICY_DEFAULT ? NULL : mask,
                   policy == OS_POLICY_DEFAULT ? 0UL : (unsigned long)(OS_NODE_WORDS * 64 + 1), 0U);
  if (r == 0) return true;
  /* The NUMA calls forbidden since start-up (a seccomp filter the program
   * installed, as container runtimes do without CAP_SYS_NICE): from now on
   * as on a kernel without them, which the start-up probe would have found,
   * rather than every later allocation failing. A refused node (EINVAL: a
   * cpuset change) still fails the caller. */
  if (errno == EPERM || errno == ENOSYS) {
    if (__atomic_exchange_n(&os_features.numa, false, __ATOMIC_RELAXED))
      locus_warn("the NUMA system calls are refused since start-up (mbind: errno %d); memory is no longer placed on "
                 "nodes", errno);
    return true;
  }
  return false;
}

bool os_page_nodes(void *const *pages, size_t n, int *status) {
  if (!os_features.numa) return false;
  return syscall(SYS_move_pages, 0, n, pages, NULL, status, 0) == 0;
}

bool os_move_pages(void *const *pages, size_t n, const int *nodes, int *status) {
  if (!os_features.numa) return false;
  return syscall(SYS_move_pages, 0, n, pages, nodes, status, MPOL_MF_MOVE) >= 0;
}

bool os_allowed_nodes(uint64_t *nodes) {
  unsigned long mask[OS_NODE_WORDS] = {0};
  if (!os_features.numa ||
      syscall(SYS_get_mempolicy, NULL, mask, (unsigned long)(OS_NODE_WORDS * 64 + 1), NULL, MPOL_F_MEMS_ALLOWED) != 0)
    return false;
  for (int i = 0; i < OS_NODE_WORDS; i++) nodes[i] = mask[i];
  return true;
}

int os_current_node(void) {
  unsigned cpu = 0, node = 0;
  if (syscall(SYS_getcpu, &cpu, &node, NULL) != 0) return -1;
  return (int)node;
}

bool os_protect(void *p, size_t size, bool accessible) {
  return mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

bool os_protect_mode(void *p, size_t size, int prot) {
  int m = prot == 3 ? PROT_READ | PROT_WRITE : prot == 1 ? PROT_READ : PROT_NONE;
  return mprotect(p, size, m) == 0;
}

/* ---- the SIGSEGV handler (next touch) ------------------------------------
 * Installed once; every fault is offered to `fault_ours` first. The
 * program's own disposition of SIGSEGV (the one it had before, and any it
 * sets later through sigaction or signal, which locus interposes while its
 * handler is installed) is kept in `prog` and honoured when a fault is not
 * ours: its mask, SA_NODEFER, SA_RESETHAND, SA_SIGINFO or not, SIG_IGN and
 * SIG_DFL (the default action on the retried access). A program that
 * replaces the handler behind locus's back (the raw system call, a static
 * libc's internal call) is found at the next os_fault_handler_install, told
 * about, and the handler re-armed. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);  /* glibc's own */
extern sighandler_t bsd_signal(int sig, sighandler_t handler);                      /* glibc's signal() */

/* The engines asking about each fault, in the order they were installed
 * (next touch, the overlap library's protection: docs/overlap.md). */
#define FAULT_ENGINES 4
static _Atomic(os_fault_fn) fault_ours[FAULT_ENGINES];
LOCK_STATIC(fault_lock, LOCK_RANK_FAULT, "fault handler install") /* installing and the program's changes */
static atomic_bool fault_installed;
/* The program's disposition, published as a seqlock (odd: being written)
 * because the handler reads it without a lock; prog_reset is the sequence
 * number whose disposition SA_RESETHAND has reset to SIG_DFL. */
static struct sigaction prog;
static atomic_uint prog_seq, prog_reset = 1;

static void prog_set(const struct sigaction *sa) {       /* fault_lock held */
  atomic_fetch_add(&prog_seq, 1);
  atomic_thread_fence(memory_order_release);
  memcpy(&prog, sa, sizeof prog);
  atomic_fetch_add_explicit(&prog_seq, 1, memory_order_release);
}

static void prog_get(struct sigaction *sa) {
  for (;;) {
    unsigned s = atomic_load_explicit(&prog_seq, memory_order_acquire);
    if (!(s & 1)) {
      memcpy(sa, (const void *)&prog, sizeof *sa);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&prog_seq, memory_order_relaxed) == s) {
        if (atomic_load(&prog_reset) == s) {
          memset(sa, 0, sizeof *sa);
          sa->sa_handler = SIG_DFL;
        }
        return;
      }
    }
    sched_yield();
  }
}

static void fault_handler(int sig, siginfo_t *info, void *uctx);

/* The disposition locus installs. */
static void fault_action(struct sigaction *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sa_sigaction = fault_handler;
  sa->sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  /* Every signal held while it runs: a handler of the program interrupting
   * it and touching a pending range would fault with SIGSEGV blocked (the
   * kernel kills the process), or wait for a group this thread owns. The
   * program's own handler gets the mask it asked for (fault_chain). */
  sigfillset(&sa->sa_mask);
}

/* Not ours: what the program asked for. */
static void fault_chain(int sig, siginfo_t *info, void *uctx) {
  struct sigaction p;
  prog_get(&p);
  if (p.sa_flags & SA_RESETHAND) atomic_store(&prog_reset, atomic_load(&prog_seq));  /* reset on delivery */
  /* SIG_DFL and SIG_IGN whatever SA_SIGINFO says (one union, as the kernel reads it). */
  if (p.sa_handler == SIG_DFL || p.sa_handler == SIG_IGN) {
    /* A signal sent by a process (kill, sigqueue) is ignored if asked; a
     * fault cannot be (the kernel forces the default action on it too). */
    if (info->si_code <= 0 && p.sa_handler == SIG_IGN) return;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    __sigaction(sig, &dfl, NULL);
    atomic_store(&fault_installed, false);
    if (info->si_code <= 0) raise(sig); /* blocked until this handler returns */
    return;                            /* a fault: the retried access takes the default action */
  }
  /* The mask the kernel would have set for the program's handler: the
   * interrupted context's, its sa_mask, and the signal unless SA_NODEFER. */
  sigset_t mask, old;
  sigorset(&mask, &((ucontext_t *)uctx)->uc_sigmask, &p.sa_mask);
  if (p.sa_flags & SA_NODEFER) sigdelset(&mask, sig);
  else sigaddset(&mask, sig);
  pthread_sigmask(SIG_SETMASK, &mask, &old);
  if (p.sa_flags & SA_SIGINFO) p.sa_sigaction(sig, info, uctx);
  else p.sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void fault_handler(int sig, siginfo_t *info, void *uctx) {
  int saved = errno;
  bool ours = false;
  for (int i = 0; i < FAULT_ENGINES && !ours; i++) {
    os_fault_fn fn = atomic_load_explicit(&fault_ours[i], memory_order_acquire);
    if (!fn) break;
    ours = fn(info->si_addr, info->si_code == SEGV_ACCERR);
  }
  if (!ours) fault_chain(sig, info, uctx);
  errno = saved;
}

bool os_fault_handler_install(os_fault_fn ours) {
  lock_acquire(&fault_lock);
  struct sigaction cur, sa;
  bool ok = __sigaction(SIGSEGV, NULL, &cur) == 0;
  bool armed = ok && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fault_handler;
  int i = 0;
  while (i < FAULT_ENGINES && atomic_load(&fault_ours[i]) && atomic_load(&fault_ours[i]) != ours) i++;
  if (i == FAULT_ENGINES) ok = false;  /* more engines than slots: cannot happen (two exist) */
  else if (!atomic_load(&fault_ours[i])) atomic_store_explicit(&fault_ours[i], ours, memory_order_release);
  if (ok && !armed) {
    if (atomic_load(&fault_installed))
      locus_warn("the program replaced locus's SIGSEGV handler without sigaction() (faults on ranges "
                 "pending next touch went to its handler); re-installed, chaining to the program's");
    prog_set(&cur);                    /* the program's: chained to */
    fault_action(&sa);
    ok = __sigaction(SIGSEGV, &sa, NULL) == 0;
    atomic_store(&fault_installed, ok);
  }
  lock_release(&fault_lock);
  return ok;
}

bool os_fault_handler_armed(void) {
  struct sigaction cur;
  return __sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fault_handler;
}

#ifndef LOCUS_NO_OVERRIDE              /* a build that exports only locus_* names: not interposed */
/* The program's sigaction: while locus's handler is installed, SIGSEGV
 * changes go to `prog` (the handler chains to it) and queries see it; the
 * kernel's disposition stays locus's. Everything else is glibc's. */
LOCUS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (sig != SIGSEGV || !atomic_load(&fault_installed)) return __sigaction(sig, act, old);
  lock_acquire(&fault_lock);
  if (!atomic_load(&fault_installed)) {
    lock_release(&fault_lock);
    return __sigaction(sig, act, old);
  }
  if (old) prog_get(old);
  if (act && !((act->sa_flags & SA_SIGINFO) && act->sa_sigaction == fault_handler)) {
    prog_set(act);
    atomic_store(&prog_reset, 1);      /* an odd number: no sequence number is */
  }
  lock_release(&fault_lock);
  return 0;
}

/* glibc's signal() calls its internal sigaction, not the interposed one:
 * SIGSEGV's goes through sigaction above (BSD semantics, as glibc's signal),
 * the others to glibc (bsd_signal is the same function as its signal). */
LOCUS_EXPORT sighandler_t signal(int sig, sighandler_t handler) {
  if (sig != SIGSEGV) return bsd_signal(sig, handler);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, sig);
  sa.sa_flags = SA_RESTART;
  return sigaction(sig, &sa, &old) == 0 ? old.sa_handler : SIG_ERR;
}
#endif

/* ---- userfaultfd (next touch's engine for ranges system calls may touch) -- */
#ifndef UFFD_FEATURE_MOVE                /* Linux 6.8 uapi, for older installed headers */
#define UFFD_FEATURE_MOVE (1 << 16)
#define _UFFDIO_MOVE (0x05)
#define UFFDIO_MOVE_MODE_DONTWAKE ((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64)1 << 1)
struct uffdio_move {
  __u64 dst, src, len, mode;
  __s64 move;
};
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#endif
int os_uffd_open(bool *thread_id) {
  struct uffdio_api api;
  int fd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    int u = ioctl(fd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    int saved = errno;
    close(fd);
    errno = saved;
    fd = u;
  }
  if (fd < 0) fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);   /* needs CAP_SYS_PTRACE, or the sysctl */
  if (fd < 0) return -1;
  for (int with_tid = 1; with_tid >= 0; with_tid--) {
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_MOVE | (with_tid ? UFFD_FEATURE_THREAD_ID : 0);
    if (ioctl(fd, UFFDIO_API, &api) == 0) {
      *thread_id = with_tid;
      if (fd < 3) {                      /* never a standard descriptor: the program may reopen them */
        int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        close(fd);
        fd = high;
      }
      return fd;
    }
    /* A failed handshake leaves the descriptor unusable: start again. */
    close(fd);
    fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
  }
  close(fd);
  errno = ENOSYS;                        /* no UFFDIO_MOVE (Linux < 6.8) */
  return -1;
}

bool os_uffd_register(int fd, void *p, size_t len) {
  struct uffdio_register reg = {.range = {.start = (uintptr_t)p, .len = len}, .mode = UFFDIO_REGISTER_MODE_MISSING};
  return ioctl(fd, UFFDIO_REGISTER, &reg) == 0;
}

bool os_uffd_unregister(int fd, void *p, size_t len) {
  struct uffdio_range r = {.start = (uintptr_t)p, .len = len};
  return ioctl(fd, UFFDIO_UNREGISTER, &r) == 0;
}

long os_uffd_move(int fd, void *dst, void *src, size_t len) {
  struct uffdio_move m = {.dst = (uintptr_t)dst, .src = (uintptr_t)src, .len = len,
                          .mode = UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES};
  if (ioctl(fd, UFFDIO_MOVE, &m) == 0) return (long)len;
  return m.move > 0 ? (long)m.move : -errno;
}

bool os_uffd_copy(int fd, void *dst, void *src, size_t len) {
  struct uffdio_copy c = {.dst = (uintptr_t)dst, .src = (uintptr_t)src, .len = len};
  return ioctl(fd, UFFDIO_COPY, &c) == 0 || errno == EEXIST;
}

void os_uffd_wake(int fd, void *p, size_t len) {
  struct uffdio_range r = {.start = (uintptr_t)p, .len = len};
  ioctl(fd, UFFDIO_WAKE, &r);            /* nobody waiting, or not registered: nothing to do */
}

int os_uffd_read(int fd, const os_fd_id_t *id, os_uffd_fault_t *out, int max, int timeout_ms) {
  struct uffd_msg msg[16];
  if (max > 16) max = 16;
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  int ready = poll(&pf, 1, timeout_ms);
  if (ready < 0) return -1;
  /* The number may name another file by now (the program closed it and
   * reused it): never read the program's data. */
  if ((pf.revents & (POLLERR | POLLNVAL)) || !os_fd_is(fd, id)) {
    errno = EBADF;
    return -1;
  }
  if (!ready) return 0;
  ssize_t n = read(fd, msg, sizeof msg[0] * (size_t)max);
  if (n < 0) return -1;
  int k = 0;
  for (ssize_t i = 0; i < n / (ssize_t)sizeof msg[0]; i++) {
    if (msg[i].event != UFFD_EVENT_PAGEFAULT) continue;
    out[k].addr = (uintptr_t)msg[i].arg.pagefault.address;
    out[k].tid = (long)msg[i].arg.pagefault.feat.ptid;
    k++;
  }
  return k;
}

void *os_reserve(size_t len) {
  void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* mremap moves within one kernel mapping only (EFAULT when [p, p+len) spans
 * several). A block is split into several after an earlier mark of part of
 * it: the pages userfaultfd put back get a new anon_vma, and the kernel does
 * not merge mappings of different anon_vmas. So on EFAULT split the range in
 * halves, down to the mappings' own bounds (O(mappings x log pages) calls). */
static bool move_pieces(char *p, size_t len, char *dst, int flags) {
  if (mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | flags, dst) == dst) return true;
  size_t page = os_page_size(), half = len / 2 / page * page;
  if (errno != EFAULT || len <= page) return false;
  if (!move_pieces(p, half, dst, flags)) return false;
  if (move_pieces(p + half, len - half, dst + half, flags)) return true;
  /* The first half is aside already: bring it back (the destination holds
   * nothing yet, as no fault is served before the mark succeeds). */
  int err = errno;
  if (!move_pieces(dst, half, p, 0))
    locus_fatal("next touch: cannot move %p-%p back after a failed mark (mremap: errno %d)", (void *)p,
                (void *)(p + half), errno);
  errno = err;
  return false;
}

bool os_move_aside(void *p, size_t len, void *dst) {
  return move_pieces(p, len, dst, MREMAP_DONTUNMAP);
}

void os_release(void *p, size_t len) { munmap(p, len); }

int os_tid_cpu(long tid) {
  char path[64], buf[1024];
  fmt_buf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  if (os_read_file(path, buf, sizeof buf) <= 0) return -1;
  char *q = strrchr(buf, ')');           /* after the command name, which may hold blanks */
  if (!q) return -1;
  /* Field 39 (processor); q is at the end of field 2. */
  int field = 2;
  for (; *q && field < 39; q++)
    if (*q == ' ') field++;
  return field == 39 ? atoi(q) : -1;
}

bool os_fd_id(int fd, os_fd_id_t *id) {
  struct stat st;
  if (fstat(fd, &st)) return false;
  id->dev = (uint64_t)st.st_dev;
  id->ino = (uint64_t)st.st_ino;
  return true;
}
bool os_fd_is(int fd, const os_fd_id_t *id) {
  int e = errno;
  os_fd_id_t now;
  bool same = fd >= 0 && os_fd_id(fd, &now) && now.dev == id->dev && now.ino == id->ino;
  errno = e;
  return same;
}

/* ---- locus's own threads (the KSM sampler, the userfaultfd server) ----
 * POSIX ends a process with its last thread: locus's threads must not keep
 * alive a process whose program threads are all gone (a main that ends with
 * pthread_exit). Each is counted before it exists (a fork between the
 * creation and the thread's first step must not find it uncounted), and
 * while a creation is under way (`starting`) no exit is decided: the
 * creator is a running program thread that the count may not show yet
 * against the new one. Each asks os_internal_exit_due from time to time.
 * The running threads are read from /proc/self/stat through a descriptor
 * opened before the first such thread, so that a later chroot,
 * a hidden /proc or a full descriptor table does not blind the rule; it is
 * above the standard descriptors, and believed only while fstat shows the
 * file it was opened on (the program may close the number and reuse it);
 * else the file is read by path. A fork child closes it only if it is still
 * locus's, and opens its own. */
static atomic_int internal_threads, starting;
static int stat_fd = -1;               /* written under the creators' and fork's exclusion (below) */
static os_fd_id_t stat_id;
static sigset_t program_mask;          /* the first creator's mask: exit handlers run under it */
static atomic_bool program_mask_set, exiting;
static atomic_flag stat_busy = ATOMIC_FLAG_INIT;

static void stat_open(void) {
  int fd = os_open("/proc/self/stat", O_RDONLY | O_CLOEXEC, 0);
  if (fd >= 0 && fd < 3) {             /* never a standard descriptor: the program may reopen them */
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    os_close(fd);
    fd = high;
  }
  if (fd >= 0 && !os_fd_id(fd, &stat_id)) {
    os_close(fd);
    fd = -1;
  }
  __atomic_store_n(&stat_fd, fd, __ATOMIC_RELEASE);   /* after stat_id: readers check against it */
}

/* This process's /proc/self/stat into buf: through the kept descriptor
 * while it is locus's, else by path; the length, or <= 0. */
static int stat_read(char *buf, size_t len) {
  int fd = __atomic_load_n(&stat_fd, __ATOMIC_ACQUIRE);
  if (fd >= 0 && os_fd_is(fd, &stat_id)) {
    long n = os_pread(fd, buf, len - 1, 0);
    if (n > 0) {
      buf[n] = 0;
      return (int)n;
    }
  }
  return os_read_file("/proc/self/stat", buf, len);
}

/* The threads of the process still running: field 20 of /proc/self/stat
 * (num_threads), less the main thread when it is gone through pthread_exit
 * (it stays counted, a zombie, field 3 'Z', until the last thread ends);
 * -1 unknown. */
int os_threads_live(void) {
  char buf[1024];
  if (stat_read(buf, sizeof buf) <= 0) return -1;
  char *q = strrchr(buf, ')');           /* after the command name, which may hold blanks */
  if (!q || q[1] != ' ') return -1;
  bool zombie = q[2] == 'Z';
  int field = 2;
  for (; *q && field < 20; q++)
    if (*q == ' ') field++;
  return field == 20 ? atoi(q) - zombie : -1;
}

static bool main_thread_zombie(void) {
  char buf[1024];
  if (stat_read(buf, sizeof buf) <= 0) return false;
  char *q = strrchr(buf, ')');
  return q && q[1] == ' ' && q[2] == 'Z';
}

int os_internal_thread_start(void *(*fn)(void *), void *arg) {
  atomic_fetch_add(&starting, 1);
  while (atomic_flag_test_and_set(&stat_busy)) os_yield();   /* two first creators at once */
  if (stat_fd < 0) stat_open();
  atomic_flag_clear(&stat_busy);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* The default stack, not a small one: when the program's threads are all
   * gone, this thread runs exit, and with it the program's atexit handlers. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  /* The program's mask: not the one of a hold of locus's, which blocks
   * everything (next touch starts its server inside one); SIGSEGV blocked
   * tells it, as programs do not block it. Without one, exit runs with
   * every signal deliverable. */
  if (!sigismember(&old, SIGSEGV) && !atomic_exchange(&program_mask_set, true)) program_mask = old;
  atomic_fetch_add(&internal_threads, 1);
  int err = pthread_create(&t, &attr, fn, arg);
  if (err) atomic_fetch_sub(&internal_threads, 1);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  atomic_fetch_sub(&starting, 1);
  return err;
}

void os_internal_thread_gone(void) { atomic_fetch_sub(&internal_threads, 1); }

bool os_internal_exit_due(void) {
  if (atomic_load(&starting)) return false;
  int live = os_threads_live();
  if (live <= 0 || live > atomic_load(&internal_threads) || atomic_load(&starting)) return false;
  return !atomic_exchange(&exiting, true);   /* false: another of locus's threads is ending the process */
}

/* An exit handler that ends this thread with pthread_exit abandons the
 * exit: another of locus's threads may then end the process. */
static void exit_abandoned(void *arg) {
  (void)arg;
  atomic_fetch_sub(&internal_threads, 1);
  atomic_store(&exiting, false);
}
void os_internal_exit(void) {
  sigset_t mask;
  if (atomic_load(&program_mask_set)) mask = program_mask;
  else sigemptyset(&mask);
  pthread_sigmask(SIG_SETMASK, &mask, NULL);
  pthread_cleanup_push(exit_abandoned, NULL);
  exit(0);
  pthread_cleanup_pop(0);
}

void os_internal_fork_child(void) {
  atomic_store(&internal_threads, 0);
  atomic_store(&starting, 0);
  atomic_store(&exiting, false);
  atomic_flag_clear(&stat_busy);
  if (stat_fd < 0) return;
  if (os_fd_is(stat_fd, &stat_id)) os_close(stat_fd);   /* the parent's file; a number the program reused stays */
  stat_open();                                          /* the child's */
}

int os_internal_threads(void) { return atomic_load(&internal_threads); }

bool os_page_resident(const void *p) {
  unsigned char v = 0;
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)(os_page_size() - 1);
  return mincore((void *)a, os_page_size(), &v) == 0 && (v & 1);
}

/* process_vm_readv on the process itself: a page that cannot be read (not
 * mapped, PROT_NONE, execute-only) fails with EFAULT instead of a signal. */
bool os_read_self(void *dst, const void *src, size_t len) {
  struct iovec l = {dst, len}, r = {(void *)src, len};
  int saved = errno;
  bool ok = syscall(SYS_process_vm_readv, getpid(), &l, 1UL, &r, 1UL, 0UL) == (long)len;
  errno = saved;
  return ok;
}

uint64_t os_random(void) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) r = arch_cycles() ^ (uintptr_t)&r;
  /* splitmix64 finaliser: spreads weak entropy over every bit */
  r += 0x9e3779b97f4a7c15ull;
  r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ull;
  r = (r ^ (r >> 27)) * 0x94d049bb133111ebull;
  return r ^ (r >> 31);
}

long os_gettid(void) { return syscall(SYS_gettid); }
static bool main_thread_zombie(void);
bool os_thread_gone(long tid) {
  int e = errno;
  int pid = getpid();
  /* The main thread after pthread_exit stays a zombie, which tgkill still
   * reaches, until the process ends: /proc says 'Z'. */
  bool gone = tid == pid ? main_thread_zombie() : syscall(SYS_tgkill, pid, tid, 0) == -1 && errno == ESRCH;
  errno = e;
  return gone;
}
int os_getpid(void) { return (int)getpid(); }

/* Asymmetric fences (membarrier, private expedited): registered once at
 * init; without it (old kernel, seccomp) os_membarrier says false. */
static bool membarrier_ok;
bool os_membarrier_init(void) {
  long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (q < 0 || !(q & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  membarrier_ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return membarrier_ok;
}
bool os_membarrier(void) {
  return membarrier_ok && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

int os_thread_cpus(uint64_t *bits, size_t words) {
  /* The raw call: it reports how many bytes of mask the kernel has, which the
   * glibc wrapper hides, and it takes any size (more than CPU_SETSIZE CPUs). */
  long n = syscall(SYS_sched_getaffinity, 0, words * sizeof(uint64_t), bits);
  if (n < 0) return -1;
  size_t w = ((size_t)n + 7) / 8;
  for (size_t i = w; i < words; i++) bits[i] = 0;
  return (int)w;
}

/* ---- file I/O that is never a cancellation point ----------------------------
 * open, read, pread, write and close are cancellation points in libc; malloc
 * and free must not be (POSIX lets no other function be one), and a deferred
 * cancel acted on inside them would unwind with a heap or source lock held
 * (the auto profile samples the pressure files from the slow paths, under
 * the heap's lock): the thread's own exit, then every fork(), would wait for
 * it forever. The raw system calls are not cancellation points. */
int os_open(const char *path, int flags, unsigned mode) {
  return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}
long os_read(int fd, void *buf, size_t len) { return syscall(SYS_read, fd, buf, len); }
long os_pread(int fd, void *buf, size_t len, int64_t off) { return syscall(SYS_pread64, fd, buf, len, (long)off); }
/* write: os_write_all, in sys.c (below the locks and messages). */

int os_read_file(const char *path, char *buf, size_t len) {
  int fd = os_open(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < len) {
    long r = os_read(fd, buf + n, len - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  os_close(fd);
  buf[n] = 0;
  return (int)n;
}

/* One line of /proc/self/maps ("start-end perms ..."): its range and
 * whether it is readable and writable; false when the line does not parse. */
static bool maps_line(const char *l, uintptr_t *start, uintptr_t *end, bool *rw) {
  uintptr_t v[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    const char *p0 = l;
    for (;; l++) {
      int d = *l >= '0' && *l <= '9' ? *l - '0' : *l >= 'a' && *l <= 'f' ? *l - 'a' + 10 : -1;
      if (d < 0) break;
      v[k] = v[k] << 4 | (uintptr_t)d;
    }
    if (l == p0 || *l++ != (k ? ' ' : '-')) return false;
  }
  *start = v[0];
  *end = v[1];
  *rw = l[0] == 'r' && l[1] == 'w';
  return true;
}

/* One mapping of /proc/self/maps against the walk: `next` moves past it;
 * false once the walk meets a gap or a piece that is not rw. */
static bool maps_step(const char *line, uintptr_t *next) {
  uintptr_t s, e;
  bool rw;
  if (!maps_line(line, &s, &e, &rw) || e <= *next) return true;
  if (s > *next || !rw) return false;
  *next = e;
  return true;
}

/* Streams /proc/self/maps (sorted by address) through a small buffer: the
 * range must be covered without a gap by readable, writable mappings.
 * A line longer than the buffer (a long path) is judged by its head, which
 * holds the range and permissions, and its tail skipped to its newline:
 * a tail is never read as a line of its own. 1 when writable, 0 when not,
 * -1 when the file cannot be read. */
int os_range_writable(uintptr_t a, size_t len) {
  int saved = errno;                   /* a successful heap creation leaves errno alone */
  int fd = os_open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    errno = saved;
    return -1;
  }
  char buf[4096];
  size_t have = 0;
  uintptr_t next = a, end = a + len;
  bool ok = true, eof = false, skipping = false;
  while (ok && !eof && next < end) {
    long r = os_read(fd, buf + have, sizeof buf - 1 - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) eof = true;
    else have += (size_t)r;
    buf[have] = 0;
    char *line = buf, *nl;
    while (ok && next < end && (nl = strchr(line, '\n'))) {
      *nl = 0;
      if (!skipping) ok = maps_step(line, &next);
      skipping = false;
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) {      /* a line longer than the buffer */
      if (!skipping) ok = maps_step(buf, &next);
      skipping = true;
      have = 0;
    }
  }
  os_close(fd);
  errno = saved;
  return ok && next >= end;
}

long os_pagemap_read(uintptr_t first, size_t n, uint64_t *entries) {
  int fd = os_open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got < n) {
    long r = os_pread(fd, (char *)entries + got * 8, (n - got) * 8, (int64_t)((first + got) * 8));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r / 8;
  }
  int saved = errno;
  os_close(fd);
  errno = saved;
  return got || !n ? (long)got : -1;
}

/* Opened without blocking: a FIFO with no reader fails (ENXIO) instead of
 * hanging the program (at its exit, for the statistics); the descriptor then
 * blocks again, so that a pipe with a slow reader gets every byte. */
int os_open_append(const char *path) {
  int fd = os_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
  if (fd >= 0) {
    int fl = fcntl(fd, F_GETFL);       /* F_GETFL/F_SETFL are not cancellation points */
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  return fd;
}

void os_close(int fd) { syscall(SYS_close, fd); }

bool os_secure(void) { return getauxval(AT_SECURE) != 0; }

/* Before libc has set `environ` (the dynamic loader may call malloc that
 * early), read the environment from /proc; the copy lives in a static buffer. */
static char env_copy[32768];
static size_t env_len;

static void env_copy_load(void) {
  if (!env_len) {
    int n = os_read_file("/proc/self/environ", env_copy, sizeof env_copy);
    env_len = n > 0 ? (size_t)n : 1;
  }
}

const char *os_getenv(const char *name) {
  if (os_secure()) return NULL;
  size_t nl = strlen(name);
  if (environ) {
    for (char **e = environ; *e; e++)
      if (!strncmp(*e, name, nl) && (*e)[nl] == '=') return *e + nl + 1;
    return NULL;
  }
  env_copy_load();
  for (size_t i = 0; i < env_len; i += strlen(env_copy + i) + 1)
    if (!strncmp(env_copy + i, name, nl) && env_copy[i + nl] == '=') return env_copy + i + nl + 1;
  return NULL;
}

/* Calls fn on every "NAME=value" entry of the environment that starts with
 * prefix, read from where os_getenv reads; nothing in secure-execution mode.
 * No allocation. */
void os_env_each(const char *prefix, void (*fn)(const char *entry, void *ctx), void *ctx) {
  if (os_secure()) return;
  size_t pl = strlen(prefix);
  if (environ) {
    for (char **e = environ; *e; e++)
      if (!strncmp(*e, prefix, pl)) fn(*e, ctx);
    return;
  }
  env_copy_load();
  for (size_t i = 0; i < env_len; i += strlen(env_copy + i) + 1)
    if (!strncmp(env_copy + i, prefix, pl)) fn(env_copy + i, ctx);
}

/* setenv(3), which allocates: only outside malloc, from a constructor. */
bool os_setenv(const char *name, const char *value) { return setenv(name, value, 1) == 0; }
