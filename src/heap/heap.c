/* Heap lifecycle (Valat, PhD thesis, 2014, §4.6.1, §4.9): one heap per thread, found
 * through a thread-local pointer set at the thread's first allocation. Only
 * the owner touches a heap's lists, so the owner never locks. Other threads
 * free small blocks into their run's thread_free list (small.c) and medium
 * blocks into the heap's lock-free MPSC stack (`remote`), which the owner
 * drains. When a thread exits its heap becomes an orphan: its runs are parked
 * (marked full, so that a remote free into one shows on the heap's notify
 * stack), its blocks stay valid and may be freed by anyone, and the next new
 * thread adopts it, so thread churn reuses heaps instead of leaking them.
 * Orphans are also collected by whoever holds the orphan list: on
 * locus_release/locus_collect, and when a heap needs a new chunk.
 *
 * Heap records are never unmapped: a stale pointer to a heap (from a chunk
 * header) always names valid memory. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include "heap/heap.h"
#include "heap/user.h"
#include "source/ksm.h"

#include "os/topology.h"
#include "os/os.h"
#include "util/lock.h"
#include "config/options.h"
#include "util/stats.h"

LOCUS_TLS heap_t *locus_tls_heap;
uint64_t locus_free_key;
run_t locus_empty_run = {.state = RUN_FULL};
heap_t locus_oom_heap = {
  .cur = {[0 ... NUM_CLASSES - 1] = &locus_empty_run}, .main = &locus_oom_heap, .lock = LOCK_INIT(LOCK_RANK_HEAP),
  .place = PLACE_MAIN, .node = -1, .state = HEAP_DEAD, .cache_node = CACHE_NODE_NONE,
};
atomic_int locus_init_state;

/* guards all_heaps, orphans, the record arena */
LOCK_STATIC(heaps_lock, LOCK_RANK_HEAPS, "heaps (all heaps, orphans, heap records)")
static heap_t *all_heaps;
static heap_t *orphans;
static os_slab_t records;             /* heap records (under heaps_lock) */
static pthread_key_t exit_key;
static bool exit_key_ok;

static heap_t *heap_record_new(void) {
  size_t sz = align_up(sizeof(heap_t), CACHE_LINE);
  return os_slab_take(&records, sz, 64 * sz);
}

static void heap_reset_classes(heap_t *h) {
  for (unsigned i = 0; i < NUM_CLASSES; i++) h->cur[i] = &locus_empty_run;
}

/* Every field of h zero but its lock, its sentinel runs, its thread cache's
 * bounds and its defaults (a main heap of no thread yet). */
static void heap_fields_init(heap_t *h) {
  memset(h, 0, sizeof *h);
  lock_init(&h->lock, LOCK_RANK_HEAP);
  heap_reset_classes(h);
  small_cache_init(h);
  h->main = h;
  h->place = PLACE_MAIN;
  h->cache_node = CACHE_NODE_NONE;     /* until a thread is bound to it */
}

/* A new, empty heap record on the all-heaps list; caller holds heaps_lock. */
static heap_t *heap_new_locked(void) {
  heap_t *h = heap_record_new();
  if (!h) return NULL;
  heap_fields_init(h);
  h->next_all = all_heaps;
  all_heaps = h;
  return h;
}

heap_t *heap_new_detached(void) {
  lock_acquire(&heaps_lock);
  heap_t *h = heap_new_locked();
  lock_release(&heaps_lock);
  return h;
}

void heap_record_clear_kept(heap_t *h) {
  lock_acquire(&heaps_lock);           /* reports read the record under it */
  heap_t *next = h->next_all, *next_usub = h->next_usub;
  heap_fields_init(h);
  h->next_all = next;
  h->next_usub = next_usub;
  lock_release(&heaps_lock);
}

void heaps_lock_all(void) { lock_acquire(&heaps_lock); }
void heaps_unlock_all(void) { lock_release(&heaps_lock); }
bool heaps_trylock_all(void) { return lock_try(&heaps_lock); }

