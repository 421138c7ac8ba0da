/* The OS layer: memory, processes, files. Every system call of locus is in
 * src/os/: this file, features.c, pressure.c, zero.c (calloc's clearing). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/membarrier.h>
#include <linux/mempolicy.h>

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
  return r == 0;
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

static os_fault_fn fault_ours;
static struct sigaction fault_previous;
LOCK_STATIC(fault_lock, LOCK_RANK_FAULT, "fault handler install")
static bool fault_installed;

static void fault_handler(int sig, siginfo_t *info, void *uctx) {
  int saved = errno;
  if (fault_ours && fault_ours(info->si_addr)) {
    errno = saved;
    return;                              /* the access is retried and now succeeds */
  }
  errno = saved;
  if (fault_previous.sa_flags & SA_SIGINFO) {
    if (fault_previous.sa_sigaction) {
      fault_previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (fault_previous.sa_handler != SIG_DFL && fault_previous.sa_handler != SIG_IGN) {
    fault_previous.sa_handler(sig);
    return;
  }
  /* Not ours and nobody else's: the default action, on the retried access. */
  signal(sig, SIG_DFL);
}

bool os_fault_handler_install(os_fault_fn ours) {
  lock_acquire(&fault_lock);
  bool ok = fault_installed;
  if (!ok) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    fault_ours = ours;
    ok = fault_installed = sigaction(SIGSEGV, &sa, &fault_previous) == 0;
  }
  lock_release(&fault_lock);
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
int os_getpid(void) { return (int)getpid(); }
void os_yield(void) { sched_yield(); }

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
static long os_write(int fd, const void *buf, size_t len) { return syscall(SYS_write, fd, buf, len); }

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

int os_open_append(const char *path) {
  return os_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
}

void os_close(int fd) { syscall(SYS_close, fd); }

bool os_write_all(int fd, const char *buf, size_t len) {
  while (len) {
    long w = os_write(fd, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    buf += w;
    len -= (size_t)w;
  }
  return true;
}

/* ---- stderr that survives the program closing it ------------------------- */
static int err_copy = -1;
static dev_t err_dev;
static ino_t err_ino;

void os_stderr_keep(void) {
  struct stat st;
  if (err_copy >= 0 || fstat(2, &st) != 0) return;
  /* A high number, away from the descriptors programs and shells number by
   * hand (exec 3>file); below 100 only when the limit is that low. */
  int fd = fcntl(2, F_DUPFD_CLOEXEC, 100);
  if (fd < 0) fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return;
  err_dev = st.st_dev;
  err_ino = st.st_ino;
  err_copy = fd;
}

/* fd 2 first when it is open: that honours the program's own redirections
 * (freopen, dup2). A descriptor 2 that the program closed and that a later
 * open reused cannot be told apart from a redirection; a write that fails on
 * it (a file opened read-only) falls back to the copy. */
void os_write_stderr(const char *buf, size_t len) {
  int saved = errno;
  if (fcntl(2, F_GETFD) >= 0 && os_write_all(2, buf, len)) {
    errno = saved;
    return;
  }
  struct stat st;                        /* the copy's number may have been reused since */
  if (err_copy >= 0 && fstat(err_copy, &st) == 0 && st.st_dev == err_dev && st.st_ino == err_ino)
    os_write_all(err_copy, buf, len);
  errno = saved;
}

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
