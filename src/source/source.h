/* Memory sources: a cache of freed segments between the heaps and the OS,
 * one per NUMA node plus a generic one (Valat, PhD thesis, 2014, §4.7). */
#ifndef LOCUS_SOURCE_H
#define LOCUS_SOURCE_H

#include "source/adapt.h"
#include "types.h"
#include "util/lock.h"

typedef struct seg_s {
  void *base;
  size_t size;
  uint64_t stamp;              /* age, for eviction of the oldest */
  uint64_t ns;                 /* when it was cached (auto profile: coarse clock) */
  uint64_t stale_ns;           /* auto, chunks: when a tick first found it past its window, or 0 */
  uint32_t map;                /* kernel mapping it lies in */
  bool huge;                   /* its mapping is advised for huge pages (REGION_HUGE) */
  bool chunk;                  /* freed as a heap chunk (auto profile: its kind, adapt.h) */
  bool merge;                  /* advised MADV_MERGEABLE (LOCUS_KSM: REGION_MERGEABLE) */
} seg_t;

#define SOURCE_SLOTS 128
/* Sources: the generic one (memory placed by the kernel's first touch, or
 * preferred on a node with LOCUS_NUMA=preferred:N), one per node (memory
 * bound to the node: mbind before the first touch, so every page of it is
 * there, whichever thread touches it), and the interleaved one (pages
 * round-robin over the allowed nodes). A region goes back to the source it
 * came from: memory of node X is reused on node X only. */
#define SOURCE_GENERIC (-1)
#define SOURCE_INTERLEAVE (-2)

struct usrc_s;

typedef struct source_s {
  lock_t lock;
  struct usrc_s *user;         /* a user heap's memory (source/user.c), or NULL */
  int node;                    /* a node id, SOURCE_GENERIC or SOURCE_INTERLEAVE */
  int policy;                  /* os_policy_t applied to its fresh mappings */
  uint64_t policy_nodes;       /* node mask of the policy */
  /* atomics so that reports may read them without the lock */
  atomic_size_t cached;        /* bytes in seg[] */
  atomic_size_t in_use;        /* bytes handed out and not yet returned */
  atomic_size_t hits, misses;
  atomic_size_t nseg;
  uint64_t clock;
  adapt_t adapt;               /* the auto profile's controller state */
  seg_t seg[SOURCE_SLOTS];     /* cached segments, unordered */
} source_t;

/* Returns a region of `size` bytes (page multiple) or NULL, with its header's
 * size, zeroed (every byte known zero), map and source fields set and the
 * rest of the header zero. Unless SRC_EXACT, the region may be up to a slice
 * larger (a cached segment taken whole). SRC_CACHED_ONLY: only from a cached
 * segment at least `size` long, else NULL (no system call). */
enum { SRC_EXACT = 1, SRC_CACHED_ONLY = 2, SRC_HUGE = 4, SRC_ALIGNED = 8, SRC_CHUNK = 16 };
/* SRC_CHUNK: a heap chunk (small or medium objects) is asked for; the auto
 * profile learns chunks and large segments apart (adapt.h). */
/* SRC_ALIGNED (small chunks, with SRC_EXACT; size a power of two): the
 * region starts on a multiple of its size, so that a block's chunk is its
 * address masked (heap.h). Cut from a cached segment that holds such a
 * window (the pieces around it stay cached), else mapped fresh. */
/* SRC_HUGE (large blocks of LOCUS_THP): a fresh mapping starts on a huge-page
 * boundary and is advised for huge pages when the THP mode asks for advice;
 * a cached huge segment is split on a huge-page boundary where it can, so
 * that the rest keeps whole huge pages. */
region_t *source_alloc(source_t *s, size_t size, unsigned flags);
void source_free(region_t *r);
/* Grows r over the cached segment right after it; false if there is none.
 * Unless SRC_EXACT (flags), a rest shorter than a slice is taken too. */
bool source_extend(region_t *r, size_t new_size, unsigned flags);
/* Resizes r with mremap (may move); NULL and r untouched on failure. */
region_t *source_resize(region_t *r, size_t new_size);
size_t source_release_all(void);
size_t source_trim(source_t *s, size_t keep);
/* Auto profile: releases the segments not reused within the source's window,
 * oldest first. Returns the bytes released. */
size_t source_decay(source_t *s, uint64_t now);
void sources_for_each(void (*fn)(source_t *, void *), void *ctx);
/* Bytes of whole huge pages in [base, base + size). */
size_t huge_span(const void *base, size_t size);
/* The source of a thread bound to `node` (-1: not bound) under the current
 * profile: its node's source with the numa profile, else the generic one. */
source_t *source_for_node(int node);
/* The source whose memory is on `node` (an allowed node), whatever the profile. */
source_t *source_of_node(int node);
source_t *source_interleave(void);
size_t source_cached_total(void);
void sources_init(void);
/* Trims every source to the current bound (after a profile or bound change). */
void sources_apply_bound(void);
void sources_report(void (*line)(void *, const source_t *), void *ctx);
/* Checks every source's accounting; aborts with a message on a violation. */
void sources_validate(void);

