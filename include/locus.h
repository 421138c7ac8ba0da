/*
 * locus: a NUMA-aware memory allocator for HPC on Linux.
 *
 * locus replaces the C allocator (malloc, free, ... and the C++ operators new
 * and delete) when it is preloaded (LD_PRELOAD=liblocus.so) or linked
 * (-llocus). This header declares the extra, locus-specific API; the standard
 * allocation functions keep their usual declarations in <stdlib.h>/<malloc.h>.
 *
 * Every function here may be called at any time, from any thread, including
 * before the first malloc.
 */
#ifndef LOCUS_H
#define LOCUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOCUS_VERSION_MAJOR 0
#define LOCUS_VERSION_MINOR 3
#define LOCUS_VERSION_PATCH 0

/* Version string, e.g. "0.1.0". */
const char *locus_version(void);

/* ---- The allocator under its own names ------------------------------------
 * The same functions as malloc, free, ... . They always exist; a build with
 * -DLOCUS_NO_OVERRIDE=ON exports only these (no malloc/free/new/delete), which
 * lets locus run beside another allocator (sanitizers, fuzzers, comparisons). */
void *locus_malloc(size_t size);
void *locus_calloc(size_t count, size_t size);
void *locus_realloc(void *ptr, size_t size);
void *locus_reallocarray(void *ptr, size_t count, size_t size);
void  locus_free(void *ptr);
void  locus_free_sized(void *ptr, size_t size);
void  locus_free_aligned_sized(void *ptr, size_t alignment, size_t size);
int   locus_posix_memalign(void **out, size_t alignment, size_t size);
void *locus_aligned_alloc(size_t alignment, size_t size);
void *locus_memalign(size_t alignment, size_t size);
void *locus_valloc(size_t size);
void *locus_pvalloc(size_t size);
size_t locus_usable_size(const void *ptr);

/* ---- Profiles -------------------------------------------------------------
 * A profile sets how much freed memory the memory sources keep for reuse:
 *   "eco"  keep nothing: memory goes back to the OS at once (lowest footprint,
 *          but every large block is mapped and faulted anew: a program that
 *          frees and allocates large blocks in a loop runs several times
 *          slower than under glibc, up to 34x in docs/results.md);
 *   "uma"  keep up to LOCUS_CACHE_MAX bytes (default 500 MiB) in total;
 *   "numa" keep up to LOCUS_CACHE_MAX bytes per NUMA node;
 *   "auto" decide per source (per node, as numa) from how soon freed memory
 *          is reused and from memory pressure, up to LOCUS_CACHE_MAX.
 * The initial profile comes from LOCUS_PROFILE (default "auto").
 * Returns 0, or -1 with errno = EINVAL for an unknown name. Switching to a
 * profile with a smaller bound releases the excess at once. */
int locus_set_profile(const char *name);
const char *locus_get_profile(void);

/* ---- NUMA placement ----------------------------------------------------------
 * Memory from these functions is released with plain free(); realloc keeps
 * its placement. Node numbers are the kernel's (as numactl shows them). */

/* A block all of whose pages are on `node`, for every size (small blocks come
 * from chunks of that node). NULL with errno = EINVAL for a node that does
 * not exist, has no memory or is not allowed by the cpuset; ENOMEM as malloc. */
void *locus_malloc_on_node(size_t size, int node);

/* A block whose pages are spread round-robin over the allowed nodes. */
void *locus_malloc_interleaved(size_t size);

/* The node holding the page of p, or -1 if that page is not resident (never
 * touched, or not mapped). */
int locus_node_of(const void *p);

/* The node the calling thread's memory comes from: the node of its CPUs when
 * all the CPUs it may run on belong to one node, else -1 (not bound: memory
 * from the generic source, placed by first touch unless LOCUS_NUMA says
 * otherwise). */
int locus_thread_node(void);

/* Re-evaluates the calling thread's node after sched_setaffinity or a
 * migration; when it changed, the thread's later allocations come from the
 * new node (blocks it holds stay valid). Returns the node, as
 * locus_thread_node. */
int locus_rebind(void);

