/* The OS layer: every system call locus makes goes through here (a test greps
 * the rest of src/ for system calls), so the statistics count them, the
 * kernel-feature record knows what may be used, and a port touches one file. */
#ifndef LOCUS_OS_H
#define LOCUS_OS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os/sys.h"              /* futex, yield, stderr: below util/ */

/* ---- memory ------------------------------------------------------------- */
void *os_map(size_t size);                 /* fresh zeroed pages or NULL */
/* Fresh pages for memory that goes back to the kernel and comes again: with
 * the kernel's page reuse (os_features.page_reuse) the mapping is marked
 * OS_MAP_PAGE_REUSE and its faults may bring back pages this process freed,
 * not cleared; *zeroed tells whether every byte is known zero. os_map()
 * without the feature. */
void *os_map_reusable(size_t size, bool *zeroed);
/* The same, starting on a multiple of `align` (huge pages: the locus kernel
 * series pools 2 MiB pages too, kernel/0003). */
void *os_map_aligned_reusable(size_t size, size_t align, bool *zeroed);
/* Mappings made with page reuse so far (statistics). */
size_t os_page_reuse_maps(void);
bool os_unmap(void *p, size_t size);
void *os_remap(void *p, size_t old_size, size_t new_size, bool may_move);
bool os_free_lazily(void *p, size_t size);  /* MADV_FREE, or MADV_DONTNEED without it */
/* Grows [p, p+old_size) to new_size: in place if the kernel can, else moved
 * (page tables, no copy) to a start that is a multiple of `align`, so that
 * huge pages move whole instead of being split. NULL when neither works. */
void *os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align);
/* ---- page sharing (share.c) ---------------------------------------------- */
/* MADV_MERGEABLE / MADV_UNMERGEABLE over [p, p+size): 0, or an errno
 * (ENOSYS when the kernel has no KSM). */
int os_merge(void *p, size_t size, bool on);
bool os_ksm_present(void);
typedef struct { uint64_t merging_pages, zero_pages, rmap_items, process_profit; } os_ksm_t;
/* This process's KSM figures (/proc/self/ksm_stat); false when the kernel has none. */
bool os_ksm_self(os_ksm_t *k);
/* A memory file of `size` bytes (memfd_create, close-on-exec): its descriptor, or -errno. */
int os_memfd(size_t size);
void os_memfd_close(int fd);
/* Maps [off, off+size) of the file at `at` (MAP_FIXED; NULL: anywhere), shared or private. */
void *os_map_file(void *at, size_t size, int fd, size_t off, bool shared);
/* Records that are never unmapped (heap records, user heap descriptors,
 * memory-file records), cut from mappings of `len` bytes: a stale pointer to
 * one always names valid memory. The caller serialises the calls. */
typedef struct { char *next, *end; } os_slab_t;
void *os_slab_take(os_slab_t *s, size_t size, size_t len);
/* Fresh private anonymous pages at `at` (MAP_FIXED). */
void *os_map_fixed(void *at, size_t size);
/* ---- clearing recycled memory for calloc (zero.c) ------------------------ */
/* Clears [p, p+size) (page-aligned bounds): exactly the pages that hold data,
 * present or swapped out (mincore, then /proc/self/pagemap where the system
 * has swap; a page that cannot be classified is cleared), so an empty page
 * is not faulted in. Long present runs and swapped pages are dropped
 * (MADV_DONTNEED), the rest written. keep_huge: present runs are dropped
 * only on whole huge-page boundaries, the edges written, so no huge page is
 * split. Every page is written once a page-reuse mapping exists (a fault
 * there may bring back old data). errno is left as it was. */
void os_zero_recycled(void *p, size_t size, bool keep_huge);
/* What os_zero_recycled knows of a page, and what it does with a run. */
enum { OS_ZERO_EMPTY = 0, OS_ZERO_PRESENT = 1, OS_ZERO_SWAPPED = 2 };
enum { OS_ZERO_WRITE = 0, OS_ZERO_DROP = 1 };
/* The state of a page from its /proc/self/pagemap entry. */
unsigned char os_zero_page_state(uint64_t entry);
/* The clearing of the n pages at base whose states are st[]: act(ctx, kind,
 * start, length) for each run to write or drop, in address order. */
typedef void (*os_zero_act_fn)(void *ctx, int kind, char *start, size_t len);
void os_zero_plan(char *base, size_t n, const unsigned char *st, bool keep_huge, os_zero_act_fn act, void *ctx);
/* Test hook, flags: none (OS_ZERO_REAL) asks the kernel whether there is
 * swap; OS_ZERO_SWAP acts as if there were; OS_ZERO_NO_PAGEMAP also as if
 * /proc/self/pagemap could not be opened; OS_ZERO_SWAP_LATE as if swap were
 * turned on just after a call's first check. */