void heap_record_restart(heap_t *h, bool keep_chunks) {
  heap_reset_classes(h);
  memset(h->partial, 0, sizeof h->partial);
  memset(h->partial_tail, 0, sizeof h->partial_tail);
  atomic_store_explicit(&h->remote, NULL, memory_order_relaxed);
  atomic_store_explicit(&h->notify, NULL, memory_order_relaxed);
  atomic_store_explicit(&h->recheck, 0, memory_order_relaxed);
  h->pop = HEAP_IDLE;
  small_cache_init(h);                 /* the thread cache empty (its blocks were the heap's) */
  h->cache_foreign = false;
  if (!keep_chunks) {
    h->small_chunks = h->medium_chunks = NULL;
    atomic_store_explicit(&h->st_chunk_bytes, 0, memory_order_relaxed);
  }
}

/* Caller holds heaps_lock: reports read tid and state under it. */
static void heap_bind_thread(heap_t *h, int node) {
  h->tid = os_gettid();
  __atomic_store_n(&h->node, node, __ATOMIC_RELAXED);   /* read by other threads' frees (small_free_foreign) */
  heap_set_state(h, HEAP_LIVE);
  for (int i = 0; i <= PLACE_INTERLEAVE; i++)
    if (h->placed[i]) h->placed[i]->tid = h->tid, heap_set_state(h->placed[i], HEAP_LIVE);
  for (heap_t *s = h->usubs; s; s = s->next_usub) s->tid = h->tid, heap_set_state(s, HEAP_LIVE);
}

static void heap_abandon(void *arg);

/* The exit hook ran in this thread (set at its first call, never cleared:
 * the thread is ending). A heap it gets afterwards is `late`. Initial-exec
 * like every TLS of locus: read under heaps_lock, where a __tls_get_addr
 * that grows the thread's DTV would call malloc. */
static LOCUS_TLS bool thread_exiting;
static size_t late_heaps;              /* heaps with `late` set (heaps_lock) */
/* Heaps made since the last sweep of all live heaps for gone threads, and
 * the count that triggers the next one (heaps_reap_gone). */
static size_t made_since_sweep, sweep_every = 4;

/* An orphan of the thread's node, so that memory freed on a node is reused
 * on that node only: a heap keeps chunks of the node it was bound to. Caller
 * holds heaps_lock. */
static heap_t *adopt_locked(int node) {
  for (heap_t **link = &orphans; *link; link = &(*link)->next_orphan) {
    heap_t *h = *link;
    if (h->node != node) continue;
    __atomic_store_n(link, h->next_orphan, __ATOMIC_RELAXED);   /* `orphans` is peeked without the lock */
    h->next_orphan = NULL;
    return h;
  }
  return NULL;
}

heap_t *heap_get_slow(void) {
  locus_init();
  int node = topology_thread_node();
  lock_acquire(&heaps_lock);
  if (late_heaps) heaps_reap_gone(false);
  heap_t *h = adopt_locked(node);
  if (!h && ++made_since_sweep >= sweep_every) {
    heaps_reap_gone(true);             /* a backstop, amortised: heaps whose thread left without the hook */
    h = adopt_locked(node);
  }
  if (!h) h = heap_new_locked();
  if (!h) {                            /* the OS refused memory: malloc fails with ENOMEM */
    lock_release(&heaps_lock);
    return &locus_oom_heap;
  }
  heap_bind_thread(h, node);
  if (thread_exiting) {                /* its exit hook may not run again: reaped once the thread is gone */
    h->late = true;
    __atomic_store_n(&late_heaps, late_heaps + 1, __ATOMIC_RELAXED);   /* peeked without the lock */
  }
  lock_release(&heaps_lock);
  locus_tls_heap = h;
  if (exit_key_ok) pthread_setspecific(exit_key, h);    /* after the TLS store: may call calloc */
  heap_t *all[PLACE_INTERLEAVE + 2] = {h};
  for (int i = 0; i <= PLACE_INTERLEAVE; i++) all[i + 1] = h->placed[i];
  for (int i = 0; i < PLACE_INTERLEAVE + 2; i++) {
    if (!all[i]) continue;
    heap_drain_remote(all[i]);
    heap_lock(all[i]);
    small_unpark(all[i]);
    heap_unlock(all[i]);
  }
  for (heap_t *s = h->usubs; s; s = s->next_usub) {   /* user sub-heaps come with it */
    heap_drain_remote(s);
    heap_lock(s);
    small_unpark(s);
    heap_unlock(s);
  }
  return h;
}

