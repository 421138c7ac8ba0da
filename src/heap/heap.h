/* Thread heaps: size-class runs for small blocks, boundary-tagged medium
 * blocks, large blocks from the sources (Valat, PhD thesis, 2014, §4.6). */
#ifndef LOCUS_HEAP_H
#define LOCUS_HEAP_H

#include <limits.h>

#include "os/topology.h"
#include "registry/registry.h"
#include "source/source.h"
#include "types.h"
#include "util/lock.h"

#define RUN_SHIFT 16
#define RUN_SIZE ((size_t)1 << RUN_SHIFT)
#define RUNS_PER_CHUNK (CHUNK_SIZE / RUN_SIZE)   /* run 0 holds the chunk header */

/* Small size classes: 16..128 by 16, then 4 classes per doubling up to 8
 * KiB, 8 between 256 B and 1 KiB (small.c). */
#define SMALL_MAX (8 * KiB)
#define NUM_CLASSES 40

/* A run's free blocks are sharded over two lists (after mimalloc's free-list
 * sharding: Leijen, Zorn, de Moura, "Mimalloc: Free List Sharding in Action",
 * 2019): `free`, which malloc pops and the owner's frees push (LIFO: a block
 * freed is the next one handed out, still in cache), and `thread_free`, where
 * other threads push with one CAS on the run (never on the heap). When `free`
 * runs out the owner takes `thread_free` whole. (mimalloc's third list, the
 * owner's frees apart from `free`, cost more instructions per malloc+free
 * pair and more cache misses here: docs/notes/.) Both lists are linked
 * through word 0 and every block on them carries the freed tag in word 1.
 *
 * thread_free packs the head pointer (bits 0-47), the number of blocks on the
 * list (bits 48-61: bounds the owner's walk, so two threads freeing one block
 * at once make a cycle that is caught, not followed) and a notification state
 * (bits 62-63): TF_FULL while the run is full and on no list, so the first
 * remote free tells the heap (pushes the run on h->notify) and turns the
 * state into TF_NOTIFYING until the push is done. Other remote frees push
 * on meanwhile and leave the state TF_NOTIFYING (tf_push_state): no free
 * waits for the notifier, which may be preempted. Only the owner's retire
 * of the run and its marking full wait for the end of TF_NOTIFYING, a
 * bounded wait that the notifier wakes (small_notify). */
#define TF_PTR_MASK (((uintptr_t)1 << 48) - 1)
#define TF_COUNT_SHIFT 48
#define TF_COUNT_ONE ((uintptr_t)1 << TF_COUNT_SHIFT)
#define TF_COUNT_MASK ((((uintptr_t)1 << 14) - 1) << TF_COUNT_SHIFT)
#define TF_FULL ((uintptr_t)1 << 62)
#define TF_NOTIFYING ((uintptr_t)2 << 62)
#define TF_STATE_MASK ((uintptr_t)3 << 62)

/* Two cache lines: the run's shape, written when it is set up and when a
 * page is carved, which every free reads (its owner's and other threads'),
 * then the lists and counts that malloc, the owner's run frees and remote
 * frees write. On one line, another thread's free read a line that the
 * owner's pops and frees kept taking back; the split made the two-thread
 * exchange benchmark faster (docs/notes/). */
typedef struct run_s {
  /* shape */
  uint32_t bsize;
  uint32_t recip;              /* ceil(2^32/bsize): offset -> index without a divide */
  /* The carved blocks are first .. first + carved - 1 (run_carved). Both
   * halves are written together, as `span`, by the owner only, so that
   * another thread reads a pair the run had in one load (run_carved_shared). */
  union {
    struct {
      uint16_t first;          /* the run's color: the block its carving starts at (run_new) */
      uint16_t carved;         /* blocks carved so far */
    };
    uint32_t span;
  };
  uint16_t capacity;           /* blocks that fit in the run */
  uint8_t cls;
  /* lists */
  void *free __attribute__((aligned(64)));   /* malloc pops here, the owner's frees push here */
  uint16_t used;               /* blocks handed out (those on thread_free included until collected) */
  uint8_t state;               /* RUN_FREE, RUN_ACTIVE, RUN_FULL: the owner's view (heap/run.h) */
  _Atomic(uintptr_t) thread_free; /* remote frees, see above */
  struct run_s *next, *prev;   /* the heap's list of non-full runs of this class */
  struct run_s *_Atomic notify_next; /* link on the owner heap's notify stack */
} __attribute__((aligned(64))) run_t;   /* two cache lines each, indexed by a shift */
#define RUN_DESC_SHIFT 7
_Static_assert(sizeof(run_t) == (size_t)1 << RUN_DESC_SHIFT, "run descriptors are indexed by a shift");

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

/* Placement of a heap: a thread's main heap serves malloc; its placed
 * sub-heaps serve locus_malloc_on_node (one per node) and
 * locus_malloc_interleaved, from chunks of that placement only. */
#define PLACE_MAIN (-1)
#define PLACE_INTERLEAVE TOPO_MAX_NODES
/* A user sub-heap (heap/user.c): a thread's own heap record for one user
 * heap, hung off the thread's main heap like a placed sub-heap; its
 * thread's frees are local, other threads' remote. */
#define PLACE_USER (TOPO_MAX_NODES + 1)
/* A thread's capture trampoline (heap/user.c): the thread's heap pointer
 * while it has captured a user heap. It owns nothing; its runs are all the
 * sentinel and its thread cache is off, so every malloc reaches a slow path,
 * which sends it to the captured heap: malloc's fast path is unchanged. */