enum { OS_ZERO_REAL = 0, OS_ZERO_SWAP = 1, OS_ZERO_NO_PAGEMAP = 2, OS_ZERO_SWAP_LATE = 4 };
void os_zero_test_mode(int mode);
/* Fresh zeroed pages whose start is a multiple of `align` (a power of two
 * above the page size): maps size + align and unmaps the excess head and tail. */
void *os_map_aligned(size_t size, size_t align);
/* MADV_HUGEPAGE over [p, p+size): the kernel may back it with transparent
 * huge pages in "madvise" mode. Advise whole mappings only: advising part of
 * one splits the kernel's mapping (and mremap cannot grow across the split). */
bool os_advise_huge(void *p, size_t size);
/* MADV_NOHUGEPAGE over [p, p+size): no more huge pages there (withdraws the
 * advice above; in "always" mode, opts the mapping out). */
bool os_advise_nohuge(void *p, size_t size);
/* Writes a zero byte at p, the first touch of a fresh page (it faults), and
 * returns the time it took: thread CPU time if cpu (a preemption does not
 * count; two system calls), else monotonic time (vDSO). Never 0. */
uint64_t os_touch_ns(void *p, bool cpu);
/* The first-touch fault of a base page now, in ns: a fresh 4-page mapping
 * whose first page is touched (the page table is set up), then the next
 * three timed one by one; the least of the three. 0 if it cannot map. */
uint64_t os_base_fault_ns(void);

/* ---- clocks --------------------------------------------------------------- */
/* Monotonic nanoseconds from the coarse clock: the vDSO answers it without
 * entering the kernel (tens of nanoseconds); resolution one tick (1-4 ms). */
uint64_t os_clock_coarse_ns(void);

/* ---- memory pressure (pressure.c) ----------------------------------------- */
/* What the machine and the process's cgroup say about memory, read from
 * /proc and /sys (a few small file reads: callers rate-limit it). A field
 * that cannot be read is SIZE_MAX (sizes) or -1 (psi). */
typedef struct {
  int psi_some_avg10;          /* the larger of /proc/pressure/memory "some avg10" and (v2) the
                                  cgroup's memory.pressure one, in hundredths of a percent */
  size_t mem_available;        /* /proc/meminfo MemAvailable, bytes */
  size_t cg_limit;             /* the tightest limit: v2 the smaller of memory.max and memory.high
                                  of the cgroup and its ancestors, v1 memory.limit_in_bytes;
                                  SIZE_MAX: none */
  size_t cg_usage;             /* usage of the cgroup that limit belongs to (v2 memory.current,
                                  v1 memory.usage_in_bytes) less its inactive file pages
                                  (memory.stat), which the kernel reclaims first */
  size_t cg_events;            /* v2: times the cgroup could not stay under memory.max even
                                  after reclaim (memory.events "oom"), summed over the levels;
                                  SIZE_MAX: unknown (v1, no cgroup) */
  int cg_version;              /* 1, 2, or 0 when the process is in no memory cgroup found */
} os_pressure_t;
void os_memory_pressure(os_pressure_t *out);

/* ---- NUMA ----------------------------------------------------------------- */
/* Memory policies of a range, applied before its first touch (mbind); masks
 * are bitmaps of node ids, OS_NODE_WORDS 64-bit words. */
#define OS_NODE_WORDS 1                    /* node ids 0..63 */
typedef enum { OS_POLICY_DEFAULT = 0, OS_POLICY_PREFERRED, OS_POLICY_BIND, OS_POLICY_INTERLEAVE } os_policy_t;
bool os_set_policy(void *p, size_t size, os_policy_t policy, const uint64_t *nodes);
/* Node of each page (status[i]: node, or a negative errno such as -ENOENT
 * for a page not resident); false if the kernel has no NUMA support. */
bool os_page_nodes(void *const *pages, size_t n, int *status);
/* Moves pages to nodes[i] (batched move_pages); status as above. */
bool os_move_pages(void *const *pages, size_t n, const int *nodes, int *status);
/* Nodes the process may allocate on (cpuset mems), from the kernel. */
bool os_allowed_nodes(uint64_t *nodes);
/* The node of the CPU the calling thread runs on now, or -1. */
int os_current_node(void);