/* Migrate-on-next-touch: the pages of [p, p+len), inside one large block
 * (above LOCUS_LARGE_THRESHOLD), move to the node of the next thread that
 * touches them (whole pages; the block's pages only). Returns 0, or -1 with
 * errno = EINVAL (not inside one live large block of locus, len 0), EBUSY
 * (overlaps a range not yet touched), EAGAIN (256 ranges pending), ENOMEM
 * (the kernel refused to change the mapping). Any number of threads may
 * touch a pending range at once, also while other ranges are marked,
 * resolved or freed. Freeing or resizing the block cancels what is still
 * pending.
 *
 * Two traps (LOCUS_NEXT_TOUCH, docs/numa.md): with userfaultfd (root, or
 * access to /dev/userfaultfd, or CAP_SYS_PTRACE; Linux 6.8) every access
 * waits for the migration, system calls included (tested: read and write;
 * the kernel's other accesses to user memory, recv or MPI receives, fault
 * the same way), and fork brings pending pages back first. Otherwise page protection (PROT_NONE) and a SIGSEGV handler
 * that passes every other fault to the program's own SIGSEGV disposition,
 * whether set before or after (sigaction and signal are interposed while the
 * handler is installed; a handler set by other means is detected at the next
 * call, reported and chained to); then a system call that reads or writes a
 * pending range fails with EFAULT (the kernel does not fault on behalf of a
 * system call): call locus_next_touch_resolve on the buffer first. */
int locus_next_touch(void *p, size_t len);

/* Makes the pending next-touch groups meeting [p, p+len) accessible now,
 * moving them to the calling thread's node (groups another thread is moving
 * are waited for): the buffer can then be handed to a system call. Memory
 * with nothing pending (any memory, locus's or not) is left as it is.
 * Returns 0, or -1 with errno = EINVAL (p NULL with len > 0, p + len wraps). */
int locus_next_touch_resolve(void *p, size_t len);

/* Physical page colours (S. Valat, PhD thesis, 2014, Ch.3): a physically
 * indexed cache of size S with A ways and pages of U bytes has S / A / U page
 * colours, and a page of frame number F has colour F mod colours. Adds to
 * counts[c] (colors entries, the caller clears them) the pages of [p, p+len)
 * that are present in memory and have colour c. Returns the number of pages
 * counted, or -1 with errno = EINVAL (p or counts NULL, colors 0), EPERM (the
 * kernel hides frame numbers: the process lacks CAP_SYS_ADMIN), or the error
 * of reading /proc/self/pagemap. Works on any memory, not only locus's. */
long locus_page_colors(const void *p, size_t len, unsigned colors, size_t *counts);

/* Return every cached (free but retained) byte of every memory source to the
 * OS now. Returns the number of bytes released. Resident memory goes down. */
size_t locus_release(void);

/* Bytes currently cached (retained for reuse) by all memory sources. */
size_t locus_cached_bytes(void);

/* Reclaim what the calling thread's heap can give back now: drain its queue of
 * blocks freed by other threads and return its empty macro-blocks. */
void locus_collect(void);

/* ---- Options ----------------------------------------------------------------
 * Every LOCUS_* environment variable is an option (the README lists them all).
 * `name` is the short name ("cache_max") or the variable ("LOCUS_CACHE_MAX").
 *
 * locus_option_get writes the current value as text (sizes with a k/M/G/T
 * suffix, booleans as 0/1) into buf, NUL-terminated when len > 0, and returns
 * the length the whole value needs (like snprintf), or -1 with errno = EINVAL
 * for an unknown name.
 *
 * locus_option_set parses `value` as the environment variable would be and
 * applies it at once (a smaller cache bound releases the excess). Returns 0,
 * or -1 with errno = EINVAL (unknown name, malformed or out-of-range value:
 * nothing changes) or EBUSY (the option is fixed at start-up, e.g.
 * large_threshold). */
int locus_option_get(const char *name, char *buf, size_t len);
int locus_option_set(const char *name, const char *value);