#define PLACE_CAPTURE (TOPO_MAX_NODES + 2)
struct uheap_s;

/* The thread cache: per class, the small blocks the heap's thread freed
 * last, a LIFO list through word 0 that malloc pops before it looks at a
 * run (after the per-thread free lists of tcmalloc: Ghemawat and Menage,
 * "TCMalloc: Thread-Caching Malloc", 2005). A block freed is the next one
 * handed out whichever run it lies in, so a thread reuses blocks still in
 * its caches; the runs alone reuse a block only once its run is current
 * again (free-list sharding keeps a run's frees together, not the thread's).
 * Invariants: only the heap's thread reads or writes its thread cache
 * (other threads' frees and idle-owner reclaim never touch it); an
 * orphan's cache is touched only under heaps_lock (by a collector of
 * orphans, which flushes it, or by the thread adopting the heap); on,
 * length + room == bound; off, the list is empty and room 0; every block on
 * it is a carved block of a small run of the list's class, of this heap or
 * of another main heap of the same node (small_free_foreign), tagged freed
 * like a block on a run's list, and still counted in its run's `used` (the
 * run sees it as handed out); an orphan's cache holds only its own blocks.
 * locus_collect, locus_release and collectors of orphans give the blocks
 * back to their runs (small_cache_flush): its own through the owner's free
 * path, others' through thread_free.
 *
 * A thread's exit keeps its own blocks cached, for the thread that adopts
 * the heap (thread churn: no walk at exit, and a warm start), and sends the
 * others' back to their owners (small_cache_exit): kept too, those slowed
 * down programs whose threads start their successor before they exit (the
 * Larson server pattern; docs/notes/).
 *
 * A free that finds its class's list full gives the whole cache (every
 * class) back and turns it off (room = 0), each class until its next malloc
 * that finds its current run's list empty (a page carved: small_carve_pop,
 * or the slow path): a long run of frees (a data structure torn
 * down, or a thread freeing what others allocated) then goes to the runs,
 * which empty and go back as they would without a cache, instead of leaving
 * cached blocks that keep their runs, and the chunks of those runs, from
 * ever going back. */
typedef struct {
  void *head;
  uint32_t room;               /* on: bound - length; off (after an overflow): 0, and the list empty */
  uint32_t bound;              /* LOCUS_THREAD_CACHE bytes of the class, at most CACHE_COUNT_MAX */
} tcache_t;
static inline uint32_t tcache_length(const tcache_t *t) { return t->head ? t->bound - t->room : 0; }
#define CACHE_COUNT_MAX 1024u

typedef struct heap_s {
  run_t *cur[NUM_CLASSES];     /* run serving each class; never NULL (sentinel); the owner reads
                                  it without the lock, so others write it with atomic stores */
  /* The owner's small malloc stores HEAP_POPPING on entering its lock-free
   * pop and HEAP_IDLE on leaving it (plain stores: no dependency between
   * mallocs). A remote free marks an idle heap HEAP_PROBED; found still
   * probed at a look HEAP_IDLE_NS or more later, the owner has not
   * allocated for that long, and the current runs whose blocks are all free
   * may be taken back without it (reclaim_current): OpenMP pool threads
   * never allocate again. */
  unsigned pop;
  uint16_t color;              /* the next run's color (run_new) */
  bool cache_foreign;          /* the thread cache may hold other heaps' blocks */
  tcache_t cache[NUM_CLASSES]; /* the thread cache, see tcache_t */
  run_t *partial[NUM_CLASSES]; /* other non-full runs of the class, oldest first */
  run_t *partial_tail[NUM_CLASSES];
  _Atomic(void *) remote;      /* MPSC stack of medium blocks freed by other threads */
  _Atomic(run_t *) notify;     /* MPSC stack of full runs that got a remote free */
  atomic_int recheck;          /* a remote last free found the lock taken: the next small-path
                                  locker looks for runs whose blocks are all free (small.c) */
  uint64_t probe_ns;           /* under `lock`: when a remote look last probed `pop` (coarse
                                  clock); no look reads or writes `pop` sooner than HEAP_IDLE_NS
                                  after it */
  lock_t lock;                 /* small-run lists, chunk list, notify draining: the owner's slow
                                  paths hold it; a remote free that empties a run takes it (try
                                  only) to give the run back without the owner */
  struct heap_s *main;         /* the main heap whose thread owns this one (itself for a main heap):
                                  beside `remote`, which a remote free touches anyway */
  int place;                   /* PLACE_MAIN, a node id, PLACE_INTERLEAVE, PLACE_USER, PLACE_CAPTURE */
  /* The node whose threads may cache this heap's small blocks when they
   * free them (small_free_foreign): the heap's node while it is a live main
   * heap, else CACHE_NODE_NONE. One word beside `main`, which such a free
   * reads anyway, instead of `place`, `node` and `state` on two lines.
   * Written with the state (heap_set_state), read without a lock. */
  int cache_node;
  chunk_t *small_chunks;       /* chunks with free run slots first */
  chunk_t *medium_chunks;
  /* One empty chunk kept to avoid thrashing. Only the owner (or, for a
   * parked heap, a holder of heaps_lock) writes it, with relaxed atomic
   * stores: a user heap's figures read it from other threads (heap/user.c). */
  chunk_t *spare;
  uint64_t spare_ns;           /* auto profile: when the spare became one */
  source_t *source;            /* placed sub-heaps: where their memory comes from */
  uint64_t mbits[2];           /* non-empty medium bins */
  mbin_t mbins[MEDIUM_BINS];
  struct heap_s *placed[TOPO_MAX_NODES + 1];   /* main heap: its sub-heaps by place, made on demand */
  struct heap_s *next_all;     /* all heaps ever made */
  struct uheap_s *user;           /* PLACE_USER: its user heap (NULL once destroyed); PLACE_CAPTURE: the heap captured */
  struct heap_s *capture;      /* main heap: its thread's capture trampoline, made on first use */
  struct heap_s *usubs;        /* main heap: its user sub-heaps (heap/user.c), linked by next_usub */
  struct heap_s *next_usub;
  struct heap_s *next_in_user; /* PLACE_USER: the next sub-heap of the same user heap */
  uint64_t uallocs;            /* PLACE_USER: blocks handed out (its thread writes, reports read) */
  /* An arena's sub-heap (LOCUS_HEAP_ARENA): blocks up to the large threshold
   * are cut from its arena chunks by a pointer bump, each after a 16-byte
   * header (its size, a tag); reset sends the bump back to the first chunk. */
  char *bump, *bump_end;
  chunk_t *arena_chunks;       /* in order of use: the current one, then the free ones kept by a reset */
  chunk_t *arena_cur;
  bool arena;                  /* a sub-heap of a LOCUS_HEAP_ARENA heap */
  /* A user sub-heap over bounded memory (the user's segment or source, or
   * under a limit): keeps no spare chunk, so that an emptied chunk goes back
   * to the source at once, where any thread's request can have it. */
  bool bounded;
  /* A user sub-heap under a limit: its memory comes in the exact sizes it
   * reserved (SRC_EXACT: no cached rest taken whole beyond the limit). */
  bool limited;
  struct large_s *large_list;  /* PLACE_USER: its live large blocks (under `lock`) */
  struct heap_s *next_orphan;
  long tid;
  int node;
  int state;                   /* heap_state_t */
  /* Main heap bound to a thread after that thread's exit hook ran (a TSD
   * destructor of the last round allocating: the hook is not called again).
   * Under heaps_lock; heaps_reap_late parks it once its thread is gone. */
  bool late;
  unsigned debug_ticks;        /* LOCUS_DEBUG: slow-path operations since the last validation */
  unsigned cache_ticks;        /* the thread cache's calls to heap_cache_tick */
  /* statistics, relaxed atomics: the owner writes, reports read */
  atomic_size_t st_chunk_bytes;    /* bytes of chunks held */
  atomic_size_t st_large_bytes;    /* live large blocks allocated by this heap's threads */
  atomic_size_t st_large_allocs;
  atomic_size_t st_remote_frees;   /* blocks freed by other threads, drained */
  atomic_size_t st_reclaimed_runs; /* current runs taken back from an idle owner by remote frees */
} heap_t;

