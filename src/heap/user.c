/* User heaps (S. Valat, PhD thesis, 2014, §4.13 and Fig. 4.5: a local heap
 * given a special segment, or a memory source of the user's that can grow
 * it; MPC used it for shared-memory segments). Learnt from mimalloc's heaps
 * (drop every block at once), jemalloc's extent hooks and the Unified
 * Memory Framework's pools over memory providers.
 *
 * A user heap (struct uheap_s) is a descriptor over one memory source — a
 * user source over the segment and the user's map (source/user.c), or
 * locus's source of a node, the interleaved one or the generic one — and,
 * for each thread that allocates from it, a heap record of its own (heap_t,
 * PLACE_USER: a *user sub-heap*) with the same runs, thread cache, medium
 * chunks and large blocks as the thread's heap, drawing on that source. A
 * sub-heap hangs off its thread's main heap (`usubs`, like the placed
 * sub-heaps: adopted with it, parked with it at the thread's exit) and off
 * the user heap (`subs`). So allocation takes no lock (the owner's path of
 * malloc, after a one-entry thread-local lookup), a thread's free of its own
 * block goes to its sub-heap's thread cache, and another thread's free takes
 * the remote path, as for any heap.
 *
 * Invariants (checked in the debug build where marked):
 * - a live descriptor has magic UHEAP_LIVE; a dropped one UHEAP_DEAD;
 *   descriptors are never unmapped and are reused only after QUARANTINE
 *   others died, with their generation `gen` one higher;
 * - the program's handle (locus_heap_t *) is the descriptor's address with
 *   its generation in the top 16 bits, never dereferenced as such: a stale
 *   handle reads a dead descriptor or one of another generation, and
 *   uheap_open aborts naming it (a double destroy is caught unless the
 *   descriptor was reused a multiple of 65,536 times since);
 * - a sub-heap's `user` is its live user heap, or NULL once that heap was
 *   destroyed (the record then waits on its thread's list for reuse by that
 *   thread); only its thread (or, with heaps_lock, a collector of orphans
 *   and the heap's destroy or reset) touches its lists;
 * - every large block of a sub-heap is on its large_list (under its lock),
 *   every chunk on its chunk lists or its spare: a drop walks the heap's
 *   memory, never its blocks;
 * - `captures` counts the threads whose heap pointer is a capture
 *   trampoline of this heap; a destroy with captures > 0 aborts;
 * - the user's map is called with no lock held but this heap's `lock`
 *   (usrc_grow), after the thread's default heap exists, and an allocation
 *   of a thread inside it goes to its default heap (in_user): a map that
 *   calls malloc never waits for itself. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "heap/user.h"

#include "numa/next_touch.h"
#include "os/os.h"
#include "os/topology.h"
#include "config/options.h"

#define UHEAP_LIVE 0x4c4f4355534850ull   /* "LOCUSHP" */
#define UHEAP_DEAD 0x44454144ull
#define QUARANTINE 64                    /* dead records kept before one is reused */

struct uheap_s {
  uint64_t magic;
  unsigned gen;                /* 16 bits: one more at each reuse of the descriptor (handles carry it) */
  lock_t lock;                 /* growth through the user's map, new sub-heaps, drop (LOCK_RANK_USER_HEAP) */
  heap_t *_Atomic subs;        /* its sub-heaps, one per thread that allocated (linked by next_in_user) */
  source_t *src;               /* where its memory comes from */
  source_t *usrc;              /* its user source (== src), or NULL (locus's memory) */
  size_t limit;
  unsigned flags;              /* LOCUS_HEAP_ARENA */
  unsigned id;
  atomic_int captures;
  atomic_size_t peak;          /* highest memory held seen after a growth */
  /* The bytes of memory its sub-heaps hold (chunks, large blocks), plus
   * the reservations of growths in progress: one counter, so that the
   * limit's check is exact (a sum over the sub-heaps' counters counted a
   * chunk going from one to another twice: uheap_room). */
  atomic_size_t held;
  char name[48];
  struct uheap_s *next, *prev;      /* live list, or (next) the dead queue */
};

/* The records: the live list (reports, fork) and the dead queue, FIFO.
 * list_lock is its own class below the records' locks: fork's prepare takes
 * it, then walks the list to take every record's lock. */
LOCK_STATIC(list_lock, LOCK_RANK_USER_HEAP - 1, "user heaps (the list)")
static uheap_t *live, *dead_head, *dead_tail;
static size_t ndead;
static unsigned next_id;
static os_slab_t records;             /* descriptors (under list_lock) */

static void uheaps_each_lock(void (*fn)(lock_t *)) {
  for (uheap_t *u = live; u; u = u->next) fn(&u->lock);
}
static lock_class_t uheap_locks = {.name = "user heap (allocation)", .rank = LOCK_RANK_USER_HEAP,
                                   .each = uheaps_each_lock};
__attribute__((constructor(101))) static void uheap_locks_register(void) { lock_class_register(&uheap_locks); }

/* The thread is inside a user heap's allocation (the user's map may call
 * malloc: it goes to the thread's default heap). */
static LOCUS_TLS int in_user;

/* ---- records ----------------------------------------------------------- */