heap_t *heap_placed(heap_t *h, int place) {
  LOCUS_ASSERT(h->main == h && place >= 0 && place <= PLACE_INTERLEAVE);
  heap_t *sub = h->placed[place];
  if (likely(sub)) return sub;
  lock_acquire(&heaps_lock);
  sub = heap_new_locked();
  if (sub) {
    sub->main = h;
    sub->place = place;
    sub->node = place == PLACE_INTERLEAVE ? -1 : place;
    sub->source = place == PLACE_INTERLEAVE ? source_interleave() : source_of_node(place);
    sub->tid = h->tid;
    heap_set_state(sub, h->state);
    h->placed[place] = sub;
  }
  lock_release(&heaps_lock);
  return sub;
}

source_t *heap_source(heap_t *h) {
  if (h->place != PLACE_MAIN) return h->source;
  switch (locus_opt.numa_policy) {
  case NUMA_INTERLEAVE: return source_interleave();
  case NUMA_BIND: return source_of_node(locus_opt.numa_node);
  default: return source_for_node(h->node);
  }
}

int heap_rebind(void) {
  locus_init();
  heap_t *h = heap_thread_main();
  int node = topology_thread_node();
  if (h && h->node == node) return node;
  if (h) heap_abandon(h);              /* (ends a capture first) */
  return heap_get()->node;
}

/* Medium blocks freed by other threads come back to their bins. The stack
 * is taken whole with one exchange, so there is no ABA problem: producers only
 * push, the single consumer only swaps the head for NULL. (Small blocks go to
 * their run's thread_free list instead: small.c.) */
void heap_drain_remote(heap_t *h) {
  void *b = atomic_exchange_explicit(&h->remote, NULL, memory_order_acquire);
  size_t n = 0;
  for (; b; n++) {
    void *next = *(void **)b;
    chunk_t *c = (chunk_t *)registry_lookup(b);
    /* A queued block lies in a live chunk of this heap: chunks go back to the
     * source only when all their blocks are free, queued ones included. */
    LOCUS_ASSERT(c && c->r.heap == h && c->r.kind == REGION_MEDIUM);
    medium_free_local(h, c, b);
    b = next;
  }
  if (n) heap_stat_add_shared(&h->st_remote_frees, n);
}

/* Empty chunks go back to the source; the heap keeps one standard-size spare
 * so that a thread oscillating around a chunk boundary does not map and unmap. */
static void chunk_unlink(heap_t *h, chunk_t *c) {
  chunk_t **list = c->r.kind == REGION_SMALL ? &h->small_chunks : &h->medium_chunks;
  if (c->prev) c->prev->next = c->next;
  else *list = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
  heap_stat_add_shared(&h->st_chunk_bytes, -c->r.size);
  heap_released(h, c->r.size);
}

_Static_assert(CHUNK_SIZE == (size_t)1 << 22, "small_frame_of assumes 4 MiB chunks");

_Atomic(uintptr_t) locus_small_frames[SMALL_FRAMES] = {[0 ... SMALL_FRAMES - 1] = FRAME_NONE};

/* A chunk taking an entry another chunk holds: that one takes the registry
 * path from now on. */
void small_frames_add(uintptr_t c) {
  LOCUS_ASSERT(c == small_chunk_of((void *)c));
  atomic_store_explicit(&locus_small_frames[small_frame_of(c)], c, memory_order_release);
}

/* Before the chunk can go anywhere; only if the entry still names it (a CAS:
 * another heap may have taken the entry for its own chunk meanwhile). */
void small_frames_remove(uintptr_t c) {
  uintptr_t e = c;
  atomic_compare_exchange_strong_explicit(&locus_small_frames[small_frame_of(c)], &e, FRAME_NONE,
                                          memory_order_release, memory_order_relaxed);
}