/* ---- user memory (source/user.c) -----------------------------------------
 * The memory of a user heap given a segment or a source of its own
 * (locus_heap_create): a source_t whose `user` is set and whose memory is
 * the user's. It never maps, unmaps, advises or remaps anything itself:
 * source_alloc cuts regions from its free extents (best fit, aligned when
 * asked), source_free merges them back (pieces of one map only),
 * source_extend grows a region over the free extent behind it, and
 * source_resize refuses (no mremap of the user's memory). Its regions carry
 * REGION_USER (never known zero: calloc clears them with stores). More
 * memory comes only from usrc_grow, which calls the user's map with no
 * locus lock held but the heap's own lock. Metadata (the extent and
 * piece tables) lives in locus's own memory, outside the user's. */
source_t *usrc_new(void *segment, size_t size, const locus_source_ops_t *ops);
/* Asks the user's map for `size` bytes aligned on `align` and adds them; false
 * when there is no map or it returned NULL (errno ENOMEM) or memory that is
 * misaligned (EINVAL, given back). */
bool usrc_grow(source_t *s, size_t size, size_t align);
/* Whether [base, base + size) overlaps memory of s. */
bool usrc_overlaps(source_t *s, uintptr_t base, size_t size);
/* Bytes of s's memory, and of it free. */
void usrc_sizes(source_t *s, size_t *total, size_t *free_bytes);
/* The largest free extent (for a medium chunk that must fit). */
size_t usrc_largest(source_t *s);
/* Every region is back: gives the pieces the user's map returned to its
 * unmap and frees s. */
void usrc_destroy(source_t *s);
/* fork() child (every lock held): `held`, the bytes its heap's parts count,
 * is what the child will ever give back; the rest is lost with the threads
 * that held it. */
void usrc_fork_child(source_t *s, size_t held);
region_t *usrc_alloc(source_t *s, size_t size, unsigned flags);
void usrc_free(region_t *r);
bool usrc_extend(region_t *r, size_t new_size, unsigned flags);
/* LOCUS_KSM: advises r's pages for same-page merging when the option asks
 * for its kind and it is not yet (REGION_MERGEABLE, kept while cached). */
void source_advise_merge(region_t *r, bool chunk);
/* A new kernel-mapping number for a region whose mapping was split (advice
 * on it alone, source/ksm.c): cached pieces of its old mapping never join it. */
uint32_t source_new_map_id(void);
/* A region of a system source straight back to the OS (a destroyed user
 * heap's memory: RSS drops at once, whatever the profile keeps). */
void source_free_to_os(region_t *r);
/* Whether [base, base + size) overlaps a segment cached by locus's sources. */
bool sources_overlap(uintptr_t base, size_t size);
/* Whether it overlaps the memory of a live user source other than `except`. */
bool usrc_any_overlaps(uintptr_t base, size_t size, const source_t *except);

/* ---- memory-file-backed regions (source/file.c) ---------------------------
 * A shareable block's region: [anonymous header page][the file's pages]
 * [PROT_NONE to a slice]; REGION_FILE, no source. Its file_info_t sits at
 * FILE_INFO_OFF in the header page, after region_t and the block header. */
struct mfile_s;
typedef struct {
  struct mfile_s *file;
  size_t foff;                 /* offset in the file of the region's first file page */
  size_t flen;                 /* bytes of the file mapped after the header page */
  void *_Atomic shadow;        /* overlap: a second shared view of the file pages, or NULL */
  bool overlap;                /* an overlap block's region: kept for reuse when freed */
} file_info_t;
#define FILE_INFO_OFF 64
file_info_t *file_info(region_t *r);
/* A region over a new memory file of len bytes (rounded to pages), zero,
 * mapped shared; NULL with errno (ENOSYS: no memfd). */
region_t *file_region_new(size_t len);
/* A region whose file pages are a private view of [src, src + len) of
 * `from` (a REGION_FILE region): from's file is frozen first; *inpage is
 * src's offset in its page. NULL with errno. */
region_t *file_region_copy(region_t *from, uintptr_t src, size_t len, size_t *inpage);
/* Unmaps the region (and its shadow); the file closes with its last region. */
void file_region_free(region_t *r);

/* ---- overlap (docs/overlap.md) --------------------------------------------
 * With overlap on, large blocks of at least file_overlap_min bytes (0: off)
 * are memory-file regions, so that the overlap library can protect their
 * pages and give the MPI runtime a *shadow*: a second shared view of the
 * same file pages, mapped once per region at its first use, unmapped with
 * it. NULL when the region's file is frozen (after a fork or a copy-on-write
 * copy: its view is private, no longer the file's). */
extern _Atomic size_t file_overlap_min;
void *file_region_shadow(region_t *r);
/* Called (when set) before a memory-file block is freed, frozen or marked
 * for next touch, with the block's file pages: the overlap library waits
 * there for the transfers that use them. */
extern void (*_Atomic file_quiesce_hook)(void *start, size_t len);
void file_quiesce(region_t *r);
/* Overlap blocks' regions are kept when freed (FILE_KEEP of them, up to
 * FILE_KEEP_BYTES, still in shared mode, pages resident, shadow mapped): a
 * program that allocates its buffers in a loop would otherwise pay a memory
 * file, two mappings and a shared-memory fault per page each time.
 * file_region_take: a kept region of at least len bytes (at most twice), its
 * contents stale, or NULL. file_region_new_overlap: a new region so marked
 * (NULL, EMFILE, when 256 are live: each holds a file descriptor).
 * file_keep_flush: every kept region back to the OS (overlap turned off). */
region_t *file_region_take(size_t len);
region_t *file_region_new_overlap(size_t len);
void file_keep_flush(void);

#endif /* LOCUS_SOURCE_H */