#define HANDLE_SHIFT 48
#define HANDLE_MASK (((uintptr_t)1 << HANDLE_SHIFT) - 1)
_Static_assert(sizeof(uintptr_t) == 8, "heap handles carry a generation in a 64-bit pointer");

locus_heap_t *uheap_handle(const uheap_t *u) {
  return u ? (locus_heap_t *)((uintptr_t)u | (uintptr_t)(u->gen & 0xffff) << HANDLE_SHIFT) : NULL;
}

/* A record from the dead queue past its quarantine, or a new one (list_lock held). */
static uheap_t *record_get(void) {
  if (ndead > QUARANTINE) {
    uheap_t *u = dead_head;
    dead_head = u->next;
    if (!dead_head) dead_tail = NULL;
    ndead--;
    return u;
  }
  size_t sz = align_up(sizeof(uheap_t), CACHE_LINE);
  uheap_t *u = os_slab_take(&records, sz, 64 * sz);
  /* The handle's top 16 bits hold the generation (user space is below
   * 2^47 on x86-64 and 2^48 on aarch64 unless a mapping asks for more). */
  if (u && (uintptr_t)u >> HANDLE_SHIFT) locus_fatal("a heap descriptor at %p: above the handle's address bits", (void *)u);
  return u;
}

static void live_link(uheap_t *u) {
  u->prev = NULL;
  u->next = live;
  if (live) live->prev = u;
  live = u;
}

static void live_unlink(uheap_t *u) {
  if (u->prev) u->prev->next = u->next;
  else live = u->next;
  if (u->next) u->next->prev = u->prev;
}

static NOINLINE void bad_heap(const uheap_t *u, const char *fn) {
  if (!u) locus_fatal("%s(): NULL heap", fn);
  if (u->magic == UHEAP_DEAD)
    locus_fatal("%s(): heap '%s' (%p) was destroyed", fn, u->name, (const void *)uheap_handle(u));
  locus_fatal("%s(): %p is not a heap made by locus_heap_create", fn, (const void *)u);
}

/* A descriptor is checked by its magic: a wild pointer mostly faults or
 * fails it (reading a foreign pointer's magic could fault, so the registry
 * of regions cannot tell). */
void uheap_check(const uheap_t *u, const char *fn) {
  if (unlikely(!u || u->magic != UHEAP_LIVE)) bad_heap(u, fn);
}

static NOINLINE void bad_handle(const locus_heap_t *h, const uheap_t *u, const char *fn) {
  if (!u || (u->magic != UHEAP_LIVE && u->magic != UHEAP_DEAD)) bad_heap(u, fn);   /* NULL or foreign */
  if ((uintptr_t)h >> HANDLE_SHIFT == (u->gen & 0xffff)) bad_heap(u, fn);   /* dead, not reused: named */
  /* A record of another generation: the heap of this handle was destroyed
   * (or the handle's top bits were overwritten); the record's name is that
   * of a later heap, not this one. */
  locus_fatal("%s(): heap handle %p is stale (its heap was destroyed) or corrupt", fn, (const void *)h);
}

static inline bool handle_matches(const locus_heap_t *h, const uheap_t *u) {
  return u->magic == UHEAP_LIVE && (uintptr_t)h >> HANDLE_SHIFT == (u->gen & 0xffff);
}

uheap_t *uheap_open(const locus_heap_t *h, const char *fn) {
  uheap_t *u = (uheap_t *)((uintptr_t)h & HANDLE_MASK);
  if (unlikely(!u || !handle_matches(h, u))) bad_handle(h, u, fn);
  return u;
}

source_t *uheap_source(const uheap_t *u) { return u->src; }
lock_t *uheap_lock_of(uheap_t *u) { return &u->lock; }
bool uheap_is_arena(const uheap_t *u) { return u->flags & LOCUS_HEAP_ARENA; }
const char *uheap_name(const uheap_t *u) { return u->name; }

/* ---- creation ---------------------------------------------------------- */

static int config_check(const locus_heap_config_t *cfg, size_t *seg_size) {
  if (!cfg || cfg->struct_size < offsetof(locus_heap_config_t, name) || cfg->struct_size > sizeof *cfg)
    return EINVAL;
  if (cfg->flags & ~LOCUS_HEAP_ARENA) return EINVAL;
  if (cfg->source && !cfg->source->map) return EINVAL;
  bool seg = cfg->segment || cfg->segment_size;
  if (seg) {
    if (!cfg->segment || (uintptr_t)cfg->segment & (PAGE_SIZE - 1)) return EINVAL;
    *seg_size = cfg->segment_size & ~(size_t)(PAGE_SIZE - 1);
    if (*seg_size < SLICE_SIZE || (uintptr_t)cfg->segment + *seg_size < (uintptr_t)cfg->segment) return EINVAL;
    /* Checked now rather than at the first allocation, which would crash:
     * every page of the segment mapped, readable and writable. */
    if (os_range_writable((uintptr_t)cfg->segment, *seg_size) == 0) return EINVAL;
  }
  bool user_mem = seg || cfg->source;
  /* Placement is for locus's memory: the user's pages are where the user put them. */
  if (cfg->node != -1 && (user_mem || cfg->interleave || cfg->node < 0 || !topology_node_allowed(cfg->node)))
    return EINVAL;
  if (cfg->interleave && (user_mem || cfg->interleave != 1)) return EINVAL;
  return 0;
}

