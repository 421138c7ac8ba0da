/*
 * locus internal types and invariants.
 *
 * The tree (SPEC §2): per-thread heaps draw macro-blocks ("chunks", CHUNK_SIZE)
 * from memory sources (one per NUMA node plus a generic one); sources draw from
 * the OS. Blocks above the large threshold are "large segments" served by the
 * sources directly. Every chunk and segment is a *region*: it starts with a
 * region header and is recorded in the registry, which maps any address to its
 * region without aligning regions on their size.
 */
#ifndef LOCUS_INTERNAL_H
#define LOCUS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "locus.h"

#define LOCUS_EXPORT __attribute__((visibility("default")))
#define LOCUS_HIDDEN __attribute__((visibility("hidden")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define NOINLINE __attribute__((noinline))
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define CACHE_LINE 64

/* ---- geometry ------------------------------------------------------------ */
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define PAGE_SIZE 4096u
#define ALIGN_MIN 16u                 /* every block is at least 16-aligned */

/* Registry granularity. Invariant: every registered region spans at least one
 * slice, so at most one region *starts* strictly inside any slice. */
#define SLICE_SHIFT 20
#define SLICE_SIZE ((size_t)1 << SLICE_SHIFT)

#define CHUNK_SIZE (4 * MiB)          /* macro-block exchanged with sources */
#define RUN_SHIFT 16
#define RUN_SIZE ((size_t)1 << RUN_SHIFT)
#define RUNS_PER_CHUNK (CHUNK_SIZE / RUN_SIZE)   /* run 0 holds the chunk header */

/* Small size classes: 16..128 by 16, then 4 classes per doubling up to 8 KiB. */
#define SMALL_MAX (8 * KiB)
#define NUM_CLASSES 32

/* ---- utilities ----------------------------------------------------------- */
static inline size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }
static inline bool is_pow2(size_t x) { return x && !(x & (x - 1)); }
static inline int log2_floor(size_t x) { return 63 - __builtin_clzl(x); }