void heap_chunk_release(heap_t *h, chunk_t *c) {
  chunk_unlink(h, c);
  if (c->r.kind == REGION_SMALL) small_frames_remove((uintptr_t)c);
  if (!h->spare && !h->bounded && c->r.size == CHUNK_SIZE && h->state == HEAP_LIVE) {
    __atomic_store_n(&h->spare, c, __ATOMIC_RELAXED);
    h->spare_ns = adapt_active() ? adapt_now() : 0;
    return;
  }
  registry_remove(&c->r);
  source_free(&c->r);
}

void heap_spare_drop(heap_t *h) {
  chunk_t *c = h->spare;
  if (!c) return;
  __atomic_store_n(&h->spare, NULL, __ATOMIC_RELAXED);
  registry_remove(&c->r);
  source_free(&c->r);
}

void heap_chunk_drop(heap_t *h, chunk_t *c) {
  chunk_unlink(h, c);
  if (c->r.kind == REGION_SMALL) small_frames_remove((uintptr_t)c);
  registry_remove(&c->r);
  source_free(&c->r);
}

static size_t medium_chunk_size(void) {
  size_t need = align_up(2 * locus_opt.large_threshold + 64 * KiB, MiB);
  return need > CHUNK_SIZE ? need : CHUNK_SIZE;
}

size_t heap_chunk_bytes(region_kind_t kind) { return kind == REGION_SMALL ? CHUNK_SIZE : medium_chunk_size(); }

static chunk_t *chunk_alloc(heap_t *h, region_kind_t kind, size_t size);

chunk_t *heap_chunk_alloc(heap_t *h, region_kind_t kind) {
  size_t size = kind == REGION_SMALL ? CHUNK_SIZE : medium_chunk_size();
  if (unlikely(h->place == PLACE_USER)) {
    /* A user segment may be shorter than a medium chunk: the largest free
     * extent then (a slice at least), and blocks up to its size. */
    if (!h->source) return NULL;       /* its user heap was destroyed */
    if (kind == REGION_MEDIUM && h->source->user) {
      size_t most = usrc_largest(h->source) & ~(size_t)(PAGE_SIZE - 1);
      if (most < size) size = most;
      if (size < SLICE_SIZE) return NULL;
    }
    if (!heap_room(h, size)) return NULL;
    chunk_t *c = chunk_alloc(h, kind, size);
    heap_room_done(h, size, c ? c->r.size : 0);
    return c;
  }
  return chunk_alloc(h, kind, size);
}

static chunk_t *chunk_alloc(heap_t *h, region_kind_t kind, size_t size) {
  chunk_t *c;
  /* Small chunks are aligned on their size (SRC_ALIGNED); a spare that was a
   * medium chunk is only by chance. */
  chunk_t *sp = h->spare;
  if (sp && sp->r.size == size && (kind != REGION_SMALL || small_chunk_of(sp) == (uintptr_t)sp)) {
    c = sp;
    __atomic_store_n(&h->spare, NULL, __ATOMIC_RELAXED);
    c->r.zeroed = false;               /* it served blocks before */
  } else {
    /* Before new memory: what exited threads' heaps got back may be enough. */
    heaps_collect_orphans(false);     /* h->lock may be held: never wait for heaps_lock */
    c = (chunk_t *)source_alloc(heap_source(h), size,
                                SRC_CHUNK | (kind == REGION_SMALL ? SRC_EXACT | SRC_ALIGNED : SRC_EXACT));
    if (!c) return NULL;
    c->r.node = (uint8_t)(c->r.source->node < 0 ? NODE_NONE : c->r.source->node);
    source_advise_merge(&c->r, true);
  }
  c->r.kind = (uint8_t)kind;
  c->r.heap = h;
  if (!registry_add(&c->r)) {          /* (again, for a spare: the kind is in the entries) */
    source_free(&c->r);
    return NULL;
  }
  c->next = c->prev = NULL;
  heap_stat_add_shared(&h->st_chunk_bytes, size);
  if (kind == REGION_SMALL) {
    c->free_runs = ~(uint64_t)1;       /* run 0 holds this header */
    memset(c->runs, 0, sizeof c->runs);  /* RUN_FREE, capacity 0: no pointer is valid yet */
    small_frames_add((uintptr_t)c);
  } else {
    medium_chunk_init(h, c);
  }
  chunk_t **list = kind == REGION_SMALL ? &h->small_chunks : &h->medium_chunks;
  c->next = *list;
  if (*list) (*list)->prev = c;
  *list = c;
  return c;
}