/* A heap's state is written under heaps_lock and read without it by a
 * remote free (small_free_last): relaxed atomics. */
#define CACHE_NODE_NONE INT_MIN         /* equals no node id, -1 included */
/* heap_t.cache_node for a heap in state st. */
static inline int heap_cache_node_for(const heap_t *h, int st) {
  return st == HEAP_LIVE && h->place == PLACE_MAIN ? h->node : CACHE_NODE_NONE;
}
static inline void heap_set_state(heap_t *h, int st) {
  __atomic_store_n(&h->state, st, __ATOMIC_RELAXED);
  __atomic_store_n(&h->cache_node, heap_cache_node_for(h, st), __ATOMIC_RELAXED);
}
static inline int heap_state(const heap_t *h) { return __atomic_load_n(&h->state, __ATOMIC_RELAXED); }
/* The heap lock: uncontended almost always (one CAS inline). */
static ALWAYS_INLINE void heap_lock(heap_t *h) {
  if (unlikely(!lock_try(&h->lock))) lock_acquire(&h->lock);
}
static ALWAYS_INLINE void heap_unlock(heap_t *h) { lock_release(&h->lock); }
static inline void heap_stat_add(atomic_size_t *c, size_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}
/* For the counters that a remote free emptying a run also changes. */
static inline void heap_stat_add_shared(atomic_size_t *c, size_t n) {
  atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}
void heaps_report(void (*line)(void *, const heap_t *), void *ctx);

/* The small chunks of every heap, so that a free knows its block is in one
 * without the registry. Small chunks start on a multiple of CHUNK_SIZE
 * (SRC_ALIGNED), so a block's chunk is its address masked; this table,
 * direct-mapped on that 4 MiB frame, says whether the masked address is a
 * small chunk: one load and a compare (small_frame_holds). Then the chunk's
 * header names the owner heap: the thread's own block, or another's. A
 * chunk whose entry another chunk holds (16 GiB apart) takes the registry
 * path. Empty entries hold FRAME_NONE.
 * Invariant: a non-empty entry names a live small chunk, in the entry of its
 * frame. An entry is set after the chunk is in the registry (heap_chunk_alloc)
 * and cleared, if it still names the chunk, before the chunk leaves it
 * (heap_chunk_release, heap_chunk_drop); entries are read without a lock: a
 * valid free keeps its chunk alive, and an entry that is stale, cleared or
 * another chunk's does not equal the masked address. */