/* ---- protection and faults (next-touch) ----------------------------------- */
bool os_protect(void *p, size_t size, bool accessible);
/* Read-only (prot 1), no access (0) or read-write (3): the overlap library's
 * protection of buffers in transfer (docs/overlap.md). */
bool os_protect_mode(void *p, size_t size, int prot);
/* Installs a SIGSEGV handler that asks `ours` (and the engines installed
 * before it: next touch, overlap; up to 4) about each fault (the address,
 * and whether it is an access error, SEGV_ACCERR): true means handled, the
 * access is retried; a fault it does not claim goes to the program's own
 * disposition (the one installed before, or set later with sigaction or
 * signal, which are interposed while the handler is installed), with that
 * disposition's semantics. Called again, it re-arms the handler if the
 * program replaced it behind locus's back (and says so on stderr).
 * Async-signal-safe `ours` only; its frame must fit a small alternate
 * signal stack. */
typedef bool (*os_fault_fn)(void *addr, bool access_error);
bool os_fault_handler_install(os_fault_fn ours);
/* Whether SIGSEGV's disposition is locus's handler now (tests). */
bool os_fault_handler_armed(void);

/* ---- userfaultfd (next touch, docs/numa.md) ------------------------------ */
/* A userfaultfd that handles kernel faults too, with UFFDIO_MOVE (Linux 6.8):
 * through /dev/userfaultfd (its file permissions), else the system call
 * (CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd=1); -1 with errno when
 * neither is allowed. *thread_id: fault messages carry the faulting tid. */
int os_uffd_open(bool *thread_id);
bool os_uffd_register(int fd, void *p, size_t len);      /* missing-page faults go to fd */
bool os_uffd_unregister(int fd, void *p, size_t len);    /* wakes the faults waiting there */
/* Moves the pages of [src, src+len) to dst (page tables, no copy; holes
 * allowed) and wakes waiters: bytes done, or -errno when none was. */
long os_uffd_move(int fd, void *dst, void *src, size_t len);
bool os_uffd_copy(int fd, void *dst, void *src, size_t len);   /* EEXIST counts as done */
void os_uffd_wake(int fd, void *p, size_t len);          /* wakes the faults waiting there */
/* A descriptor's identity (fstat's device and inode), to tell whether a
 * number locus keeps still names its file after the program may have
 * closed and reused it. os_fd_is keeps errno. */
typedef struct { uint64_t dev, ino; } os_fd_id_t;
bool os_fd_id(int fd, os_fd_id_t *id);
bool os_fd_is(int fd, const os_fd_id_t *id);
typedef struct { uintptr_t addr; long tid; } os_uffd_fault_t;
/* (The descriptor is non-blocking: poll needs it.) Waits up to timeout_ms for fault messages: the number of page faults
 * read (0 on timeout), -1 on error (EBADF: fd no longer names the file of
 * id). */
int os_uffd_read(int fd, const os_fd_id_t *id, os_uffd_fault_t *out, int max, int timeout_ms);
void *os_reserve(size_t len);                            /* PROT_NONE address space */
/* Moves the pages of [p, p+len) to dst (replacing what is there), leaving p
 * mapped and empty (mremap MREMAP_DONTUNMAP). */
bool os_move_aside(void *p, size_t len, void *dst);
void os_release(void *p, size_t len);                    /* munmap, not counted as returned memory */
int os_tid_cpu(long tid);                                /* the CPU a thread of this process last ran on */
/* The process's running threads (/proc/self/stat), -1 unknown. */
int os_threads_live(void);
/* locus's own threads (the KSM sampler, the userfaultfd server): started
 * detached with every signal blocked and counted before they exist (0 or
 * the pthread_create error). Each asks os_internal_exit_due from time to
 * time: when no program thread is left, the process exits (status 0, as
 * when a last thread ends), the exit handlers under the mask of the
 * program thread that started the first of them. A thread that returns
 * calls os_internal_thread_gone. A fork child has none of them: the fork
 * hooks of their owners call os_internal_fork_child. */
int os_internal_thread_start(void *(*fn)(void *), void *arg);
void os_internal_thread_gone(void);
/* Whether this thread is to end the process now (no program thread left;
 * true for one caller only): it then puts right what only it could serve
 * (pending next-touch ranges) and calls os_internal_exit. */
bool os_internal_exit_due(void);
_Noreturn void os_internal_exit(void);
void os_internal_fork_child(void);
int os_internal_threads(void);

/* Whether the page holding p is resident (mincore). */
bool os_page_resident(const void *p);
/* Copies len bytes of this process's memory without faulting: false (no
 * signal) when a page is unmapped or not readable. */