/* Auto profile: an unused spare chunk is kept the longer of the large
 * segments' longest window and its source's chunk window, then goes to its
 * source (where it decays like any chunk); then the sources' controller
 * runs. */
void heap_adapt_tick(heap_t *h) {
  if (unlikely(ksm_auto()) && h != &locus_oom_heap) ksm_tick(adapt_now());
  if (h == &locus_oom_heap || !adapt_active()) return;
  uint64_t now = adapt_now();
  uint64_t keep = h->spare ? atomic_load_explicit(&h->spare->r.source->adapt.k[ADAPT_CHUNK].window_ns,
                                                  memory_order_relaxed) : 0;
  if (keep < ADAPT_WINDOW_MAX_NS) keep = ADAPT_WINDOW_MAX_NS;
  if (h->spare && h->spare_ns + keep < now) heap_spare_drop(h);
  adapt_tick(now);
}

NOINLINE void heap_cache_tick(heap_t *h) {
  if ((++h->cache_ticks & 31) == 0) heap_adapt_tick(h);
}

void heap_collect(heap_t *h) {
  heap_drain_remote(h);
  heap_lock(h);
  small_collect_all(h, h->state != HEAP_LIVE);
  heap_unlock(h);
  /* Only a user heap's reset leaves a medium chunk empty (a free that
   * empties one releases it): such chunks go back too. */
  if (h->place == PLACE_USER) medium_release_empty(h);
  heap_debug_tick(h);
  heap_spare_drop(h);
}

static void heap_park_locked(heap_t *h);
/* Thread exit (TSD destructor). Later destructors of the same thread may still
 * allocate: they get a heap again (adopting or creating one), which is
 * abandoned again at the next destructor round, or, after the last round,
 * parked once the thread is gone (`late`, heaps_reap_gone). */
static void heap_exit_hook(void *arg) {
  thread_exiting = true;
  heap_abandon(arg);
}
/* The thread gives its heap up: at exit, or to change node (heap_rebind). */
static void heap_abandon(void *arg) {
  heap_t *h = arg;
  if (h) uheap_capture_end(h);         /* a capture ends with its thread */
  if (!h || locus_tls_heap != h) return;
  uheap_thread_forget();               /* its sub-heaps go with h */
  /* The thread cache stays with the heap, without other heaps' blocks
   * (tcache_t): the thread that adopts it next (thread churn: a pool that
   * is torn down and made again) starts with the blocks this one freed
   * last. A collector of orphans gives it back (orphan_collect). Placed
   * sub-heaps cache only their own blocks. */
  small_cache_exit(h);
  locus_tls_heap = NULL;
  lock_acquire(&heaps_lock);
  heap_park_locked(h);
  lock_release(&heaps_lock);
}

/* A live main heap becomes an orphan, parked (heaps_lock held; its thread
 * gave it up or is gone). */
static void heap_park_locked(heap_t *h) {
  if (h->late) {
    h->late = false;
    __atomic_store_n(&late_heaps, late_heaps - 1, __ATOMIC_RELAXED);
  }
  heap_set_state(h, HEAP_ORPHAN);
  h->tid = 0;
  for (int i = 0; i <= PLACE_INTERLEAVE; i++)
    if (h->placed[i]) heap_set_state(h->placed[i], HEAP_ORPHAN), h->placed[i]->tid = 0;
  for (heap_t *s = h->usubs; s; s = s->next_usub) heap_set_state(s, HEAP_ORPHAN), s->tid = 0;
  /* Parked under the lock, as a collector of orphans would: the heap is
   * nobody's now. (A later destructor of this thread gets another heap.) */
  heap_collect(h);
  for (int i = 0; i <= PLACE_INTERLEAVE; i++)
    if (h->placed[i]) heap_collect(h->placed[i]);
  for (heap_t *s = h->usubs; s; s = s->next_usub) heap_collect(s);
  h->next_orphan = orphans;
  __atomic_store_n(&orphans, h, __ATOMIC_RELAXED);   /* peeked without the lock */
}