#define SMALL_FRAMES 4096u
#define FRAME_NONE ((uintptr_t)1)      /* equals no chunk address: chunks are aligned */
extern _Atomic(uintptr_t) locus_small_frames[SMALL_FRAMES] __attribute__((visibility("hidden")));
static ALWAYS_INLINE uintptr_t small_chunk_of(const void *p) { return (uintptr_t)p & ~(uintptr_t)(CHUNK_SIZE - 1); }
static ALWAYS_INLINE unsigned small_frame_of(uintptr_t c) {
  return (unsigned)(c >> 22) & (SMALL_FRAMES - 1);   /* 22: log2(CHUNK_SIZE) */
}
/* Whether c (any address masked by small_chunk_of) is a small chunk that
 * the table holds. */
static ALWAYS_INLINE bool small_frame_holds(uintptr_t c) {
  return atomic_load_explicit(&locus_small_frames[small_frame_of(c)], memory_order_relaxed) == c;
}
/* Records / forgets a small chunk (its heap's lock held, or the heap private). */
void small_frames_add(uintptr_t c);
void small_frames_remove(uintptr_t c);

/* LOCUS_TLS: types.h. */
extern LOCUS_TLS heap_t *locus_tls_heap;
/* hidden on the declaration too: one load relative to the instruction
 * pointer instead of an address from the GOT then a load */
extern uint64_t locus_free_key __attribute__((visibility("hidden")));   /* tags freed blocks, see block_tag() */
extern run_t locus_empty_run;          /* cur[] sentinel: never has free blocks */
/* Returned by heap_get when no heap could be made (the OS refused memory).
 * Its runs are all the sentinel, so small allocations reach the slow path,
 * which fails with ENOMEM; it owns nothing and is never any thread's heap. */
extern heap_t locus_oom_heap;

heap_t *heap_get_slow(void);
static ALWAYS_INLINE heap_t *heap_get(void) {
  heap_t *h = locus_tls_heap;
  if (likely(h)) return h;
  return heap_get_slow();
}
/* The source a heap's memory comes from: fixed for a placed sub-heap; for a
 * main heap, from the process policy (LOCUS_NUMA), the profile and the node
 * the thread is bound to. */
source_t *heap_source(heap_t *h);
/* The calling thread's sub-heap for `place` (made on first use); NULL when
 * no heap record can be had. h is the calling thread's main heap. */
heap_t *heap_placed(heap_t *h, int place);
/* locus_rebind: re-evaluates the thread's node; a change hands the thread a
 * heap of the new node (its old heap becomes an orphan). Returns the node. */
int heap_rebind(void);
void heap_drain_remote(heap_t *h);
/* malloc's paths on a given heap (api/malloc.c); heap_alloc: any size,
 * alignment (a power of two) and clearing, NULL + ENOMEM on failure. */
void *heap_malloc(heap_t *h, size_t size);
void *heap_alloc(heap_t *h, size_t size, size_t align, bool zero);
/* The thread's main heap (its own while it has captured a user heap), or NULL. */
static inline heap_t *heap_thread_main(void) {
  heap_t *h = locus_tls_heap;
  return h ? h->main : NULL;
}
/* Whether a user sub-heap may take `bytes` more of memory (its user heap's
 * limit, over all its sub-heaps) (heap/user.c). */
bool uheap_room(const heap_t *sub, size_t bytes);
void uheap_room_done(const heap_t *sub, size_t reserved, size_t got);
void uheap_released(const heap_t *sub, size_t bytes);
/* A user heap counts its memory in one place: heap_room reserves the bytes
 * of a growth (false: past the limit); heap_room_done, once the growth is
 * counted or failed, replaces them with the bytes it got (0: failed);
 * heap_released, when memory leaves a sub-heap for its source. */
static inline bool heap_room(const heap_t *h, size_t bytes) {
  return h->place != PLACE_USER || uheap_room(h, bytes);
}
static inline void heap_room_done(const heap_t *h, size_t reserved, size_t got) {
  if (h->place == PLACE_USER) uheap_room_done(h, reserved, got);
}
static inline void heap_released(const heap_t *h, size_t bytes) {
  if (h->place == PLACE_USER) uheap_released(h, bytes);
}
void heap_collect(heap_t *h);
/* Collects orphaned heaps that other threads freed into (any thread may
 * call); without `wait`, only if the heap list's lock is free at once. */
void heaps_collect_orphans(bool wait);
chunk_t *heap_chunk_alloc(heap_t *h, region_kind_t kind);
/* The bytes of a new chunk of that kind. */
size_t heap_chunk_bytes(region_kind_t kind);
/* A heap record on the all-heaps list, for a user heap or a capture
 * trampoline (heap/user.c); NULL when the OS refused memory. */
heap_t *heap_new_detached(void);
/* A dead user sub-heap's record made new by its thread: every field zero
 * but its links (the record list, its thread's list of sub-heaps). */
void heap_record_clear_kept(heap_t *h);
/* The heap list's lock, for a user heap's drop (heap/user.c). */
void heaps_lock_all(void);
void heaps_unlock_all(void);
bool heaps_trylock_all(void);
/* A user heap dropped every block: its run lists, stacks, thread cache and
 * (unless keep_chunks) its chunk lists start over. */
void heap_record_restart(heap_t *h, bool keep_chunks);
void heap_chunk_release(heap_t *h, chunk_t *c);
/* Unlinks an empty chunk and gives it to the source (no spare); h->lock held. */
void heap_chunk_drop(heap_t *h, chunk_t *c);
/* The heap's spare chunk, if any, goes back to its source (owner thread). */
void heap_spare_drop(heap_t *h);
/* The heap's thread cache back to its runs, then heap_collect: remote frees
 * back, empty runs and chunks and the spare to the source (its owner, or
 * heaps_lock held for a parked heap). */