/* Whether the segment overlaps memory locus manages: a region (a block of
 * malloc, say) or another user heap's memory; list_lock held. */
static bool segment_taken(uintptr_t base, size_t size, const source_t *own) {
  return registry_overlaps(base, size) || sources_overlap(base, size) || usrc_any_overlaps(base, size, own);
}

static void record_init(uheap_t *u, const locus_heap_config_t *cfg, source_t *usrc) {
  lock_init(&u->lock, LOCK_RANK_USER_HEAP);
  atomic_store(&u->subs, NULL);
  u->usrc = usrc;
  if (usrc) u->src = usrc;
  else if (cfg->interleave) u->src = source_interleave();
  else if (cfg->node >= 0) u->src = source_of_node(cfg->node);
  else u->src = source_for_node(-1);
  u->limit = cfg->limit;
  u->flags = cfg->flags;
  u->id = ++next_id;
  u->gen++;                            /* a new record is zeroed: generation 1 */
  atomic_store(&u->peak, 0);
  atomic_store(&u->held, 0);
  atomic_store(&u->captures, 0);
  const char *name = cfg->struct_size > offsetof(locus_heap_config_t, name) ? cfg->name : NULL;
  if (name) snprintf(u->name, sizeof u->name, "%s", name);
  else snprintf(u->name, sizeof u->name, "heap#%u", u->id);
  __atomic_store_n(&u->magic, UHEAP_LIVE, __ATOMIC_RELEASE);
}

/* A record back to the dead queue, at its head (reused first); list_lock held. */
static void record_put_back(uheap_t *u) {
  u->magic = UHEAP_DEAD;
  u->next = dead_head;
  dead_head = u;
  if (!dead_tail) dead_tail = u;
  ndead++;
}

uheap_t *uheap_create(const locus_heap_config_t *cfg) {
  locus_init();
  size_t seg_size = 0;
  int err = config_check(cfg, &seg_size);
  if (err) {
    errno = err;
    return NULL;
  }
  lock_acquire(&list_lock);
  uheap_t *u = record_get();
  lock_release(&list_lock);
  if (!u) {
    errno = ENOMEM;
    return NULL;
  }
  /* The user source outside list_lock: it maps memory. */
  source_t *usrc = NULL;
  bool user_mem = cfg->segment || cfg->source;
  if (user_mem) usrc = usrc_new(cfg->segment, seg_size, cfg->source);
  err = user_mem && !usrc ? ENOMEM : 0;
  lock_acquire(&list_lock);
  /* The overlap check and the link under one hold of the lock: of two
   * heaps given one segment at once, the second sees the first. */
  if (!err && cfg->segment && segment_taken((uintptr_t)cfg->segment, seg_size, usrc)) err = EINVAL;
  if (err) {
    record_put_back(u);
    lock_release(&list_lock);
    if (usrc) usrc_destroy(usrc);
    errno = err;
    return NULL;
  }
  record_init(u, cfg, usrc);
  live_link(u);
  lock_release(&list_lock);
  return u;
}

/* ---- allocation -------------------------------------------------------- */

/* The calling thread's sub-heap of the user heap it used last: one compare
 * on the way to the owner's path of malloc. A destroyed heap's sub-heaps
 * have no user, so a stale entry does not match. */
static LOCUS_TLS uheap_t *last_u;
/* last_u's handle; NO_HANDLE (no heap's, not NULL: locus_heap_malloc(NULL)
 * must not pass the fast path with last_sub NULL) when none. */
#define NO_HANDLE ((locus_heap_t *)~(uintptr_t)0)
static LOCUS_TLS locus_heap_t *last_h = NO_HANDLE;
static LOCUS_TLS heap_t *last_sub;

/* What u's sub-heaps count, chunks and large blocks (read without their
 * locks: relaxed counters, a list that only grows at its head); equals
 * `held` when no growth or release is under way. */
static size_t parts_bytes(const uheap_t *u) {
  size_t n = 0;
  for (heap_t *s = atomic_load_explicit(&((uheap_t *)u)->subs, memory_order_acquire); s; s = s->next_in_user)
    n += atomic_load_explicit(&s->st_chunk_bytes, memory_order_relaxed) +
         atomic_load_explicit(&s->st_large_bytes, memory_order_relaxed);
  return n;
}

/* The memory the heap holds now: over the user's memory, what its source
 * handed out (exact, read under the source's lock: never above the
 * segment); else the counter, and the spares (always standard chunks, kept
 * only by unbounded heaps: read as flags, never dereferenced). */
static size_t held_bytes(const uheap_t *u) {
  if (u->usrc) {
    size_t total, free_bytes;
    usrc_sizes(u->usrc, &total, &free_bytes);
    return total - free_bytes;
  }
  size_t n = atomic_load_explicit(&((uheap_t *)u)->held, memory_order_relaxed);
  for (heap_t *s = atomic_load_explicit(&((uheap_t *)u)->subs, memory_order_acquire); s; s = s->next_in_user)
    if (__atomic_load_n(&s->spare, __ATOMIC_RELAXED)) n += CHUNK_SIZE;
  return n;
}

/* A growth reserves its bytes in `held` before it asks the source (under a
 * limit: only while they fit), so that threads growing the heap at once
 * cannot pass the limit together; uheap_room_done puts what it got in their
 * place. */