/* ---- Checking ---------------------------------------------------------------
 * Validates the calling thread's heap (runs, free lists, medium blocks and
 * their bins, registry entries) and the memory sources' accounting. Returns 0
 * when everything holds; a violation aborts with a message naming it (the
 * heap is corrupt: continuing could only spread the damage). Costs a walk of
 * the thread's heap: for tests and debugging, not for production loops. The
 * LOCUS_DEBUG build also runs it by itself on slow paths. */
int locus_heap_check(void);

/* ---- Statistics ----------------------------------------------------------- */
typedef struct locus_stats {
  uint64_t bytes_in_use;        /* bytes of live large segments and heap macro-blocks */
  uint64_t bytes_cached;        /* bytes retained by the memory sources */
  uint64_t peak_footprint;      /* highest bytes_in_use + bytes_cached seen */
  uint64_t mmap_calls, munmap_calls, mremap_calls, madvise_calls;
  uint64_t cache_hits, cache_misses;
  uint64_t bytes_returned;      /* bytes given back to the OS (munmap/madvise) */
  uint64_t heaps_live, heaps_orphaned;
  /* Added in 0.3 with the auto profile and LOCUS_THP (the struct grew: 0.3 is a
   * new ABI, liblocus.so.0.3). */
  uint64_t bytes_huge;          /* whole 2 MiB pages of live large blocks placed and advised for THP */
  uint64_t bytes_decayed;       /* auto: cached bytes released because they were not reused in time */
  uint64_t bytes_pressure_released;  /* auto: cached bytes released under memory pressure */
} locus_stats_t;

/* ---- Heaps (docs/heaps.md) ----------------------------------------------------
 * A heap of your own, beside the per-thread heaps that serve malloc: over a
 * segment you give it (shared memory, a file or hugetlbfs mapping, pinned
 * pages, an MPI window), over a memory source of yours that can grow it, or
 * over locus's own memory placed on one node or interleaved. Its blocks are
 * ordinary blocks: free, realloc (the block stays in its heap),
 * malloc_usable_size and C++ delete work on them, from any thread. Any
 * thread may allocate from any heap without a lock (each thread gets a
 * sub-heap of its own); frees take no lock. locus_heap_destroy drops every
 * block at once, in time proportional to the heap's memory segments, not its
 * blocks; locus_heap_reset does the same and keeps the memory for the next
 * round.
 * After S. Valat, PhD thesis, 2014, §4.13 (heaps over special segments). */
typedef struct locus_heap locus_heap_t;

/* A memory source of yours: map returns `size` bytes aligned on `align` (a
 * power of two, at least the page size) or NULL when exhausted; unmap gets
 * back exactly what one map returned, when the heap is destroyed (unmap may
 * be NULL: the memory is then left to you). map is called with the heap's
 * lock held (it may call malloc, which then uses the thread's default heap,
 * never this one); unmap with no lock held. */
typedef struct locus_source_ops {
  void *(*map)(void *ctx, size_t size, size_t align);
  void (*unmap)(void *ctx, void *p, size_t size);
  void *ctx;
} locus_source_ops_t;

/* Blocks are released only by locus_heap_reset/destroy: free() of one aborts
 * naming the heap (a region allocator: per-time-step temporaries). */
#define LOCUS_HEAP_ARENA 1u

typedef struct locus_heap_config {
  size_t struct_size;          /* sizeof(locus_heap_config_t): lets the struct grow */
  void *segment;               /* memory to manage, or NULL: mapped readable and writable,
                                  aligned on 4 KiB (x86-64) or 64 KiB (aarch64), >= 1 MiB,
                                  not from malloc */
  size_t segment_size;         /* its bytes (rounded down to whole pages) */
  const locus_source_ops_t *source;  /* grows the heap (after the segment, if any), or NULL */
  int node;                    /* -1: first touch; >= 0: every page on that node (locus's memory only) */
  int interleave;              /* 1: pages interleaved over the allowed nodes (locus's memory only) */
  size_t limit;                /* 0: none; else the heap holds at most this many bytes of
                                  memory (NULL + ENOMEM past it) */
  unsigned flags;              /* LOCUS_HEAP_ARENA */
  const char *name;            /* for reports and error messages (copied), or NULL */
} locus_heap_config_t;
#define LOCUS_HEAP_CONFIG_INIT { sizeof(locus_heap_config_t), 0, 0, 0, -1, 0, 0, 0, 0 }