void heap_collect_full(heap_t *h);
void heaps_counts(size_t *live, size_t *orphaned);
/* Checks every invariant of h (runs, free lists, medium blocks and bins,
 * registry entries of its chunks); aborts naming the first violation. Only
 * the owner thread may call it. */
void heap_validate(heap_t *h);
/* Every slow-path operation of a heap (a run refill, a medium allocation)
 * calls this: every 32nd call gives the adaptive controller its tick (the
 * auto profile decays cached memory without a thread of its own), and the
 * debug build validates the heap every 256th. One increment otherwise. */
void heap_adapt_tick(heap_t *h);
/* The thread cache's share of the ticks (small_free_local): every 32nd call
 * gives the controller its tick, without the debug build's validation. */
void heap_cache_tick(heap_t *h);
/* Parks the live main heaps whose thread is gone (heaps_lock held): the
 * late ones, or with `all` every one (heap.c). */
void heaps_reap_gone(bool all);
static inline void heap_debug_tick(heap_t *h) {
  unsigned t = ++h->debug_ticks;
  if (unlikely((t & 31) == 0)) heap_adapt_tick(h);
#ifdef LOCUS_DEBUG
  if (t % 256 == 0) heap_validate(h);
#endif
}
extern atomic_int locus_init_state;
/* Its values besides 0 (not started): see locus_init. */
#define INIT_DONE 2
#define INIT_BUSY(pid) (3 + (pid))

/* A freed small or medium block carries a tag in its second word so that a
 * second free is caught; malloc clears the word. The tag mixes the address
 * with a secret so live data cannot equal it by accident. */
static ALWAYS_INLINE uintptr_t block_tag(const void *p) { return (uintptr_t)p ^ locus_free_key; }

/* ---- small.c ----------------------------------------------------------- */
extern uint8_t locus_class_of16[SMALL_MAX / 16 + 1];
extern uint32_t locus_class_size[NUM_CLASSES];
void small_init(void);
static ALWAYS_INLINE unsigned size_class(size_t size) {
  return locus_class_of16[(size + 15) >> 4];
}
/* `used` is written by the owner only, but read by remote frees (the
 * "last block" check, redone under the owner's lock before it acts, after
 * which that thread retires the run: it writes fields the owner last wrote
 * without the lock). The owner's stores are releases and the remote loads
 * acquires, so those earlier owner writes happen before. A stale value can
 * only be larger than the true one (the owner only decrements a run that is
 * not current; a run leaves `cur[]` under the lock): the check then fails.
 * On x86-64 a plain store after a compiler barrier is a release (GCC turns
 * an atomic 16-bit decrement into four instructions instead of one); the
 * thread sanitizer must see atomics. */
static ALWAYS_INLINE unsigned run_used(const run_t *run) { return __atomic_load_n(&run->used, __ATOMIC_ACQUIRE); }
#include "heap/run.h"                  /* the run lifecycle: states, transitions */
#if defined(__SANITIZE_THREAD__)      /* GCC */
#define LOCUS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)   /* clang */
#define LOCUS_TSAN 1
#endif
#endif
#if ARCH_TSO && !defined(LOCUS_TSAN)   /* stores are releases: one add to memory */
static ALWAYS_INLINE void run_used_set(run_t *run, unsigned v) {
  __atomic_signal_fence(__ATOMIC_RELEASE);
  run->used = (uint16_t)v;
}
/* Returns the value it stored, never `used` read again: once the store is
 * visible, a remote free may take the run's remaining blocks (collect_list
 * sets `used` to 0) and retire it, and a read-back would then see 0 and
 * retire the run a second time (small_free_emptied), giving its chunk back
 * twice. `return --run->used` did read back at -O0 (load, subtract, store,
 * load): the debug build handed one chunk to two heaps. -O2 compiles this
 * as before: one subtract from memory whose flags are tested. */
static ALWAYS_INLINE unsigned run_used_dec(run_t *run) {
  __atomic_signal_fence(__ATOMIC_RELEASE);
  uint16_t v = (uint16_t)(run->used - 1u);
  run->used = v;
  return v;
}
static ALWAYS_INLINE void run_used_inc(run_t *run) {   /* one add to memory */
  __atomic_signal_fence(__ATOMIC_RELEASE);
  run->used++;
}
#else
static ALWAYS_INLINE void run_used_set(run_t *run, unsigned v) {
  __atomic_store_n(&run->used, (uint16_t)v, __ATOMIC_RELEASE);
}
static ALWAYS_INLINE unsigned run_used_dec(run_t *run) {
  unsigned v = run->used - 1u;
  __atomic_store_n(&run->used, (uint16_t)v, __ATOMIC_RELEASE);
  return v;
}
static ALWAYS_INLINE void run_used_inc(run_t *run) { run_used_set(run, run->used + 1u); }
#endif
void *small_alloc_slow(heap_t *h, unsigned cls);
/* In the owner's pop window: the next page of its current run, carved
 * without the lock, and a block of it; NULL when the run has none to carve
 * or remote frees to take first (small.c). */
void *small_carve_pop(heap_t *h, unsigned cls);
enum { HEAP_IDLE = 0, HEAP_POPPING = 1, HEAP_PROBED = 2 };
/* How long an owner must not have allocated before remote frees take its
 * current runs back. Invariant: a current run is taken back only when
 * h->pop has stayed HEAP_PROBED since h->probe_ns, at least this long ago,
 * and `pop` is probed at most once per this period: an owner that only
 * waits (a producer on a full ring) loses its runs at most once per period,
 * and a remote free writes the line of `pop`, which the owner writes at
 * every malloc, at most once per period. */