bool uheap_room(const heap_t *sub, size_t bytes) {
  uheap_t *u = sub->user;
  if (!u) return false;
  if (!u->limit) {
    atomic_fetch_add_explicit(&u->held, bytes, memory_order_relaxed);
    return true;
  }
  size_t cur = atomic_load_explicit(&u->held, memory_order_relaxed);
  do {
    if (bytes > u->limit || cur > u->limit - bytes) return false;
  } while (!atomic_compare_exchange_weak_explicit(&u->held, &cur, cur + bytes, memory_order_relaxed,
                                                  memory_order_relaxed));
  return true;
}

/* The peak is what the heap holds once the growth is counted or failed (a
 * reservation that the source refused never counts). */
void uheap_room_done(const heap_t *sub, size_t reserved, size_t got) {
  uheap_t *u = sub->user;
  if (!u) return;
  LOCUS_ASSERT(!u->limit || got <= reserved);   /* SRC_EXACT under a limit (heap_t.limited) */
  atomic_fetch_add_explicit(&u->held, got - reserved, memory_order_relaxed);   /* modular */
  size_t held = held_bytes(u);
  size_t peak = atomic_load_explicit(&u->peak, memory_order_relaxed);
  while (held > peak && !atomic_compare_exchange_weak(&u->peak, &peak, held)) {
  }
}

void uheap_released(const heap_t *sub, size_t bytes) {
  uheap_t *u = sub->user;
  if (u) atomic_fetch_sub_explicit(&u->held, bytes, memory_order_relaxed);
}

/* A sub-heap record set up for u, owned by the thread of `main`. */
static void sub_init(heap_t *sub, heap_t *main, uheap_t *u) {
  sub->main = main;
  sub->place = PLACE_USER;
  sub->user = u;
  sub->source = u->src;
  /* No node a heap's cache_node can equal: other heaps' blocks never enter
   * this sub-heap's thread cache (a capture must hand out only u's blocks). */
  sub->node = CACHE_NODE_NONE + 1;
  sub->arena = u->flags & LOCUS_HEAP_ARENA;
  sub->bounded = u->usrc || u->limit;
  sub->limited = u->limit != 0;
  sub->tid = main->tid;
  heap_set_state(sub, main->state);
}

/* The thread's sub-heap of u: on its main heap's list, a dead one of that
 * list made new, or a new record. NULL (ENOMEM) when none can be had. */
static NOINLINE heap_t *sub_slow(uheap_t *u) {
  heap_t *main = heap_get()->main;
  if (main == &locus_oom_heap) return NULL;
  heap_t *sub = NULL, *dead = NULL;
  for (heap_t *s = main->usubs; s; s = s->next_usub) {
    if (s->user == u) {
      sub = s;
      break;
    }
    if (!s->user && !dead) dead = s;
  }
  if (!sub) {
    if (dead) {
      sub = dead;
      heap_record_clear_kept(sub);     /* its links stay: main's list, the record list */
    } else {
      sub = heap_new_detached();
      if (!sub) return NULL;
      sub->next_usub = main->usubs;
    }
    sub_init(sub, main, u);
    lock_acquire(&u->lock);            /* u's list: drop and reports walk it */
    sub->next_in_user = atomic_load_explicit(&u->subs, memory_order_relaxed);
    atomic_store_explicit(&u->subs, sub, memory_order_release);
    lock_release(&u->lock);
    if (!dead) __atomic_store_n(&main->usubs, sub, __ATOMIC_RELEASE);
  }
  last_u = u;
  last_h = uheap_handle(u);
  last_sub = sub;
  return sub;
}

/* The thread gives its default heap up (exit, rebind): its sub-heaps go with
 * it, to the thread that adopts it; the lookup must not find them again
 * (a later destructor of this thread allocating would share a sub-heap
 * with the adopter). */
void uheap_thread_forget(void) {
  last_u = NULL;
  last_h = NO_HANDLE;
  last_sub = NULL;
}

static ALWAYS_INLINE heap_t *sub_of(uheap_t *u) {
  heap_t *sub = last_sub;
  if (likely(last_u == u) && likely(sub->user == u)) return sub;
  return sub_slow(u);
}

/* Memory a request needs from the user's map: a small chunk (aligned on its
 * size), a medium chunk, or the large block's region. */
static void growth_for(const heap_t *h, size_t size, size_t align, size_t *bytes, size_t *galign) {
  *galign = PAGE_SIZE;
  if (size <= SMALL_MAX && align <= os_page_size()) {
    *bytes = CHUNK_SIZE;
    *galign = CHUNK_SIZE;
  } else if (size <= locus_opt.large_threshold && align <= locus_opt.large_threshold / 4 &&
             size + align <= locus_opt.large_threshold) {
    *bytes = heap_chunk_bytes(REGION_MEDIUM);
  } else {
    *bytes = large_region_bytes(h, size, align);
  }
}

/* ---- arenas: a pointer bump over arena chunks ---------------------------- */

#define ARENA_HDR 16u                  /* before each block: its usable size and a tag */
#define ARENA_FIRST offsetof(chunk_t, runs)   /* the chunk header used: region, links, hiwater */
#define ARENA_TAG ((uintptr_t)0x4c4f4355534152ull)
typedef struct { size_t size; uintptr_t tag; } arena_hdr_t;