bool os_read_self(void *dst, const void *src, size_t len);

/* ---- processes, threads, files ------------------------------------------ */
uint64_t os_random(void);
long os_gettid(void);
/* Whether thread tid of this process is gone (tgkill with signal 0 says
 * ESRCH). A live thread is never called gone; a gone one may be called
 * alive when a new thread took its number. errno kept. */
bool os_thread_gone(long tid);
int os_getpid(void);
/* Every running thread of the process executes a full memory barrier before
 * this returns (membarrier private expedited): the other side of a fence
 * that the fast paths leave to the compiler. False when unavailable. */
bool os_membarrier(void);
bool os_membarrier_init(void);             /* once, at init */
/* The CPUs the calling thread may run on, as a bitmap of `words` 64-bit words;
 * returns the number of words the kernel filled, or -1. */
int os_thread_cpus(uint64_t *bits, size_t words);
/* Reads an environment variable without allocating (works before libc init).
 * In secure-execution mode (setuid, setgid, capabilities) it returns NULL for
 * every variable: see os_secure(). */
const char *os_getenv(const char *name);
/* Calls fn on each "NAME=value" entry of the environment whose name starts
 * with prefix (none in secure-execution mode); no allocation. */
void os_env_each(const char *prefix, void (*fn)(const char *entry, void *ctx), void *ctx);
/* setenv(3): allocates through malloc, so never from inside it. */
bool os_setenv(const char *name, const char *value);
/* The file I/O below goes through the raw system calls, which are never
 * cancellation points (a deferred pthread_cancel must not act inside malloc,
 * where locks are held): use these, not open/read/write/close. */
int os_open(const char *path, int flags, unsigned mode);
long os_read(int fd, void *buf, size_t len);
long os_pread(int fd, void *buf, size_t len, int64_t off);
int os_read_file(const char *path, char *buf, size_t len);
/* The /proc/self/pagemap entries of the n pages from page number `first`
 * (address / page size): bit 63 present, bits 0-54 the frame number (0 when
 * the kernel hides it). Returns the entries read, or -1 (errno set). */
long os_pagemap_read(uintptr_t first, size_t n, uint64_t *entries);
/* Whether [a, a + len) is mapped readable and writable without a gap, from
 * /proc/self/maps: 1 yes, 0 no, -1 cannot tell. No allocation. */
int os_range_writable(uintptr_t a, size_t len);
/* A file opened for appending (created 0644), or -1. */
int os_open_append(const char *path);
void os_close(int fd);
/* True in secure-execution mode (AT_SECURE): the process gained privileges
 * through exec, and its environment comes from a less privileged user. */
bool os_secure(void);

/* ---- kernel features, probed once at start ------------------------------- */
typedef enum { THP_UNSUPPORTED = 0, THP_NEVER, THP_MADVISE, THP_ALWAYS } thp_mode_t;

/* The madvise advice of locus's kernel page-reuse series (kernel/): memory
 * freed in a range so marked may come back to the same process without being
 * cleared. A stock kernel rejects the advice with EINVAL. */
#define OS_MADV_PAGE_REUSE 26
/* The same as an mmap flag, for private anonymous mappings (ignored
 * elsewhere, as by a stock kernel: probe with the advice). */
#define OS_MAP_PAGE_REUSE 0x200000

typedef struct {
  size_t page_size;            /* the kernel's base page size */
  size_t huge_page_size;       /* PMD-sized transparent huge page, 0 if none */
  thp_mode_t thp;              /* /sys/kernel/mm/transparent_hugepage/enabled */
  int numa_balancing;          /* /proc/sys/kernel/numa_balancing, -1 if absent */
  bool madv_free;              /* MADV_FREE (Linux 4.5) */
  bool madv_populate_write;    /* MADV_POPULATE_WRITE (Linux 5.14) */
  bool page_reuse;             /* OS_MADV_PAGE_REUSE (locus kernel series) */
  bool numa;                   /* the kernel has NUMA system calls (mbind, move_pages) */
  bool secure;                 /* secure-execution mode */
  char kernel[65];             /* uname release */
} os_features_t;

extern os_features_t os_features;
void os_features_probe(void);
const char *os_thp_name(thp_mode_t m);
static inline size_t os_page_size(void) { return os_features.page_size; }

/* Test hook (unit tests): the next n calls to os_map fail as if the kernel
 * refused, so that out-of-memory paths can be tested without exhausting memory. */
void os_inject_map_failures(int n);

#endif /* LOCUS_OS_H */