/* NULL with errno EINVAL for a bad configuration (wrong struct_size, a
 * segment that is NULL, too small, misaligned or overlapping memory another
 * heap or locus manages, a node that is not allowed, unknown flags), ENOMEM
 * when no record can be had. */
locus_heap_t *locus_heap_create(const locus_heap_config_t *cfg);
/* Every block still in the heap is gone; its memory goes back to its source
 * (locus's memory to locus's source, which keeps it or releases it as the
 * profile says, as for freed blocks; a segment to you). No thread may use the heap
 * or its blocks meanwhile. Destroying a heap twice, or one that a thread has
 * captured, aborts with a message naming it (a handle carries its record's
 * generation: a stale handle is recognised after the record serves another
 * heap, unless that record was reused a multiple of 65,536 times since). */
void locus_heap_destroy(locus_heap_t *h);
/* The same, but the heap keeps its memory: the next allocations reuse its
 * pages without faults. */
void locus_heap_reset(locus_heap_t *h);
void *locus_heap_malloc(locus_heap_t *h, size_t size);
void *locus_heap_calloc(locus_heap_t *h, size_t n, size_t size);
/* A block of another heap (or of malloc) moves into h; NULL p allocates. */
void *locus_heap_realloc(locus_heap_t *h, void *p, size_t size);
void *locus_heap_aligned_alloc(locus_heap_t *h, size_t align, size_t size);
/* The heap a block belongs to; NULL for the default heaps (malloc's). */
locus_heap_t *locus_heap_of(const void *p);
/* From now on this thread's malloc, calloc, realloc of NULL, aligned
 * allocations and C++ new go to h (NULL: back to the default heaps), until
 * the next call; returns the heap captured before (NULL: the default).
 * Allocations made while the heap's own lock is held (its source's map)
 * go to the default heap. A thread's exit ends its capture. */
locus_heap_t *locus_heap_capture(locus_heap_t *h);
/* The heap's own figures: bytes_in_use (memory it holds: chunks and large
 * blocks), bytes_cached (free memory of its segment and source pieces),
 * peak_footprint (highest bytes_in_use), cache_hits (allocations),
 * bytes_huge 0; the rest 0. 0, or -1 with errno EINVAL for a NULL argument;
 * like every locus_heap_* call, a destroyed heap aborts naming it. */
int locus_heap_stats(locus_heap_t *h, locus_stats_t *st);
/* The heap's name (as configured, or "heap#N"). */
const char *locus_heap_name(const locus_heap_t *h);

/* ---- Page sharing (docs/sharing.md) -------------------------------------------
 * After S. Valat, PhD thesis, 2014, Ch.6: simulations hold many identical
 * pages (tables duplicated in every rank, meshes of zeros).
 *
 * locus_merge advises the kernel's same-page merging (KSM, MADV_MERGEABLE)
 * for the whole pages inside [p, p + len), which must lie in one block or
 * chunk of locus; locus_unmerge withdraws it (merged pages are copied back).
 * 0, or -1 with errno: EINVAL (no whole page inside, or not locus's memory),
 * ENOSYS (a kernel without KSM). LOCUS_KSM=large|all advises locus's own
 * memory by itself. The kernel merges only while /sys/kernel/mm/ksm/run is 1. */
int locus_merge(void *p, size_t len);
int locus_unmerge(void *p, size_t len);
/* A zero-filled block whose pages are a memory file's (memfd), so that
 * locus_cow_copy can share them: free, realloc (it stays shareable) and
 * malloc_usable_size work on it. NULL with errno ENOMEM, ENOSYS without
 * memfd, EMFILE without a file descriptor left: it costs one while it (or a
 * copy of it) lives. */
void *locus_malloc_shareable(size_t size);
/* A copy of [src, src + len), which must lie inside one shareable block (or
 * a copy), that shares src's pages until either side writes: each side then
 * gets private pages (snapshot semantics both ways); the copy is itself
 * shareable and is released with free(). No thread may write the source
 * during the call. NULL with errno EINVAL (not inside a live shareable
 * block), ENOMEM. */