/* A block of `size` bytes aligned on `align` (<= the page) from the current
 * arena chunk, or NULL when it has no room. */
static ALWAYS_INLINE void *arena_bump(heap_t *sub, size_t size, size_t align) {
  char *b = sub->bump;
  char *p = (char *)align_up((uintptr_t)b + ARENA_HDR, align);
  size_t n = align_up(size ? size : 1, 16);
  if (unlikely(!b || p + n > sub->bump_end)) return NULL;
  sub->bump = p + n;
  arena_hdr_t *h = (arena_hdr_t *)(p - ARENA_HDR);
  h->size = n;
  h->tag = (uintptr_t)p ^ ARENA_TAG;
  return p;
}

/* A new arena chunk for `need` more bytes: a 4 MiB chunk, or from a user
 * segment the largest extent that holds it. NULL when the heap has no room. */
static chunk_t *arena_chunk_new(heap_t *sub, size_t need) {
  size_t size = CHUNK_SIZE;
  if (sub->source->user) {
    size_t most = usrc_largest(sub->source) & ~(size_t)(PAGE_SIZE - 1);
    if (most < size) size = most;
    if (size < SLICE_SIZE || size < need) return NULL;
  }
  if (!heap_room(sub, size)) return NULL;
  chunk_t *c = (chunk_t *)source_alloc(sub->source, size, SRC_CHUNK | SRC_EXACT);
  if (c) {
    c->r.kind = REGION_ARENA;
    c->r.heap = sub;
    c->r.node = (uint8_t)(c->r.source->node < 0 ? NODE_NONE : c->r.source->node);
    if (!registry_add(&c->r)) {
      source_free(&c->r);
      c = NULL;
    }
  }
  if (c) {
    source_advise_merge(&c->r, true);
    c->next = c->prev = NULL;
    heap_stat_add_shared(&sub->st_chunk_bytes, c->r.size);
  }
  heap_room_done(sub, size, c ? c->r.size : 0);
  return c;
}

/* The bump moves to the next chunk kept by a reset that holds `need`
 * bytes, or to a new chunk at the end of the list. */
static NOINLINE bool arena_refill(heap_t *sub, size_t need) {
  need += ARENA_FIRST;
  chunk_t *c = sub->arena_cur ? sub->arena_cur->next : sub->arena_chunks;
  while (c && c->r.size < need) c = c->next;
  if (!c) {
    c = arena_chunk_new(sub, need);
    if (!c) return false;
    chunk_t **link = &sub->arena_chunks;
    while (*link) link = &(*link)->next;
    *link = c;
  }
  sub->arena_cur = c;
  sub->bump = (char *)c + ARENA_FIRST;
  sub->bump_end = (char *)c + c->r.size;
  return true;
}

/* An arena's block up to the large threshold; calloc clears it unless its
 * chunk is fresh from the OS (a chunk kept by a reset is not: r.zeroed). */
static void *arena_alloc(heap_t *sub, size_t size, size_t align, bool zero) {
  void *p = arena_bump(sub, size, align);
  if (!p) {
    if (!arena_refill(sub, size + align + ARENA_HDR)) return NULL;
    p = arena_bump(sub, size, align);
  }
  if (p && zero && !sub->arena_cur->r.zeroed) memset(p, 0, size);
  return p;
}

/* Blocks up to the large threshold that an arena chunk can hold (the
 * threshold may be set above a chunk); the rest are large blocks. */
static bool arena_fits(const heap_t *sub, size_t size, size_t align) {
  return sub->arena && size <= locus_opt.large_threshold && align <= os_page_size() &&
         size + align + ARENA_HDR + ARENA_FIRST <= CHUNK_SIZE;
}

size_t arena_usable(const void *p, const char *fn) {
  const arena_hdr_t *h = (const arena_hdr_t *)((const char *)p - ARENA_HDR);
  if (((uintptr_t)p & 15) || h->tag != ((uintptr_t)p ^ ARENA_TAG))
    locus_fatal("%s(): invalid pointer %p (not the start of a block of an arena heap)", fn, p);
  return h->size;
}

/* Reset: the bump goes back to the first chunk, whose bytes are no longer
 * known zero; destroy: the chunks go. */
static void arena_drop(heap_t *sub, bool keep) {
  for (chunk_t *c = sub->arena_chunks, *next; c; c = next) {
    next = c->next;
    if (keep) c->r.zeroed = false;
    else registry_remove(&c->r), source_free(&c->r);
  }
  if (!keep) sub->arena_chunks = NULL;
  sub->arena_cur = NULL;
  sub->bump = sub->bump_end = NULL;
}

/* A small request that found no small chunk (a segment too short or not
 * aligned for one) is served by a medium block: every free, realloc and
 * size query works on it the same. */
static void *alloc_in(heap_t *sub, size_t size, size_t align, bool zero) {
  if (arena_fits(sub, size, align)) return arena_alloc(sub, size, align, zero);
  void *p = heap_alloc(sub, size, align, zero);
  if (!p && sub->source->user && size <= SMALL_MAX && align <= locus_opt.large_threshold / 4)
    p = medium_alloc(sub, size, align < ALIGN_MIN ? ALIGN_MIN : align, zero);
  return p;
}

/* An arena's chunks that the bump has not reached since a reset go back to
 * the source (owner, or heaps_lock held for a parked sub-heap). */