#define HEAP_IDLE_NS (10 * 1000 * 1000ull)
/* The take-back of an idle owner's current runs (reclaim_current); build
 * with -DLOCUS_RECLAIM_CURRENT=0 to leave an idle owner its current runs
 * (at most one per class). It was off for a while after failures in the -O0
 * build with HEAP_IDLE_NS at 0; the cause was not this protocol but
 * run_used_dec reading `used` back after its store (see there; the history
 * is in docs/notes/). */
#ifndef LOCUS_RECLAIM_CURRENT
#define LOCUS_RECLAIM_CURRENT 1
#endif
/* The owner's pop window (see heap_t.pop). The entry's store must be
 * visible before cur[] is read: on the owner's side only the compiler is
 * told; the remote side issues os_membarrier, which makes every running
 * thread execute a full barrier. Leaving is a release: a remote that reads
 * HEAP_IDLE sees the pop's writes. */
static ALWAYS_INLINE void heap_pop_enter(heap_t *h) {
  __atomic_store_n(&h->pop, HEAP_POPPING, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
static ALWAYS_INLINE void heap_pop_leave(heap_t *h) {
  __atomic_store_n(&h->pop, HEAP_IDLE, __ATOMIC_RELEASE);   /* a plain store on TSO machines */
}
static ALWAYS_INLINE run_t *heap_cur(heap_t *h, unsigned cls) {
  return __atomic_load_n(&h->cur[cls], __ATOMIC_RELAXED);
}
/* The owner's free of b when the run is full or b is its last block (under the lock). */
void small_free_update(heap_t *h, chunk_t *c, run_t *run, void **b);
/* The owner's free emptied the run: retired unless current (under the lock). */
void small_free_emptied(heap_t *h, chunk_t *c, run_t *run);
void small_notify(heap_t *owner, run_t *run);
/* Test hook: see small_notify. */
extern void (*small_notify_hook)(int stage);
void small_free_last(heap_t *owner, run_t *run, void *p);
/* Owner side: moves thread_free onto `free`; returns the blocks taken. */
size_t small_collect(heap_t *h, chunk_t *c, run_t *run);
/* Owner side: takes back what other threads freed into h's small runs,
 * retires empty runs (empty chunks go back to the source). With `park`, every
 * run left is marked full so that the next remote free into it tells the heap
 * (a heap with no thread: its notify stack then says it has work). */
void small_collect_all(heap_t *h, bool park);
void small_unpark(heap_t *h);
/* fork() child, every heap lock held: ends notifications that a thread which
 * is gone left half done (a run left TF_NOTIFYING would block its owner). */
void small_fork_child(heap_t *h);
/* fork() child: the notifications' wait queue has no sleeper any more. */
void small_fork_child_queue(void);
/* The owner's free: onto the run's free list.
 * Invariant: the owner never touches a run after publishing a decrement of
 * `used` to a value above 0 without the heap lock. Once the count drops, a
 * remote free of the run's last other block may retire the run
 * (small_free_last) and release its chunk. So the rare case of a full run is
 * decided before the decrement, while the block being freed still keeps the
 * run alive, and is done under the lock. A decrement to 0 leaves no block
 * for a remote free to come with: the owner retires the run (under the
 * lock) after it. */
static ALWAYS_INLINE void small_free_run(heap_t *h, chunk_t *c, run_t *run, void *p, uintptr_t tag) {
  LOCUS_ASSERT(run->used > 0 && run->used <= run->carved && run->carved <= run->capacity);
  void **b = p;
  b[1] = (void *)tag;
  if (unlikely(run_state(run) == RUN_FULL)) {
    small_free_update(h, c, run, b);
    return;
  }
  b[0] = run->free;                    /* after the branch: two plain stores, not a vector pack */
  run->free = b;
  /* Emptied: no block of the run is handed out or on thread_free (both
   * count in `used`), so no valid remote free can touch it any more: the
   * retire is decided after the decrement (one branch on its flags). */
  if (unlikely(run_used_dec(run) == 0)) {
    small_free_emptied(h, c, run);
    return;
  }
}
/* A full list: the list and the block to the runs, the cache off (tcache_t). */
void small_cache_overflow(heap_t *h, chunk_t *c, run_t *run, void *p, uintptr_t tag);
/* Gives every class's list back to the runs and turns the cache off (tcache_t). */
void small_cache_off(heap_t *h);
/* Pushes a checked block onto a list with room. */
static ALWAYS_INLINE void tcache_push(tcache_t *t, void *p, uintptr_t tag) {
  void **b = p;
  b[1] = (void *)tag;
  b[0] = t->head;
  t->head = b;
  t->room--;
}
/* The owner's free of a checked block: onto the thread cache (the run is
 * not touched: the block stays counted in `used`). One branch on the fast
 * path: `room` at no multiple of 64 (so not 0). */
static ALWAYS_INLINE void small_free_local(heap_t *h, chunk_t *c, run_t *run, void *p, uintptr_t tag) {
  tcache_t *t = &h->cache[run->cls];
  uint32_t room = t->room;
  if (likely(room & 63)) {
    tcache_push(t, p, tag);
    return;
  }
  if (!((uintptr_t)t->head | room)) {  /* off, or LOCUS_THREAD_CACHE=0 (one test for both words) */
    small_free_run(h, c, run, p, tag);
    return;
  }
  /* A program whose blocks all come and go through the cache makes no
   * slow-path call: the adaptive controller still gets its tick, at a push
   * that finds the class's free places a multiple of 64: every 64 pushes
   * onto a growing list, and every push onto a list that the mallocs keep
   * emptying: bounds of 64 and more are multiples of 64 (small_cache_init;
   * classes up to 4 KiB with the default LOCUS_THREAD_CACHE, test_adapt). */
  if (room) {
    tcache_push(t, p, tag);
    heap_cache_tick(h);
    return;
  }
  small_cache_overflow(h, c, run, p, tag);
}
/* Another thread's block found h's list full: to its run, the cache off. */
void small_free_foreign_full(heap_t *h, heap_t *owner, run_t *run, void *p);
/* Sets the bounds of a new heap's thread cache from LOCUS_THREAD_CACHE. */
void small_cache_init(heap_t *h);
/* The owner, or a collector of an orphan, gives the thread cache back to
 * the runs (h->lock not held). */
void small_cache_flush(heap_t *h);
/* Whether no class of h's thread cache holds a block (the owner, or a
 * collector of an orphan). */
bool small_cache_empty(const heap_t *h);
/* The owner's exit: other heaps' blocks leave the cache, its own stay. */
void small_cache_exit(heap_t *h);
/* Another thread's free: one CAS on the run's thread_free, none on the heap,
 * except the first free into a full run, which tells the owner (small_notify). */
static ALWAYS_INLINE void small_free_remote(heap_t *owner, run_t *run, void *p) {
  void **b = p;
  b[1] = (void *)block_tag(b);
  uintptr_t old = atomic_load_explicit(&run->thread_free, memory_order_relaxed), nw;
  /* This free may empty the run (all its other handed-out blocks are on
   * thread_free): then the run can go back without the owner (idle threads
   * of an OpenMP pool never allocate again). Our block keeps the run alive
   * until pushed, so reading `used` here is safe; the check is redone under
   * the owner's lock. It is made again after a failed CAS: of two threads
   * freeing a run's last two blocks at once, the loser sees it is last. */
  for (;;) {
    if (unlikely(((old & TF_COUNT_MASK) >> TF_COUNT_SHIFT) + 1 == run_used(run))) {
      small_free_last(owner, run, p);
      return;
    }
    b[0] = (void *)(old & TF_PTR_MASK);
    nw = (uintptr_t)b | ((old & TF_COUNT_MASK) + TF_COUNT_ONE) | tf_push_state(old);
    if (atomic_compare_exchange_weak_explicit(&run->thread_free, &old, nw, memory_order_release,
                                              memory_order_relaxed))
      break;
  }
  if (unlikely(old & TF_FULL)) small_notify(owner, run);
}
/* The run descriptor of a block of small chunk c, from the block's address
 * alone: c is aligned on CHUNK_SIZE (SRC_ALIGNED), so the block's offset in
 * the chunk is its address's low bits, and descriptors are indexed by a
 * shift (one shift and one mask, no subtraction). */
static ALWAYS_INLINE run_t *chunk_run_of(chunk_t *c, const void *p, size_t *off) {
  LOCUS_ASSERT(((uintptr_t)c & (CHUNK_SIZE - 1)) == 0);
  uintptr_t a = (uintptr_t)p;
  *off = a & (RUN_SIZE - 1);
  uintptr_t desc = (a >> (RUN_SHIFT - RUN_DESC_SHIFT)) & ((CHUNK_SIZE - 1) >> (RUN_SHIFT - RUN_DESC_SHIFT));
  return (run_t *)((char *)c->runs + (desc & ~(sizeof(run_t) - 1)));
}
static ALWAYS_INLINE char *run_start(chunk_t *c, run_t *run) {
  return (char *)c + ((size_t)(run - c->runs) << RUN_SHIFT);
}
/* Whether block idx (< RUN_SIZE / bsize) of the run was ever carved.
 * Carving starts at block `first` and goes to the run's end a page at a
 * time; there the blocks before `first` are carved at once and `first`
 * becomes 0 (run_extend). So the carved blocks are always first .. first +
 * carved - 1 with first + carved <= capacity: one unsigned compare (below
 * `first`, idx - first wraps to a huge value). The block past the last
 * whole one (idx == capacity, in the tail a run's size leaves over) is never
 * carved, and a retired run has first = carved = 0. Read by the owner, or
 * under its lock: `first` and `carved` change in its slow path. */
static ALWAYS_INLINE bool run_carved(const run_t *run, size_t idx) {
  return idx - run->first < run->carved;
}
/* The same, for another thread than the owner: `first` and `carved` in one
 * load, a pair the run had (the owner writes them together: run_set_span),
 * so first + carved <= capacity holds for what is read and a block that
 * passes is below the capacity. A valid block was carved before it was
 * handed out, which happened before its free: the pair read covers it. */
typedef union {                        /* run_t's span, with the halves named in the same order */
  struct { uint16_t first, carved; };
  uint32_t span;
} run_span_t;
static ALWAYS_INLINE bool run_carved_shared(const run_t *run, size_t idx) {
  run_span_t s = {.span = __atomic_load_n(&run->span, __ATOMIC_RELAXED)};
  return idx - s.first < s.carved;
}
/* The owner sets the carved range (one store: run_carved_shared). */
static ALWAYS_INLINE void run_set_span(run_t *run, unsigned first, unsigned carved) {
  run_span_t s = {.first = (uint16_t)first, .carved = (uint16_t)carved};
  __atomic_store_n(&run->span, s.span, __ATOMIC_RELAXED);
}
/* Index of the block starting at offset `off` of the run, or a value >=
 * capacity when off is not a block start. Reads only fields fixed when the
 * run was set up, so any thread may call it. */
static ALWAYS_INLINE size_t run_index(const run_t *run, size_t off) {
  size_t idx = (off * run->recip) >> 32;
  return idx * run->bsize == off ? idx : SIZE_MAX;
}

/* Another thread's free of a checked block (carved: run_carved_shared):
 * onto the freeing thread's own cache when its heap h may reuse the block
 * (the owner is a main heap of the same node: placed blocks go back to their
 * placement, and memory freed on a node is reused on that node only) and
 * the class's list has room; else onto the run's thread_free. A cached
 * foreign block stays the owner's: counted in its run's `used`, it goes back
 * to the owner through thread_free when h frees it again or flushes it
 * (tcmalloc's thread caches take any block too: a thread that frees blocks
 * of others reuses them at once, while they are in its caches, without a
 * CAS on the owner's run). Only blocks of a live thread's heap: a block
 * cached here and handed out again stays the owner's, so every later free
 * of it takes this slower path; blocks of an exited thread (a server that
 * hands work to a new thread: bench_ab_larson) would stay foreign for good,
 * where sent home they are reused by the heap's next thread. A stale read
 * of the state only costs that. free_small makes the common case (room in
 * the list) inline; this is the rest (its push serves a free that read the
 * owner's state again after the owner's thread came or went). */
static ALWAYS_INLINE bool small_foreign_cacheable(const heap_t *h, const heap_t *owner) {
  return __atomic_load_n(&owner->cache_node, __ATOMIC_RELAXED) == h->node;
}
static ALWAYS_INLINE void small_free_foreign(heap_t *h, heap_t *owner, run_t *run, void *p) {
  if (h && small_foreign_cacheable(h, owner)) {
    tcache_t *t = &h->cache[run->cls];
    if (t->room) {
      tcache_push(t, p, block_tag(p));
      h->cache_foreign = true;
      return;
    }
    if (t->head) {                     /* full: the same rule as the owner's (tcache_t) */
      small_free_foreign_full(h, owner, run, p);
      return;
    }
  }
  small_free_remote(owner, run, p);
}
/* ---- medium.c ---------------------------------------------------------- */
#define MEDIUM_FIRST_OFF align_up(sizeof(chunk_t), 64)
static inline size_t mb_size(const mblock_t *b) { return b->head & ~(size_t)15; }
static inline bool mb_inuse(const mblock_t *b) { return b->head & MB_INUSE; }
static inline mblock_t *mb_next(mblock_t *b) { return (mblock_t *)((char *)b + mb_size(b)); }
static inline mblock_t *mb_of(const void *p) { return (mblock_t *)((char *)p - MB_HDR); }
unsigned medium_bin_of(size_t size);
void *medium_alloc(heap_t *h, size_t size, size_t align, bool zero);
void medium_free_local(heap_t *h, chunk_t *c, void *p);
mblock_t *medium_check(chunk_t *c, const void *p, const char *fn, bool local);
size_t medium_usable(const void *p);
bool medium_resize_in_place(heap_t *h, chunk_t *c, void *p, size_t size);
void medium_chunk_init(heap_t *h, chunk_t *c);
/* The medium chunks that are one free block (a reset keeps them so) go back
 * to the source (owner, or heaps_lock held for a parked heap). */
void medium_release_empty(heap_t *h);

/* ---- large.c ----------------------------------------------------------- */
typedef struct large_s {
  region_t r;
  size_t user_off;             /* payload offset from the region start */
  size_t user_size;            /* requested bytes */
  size_t magic;                /* LARGE_LIVE */
} large_t;
#define LARGE_LIVE ((size_t)0x4c4f4355534c4756ull)
/* A user heap's large block: the header links it on its heap's list, so
 * that destroy and reset find every block without a walk of the registry
 * (its payload starts past LARGE_USER_ROOM instead of 64 bytes). */
typedef struct {
  large_t l;
  large_t *next, *prev;
} large_user_t;
#define LARGE_USER_ROOM 128u
void *large_alloc(heap_t *h, size_t size, size_t align, bool zero);
void large_free(large_t *l);
void *large_realloc(large_t *l, void *p, size_t size);
large_t *large_check(region_t *r, const void *p, const char *fn);
/* A user heap's realloc, by any thread (a large block has no owner state):
 * the block stays where it is (shrunk, or grown over the free memory behind
 * it), else NULL. */
void *large_resize_in_place(large_t *l, void *p, size_t size);
/* The region bytes large_alloc(h, size, align) asks its source for (no huge-page rounding). */
size_t large_region_bytes(const heap_t *h, size_t size, size_t align);
static inline size_t large_usable(const large_t *l) {
  if (unlikely(l->r.flags & REGION_FILE))   /* up to the file's last page; the rest is reserved only */
    return PAGE_SIZE + file_info((region_t *)&l->r)->flen - l->user_off;
  return l->r.size - l->user_off;
}
/* Shareable blocks (source/file.c): a new one of `size` bytes, zero; a
 * copy-on-write copy of [src, src + len) inside `from`, a shareable block.
 * The payload pointer, or NULL with errno. */
void *large_file_alloc(heap_t *h, size_t size);
/* An overlap block (docs/overlap.md): a memory-file region, a kept one when
 * there is (cleared if zero). NULL with errno. */
void *large_overlap_alloc(heap_t *h, size_t size, bool zero);
void *large_file_copy(heap_t *h, large_t *from, const void *src, size_t len);

#endif /* LOCUS_HEAP_H */
