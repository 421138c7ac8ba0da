/*
 * Types and constants shared by every module of locus.
 *
 * The tree (S. Valat, PhD thesis, 2014, Ch.4): per-thread heaps draw
 * macro-blocks ("chunks", CHUNK_SIZE) from memory sources (one per NUMA node
 * plus a generic one); sources draw from the OS. Blocks above the large
 * threshold are "large segments" served by the sources directly. Every chunk
 * and segment is a *region*: it starts with a region header and is recorded in
 * the registry, which maps any address to its region without aligning regions
 * on their size.
 *
 * Each module has its own header with its own types (heap/heap.h,
 * source/source.h, registry/registry.h, os/os.h, ...); this one holds only
 * what all of them need.
 */
#ifndef LOCUS_TYPES_H
#define LOCUS_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "arch/arch.h"
#include "locus.h"

#define LOCUS_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* The TLS model is a build option: initial-exec (one load, for LD_PRELOAD and
 * linking) or the dynamic model that dlopen always accepts. */
#ifdef LOCUS_TLS_DYNAMIC
#define LOCUS_TLS __thread __attribute__((tls_model("global-dynamic")))
#else
#define LOCUS_TLS __thread __attribute__((tls_model("initial-exec")))
#endif
#define NOINLINE __attribute__((noinline))
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define CACHE_LINE ARCH_CACHE_LINE

/* ---- geometry ------------------------------------------------------------ */
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
/* PAGE_SIZE is locus's mapping granule: every region, cached segment, split
 * and unmap *size* is a multiple of it. It is the largest base page the
 * architecture allows (4 KiB on x86-64, 64 KiB on aarch64), so one binary is
 * correct under any kernel page size. Addresses are only as aligned as the
 * kernel's pages (mmap and mremap promise no more): os_page_size(), which
 * every alignment guarantee uses. */
#define PAGE_SIZE ARCH_PAGE_MAX
#define CARVE_SIZE 4096u              /* small runs are carved 4 KiB at a time */
#define ALIGN_MIN 16u                 /* every block is at least 16-aligned */

/* Registry granularity. Invariant: every registered region spans at least one
 * slice, so at most one region *starts* strictly inside any slice. */
#define SLICE_SHIFT 20
#define SLICE_SIZE ((size_t)1 << SLICE_SHIFT)

#define CHUNK_SIZE (4 * MiB)          /* macro-block exchanged with sources */

/* ---- utilities ----------------------------------------------------------- */
static inline size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }
static inline bool is_pow2(size_t x) { return x && !(x & (x - 1)); }
static inline int log2_floor(size_t x) { return 63 - __builtin_clzl(x); }

/* ---- regions --------------------------------------------------------------- */
typedef enum {
  REGION_NONE = 0,
  REGION_SMALL = 0x51,   /* chunk carved into runs of one size class each */
  REGION_MEDIUM = 0x52,  /* chunk of boundary-tagged blocks */
  REGION_LARGE = 0x53,   /* one large block */
  REGION_ARENA = 0x54,   /* an arena heap's chunk: blocks cut by a pointer bump (heap/user.c) */
} region_kind_t;

struct source_s;
struct heap_s;

#define NODE_NONE 0xff                /* region_t.node of memory not bound to a node */

/* region_t.flags */
#define REGION_NEXT_TOUCH 1u          /* locus_next_touch was asked on it (large blocks) */
#define REGION_MISPLACED 2u           /* pages may have left the source's node: not cached again */
#define REGION_HUGE 4u                /* starts on a huge-page boundary in a mapping advised for huge pages */
#define REGION_FILE 16u               /* a shareable block: a memory file's pages (source/file.c) */
#define REGION_MERGEABLE 32u          /* advised MADV_MERGEABLE (LOCUS_KSM) */
#define REGION_KSM_WATCH 64u          /* watched by LOCUS_KSM=auto's sampler (source/ksm.c) */
#define REGION_KSM_AUTO 128u          /* ... and advised by it: never cached with the advice */
#define REGION_USER 8u                /* the user's memory (a user heap's segment or source): never advised,
                                         remapped or dropped, never known zero */

typedef struct region_s {
  size_t size;                 /* mapped bytes from the region start */
  uint8_t kind;                /* region_kind_t */
  uint8_t zeroed;              /* memory came fresh from the OS */
  uint8_t node;                /* NUMA node of the source, or NODE_NONE */
  uint8_t flags;               /* REGION_* */
  uint32_t map;                /* kernel mapping (VMA) the region lies in, see source.c */
  struct source_s *source;     /* where the memory returns */
  struct heap_s *heap;         /* owner (chunks); allocating heap (large: statistics only) */
} region_t;

/* One-time global initialisation (heap/heap.c); cheap once done, safe to call
 * from any entry point, before the first malloc included. */
void locus_init(void);

#include "util/error.h"

#endif /* LOCUS_TYPES_H */