static void arena_release_unused(heap_t *sub) {
  if (!sub->arena) return;
  chunk_t **link = sub->arena_cur ? &sub->arena_cur->next : &sub->arena_chunks;
  for (chunk_t *c = *link, *next; c; c = next) {
    next = c->next;
    heap_stat_add_shared(&sub->st_chunk_bytes, -c->r.size);
    heap_released(sub, c->r.size);
    registry_remove(&c->r);
    source_free(&c->r);
  }
  *link = NULL;
}

/* One sub-heap's idle memory back to the source (its owner, or heaps_lock
 * held for a parked one): its thread cache, remote frees, empty runs, every
 * empty chunk whatever served it (a chunk of small blocks can serve a
 * medium block once it is back), the spare, and an arena's chunks kept by a
 * reset. */
static void sub_reclaim(heap_t *s) {
  heap_collect_full(s);
  arena_release_unused(s);
}

/* Before ENOMEM, the memory that the heap's parts hold idle goes back to its
 * source, where this request can have it: this thread's part, and the parts
 * of threads that exited (parked sub-heaps: until a thread adopts them, blocks
 * other threads free into them stay there). A bounded heap's live parts keep
 * no spare (heap_t.bounded); what another live thread holds, its thread
 * cache, its current runs, the medium blocks freed into it that it has not
 * taken back, stays its own. Proportional to the heap's chunks. */
static NOINLINE void reclaim(uheap_t *u, heap_t *sub) {
  sub_reclaim(sub);
  /* The heap list's lock makes this thread the parked sub-heaps' only user
   * (adoption takes it). It is tried, never waited for: this thread may
   * hold it (a signal handler that interrupted a reclaim or a collect, of
   * another heap) or a lock after it (a source's map allocating from this
   * heap's neighbour holds its heap's lock). A few tries, a yield apart,
   * outwait another thread's short hold. */
  for (int i = 0; !heaps_trylock_all(); i++) {
    if (i == 16) return;
    os_yield();
  }
  for (heap_t *s = atomic_load_explicit(&u->subs, memory_order_acquire); s; s = s->next_in_user)
    if (s != sub && heap_state(s) == HEAP_ORPHAN) sub_reclaim(s);
  heaps_unlock_all();
}

/* The heap's memory is exhausted: its idle memory back to the source, then
 * the user's source grows it (under u's lock, the thread marked in_user so
 * that a map calling malloc uses its default heap), then one more try. */
static NOINLINE void *alloc_grow(uheap_t *u, heap_t *sub, size_t size, size_t align, bool zero) {
  void *p = alloc_in(sub, size, align, zero);
  if (!p) {
    reclaim(u, sub);
    p = alloc_in(sub, size, align, zero);
  }
  if (p || !u->usrc || size > (size_t)PTRDIFF_MAX / 2) return p;
  size_t bytes, galign;
  growth_for(sub, size, align, &bytes, &galign);
  if (!uheap_room(sub, bytes)) return NULL;   /* a first look: the chunk's allocation reserves */
  uheap_room_done(sub, bytes, 0);
  in_user++;
  lock_acquire(&u->lock);
  bool grown = usrc_grow(u->usrc, bytes, galign);
  lock_release(&u->lock);
  in_user--;
  return grown ? alloc_in(sub, size, align, zero) : NULL;
}