void *locus_cow_copy(const void *src, size_t len);

/* ---- Shared tables ----------------------------------------------------------
 * One read-only copy per NUMA node of a table that several processes of a
 * user need (tables of constants read by every MPI rank of a node), instead
 * of one copy each (docs/sharing.md, "Shared tables").
 *
 * locus_shared_table returns the table called `name` of the calling thread's
 * node (the node it is bound to, else the node of the CPU it runs on),
 * mapped read-only: a write faults (SIGSEGV). The first process to ask
 * creates it on that node and calls init(table, size, arg) on a writable
 * mapping (init NULL: the table stays zero); the others, and the other
 * threads of the process, wait for init to return (asleep; a process killed
 * during init lets the next one initialise it) and get the same contents,
 * which init must fill the same way in every process. Returns the table
 * (page-aligned), or NULL with errno = EINVAL (name NULL, empty, longer than
 * LOCUS_SHARED_TABLE_NAME_MAX bytes or holding '/'; size 0), EEXIST (the
 * table exists with another size), ENOSYS (no /dev/shm), EDEADLK (init asks
 * for its own table; two inits asking for each other's table wait for ever,
 * as nested pthread_once would), EMFILE (64 tables mapped by the process,
 * or no file descriptor left), ENOMEM,
 * EACCES (the file under that name belongs to another user), or the error of
 * the file system. Every successful call is matched by a release; the last
 * release in a process unmaps its view, and the table is removed when no
 * process maps it any more (or at the exit of its last user; docs/sharing.md
 * says what a crash leaves). */
#define LOCUS_SHARED_TABLE_NAME_MAX 64
void *locus_shared_table(const char *name, size_t size,
                         void (*init)(void *table, size_t size, void *arg), void *arg);
/* 0, or -1 with errno = EINVAL (not a table of locus_shared_table, or
 * already released as many times as it was returned). */
int locus_shared_table_release(void *table);

/* ---- Overlap (liblocus-overlap.so; docs/overlap.md) -----------------------
 * The interface of the overlap library (blocking MPI calls run in the
 * background, buffers guarded by page protection), not meant for programs.
 * locus_overlap_enable: from now on, blocks of at least min_bytes (0: off)
 * from the default heaps are memory-file-backed, page-aligned large blocks.
 * locus_overlap_span: when [p, p + len) lies in one such block (not frozen
 * by a fork or locus_cow_copy), the pages covering it (start, len) and the
 * same pages in a shadow view with normal permissions (shadow); else -1,
 * EINVAL. locus_overlap_protect: those pages' protection: 0 none, 1 read,
 * 3 read-write. locus_overlap_hooks: `fault` is offered each SIGSEGV after
 * next touch (non-zero: handled, the access is retried; async-signal-safe),
 * `quiesce` runs before a memory-file block is freed or frozen, with its
 * pages. 0, or -1 with errno. */
typedef struct { void *start; size_t len; void *shadow; } locus_overlap_span_t;
int locus_overlap_enable(size_t min_bytes);
int locus_overlap_span(const void *p, size_t len, locus_overlap_span_t *out);
int locus_overlap_protect(void *start, size_t len, int prot);
int locus_overlap_hooks(int (*fault)(void *addr, int access_error), void (*quiesce)(void *start, size_t len));

/* Fill *st with process-wide totals. */
void locus_stats_get(locus_stats_t *st);

/* Print a readable report to stderr (or the file named by LOCUS_STATS_FILE,
 * where %p is the process id, %r the MPI rank, %% a percent sign). It keeps
 * apart what the program holds (large blocks live; small and medium blocks
 * only as the heap chunks they come from), what locus reserved (mapped
 * through the memory sources: bytes_in_use + bytes_cached) and what is
 * resident for the whole process. */
void locus_stats_print(void);

/* Write the statistics as one JSON object into buf (always NUL-terminated when
 * len > 0); beside the fields above it has bytes_reserved, bytes_large_live,
 * bytes_chunks and bytes_resident, as in the report. Returns the length the full text needs, excluding the NUL, like
 * snprintf: a return value >= len means the text was truncated. */
size_t locus_stats_json(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* LOCUS_H */