/* Live main heaps whose thread is gone become orphans (heaps_lock held):
 * the late ones, or with `all` every one (a thread whose first allocation
 * came in the last destructor round never ran the hook, so its heap is not
 * marked late). Their thread's TLS went with it: the thread cache, foreign
 * blocks included, goes back to the runs as a collector's would, and a
 * capture it left counts no more. os_thread_gone never calls a live thread
 * gone. Called when a thread needs a heap (`all`: amortised, every
 * sweep_every heaps made), by locus_release/collect and by a heap destroy
 * that finds its heap captured. */
void heaps_reap_gone(bool all) {
  long self = os_gettid();
  size_t live = 0, reaped = 0;
  for (heap_t *h = all_heaps; h; h = h->next_all) {
    if (h->place != PLACE_MAIN || h == &locus_oom_heap || heap_state(h) != HEAP_LIVE) continue;
    live++;
    if ((!h->late && !all) || h->tid == self || !os_thread_gone(h->tid)) continue;
    uheap_capture_drop(h);
    small_cache_flush(h);
    heap_park_locked(h);
    live--;
    reaped++;
  }
  /* The next sweep: at the next heap to make when this one found some
   * (threads that leave without the hook tend to come in numbers), else
   * after half as many heaps made as are live, at least 4: O(1) system
   * calls per heap made. */
  if (all) {
    made_since_sweep = 0;
    sweep_every = reaped ? 1 : live / 2 > 4 ? live / 2 : 4;
  }
}

/* An orphan has work when some thread freed into it since it was parked. */
static bool heap_has_remote(heap_t *h) {
  return atomic_load_explicit(&h->notify, memory_order_relaxed) ||
         atomic_load_explicit(&h->remote, memory_order_relaxed);
}

/* One orphan (heaps_lock held: the caller is its only user, as its thread
 * was): the thread cache its thread left goes back to the runs, then what
 * others freed into it is taken back, when there is any or on request. */
static void orphan_collect(heap_t *h, bool wait) {
  bool cached = !small_cache_empty(h);
  if (cached) small_cache_flush(h);
  if (wait || cached || heap_has_remote(h)) heap_collect(h);
}

void heap_collect_full(heap_t *h) {
  small_cache_flush(h);
  heap_collect(h);
}

/* Takes back what other threads freed into orphaned heaps (exited threads):
 * their empty runs and chunks go back to the sources. Holding heaps_lock
 * makes the caller the orphans' only user (adoption takes them under it). */
void heaps_collect_orphans(bool wait) {
  if (!wait && !__atomic_load_n(&orphans, __ATOMIC_RELAXED)) return;   /* a peek: rechecked under the lock */
  if (wait) lock_acquire(&heaps_lock);
  else if (!lock_try(&heaps_lock)) return;
  if (wait) heaps_reap_gone(true);     /* on request: every heap whose thread is gone */
  /* On request (wait: locus_release/locus_collect) every orphan is walked:
   * runs emptied by remote frees leave no trace on the stacks. */
  for (heap_t *h = orphans; h; h = h->next_orphan) {
    orphan_collect(h, wait);
    for (int i = 0; i <= PLACE_INTERLEAVE; i++)
      if (h->placed[i]) orphan_collect(h->placed[i], wait);
    for (heap_t *s = h->usubs; s; s = s->next_usub) orphan_collect(s, wait);
  }
  lock_release(&heaps_lock);
}

void heaps_report(void (*line)(void *, const heap_t *), void *ctx) {
  lock_acquire(&heaps_lock);
  for (heap_t *h = all_heaps; h; h = h->next_all) line(ctx, h);
  lock_release(&heaps_lock);
}

void heaps_counts(size_t *live, size_t *orphaned) {
  lock_acquire(&heaps_lock);
  for (heap_t *h = all_heaps; h; h = h->next_all) {
    if (h->place != PLACE_MAIN) continue;   /* placed sub-heaps go with their main heap; user heaps apart */
    if (h->state == HEAP_LIVE) ++*live;
    else if (h->state == HEAP_ORPHAN) ++*orphaned;
  }
  lock_release(&heaps_lock);
}

/* Every heap's lock, for the lock registry's fork handlers: they run it
 * with heaps_lock held (ranked below), which guards the list. A remote free
 * may be retiring a run of any heap (small_free_last), so the child must not
 * inherit a half-done update or a lock held by a thread it does not have. */