/* One add to memory (a plain store by its thread; reports read it relaxed). */
static ALWAYS_INLINE void count_alloc(heap_t *sub) {
  __atomic_store_n(&sub->uallocs, __atomic_load_n(&sub->uallocs, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

void *uheap_alloc(uheap_t *u, size_t size, size_t align, bool zero) {
  int saved = errno;                   /* a first attempt that fails before a growth sets it */
  heap_t *sub = sub_of(u);
  void *p = NULL;
  if (likely(sub)) p = arena_fits(sub, size, align) ? arena_alloc(sub, size, align, zero) : heap_alloc(sub, size, align, zero);
  if (unlikely(!p) && sub) p = alloc_grow(u, sub, size, align, zero);
  if (p) count_alloc(sub);
  errno = p ? saved : ENOMEM;
  return p;
}

/* Not the heap used last, a destroyed heap, a miss of the bump or of the
 * owner's pop: the checks, then the general path. */
static NOINLINE void *malloc_slow(locus_heap_t *h, size_t size) {
  return uheap_alloc(uheap_open(h, "locus_heap_malloc"), size, ALIGN_MIN, false);
}

/* A sub-heap that is no arena: the owner's path of malloc. */
static NOINLINE void *sub_malloc(locus_heap_t *h, heap_t *sub, size_t size) {
  void *p = heap_malloc(sub, size);
  if (likely(p)) {
    count_alloc(sub);
    return p;
  }
  return malloc_slow(h, size);
}

/* locus_heap_malloc: the sub-heap used last (when h is that heap's handle,
 * h's record is last_u, of that generation; the sub-heap's `user` is NULL
 * once the heap is destroyed, and a record reused since for another heap is
 * set up by this thread, which updates last_h: the slow path then aborts
 * naming it), then the bump of an arena or the owner's path of malloc. Only
 * tail calls: no stack frame. */
void *uheap_malloc(locus_heap_t *h, size_t size) {
  heap_t *sub = last_sub;
  if (unlikely(last_h != h) || unlikely(sub->user != (uheap_t *)((uintptr_t)h & HANDLE_MASK)) ||
      unlikely(size > SMALL_MAX))
    return malloc_slow(h, size);
  if (!sub->arena) return sub_malloc(h, sub, size);
  void *p = arena_bump(sub, size, ALIGN_MIN);
  if (unlikely(!p)) return malloc_slow(h, size);
  count_alloc(sub);
  return p;
}

bool uheap_owns(const heap_t *sub) { return sub->main == heap_thread_main(); }

NOINLINE void uheap_free_check(const heap_t *owner, const void *p, const char *fn) {
  const uheap_t *u = owner->user;
  if (!u || u->magic != UHEAP_LIVE)
    locus_fatal("%s(): %p is a block of a user heap that was destroyed%s%s", fn, p, u ? ": " : "",
                u ? u->name : "");
  if (u->flags & LOCUS_HEAP_ARENA)
    locus_fatal("%s(): %p is a block of arena heap '%s': arena blocks are released only by "
                "locus_heap_reset or locus_heap_destroy", fn, p, u->name);
}

/* ---- large blocks ------------------------------------------------------ */

void uheap_large_link(heap_t *h, large_t *l) {
  large_user_t *x = (large_user_t *)l;
  heap_lock(h);
  x->prev = NULL;
  x->next = h->large_list;
  if (h->large_list) ((large_user_t *)h->large_list)->prev = l;
  h->large_list = l;
  heap_unlock(h);
}

void uheap_large_unlink(large_t *l) {
  heap_t *h = l->r.heap;
  large_user_t *x = (large_user_t *)l;
  heap_lock(h);
  if (x->prev) ((large_user_t *)x->prev)->next = x->next;
  else h->large_list = x->next;
  if (x->next) ((large_user_t *)x->next)->prev = x->prev;
  heap_unlock(h);
}

/* ---- destroy and reset ------------------------------------------------- */

/* A region of the heap leaves it, back to its source: the user's extents, or
 * locus's source, which keeps it or gives it to the OS as the profile says
 * (as for a freed large block: eco at once, auto unless it is reused). */
static void region_out(region_t *r) {
  registry_remove(r);
  source_free(r);
}

static void drop_chunk(heap_t *h, chunk_t *c, bool keep) {
  if (c->r.kind == REGION_SMALL) {
    if (keep) {                        /* stays, every run slot free */
      c->free_runs = ~(uint64_t)1;
      memset(c->runs, 0, sizeof c->runs);
      return;
    }
    small_frames_remove((uintptr_t)c);
  } else if (keep) {
    c->r.zeroed = false;               /* its bytes above the new high-water mark were handed out */
    medium_chunk_init(h, c);           /* one free block (the bins were emptied) */
    return;
  }
  region_out(&c->r);
}

/* Every block of one sub-heap goes: large blocks to their source, chunks to
 * their source (destroy) or back to one free run slot each / one free
 * medium block (reset); its lists and thread cache start over. Proportional
 * to the sub-heap's regions. The caller holds heaps_lock and u->lock;
 * nobody may use the heap's blocks. */
static void drop_sub(heap_t *h, bool keep) {
  heap_lock(h);
  arena_drop(h, keep);
  for (large_t *l = h->large_list; l;) {
    large_t *next = ((large_user_t *)l)->next;
    if (unlikely(l->r.flags & REGION_NEXT_TOUCH)) next_touch_cancel(&l->r);
    l->magic = 0;
    region_out(&l->r);
    l = next;
  }
  h->large_list = NULL;
  atomic_store_explicit(&h->st_large_bytes, 0, memory_order_relaxed);
  memset(h->mbins, 0, sizeof h->mbins);
  memset(h->mbits, 0, sizeof h->mbits);
  for (int kind = 0; kind < 2; kind++) {
    chunk_t *c = kind ? h->medium_chunks : h->small_chunks;
    while (c) {
      chunk_t *next = c->next;
      drop_chunk(h, c, keep);
      c = next;
    }
  }
  if (!keep) heap_spare_drop(h);      /* (reset keeps it: an empty chunk) */
  heap_record_restart(h, keep);
  heap_unlock(h);
}

void uheap_drop(locus_heap_t *h, bool keep, const char *fn) {
  uheap_t *u = uheap_open(h, fn);
  /* The heap list's lock keeps out what else walks sub-heaps: adoption,
   * a thread's exit, collectors of orphans, reports. */
  heaps_lock_all();
  /* A capture by a thread that is gone (its heap late or unhooked: heap.c)
   * is dropped by the reaper, not held against the destroy. */
  if (!keep && atomic_load(&u->captures)) heaps_reap_gone(true);
  lock_acquire(&u->lock);
  if (!keep && atomic_load(&u->captures))
    locus_fatal("%s(): heap '%s' (%p) is captured by %d thread(s)", fn, u->name, (void *)h,
                atomic_load(&u->captures));
  /* A destroy raced with this one (and the record may serve a new heap by now). */
  if (!handle_matches(h, u)) bad_handle(h, u, fn);
#ifdef LOCUS_DEBUG
  /* The heap's count is its sub-heaps' memory (no growth runs now). */
  if (parts_bytes(u) != atomic_load(&u->held))
    locus_fatal("internal error: heap '%s' counts %zu bytes, its parts hold %zu", u->name, atomic_load(&u->held),
                parts_bytes(u));
#endif
  size_t kept = 0;
  for (heap_t *s = atomic_load(&u->subs); s; s = s->next_in_user) {
    drop_sub(s, keep);
    kept += atomic_load_explicit(&s->st_chunk_bytes, memory_order_relaxed);
    if (!keep) {                       /* waits on its thread's list for reuse */
      s->user = NULL;
      s->source = NULL;
    }
  }
  atomic_store_explicit(&u->held, keep ? kept : 0, memory_order_relaxed);   /* nobody grows it meanwhile */
  if (!keep) u->magic = UHEAP_DEAD;
  lock_release(&u->lock);
  heaps_unlock_all();
  if (keep) return;
  /* Off the live list before its source goes: another heap's creation
   * checks its segment against the live heaps' sources. */
  lock_acquire(&list_lock);
  live_unlink(u);
  source_t *usrc = u->usrc;
  u->usrc = NULL;
  u->next = NULL;
  if (dead_tail) dead_tail->next = u;
  else dead_head = u;
  dead_tail = u;
  ndead++;
  lock_release(&list_lock);
  if (usrc) usrc_destroy(usrc);
}

/* fork() child, every lock held by the forking thread (the other threads
 * are gone): a capture count is the forking thread's own capture only, and
 * the held count is what the sub-heaps hold. */
void uheap_fork_child(const heap_t *tls) {
  for (uheap_t *u = live; u; u = u->next) {
    atomic_store(&u->captures, tls && tls->place == PLACE_CAPTURE && tls->user == u ? 1 : 0);
    /* A growth or a release of another thread (no lock between its
     * reservation and its count) ended with that thread: the count is
     * made again from what the sub-heaps hold. */
    size_t sum = parts_bytes(u);
    atomic_store(&u->held, sum);
    if (u->usrc) usrc_fork_child(u->usrc, sum);
  }
}

/* ---- capture ----------------------------------------------------------- */

uheap_t *uheap_capture(uheap_t *u, int *err) {
  *err = 0;
  heap_t *t = heap_get();
  heap_t *main = t->main;
  uheap_t *prev = t->place == PLACE_CAPTURE ? t->user : NULL;
  if (u) uheap_check(u, "locus_heap_capture");
  if (u == prev) return prev;
  if (u && t == &locus_oom_heap) {
    *err = ENOMEM;
    return prev;
  }
  heap_t *tr = NULL;
  if (u) {
    tr = main->capture;
    if (!tr) {
      tr = heap_new_detached();
      if (!tr) {
        *err = ENOMEM;
        return prev;
      }
      tr->main = main;
      tr->place = PLACE_CAPTURE;
      tr->node = main->node;
      for (unsigned i = 0; i < NUM_CLASSES; i++) tr->cache[i] = (tcache_t){0};
      heap_set_state(tr, HEAP_LIVE);
      main->capture = tr;
    }
    atomic_fetch_add(&u->captures, 1);
    tr->user = u;
  }
  if (prev) atomic_fetch_sub(&prev->captures, 1);
  locus_tls_heap = u ? tr : main;
  return prev;
}

void uheap_capture_end(heap_t *main) {
  heap_t *t = locus_tls_heap;
  if (!t || t->place != PLACE_CAPTURE || t->main != main) return;
  atomic_fetch_sub(&t->user->captures, 1);
  t->user = NULL;
  locus_tls_heap = main;
}

void uheap_capture_drop(heap_t *main) {
  heap_t *t = main->capture;
  if (!t || !t->user) return;
  atomic_fetch_sub(&t->user->captures, 1);
  t->user = NULL;
}

void *uheap_captured_alloc(heap_t *tramp, size_t size, size_t align, bool zero) {
  if (in_user) return heap_alloc(tramp->main, size, align, zero);
  return uheap_alloc(tramp->user, size, align, zero);
}

/* ---- figures ----------------------------------------------------------- */

void uheap_figures(uheap_t *u, size_t *held, size_t *seg_total, size_t *seg_free, size_t *threads,
                   size_t *allocs) {
  *held = held_bytes(u);
  *seg_total = *seg_free = *threads = *allocs = 0;
  for (heap_t *s = atomic_load(&u->subs); s; s = s->next_in_user)
    ++*threads, *allocs += __atomic_load_n(&s->uallocs, __ATOMIC_RELAXED);
  if (u->usrc) usrc_sizes(u->usrc, seg_total, seg_free);
}

int uheap_stats(uheap_t *u, locus_stats_t *st) {
  size_t held, total, free_bytes, threads, allocs;
  uheap_figures(u, &held, &total, &free_bytes, &threads, &allocs);
  memset(st, 0, sizeof *st);
  st->cache_hits = allocs;
  st->bytes_in_use = held;
  st->bytes_cached = free_bytes;
  st->peak_footprint = atomic_load_explicit(&u->peak, memory_order_relaxed);
  st->heaps_live = threads;
  return 0;
}

void uheaps_report(void (*line)(void *, uheap_t *), void *ctx) {
  lock_acquire(&list_lock);
  for (uheap_t *u = live; u; u = u->next) line(ctx, u);
  lock_release(&list_lock);
}
