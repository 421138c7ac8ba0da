/* User heaps (S. Valat, PhD thesis, 2014, §4.13 and Fig. 4.5: a local heap
 * given a special segment, or a memory source of the user's that can grow
 * it; MPC used it for shared-memory segments). Learnt from mimalloc's heaps
 * (drop every block at once), jemalloc's extent hooks and the Unified
 * Memory Framework's pools over memory providers.
 *
 * A user heap is one heap record (heap_t, PLACE_USER) with the same runs,
 * medium chunks and large blocks as a thread's heap, drawing on its own
 * memory source: a user source over the segment and the user's map
 * (source/user.c), or locus's source of a node, the interleaved one or the
 * generic one. Any thread allocates from it under the heap's allocation
 * lock (`lock`), and acts as the record's owner meanwhile (its lock-free pop
 * included: the lock orders the owners). No thread has the record as its
 * heap, so every free of its blocks, from any thread, takes the remote path
 * (one CAS on the run, or on the record's medium stack) and needs no lock;
 * the next allocation takes those blocks back, as an owner does.
 *
 * Invariants (checked in the debug build where marked):
 * - a live record has magic UHEAP_LIVE; a dropped one UHEAP_DEAD, and its
 *   heap record is DEAD; records are never unmapped (a stale handle reads
 *   a dead record: uheap_check aborts naming it) and are reused only after
 *   QUARANTINE others died (a double destroy is caught until then);
 * - every large block of the heap is on its record's large_list (under the
 *   record's heap lock); every chunk on its chunk lists or its spare: so a
 *   drop walks the heap's memory, never its blocks;
 * - the record's thread cache stays off (no thread frees into it as owner);
 * - `captures` counts the threads whose heap pointer is this heap's capture
 *   trampoline; a destroy with captures > 0 aborts;
 * - the user's map is called with no lock held but this allocation lock
 *   (usrc_grow), and an allocation of a thread already inside a user heap's
 *   allocation goes to its default heap (in_user), so a map that calls
 *   malloc never waits for itself. */
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

struct locus_heap {
  uint64_t magic;
  lock_t lock;                 /* allocation, realloc, drop (rank LOCK_RANK_USER_HEAP) */
  heap_t *h;                   /* its heap record (kept with this record for reuse) */
  source_t *usrc;              /* its user source, or NULL (locus's memory) */
  unsigned flags;              /* LOCUS_HEAP_ARENA */
  unsigned id;
  atomic_int captures;
  size_t allocs, peak;         /* under `lock` */
  char name[48];
  struct locus_heap *next, *prev;   /* live list, or (next) the dead queue */
};

/* The records: the live list (reports, fork) and the dead queue, FIFO.
 * list_lock is its own class below the records' locks: fork's prepare takes
 * it, then walks the list to take every record's lock. */
LOCK_STATIC(list_lock, LOCK_RANK_USER_HEAP - 1, "user heaps (the list)")
static uheap_t *live, *dead_head, *dead_tail;
static size_t ndead;
static unsigned next_id;
static char *rec_next, *rec_end;

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
  if ((size_t)(rec_end - rec_next) < sz) {
    size_t len = 64 * sz;
    char *p = os_map(len);
    if (!p) return NULL;
    rec_next = p;
    rec_end = p + len;
  }
  uheap_t *u = (uheap_t *)rec_next;
  rec_next += sz;
  u->h = NULL;
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
    locus_fatal("%s(): heap '%s' (%p) was destroyed", fn, u->name, (const void *)u);
  locus_fatal("%s(): %p is not a heap made by locus_heap_create", fn, (const void *)u);
}

/* A handle is a record only if it lies in locus's record pages; reading a
 * foreign pointer's magic could fault, so the registry of regions cannot
 * tell. The magic is the check: a wild pointer mostly faults or fails it. */
void uheap_check(const uheap_t *u, const char *fn) {
  if (unlikely(!u || u->magic != UHEAP_LIVE)) bad_heap(u, fn);
}

heap_t *uheap_heap(const uheap_t *u) { return u->h; }
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
  heap_t *h = u->h;
  h->main = h;
  h->place = PLACE_USER;
  h->user = u;
  h->node = cfg->node;
  h->limit = cfg->limit;
  if (usrc) h->source = usrc;
  else if (cfg->interleave) h->source = source_interleave();
  else if (cfg->node >= 0) h->source = source_of_node(cfg->node);
  else h->source = source_for_node(-1);
  for (unsigned i = 0; i < NUM_CLASSES; i++) h->cache[i] = (tcache_t){0};   /* off: see the invariants */
  heap_set_state(h, HEAP_LIVE);
  lock_init(&u->lock, LOCK_RANK_USER_HEAP);
  u->usrc = usrc;
  u->flags = cfg->flags;
  u->id = ++next_id;
  u->allocs = u->peak = 0;
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
  /* The heap record and the user source outside list_lock: they take the
   * heap list's lock (ranked below) and map memory. */
  if (!u->h) u->h = heap_new_detached();
  else heap_record_clear(u->h);
  source_t *usrc = NULL;
  bool user_mem = cfg->segment || cfg->source;
  if (u->h && user_mem) usrc = usrc_new(cfg->segment, seg_size, cfg->source);
  err = !u->h || (user_mem && !usrc) ? ENOMEM : 0;
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

void uheap_lock(uheap_t *u) {
  /* The thread's default heap first: the user's map may call malloc, which
   * must not make that heap (under the heap list's lock, ranked below)
   * while this lock is held. */
  (void)heap_get();
  in_user++;
  lock_acquire(&u->lock);
}