static void heaps_each_lock(void (*fn)(lock_t *)) {
  for (heap_t *h = all_heaps; h; h = h->next_all) fn(&h->lock);
}
static lock_class_t heap_locks = {.name = "heap (each heap's lists)", .rank = LOCK_RANK_HEAP, .each = heaps_each_lock};
__attribute__((constructor(101))) static void heap_locks_register(void) { lock_class_register(&heap_locks); }

/* fork(): the child has only the forking thread. Other live heaps may have
 * been mid-update, so they are never used again (DEAD): frees of their blocks
 * still go to their stacks, which nobody drains. Orphans are consistent and
 * stay adoptable. Runs with every registered lock held (the prepare handler
 * took them), before they are reset. */
static waitq_t init_wq;

static void heaps_fork_child(void) {
  for (heap_t *h = all_heaps; h; h = h->next_all) small_fork_child(h);
  small_fork_child_queue();
  waitq_reset(&init_wq);
  /* The thread's main heap (locus_tls_heap is its capture trampoline while
   * it has captured a user heap); its placed and user sub-heaps stay live. */
  heap_t *self = heap_thread_main();
  uheap_fork_child(locus_tls_heap);
  for (heap_t *h = all_heaps; h; h = h->next_all) {
    if (h->main != self && h->state == HEAP_LIVE) heap_set_state(h, HEAP_DEAD);
    if (h != self) h->late = false;    /* the threads of late heaps are not in the child */
  }
  late_heaps = self && self->late;
  if (self) self->tid = os_gettid();
}

/* Every lock of the library, from the registry, in rank order (util/lock.h). */
static void fork_prepare(void) { locks_fork_prepare(); }
static void fork_parent(void) { locks_fork_parent(); }
static void fork_child(void) {
  heaps_fork_child();
  locks_fork_child();
}

/* One-time global initialisation; may run inside the first malloc of the
 * process (from the dynamic loader), so nothing here allocates.
 * locus_init_state: 0 not started, INIT_DONE, or INIT_BUSY(pid) while a
 * thread of process pid initialises. Others wait (bounded: waitq_t) for
 * INIT_DONE. A fork() while another thread initialised leaves the child
 * with its parent's pid in the state and no thread to finish: the child
 * starts over (every step below may run again; the key and the secret
 * are kept). init_wq is defined above (the fork handler resets it). */

static bool init_changed(const void *busy) {
  return atomic_load_explicit(&locus_init_state, memory_order_acquire) != *(const int *)busy;
}

void locus_init(void) {
  int st = atomic_load_explicit(&locus_init_state, memory_order_acquire);
  if (likely(st == INIT_DONE)) return;
  int me = INIT_BUSY(os_getpid());
  for (;;) {
    st = atomic_load_explicit(&locus_init_state, memory_order_acquire);
    if (st == INIT_DONE) return;
    if (st == me) {                    /* another thread of this process initialises */
      waitq_wait(&init_wq, init_changed, &me);
      continue;
    }
    if (atomic_compare_exchange_strong(&locus_init_state, &st, me)) break;
  }
  os_features_probe();
  os_stderr_keep();
  topology_init();
  options_init();
  sources_init();
  small_init();
  os_membarrier_init();                /* without it, idle heaps keep their current runs */
  if (!locus_free_key) locus_free_key = os_random() | 1;   /* freed blocks carry tags made with it */
  /* Without the key, exiting threads keep their heaps instead of handing
   * them on: a leak, never a corruption. */
  if (!exit_key_ok) exit_key_ok = pthread_key_create(&exit_key, heap_exit_hook) == 0;
  if (!exit_key_ok)
    locus_warn("no thread-exit hook (pthread_key_create failed): heaps of exited threads are not reused");
  atomic_store_explicit(&locus_init_state, INIT_DONE, memory_order_release);
  waitq_wake(&init_wq);
  if (atomic_load(&locus_opt.verbose)) options_print();
}

/* Registered from a constructor, outside any malloc call: pthread_atfork may
 * itself allocate. */
__attribute__((constructor)) static void locus_ctor(void) {
  locus_init();
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}