typedef struct { atomic_int v; } lock_t;
void lock_acquire(lock_t *l);
static inline bool lock_try(lock_t *l) {
  int z = 0;
  return atomic_compare_exchange_strong_explicit(&l->v, &z, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}
static inline void lock_release(lock_t *l) { atomic_store_explicit(&l->v, 0, memory_order_release); }

/* ---- errors (util/error.c) ----------------------------------------------- */
__attribute__((noreturn)) void locus_fatal(const char *fmt, ...);
void locus_warn(const char *fmt, ...);
/* Formats into buf like a tiny snprintf (%s %d %u %zu %lu %p %x %%); never allocates. */
size_t fmt_buf(char *buf, size_t len, const char *fmt, ...);
size_t fmt_vbuf(char *buf, size_t len, const char *fmt, __builtin_va_list ap);

/* ---- options (util/options.c) -------------------------------------------- */
typedef enum { PROFILE_ECO = 0, PROFILE_UMA = 1, PROFILE_NUMA = 2 } profile_t;
typedef struct {
  _Atomic profile_t profile;   /* atomic: locus_set_profile may run beside allocations */
  atomic_size_t cache_max;     /* bytes kept per source (uma: in total) */
  size_t cache_max_segment;  /* largest segment worth caching */
  size_t large_threshold;    /* blocks above go to the sources */
  bool lazy_release;         /* eco: MADV_FREE instead of munmap */
  bool color;                /* random 64-byte start offset for large blocks */
  bool stats;                /* print statistics at exit */
  bool verbose;
  char stats_file[256];
} options_t;
extern options_t locus_opt;
void options_init(void);
size_t options_profile_cache_max(profile_t p);
const char *profile_name(profile_t p);
bool profile_parse(const char *s, profile_t *out);

/* ---- OS layer (os/os.c) -------------------------------------------------- */
void *os_map(size_t size);                 /* fresh zeroed pages or NULL */
bool os_unmap(void *p, size_t size);
void *os_remap(void *p, size_t old_size, size_t new_size, bool may_move);
bool os_free_lazily(void *p, size_t size);  /* MADV_FREE */
/* Clears [p, p+size) (page-aligned bounds), touching only resident pages. */
void os_zero_resident(void *p, size_t size);
uint64_t os_random(void);
long os_gettid(void);
/* Reads an environment variable without allocating (works before libc init). */
const char *os_getenv(const char *name);
int os_read_file(const char *path, char *buf, size_t len);

/* ---- statistics (util/stats.c) ------------------------------------------- */
typedef struct {
  atomic_size_t in_use, cached, peak;
  atomic_size_t mmaps, munmaps, mremaps, madvises;
  atomic_size_t hits, misses, returned;
} stats_t;
extern stats_t locus_stats;
static inline void stat_add(atomic_size_t *c, size_t n) {
  atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}
static inline void stat_sub(atomic_size_t *c, size_t n) {
  atomic_fetch_sub_explicit(c, n, memory_order_relaxed);
}
void stats_update_peak(void);
void stats_at_exit(void);

/* ---- regions and registry (registry/registry.c) -------------------------- */
typedef enum {
  REGION_NONE = 0,
  REGION_SMALL = 0x51,   /* chunk carved into runs of one size class each */
  REGION_MEDIUM = 0x52,  /* chunk of boundary-tagged blocks */
  REGION_LARGE = 0x53,   /* one large block */
} region_kind_t;

struct source_s;
struct heap_s;

typedef struct region_s {
  size_t size;                 /* mapped bytes from the region start */
  uint8_t kind;                /* region_kind_t */
  uint8_t zeroed;              /* memory came fresh from the OS */
  uint16_t node;
  uint32_t map;                /* kernel mapping (VMA) the region lies in, see source.c */
  struct source_s *source;     /* where the memory returns */
  struct heap_s *heap;         /* owner (chunks); allocating heap (large: statistics only) */
} region_t;

void registry_add(region_t *r);
void registry_remove(region_t *r);

/* Two-level index over SLICE_SIZE slices. Each slice entry names the region
 * covering the slice's first byte and the (at most one) region starting inside
 * it. Lock-free reads: entries are written only while their region is private
 * to the writer (just mapped, or about to be unmapped). */
typedef struct {
  _Atomic(uintptr_t) cover;
  _Atomic(uintptr_t) inside;
} slice_entry_t;

/* Entries hold the region address (page-aligned) with its kind in the low
 * byte, so the free fast path learns the kind without touching the header. */
#define REG_KIND_MASK ((uintptr_t)0xff)

#define REG_ADDR_BITS 47
#define REG_L2_BITS 13
#define REG_L1_BITS (REG_ADDR_BITS - SLICE_SHIFT - REG_L2_BITS)
extern _Atomic(slice_entry_t *) registry_l1[(size_t)1 << REG_L1_BITS];

/* The tagged entry of the region that may contain p, 0 if none. The caller
 * still checks that p lies below the region's end. */
static ALWAYS_INLINE uintptr_t registry_find(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t s = a >> SLICE_SHIFT;
  if (unlikely(s >> (REG_L1_BITS + REG_L2_BITS))) return 0;
  slice_entry_t *leaf = atomic_load_explicit(&registry_l1[s >> REG_L2_BITS], memory_order_acquire);
  if (unlikely(!leaf)) return 0;
  slice_entry_t *e = &leaf[s & (((uintptr_t)1 << REG_L2_BITS) - 1)];
  uintptr_t t = atomic_load_explicit(&e->inside, memory_order_acquire);
  if (t && a >= (t & ~REG_KIND_MASK)) return t;
  return atomic_load_explicit(&e->cover, memory_order_acquire);
}

static ALWAYS_INLINE region_t *registry_lookup(const void *p) {
  region_t *r = (region_t *)(registry_find(p) & ~REG_KIND_MASK);
  if (unlikely(!r || (uintptr_t)p - (uintptr_t)r >= r->size)) return NULL;
  return r;
}

/* ---- memory sources (source/source.c) ------------------------------------ */
typedef struct seg_s {
  void *base;
  size_t size;
  uint64_t stamp;              /* age, for eviction of the oldest */
  uint32_t map;                /* kernel mapping it lies in */
} seg_t;

#define SOURCE_SLOTS 128
typedef struct source_s {
  lock_t lock;
  int node;                    /* -1: the generic source */
  /* atomics so that reports may read them without the lock */
  atomic_size_t cached;        /* bytes in seg[] */
  atomic_size_t in_use;        /* bytes handed out and not yet returned */
  atomic_size_t hits, misses;
  atomic_size_t nseg;
  uint64_t clock;
  seg_t seg[SOURCE_SLOTS];     /* cached segments, unordered */
} source_t;

/* Returns a region of `size` bytes (page multiple) or NULL, with its header's
 * size, zeroed (every byte known zero), map and source fields set and the
 * rest of the header zero. Unless SRC_EXACT, the region may be up to a slice
 * larger (a cached segment taken whole). SRC_CACHED_ONLY: only from a cached
 * segment at least `size` long, else NULL (no system call). */
enum { SRC_EXACT = 1, SRC_CACHED_ONLY = 2 };   /* source_alloc flags */
region_t *source_alloc(source_t *s, size_t size, unsigned flags);
void source_free(region_t *r);
/* Grows r over the cached segment right after it; false if there is none. */
bool source_extend(region_t *r, size_t new_size);
/* Resizes r with mremap (may move); NULL and r untouched on failure. */
region_t *source_resize(region_t *r, size_t new_size);
size_t source_release_all(void);
size_t source_trim(source_t *s, size_t keep);
source_t *source_for_node(int node);      /* node < 0: generic */
size_t source_cached_total(void);
void sources_init(void);
void sources_fork_prepare(void);
void sources_fork_parent(void);
void sources_fork_child(void);
void sources_apply_profile(void);
void sources_report(void (*line)(void *, const source_t *), void *ctx);

/* ---- NUMA topology (numa/topology.c) -------------------------------------- */
void topology_init(void);
int topology_nodes(void);
/* The node all of the calling thread's allowed CPUs belong to, or -1. */
int topology_thread_node(void);

/* ---- heaps (heap/) ----------------------------------------------------- */
typedef struct run_s {
  void *free;                  /* owner's free list, linked through word 0 */
  uint16_t used;               /* blocks handed out (remote-freed ones included until drained) */
  uint16_t capacity;           /* blocks that fit in the run */
  uint16_t carved;             /* blocks carved so far from the run's start */
  uint8_t cls;
  uint8_t state;               /* RUN_FREE, RUN_ACTIVE, RUN_FULL */
  uint32_t bsize;
  uint32_t recip;              /* ceil(2^32/bsize): offset -> index without a divide */
  struct run_s *next, *prev;   /* the heap's list of non-full runs of this class */
} __attribute__((aligned(64))) run_t;   /* one cache line each, indexed by a shift */

enum { RUN_FREE = 0, RUN_ACTIVE = 1, RUN_FULL = 2 };

typedef struct chunk_s {
  region_t r;
  struct chunk_s *next, *prev; /* heap's chunk list of this kind */
  uint64_t free_runs;          /* small: bit i set = run slot i unused */
  size_t hiwater;              /* medium: highest offset ever handed out */
  run_t runs[RUNS_PER_CHUNK];  /* small: run descriptors */
} chunk_t;

/* Medium blocks: a 16-byte boundary tag before the payload. */
typedef struct mblock_s {
  size_t prev_size;            /* size of the block before (0: first block) */
  size_t head;                 /* size | MB_INUSE */
  struct mblock_s *next, *prev;/* free list links, valid when free */
} mblock_t;
#define MB_INUSE ((size_t)1)
#define MB_HDR 16u
#define MB_MIN 64u             /* smallest free block worth keeping on a list */
#define MEDIUM_BINS 96

typedef struct { mblock_t *head, *tail; } mbin_t;

typedef enum { HEAP_LIVE = 0, HEAP_ORPHAN = 1, HEAP_DEAD = 2 } heap_state_t;

typedef struct heap_s {
  run_t *cur[NUM_CLASSES];     /* run serving each class; never NULL (sentinel) */
  uintptr_t hot;               /* small chunk that got the latest run, or HOT_NONE:
                                  frees into it skip the registry */
  run_t *partial[NUM_CLASSES]; /* other non-full runs of the class */
  _Atomic(void *) remote;      /* MPSC stack of blocks freed by other threads */
  chunk_t *small_chunks;       /* chunks with free run slots first */
  chunk_t *medium_chunks;
  chunk_t *spare;              /* one empty chunk kept to avoid thrashing */
  source_t *source;
  uint64_t mbits[2];           /* non-empty medium bins */
  mbin_t mbins[MEDIUM_BINS];
  struct heap_s *next_all;     /* all heaps ever made */
  struct heap_s *next_orphan;
  long tid;
  int node;
  int state;                   /* heap_state_t */
  /* statistics, relaxed atomics: the owner writes, reports read */
  atomic_size_t st_chunk_bytes;    /* bytes of chunks held */
  atomic_size_t st_large_bytes;    /* live large blocks allocated by this heap's threads */
  atomic_size_t st_large_allocs;
  atomic_size_t st_remote_frees;   /* blocks freed by other threads, drained */
} heap_t;

static inline void heap_stat_add(atomic_size_t *c, size_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}
void heaps_report(void (*line)(void *, const heap_t *), void *ctx);

#define HOT_NONE ((uintptr_t)1 << 63)   /* p - HOT_NONE >= CHUNK_SIZE for every user address */

/* The TLS model is a build option: initial-exec (one load, for LD_PRELOAD and
 * linking) or the dynamic model that dlopen always accepts. */
#ifdef LOCUS_TLS_DYNAMIC
#define LOCUS_TLS __thread __attribute__((tls_model("global-dynamic")))
#else
#define LOCUS_TLS __thread __attribute__((tls_model("initial-exec")))
#endif
extern LOCUS_TLS heap_t *locus_tls_heap;
extern uint64_t locus_free_key;        /* tags freed blocks, see block_tag() */
extern run_t locus_empty_run;          /* cur[] sentinel: never has free blocks */

heap_t *heap_get_slow(void);
static ALWAYS_INLINE heap_t *heap_get(void) {
  heap_t *h = locus_tls_heap;
  if (likely(h)) return h;
  return heap_get_slow();
}
void heap_drain_remote(heap_t *h);
void heap_collect(heap_t *h);
chunk_t *heap_chunk_alloc(heap_t *h, region_kind_t kind);
void heap_chunk_release(heap_t *h, chunk_t *c);
void heaps_counts(size_t *live, size_t *orphaned);
void locus_init(void);
extern atomic_int locus_init_state;

/* A freed small or medium block carries a tag in its second word so that a
 * second free is caught; malloc clears the word. The tag mixes the address
 * with a secret so live data cannot equal it by accident. */
static ALWAYS_INLINE uintptr_t block_tag(const void *p) { return (uintptr_t)p ^ locus_free_key; }

/* small.c */
extern uint8_t locus_class_of16[SMALL_MAX / 16 + 1];
extern uint32_t locus_class_size[NUM_CLASSES];
void small_init(void);
static ALWAYS_INLINE unsigned size_class(size_t size) {
  return locus_class_of16[(size + 15) >> 4];
}
void *small_alloc_slow(heap_t *h, unsigned cls);
void small_free_update(heap_t *h, chunk_t *c, run_t *run);
static ALWAYS_INLINE void small_free_local(heap_t *h, chunk_t *c, run_t *run, void *p) {
  void **b = p;
  b[0] = run->free;
  b[1] = (void *)block_tag(b);
  run->free = b;
  if (unlikely(--run->used == 0 || run->state == RUN_FULL)) small_free_update(h, c, run);
}
static ALWAYS_INLINE run_t *chunk_run_of(chunk_t *c, const void *p, size_t *off) {
  size_t o = (uintptr_t)p - (uintptr_t)c;
  run_t *run = &c->runs[o >> RUN_SHIFT];
  *off = o & (RUN_SIZE - 1);
  return run;
}
static ALWAYS_INLINE char *run_start(chunk_t *c, run_t *run) {
  return (char *)c + ((size_t)(run - c->runs) << RUN_SHIFT);
}
/* Index of the block starting at offset `off` of the run, or a value >=
 * capacity when off is not a block start. Reads only fields fixed when the
 * run was set up, so any thread may call it. */
static ALWAYS_INLINE size_t run_index(const run_t *run, size_t off) {
  size_t idx = (off * run->recip) >> 32;
  return idx * run->bsize == off ? idx : SIZE_MAX;
}

/* medium.c */
void *medium_alloc(heap_t *h, size_t size, size_t align, bool zero);
void medium_free_local(heap_t *h, chunk_t *c, void *p);
mblock_t *medium_check(chunk_t *c, const void *p, const char *fn, bool local);
size_t medium_usable(const void *p);
bool medium_resize_in_place(heap_t *h, chunk_t *c, void *p, size_t size);
void medium_chunk_init(heap_t *h, chunk_t *c);

/* large.c */
typedef struct large_s {
  region_t r;
  size_t user_off;             /* payload offset from the region start */
  size_t user_size;            /* requested bytes */
  size_t magic;                /* LARGE_LIVE */
} large_t;
#define LARGE_LIVE ((size_t)0x4c4f4355534c4756ull)
void *large_alloc(size_t size, size_t align, bool zero);
void large_free(large_t *l);
void *large_realloc(large_t *l, void *p, size_t size);
large_t *large_check(region_t *r, const void *p, const char *fn);
static inline size_t large_usable(const large_t *l) { return l->r.size - l->user_off; }

/* entry points shared by the api/ files */
void *locus_alloc_aligned(size_t size, size_t align);
void locus_free_checked(void *p, const char *fn);

#endif /* LOCUS_INTERNAL_H */