void uheap_unlock(uheap_t *u) {
  lock_release(&u->lock);
  in_user--;
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

/* A small request that found no small chunk (a segment too short or not
 * aligned for one) is served by a medium block: every free, realloc and
 * size query works on it the same. */
static void *alloc_locked(uheap_t *u, size_t size, size_t align, bool zero) {
  heap_t *h = u->h;
  void *p = heap_alloc(h, size, align, zero);
  if (!p && u->usrc && size <= SMALL_MAX && align <= locus_opt.large_threshold / 4)
    p = medium_alloc(h, size, align < ALIGN_MIN ? ALIGN_MIN : align, zero);
  return p;
}

void *uheap_alloc(uheap_t *u, size_t size, size_t align, bool zero) {
  int saved = errno;                   /* a first attempt that fails before a growth sets it */
  uheap_lock(u);
  void *p = alloc_locked(u, size, align, zero);
  if (!p && u->usrc && size <= (size_t)PTRDIFF_MAX / 2) {
    size_t bytes, galign;
    growth_for(u->h, size, align, &bytes, &galign);
    if (heap_room(u->h, bytes) && usrc_grow(u->usrc, bytes, galign)) p = alloc_locked(u, size, align, zero);
  }
  if (p) {
    u->allocs++;
    size_t held = atomic_load_explicit(&u->h->st_chunk_bytes, memory_order_relaxed) +
                  atomic_load_explicit(&u->h->st_large_bytes, memory_order_relaxed);
    if (held > u->peak) u->peak = held;
  }
  uheap_unlock(u);
  errno = p ? saved : ENOMEM;
  return p;
}

NOINLINE void uheap_free_check(const heap_t *owner, const void *p, const char *fn) {
  const uheap_t *u = owner->user;
  if (u->magic != UHEAP_LIVE)
    locus_fatal("%s(): %p is a block of heap '%s', which was destroyed or reset", fn, p, u->name);
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

/* A region of the heap leaves it: to the user's extents, or (destroy) to the
 * OS, or (reset) to its source's cache. */
static void region_out(region_t *r, bool keep) {
  registry_remove(r);
  if (keep || (r->flags & REGION_USER)) source_free(r);
  else source_free_to_os(r);
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
  region_out(&c->r, false);
}

/* Every block goes: large blocks to their source, chunks to their source
 * (destroy) or back to one free run slot each / one free medium block
 * (reset); the record's lists start over. Proportional to the heap's
 * regions. The caller holds u->lock; nobody may use the heap's blocks. */
static void drop_all(uheap_t *u, bool keep) {
  heap_t *h = u->h;
  heap_lock(h);
  for (large_t *l = h->large_list; l;) {
    large_t *next = ((large_user_t *)l)->next;
    if (unlikely(l->r.flags & REGION_NEXT_TOUCH)) next_touch_cancel(&l->r);
    l->magic = 0;
    region_out(&l->r, keep);
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
  if (h->spare && !keep) {           /* (reset keeps it: an empty chunk) */
    region_out(&h->spare->r, false);
    h->spare = NULL;
  }
  heap_record_restart(h, keep);
  heap_unlock(h);
}

void uheap_drop(uheap_t *u, bool keep, const char *fn) {
  uheap_check(u, fn);
  lock_acquire(&u->lock);
  if (!keep && atomic_load(&u->captures))
    locus_fatal("%s(): heap '%s' (%p) is captured by %d thread(s)", fn, u->name, (void *)u,
                atomic_load(&u->captures));
  if (u->magic != UHEAP_LIVE) bad_heap(u, fn);   /* a destroy raced with this one */
  drop_all(u, keep);
  if (keep) {
    lock_release(&u->lock);
    return;
  }
  u->magic = UHEAP_DEAD;
  lock_release(&u->lock);
  heap_record_retire(u->h);            /* dead, no source: reports no longer follow it */
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
 * are gone): a capture count is the forking thread's own capture only. */
void uheap_fork_child(const heap_t *tls) {
  for (uheap_t *u = live; u; u = u->next)
    atomic_store(&u->captures, tls && tls->place == PLACE_CAPTURE && tls->user == u ? 1 : 0);
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

void *uheap_captured_alloc(heap_t *tramp, size_t size, size_t align, bool zero) {
  if (in_user) return heap_alloc(tramp->main, size, align, zero);
  return uheap_alloc(tramp->user, size, align, zero);
}

/* ---- figures ----------------------------------------------------------- */

void uheap_figures(uheap_t *u, size_t *held, size_t *seg_total, size_t *seg_free, size_t *allocs) {
  *held = atomic_load_explicit(&u->h->st_chunk_bytes, memory_order_relaxed) +
          atomic_load_explicit(&u->h->st_large_bytes, memory_order_relaxed);
  *seg_total = *seg_free = 0;
  if (u->usrc) usrc_sizes(u->usrc, seg_total, seg_free);
  *allocs = __atomic_load_n(&u->allocs, __ATOMIC_RELAXED);
}

int uheap_stats(uheap_t *u, locus_stats_t *st) {
  size_t held, total, free_bytes, allocs;
  uheap_figures(u, &held, &total, &free_bytes, &allocs);
  memset(st, 0, sizeof *st);
  st->bytes_in_use = held;
  st->bytes_cached = free_bytes;
  st->peak_footprint = __atomic_load_n(&u->peak, __ATOMIC_RELAXED);
  st->cache_hits = allocs;
  return 0;
}

void uheaps_report(void (*line)(void *, uheap_t *), void *ctx) {
  lock_acquire(&list_lock);
  for (uheap_t *u = live; u; u = u->next) line(ctx, u);
  lock_release(&list_lock);
}
