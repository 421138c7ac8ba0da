/* Small blocks (<= SMALL_MAX): size classes served from 64 KiB runs, each run
 * holding blocks of one class, linked in a free list through their first
 * word: jemalloc-style runs, which the thesis found would beat its 16-byte
 * boundary tags for small sizes (Valat, PhD thesis, 2014, §4.6).
 *
 * Classes: 16..128 in steps of 16, then 4 classes per power of two up to
 * 8 KiB, except 8 per power of two between 256 B and 1 KiB (steps of 32 and
 * 64 B). Worst-case internal waste: 15 bytes for requests <= 128 (e.g. 17 B
 * in a 32 B block), under 20% above 128 (129 B in a 160 B block), under
 * 12.5% between 256 B and 1 KiB. The finer steps there are for reuse: a block
 * handed out again mostly serves a request of another size in its class, and
 * the last line the new owner writes is the one the last owner wrote (still
 * cached) less often when the class is wide (more second-level write misses
 * with 128-byte steps; the measurement is in docs/notes/).
 *
 * A run is the heap's current run for its class (RUN_ACTIVE, in cur[]),
 * partially used (RUN_ACTIVE, in partial[], oldest first so that a run has
 * gathered frees by the time it is taken again), full (RUN_FULL, on no list:
 * found again through the chunk when the owner frees one of its blocks, or
 * through the heap's notify stack when another thread does), or unused
 * (RUN_FREE, its slot free in the chunk's bitmap). The states, actors, transitions
 * and why they are safe: heap/run.h.
 *
 * Free lists are sharded per run (free / thread_free, see
 * heap.h): a remote free touches only the run's descriptor, and the owner
 * takes a run's remote frees in one exchange when its other lists are empty.
 * In front of the runs, the owner's frees go to its thread cache (heap.h).
 *
 * Runs are colored: runs start on 64 KiB boundaries, which is the size of
 * one way of a 512 KiB 8-way L2 (and a multiple of the way size of most
 * L1s), so the blocks a run hands out first, which LIFO reuse keeps handing
 * out, would sit in the same cache sets in every run and the runs of all
 * classes would compete for a few sets. Each run starts carving at its own
 * block (run_t.first), spread over the run's 64 KiB by a golden-ratio step. */
#include <string.h>

#include "heap/heap.h"
#include "heap/user.h"
#include "os/os.h"
#include "config/options.h"

uint8_t locus_class_of16[SMALL_MAX / 16 + 1];
uint32_t locus_class_size[NUM_CLASSES];

void small_init(void) {
  unsigned n = 0;
  for (uint32_t s = 16; s <= 128; s += 16) locus_class_size[n++] = s;
  for (uint32_t base = 128; base < SMALL_MAX; base *= 2) {
    uint32_t per = base == 256 || base == 512 ? 8 : 4;
    for (uint32_t k = 1; k <= per; k++) locus_class_size[n++] = base + k * base / per;
  }
  LOCUS_ASSERT(n == NUM_CLASSES && locus_class_size[n - 1] == SMALL_MAX);
  unsigned c = 0;
  for (unsigned i = 0; i <= SMALL_MAX / 16; i++) {
    while (locus_class_size[c] < i * 16) c++;
    locus_class_of16[i] = (uint8_t)c;
  }
}

static void run_init(run_t *run, unsigned cls, uint16_t color) {
  uint32_t bs = locus_class_size[cls];
  run->free = NULL;
  run_used_set(run, 0);
  run->capacity = (uint16_t)(RUN_SIZE / bs);
  run_set_span(run, (color / bs) % run->capacity, 0);   /* from a block near byte `color` */
  run->cls = (uint8_t)cls;
  run->bsize = bs;
  run->recip = (uint32_t)(((uint64_t)1 << 32) / bs + 1);
  run_enter_current(run);
  atomic_store_explicit(&run->thread_free, 0, memory_order_relaxed);
  run->next = run->prev = NULL;
  atomic_store_explicit(&run->notify_next, NULL, memory_order_relaxed);
}

static inline chunk_t *run_chunk(run_t *run) {
  return (chunk_t *)small_chunk_of(run);   /* descriptors live in their chunk's header */
}

/* Threads never-used blocks into the free list, from block `first` to the
 * run's end, a page's worth at a time; at the end, every block before
 * `first` at once, and the run is carved from block 0 (run_carved). Carving
 * lazily keeps untouched pages of a fresh run untouched (a run touches at
 * most a page more than it has handed out), and a page carved is handed out
 * next, while its lines are in the first-level cache; a run used up to its
 * end is in use enough that the rest may be touched. */
static void run_extend(chunk_t *c, run_t *run) {
  uint32_t bs = run->bsize;
  unsigned at = run->first + run->carved, n;   /* the next block to carve */
  char *head;
  if (at < run->capacity) {
    n = CARVE_SIZE / bs;
    if (n == 0) n = 1;
    if (n > run->capacity - at) n = run->capacity - at;
    run_set_span(run, run->first, run->carved + n);
  } else {                             /* the blocks before `first`, the last ones */
    at = 0;
    n = run->first;
    run_set_span(run, 0, run->capacity);
  }
  LOCUS_ASSERT(n > 0 && run->first + run->carved <= run->capacity);
  char *b = run_start(c, run) + (size_t)at * bs;
  head = b;
  /* Carved blocks carry the freed tag like freed ones: every block on a free
   * list has it (the validator checks), and freeing a block that was never
   * handed out is caught as a double free. */
  for (unsigned i = 0; i + 1 < n; i++, b += bs) {
    ((void **)b)[0] = b + bs;
    ((uintptr_t *)b)[1] = block_tag(b);
  }
  ((void **)b)[0] = run->free;
  ((uintptr_t *)b)[1] = block_tag(b);
  run->free = head;
}

/* CURRENT <-> PARTIAL moves a RUN_ACTIVE run between cur[] and the partial
 * list (heap/run.h); a partial run is never current. */
static void partial_push(heap_t *h, run_t *run) {   /* at the tail: oldest first */
  LOCUS_ASSERT(run_state(run) == RUN_ACTIVE && h->cur[run->cls] != run);
  unsigned cls = run->cls;
  run->next = NULL;
  run->prev = h->partial_tail[cls];
  if (run->prev) run->prev->next = run;
  else h->partial[cls] = run;
  h->partial_tail[cls] = run;
}

static void partial_unlink(heap_t *h, run_t *run) {
  LOCUS_ASSERT(run_state(run) == RUN_ACTIVE && h->cur[run->cls] != run);
  if (run->prev) run->prev->next = run->next;
  else h->partial[run->cls] = run->next;
  if (run->next) run->next->prev = run->prev;
  else h->partial_tail[run->cls] = run->prev;
  run->next = run->prev = NULL;
}

static run_t *run_new(heap_t *h, unsigned cls, chunk_t **out) {
  chunk_t *c = h->small_chunks;
  if (!c || !c->free_runs) {
    c = heap_chunk_alloc(h, REGION_SMALL);
    if (!c) return NULL;
  }
  unsigned i = (unsigned)__builtin_ctzll(c->free_runs);
  c->free_runs &= c->free_runs - 1;
  if (!c->free_runs && c->next) {      /* keep chunks with free slots at the head */
    h->small_chunks = c->next;
    c->next->prev = NULL;
    chunk_t *t = h->small_chunks;
    while (t->next) t = t->next;
    t->next = c;
    c->prev = t;
    c->next = NULL;
  }
  run_t *run = &c->runs[i];
  h->color = (uint16_t)(h->color + 0x9E37u);   /* 65536 / golden ratio: successive runs far apart */
  run_init(run, cls, h->color);
  *out = c;
  return run;
}

static inline void *run_pop(run_t *run) {
  LOCUS_ASSERT(run->state == RUN_ACTIVE && run->used < run->carved && run->carved <= run->capacity);
  void **b = run->free;
  run->free = *b;
  run_used_set(run, run->used + 1u);
  b[1] = NULL;
  return b;
}

/* A class's list turned off by an overflow comes on again (tcache_t): at
 * the class's next malloc that finds its run's list empty. */
static inline void cache_class_on(tcache_t *t) {
  if (!t->head) t->room = t->bound;
}

/* The owner's malloc found its current run's list empty; it is in its pop
 * window (heap_pop_enter). When the run has blocks left to carve and no
 * remote frees wait on thread_free (those are taken first, under the lock:
 * small_alloc_slow), carves the next page and pops a block, without the
 * lock: only the owner writes a current run's `free` and carved range, and
 * the pop window keeps other threads from taking the run back
 * (reclaim_current), as for a pop. NULL otherwise. A class's cache turned
 * off by an overflow comes on here as at a slow path (each carve was one):
 * left off until the run was used up, a thread-churning workload ran
 * slower. Against a slow path per carve (the carve then doubled to make
 * them fewer) the bulk batch is faster and misses the first-level cache
 * less (figures in docs/notes/). */
void *small_carve_pop(heap_t *h, unsigned cls) {
  run_t *run = heap_cur(h, cls);
  if (run->carved >= run->capacity ||       /* the sentinel too: capacity 0 */
      (atomic_load_explicit(&run->thread_free, memory_order_relaxed) & TF_COUNT_MASK))
    return NULL;
  cache_class_on(&h->cache[cls]);      /* as at a slow path */
  run_extend(run_chunk(run), run);
  return run_pop(run);
}

static NOINLINE void tf_corrupt(run_t *run, void *b, const char *what) {
  locus_fatal("free(): %s of %p (small block, found by its owner while taking back remote frees of run %p)",
              what, b, (void *)run);
}

/* Takes thread_free whole (its state bits stay) and moves it onto `free`.
 * The walk is bounded by the count packed with the head, and each block is
 * marked while walked: a block pushed twice (two threads freed it at the
 * same time; both passed the tag check before either pushed) is met again
 * marked, and reported as a double free instead of making a cycle. */
static size_t collect_list(heap_t *h, chunk_t *c, run_t *run, bool splice) {
  uintptr_t tf = atomic_load_explicit(&run->thread_free, memory_order_relaxed);
  do {
    if (!(tf & TF_COUNT_MASK)) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&run->thread_free, &tf, tf & TF_STATE_MASK,
                                                  memory_order_acquire, memory_order_relaxed));
  size_t n = (tf & TF_COUNT_MASK) >> TF_COUNT_SHIFT;
  void **head = (void **)(tf & TF_PTR_MASK), **b = head, **last = NULL;
  if (n > run_used(run)) tf_corrupt(run, head, "double free (more blocks freed than handed out)");
  char *start = run_start(c, run);
  for (size_t i = 0; i < n; i++) {
    size_t off = (size_t)((char *)b - start);
    if (!b || (char *)b < start || off >= RUN_SIZE || !run_carved(run, run_index(run, off)))
      tf_corrupt(run, b, "corrupted remote free list (write after free?)");
    if ((uintptr_t)b[1] != block_tag(b)) {
      if ((uintptr_t)b[1] == (block_tag(b) ^ 2)) tf_corrupt(run, b, "double free (freed by two threads at once)");
      tf_corrupt(run, b, "corrupted remote free list (write after free?)");
    }
    b[1] = (void *)(block_tag(b) ^ 2);  /* marked: met again means pushed twice */
    last = b;
    b = b[0];
  }
  if (b) tf_corrupt(run, b, "double free (remote free list longer than its count)");
  for (b = head; b != last; b = b[0]) b[1] = (void *)block_tag(b);
  last[1] = (void *)block_tag(last);
  if (splice) {
    last[0] = run->free;
    run->free = head;
  }
  run_used_set(run, run_used(run) - (unsigned)n);
  heap_stat_add_shared(&h->st_remote_frees, n);
  return n;
}

size_t small_collect(heap_t *h, chunk_t *c, run_t *run) { return collect_list(h, c, run, true); }

/* Full runs that got a remote free go back on the partial lists. A run is
 * on the stack at most once: it is pushed only by the free that turns
 * TF_FULL into TF_NOTIFYING, and the owner sets TF_FULL again only after
 * draining (run_mark_full). */
static void notify_drain(heap_t *h) {
  run_t *r = atomic_exchange_explicit(&h->notify, NULL, memory_order_acquire);
  while (r) {
    run_t *next = atomic_load_explicit(&r->notify_next, memory_order_relaxed);
    if (r->state == RUN_FULL) {
      run_leave_full(r);
      partial_push(h, r);
    }
    r = next;
  }
}

/* The owner's waits for the end of a run's TF_NOTIFYING (run_mark_full,
 * small_run_retire) sleep here; the notifier wakes them (small_notify). One
 * queue for every run: a notification lasts a few instructions unless its
 * thread is preempted, and a sleeper woken for another run looks again. */
static waitq_t notify_wq;

static bool notify_ended(const void *run) {
  return !(atomic_load_explicit(&((const run_t *)run)->thread_free, memory_order_acquire) & TF_NOTIFYING);
}

/* Test hook (tests/unit, tests/adversarial): called before the push (stage
 * 0) and between the push and the end of TF_NOTIFYING (stage 1), to hold a
 * notification open as a preempted notifier would. NULL outside those
 * tests. */
void (*small_notify_hook)(int stage);

/* Called by the remote free that found the run full: pushes the run on its
 * owner's notify stack, then ends TF_NOTIFYING (other remote frees of the
 * run push on meanwhile; the owner waits for the end before retiring the
 * run or marking it full again) and wakes the owner if it sleeps. */
NOINLINE void small_notify(heap_t *owner, run_t *run) {
  if (unlikely(small_notify_hook != NULL)) small_notify_hook(0);
  run_t *head = atomic_load_explicit(&owner->notify, memory_order_relaxed);
  do {
    atomic_store_explicit(&run->notify_next, head, memory_order_relaxed);
  } while (!atomic_compare_exchange_weak_explicit(&owner->notify, &head, run, memory_order_release,
                                                  memory_order_relaxed));
  if (unlikely(small_notify_hook != NULL)) small_notify_hook(1);
  run_notify_end(run);
  waitq_wake(&notify_wq);
}

/* Gives `free` something to pop: the remote frees, then a fresh page of the
 * run. False when the run is used up. */
static bool run_refill(heap_t *h, chunk_t *c, run_t *run) {
  if (run->free) return true;
  if ((atomic_load_explicit(&run->thread_free, memory_order_relaxed) & TF_COUNT_MASK) && small_collect(h, c, run))
    return true;
  if (run->carved < run->capacity) {
    run_extend(c, run);
    return true;
  }
  return false;
}

/* A used-up run becomes RUN_FULL with TF_FULL set, so that the first remote
 * free into it tells the heap. The exchange 0 -> TF_FULL fails when remote
 * frees arrived meanwhile: they are taken and the run serves on (true). */
static bool run_mark_full(heap_t *h, chunk_t *c, run_t *run) {
  for (;;) {
    uintptr_t tf = atomic_load_explicit(&run->thread_free, memory_order_acquire);
    if (tf & TF_COUNT_MASK) {
      small_collect(h, c, run);
      return true;
    }
    if ((tf & TF_STATE_MASK) == TF_FULL) {   /* already marked */
      run_enter_full(run);
      return false;
    }
    if (tf & TF_STATE_MASK) {          /* a notification of an earlier full period ends */
      waitq_wait(&notify_wq, notify_ended, run);
      continue;
    }
    /* Every earlier push of this run on the stack ended before TF_NOTIFYING
     * was cleared, which we saw: drain now, so it is on the stack no more. */
    if (atomic_load_explicit(&h->notify, memory_order_relaxed)) notify_drain(h);
    if (run_tf_mark_full(run, tf)) {
      run_enter_full(run);
      return false;
    }
  }
}

static void *alloc_slow_locked(heap_t *h, unsigned cls) {
  run_t *run = h->cur[cls];
  if (run != &locus_empty_run) {
    chunk_t *c = run_chunk(run);
    if (run_refill(h, c, run) || run_mark_full(h, c, run)) return run_pop(run);
    h->cur[cls] = &locus_empty_run;
  }
  if (atomic_load_explicit(&h->notify, memory_order_relaxed)) notify_drain(h);
  while ((run = h->partial[cls])) {
    partial_unlink(h, run);
    chunk_t *c = run_chunk(run);
    if (run_refill(h, c, run) || run_mark_full(h, c, run)) {
      h->cur[cls] = run;
      return run_pop(run);
    }
  }
  chunk_t *c;
  run = run_new(h, cls, &c);
  if (!run) return NULL;
  h->cur[cls] = run;
  run_extend(c, run);
  return run_pop(run);
}

static void recheck_unlock(heap_t *h);

void *small_alloc_slow(heap_t *h, unsigned cls) {
  if (unlikely(h->place == PLACE_CAPTURE)) {  /* the thread captured a user heap (heap/user.c) */
    size_t size = locus_class_size[cls];
    size_t align = size & -size;         /* what the class's blocks promise (aligned_class) */
    return uheap_captured_alloc(h, size, align > 4096 ? 4096 : align, false);
  }
  if (unlikely(h == &locus_oom_heap)) {     /* no heap yet: the OS may have memory now */
    h = heap_get_slow();
    if (h == &locus_oom_heap) return NULL;
  }
  heap_debug_tick(h);
  cache_class_on(&h->cache[cls]);
  heap_lock(h);
  void *p = alloc_slow_locked(h, cls);
  recheck_unlock(h);
  return p;
}

/* A current run leaves cur[] before its retire. It is on no list, which
 * the retire must know (it unlinks RUN_ACTIVE runs from the partial list:
 * unlinking a run that is not on it empties the class's list). The owner's
 * pop reads cur[] without the lock: only the owner, or a remote free that
 * follows the protocol of reclaim_current, may call this. */
static void run_unhook_current(heap_t *h, run_t *run) {
  LOCUS_ASSERT(h->cur[run->cls] == run && run->state == RUN_ACTIVE);
  __atomic_store_n(&h->cur[run->cls], &locus_empty_run, __ATOMIC_RELAXED);
  run_enter_full(run);
}

/* Retires an empty run that is not current; its chunk goes back when all of
 * its runs are unused. */
static void small_run_retire(heap_t *h, chunk_t *c, run_t *run, bool owner) {
  LOCUS_ASSERT(run->used == 0 && h->cur[run->cls] != run);
  /* Retired once: a second retire of the slot would give its chunk back twice
   * (to the source and to the spare: two heaps would share it). */
  LOCUS_ASSERT(run->state != RUN_FREE && !(c->free_runs >> (run - c->runs) & 1));
  LOCUS_ASSERT(lock_held(&h->lock));   /* the run lists change only under it */
  /* A remote free may still be pushing the run on the notify stack: wait for
   * it (bounded: it wakes us), then empty the stack, so that nothing points
   * to the slot. */
  waitq_wait(&notify_wq, notify_ended, run);
  if (atomic_load_explicit(&h->notify, memory_order_relaxed)) notify_drain(h);
  if (run->state != RUN_FULL) partial_unlink(h, run);
  run_enter_free(run);
  atomic_store_explicit(&run->thread_free, 0, memory_order_relaxed);
  run->free = NULL;
  run_set_span(run, 0, 0);             /* a late free into the slot is caught as invalid */
  run->capacity = 0;
  unsigned i = (unsigned)(run - c->runs);
  if (!c->free_runs && c->prev) {      /* chunk regains a free slot: move it to the head */
    c->prev->next = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = NULL;
    c->next = h->small_chunks;
    h->small_chunks->prev = c;
    h->small_chunks = c;
  }
  c->free_runs |= (uint64_t)1 << i;
  if (c->free_runs != ~(uint64_t)1) return;
  if (owner) heap_chunk_release(h, c);
  else heap_chunk_drop(h, c);          /* leaves the frame table first */
}

/* Ends a run's full period: back on the partial list; a notification still
 * on its way is ignored by notify_drain (the run is no longer full). */
static void run_unfull(heap_t *h, run_t *run) {
  run_leave_full(run);
  run_tf_unfull(run);
  partial_push(h, run);
}

/* The rare case of a local free decided before the decrement: the run was
 * full (it may also become empty). */
NOINLINE void small_free_update(heap_t *h, chunk_t *c, run_t *run, void **b) {
  heap_lock(h);
  /* b is still counted in `used`: no remote free can have retired the run. */
  LOCUS_ASSERT(run->state != RUN_FREE && run->used > 0);
  b[0] = run->free;                    /* the list may have changed while we waited */
  run->free = b;
  run_used_dec(run);
  if (run->state == RUN_FULL) run_unfull(h, run);
  if (run->used == 0 && h->cur[run->cls] != run) small_run_retire(h, c, run, true);
  heap_unlock(h);
}

/* Every run of c in use is a current run of h with no block handed out. */
static bool chunk_only_empty_current(heap_t *h, chunk_t *c) {
  for (uint64_t live = ~c->free_runs & ~(uint64_t)1; live; live &= live - 1) {
    run_t *r = &c->runs[__builtin_ctzll(live)];
    if (r->state != RUN_ACTIVE || h->cur[r->cls] != r || run_used(r) != 0) return false;
  }
  return true;
}

/* The owner's free emptied a run. Not current: retired. Current: kept (a
 * malloc/free of one block must not retire and set up a run every time),
 * unless every run of its chunk is an emptied current run and the heap has
 * a spare chunk: then they are all retired and the chunk goes back (a thread
 * that allocated a set and freed it keeps no chunk for its current runs:
 * an OpenMP program's serial phase kept several chunks that way). The next malloc of a
 * class takes the spare; with no spare left, the rule no longer applies. */
NOINLINE void small_free_emptied(heap_t *h, chunk_t *c, run_t *run) {
  heap_lock(h);
  LOCUS_ASSERT(run->used == 0 && run->state == RUN_ACTIVE);
  if (h->cur[run->cls] != run) {
    small_run_retire(h, c, run, true);
  } else if (h->spare && chunk_only_empty_current(h, c)) {
    uint64_t live = ~c->free_runs & ~(uint64_t)1;
    while (live) {                     /* the last retire releases c */
      run_t *r = &c->runs[__builtin_ctzll(live)];
      live &= live - 1;
      run_unhook_current(h, r);
      small_run_retire(h, c, r, true);
    }
  }
  heap_unlock(h);
}

/* Every handed-out block of the run is on thread_free (none is held by the
 * owner or anyone). Under the heap's lock. With used > 0 the owner holds no
 * block of the run: none of its frees can be about to touch it. */
static bool run_all_free(run_t *run) {
  uintptr_t tf = atomic_load_explicit(&run->thread_free, memory_order_acquire);
  return ((tf & TF_COUNT_MASK) >> TF_COUNT_SHIFT) == run_used(run);
}

/* Takes back, without the owner, the current runs whose blocks are all free
 * (by remote frees, or by the owner's, which keep an emptied current run) when
 * the owner looks idle: an OpenMP pool thread that allocated in one loop
 * and never allocates again would pin them, and their chunks, for ever.
 * Called by remote frees under the owner's lock (small_free_last).
 *
 * The owner pops from cur[] without the lock, between its stores of
 * HEAP_POPPING and HEAP_IDLE to h->pop. Protocol: a look that finds the
 * heap idle marks it HEAP_PROBED and stops there; a look at least
 * HEAP_IDLE_NS later that still finds it probed (the owner has not
 * allocated since: an owner that allocates keeps its runs) unhooks the
 * runs (cur[] = sentinel); then
 * os_membarrier makes the owner's entry store visible if it was already in
 * a pop that may have read the old cur[] (x86 may hold that store in its
 * buffer past the load); a pop starting after the barrier sees the
 * sentinel and takes the lock. Still probed: nobody pops from the unhooked
 * runs, which are retired (their chunks go to the source when empty).
 * Else the runs are hooked back. The owner holds no block of such a run,
 * so its frees cannot touch it either. */
static void reclaim_current(heap_t *h) {
  if (!LOCUS_RECLAIM_CURRENT) return;  /* built without it (heap.h) */
  /* Idle means idle for HEAP_IDLE_NS: a producer waiting on a full ring is
   * idle for microseconds, and taking its runs at every look cost a
   * membarrier and up to a run refill per class each time (a ring benchmark
   * ran markedly slower). */
  uint64_t now = os_clock_coarse_ns();
  if (now - h->probe_ns < HEAP_IDLE_NS) return;
  unsigned v = __atomic_load_n(&h->pop, __ATOMIC_ACQUIRE);
  if (v != HEAP_PROBED) {
    unsigned idle = HEAP_IDLE;
    if (v == HEAP_IDLE &&
        __atomic_compare_exchange_n(&h->pop, &idle, HEAP_PROBED, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
      h->probe_ns = now;
    return;
  }
  /* Still probed: later looks may take runs emptied since without waiting
   * (each look that issues a membarrier takes a current run, and the owner
   * makes no new one without leaving HEAP_PROBED); an owner that allocates
   * again is probed anew, HEAP_IDLE_NS after this probe at the earliest. */
  run_t *taken[NUM_CLASSES];
  unsigned n = 0;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    run_t *run = h->cur[cls];
    taken[cls] = NULL;
    /* used > 0: an emptied current run may be the owner's own doing, whose
     * free then retires it under the lock (small_free_emptied) */
    if (run == &locus_empty_run || run_used(run) == 0 || !run_all_free(run)) continue;
    taken[cls] = run;
    __atomic_store_n(&h->cur[cls], &locus_empty_run, __ATOMIC_RELAXED);
    n++;
  }
  if (!n) return;
  bool ok = os_membarrier() && __atomic_load_n(&h->pop, __ATOMIC_ACQUIRE) == HEAP_PROBED;
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    run_t *run = taken[cls];
    if (!run) continue;
    if (!ok) {                          /* the owner may be popping: hook back */
      __atomic_store_n(&h->cur[cls], run, __ATOMIC_RELAXED);
      continue;
    }
    LOCUS_ASSERT(run->state == RUN_ACTIVE && run_all_free(run));
    chunk_t *c = run_chunk(run);
    collect_list(h, c, run, false);    /* checked for double frees; the retire drops the lists */
    run_enter_full(run);               /* on no list (it was current) */
    small_run_retire(h, c, run, false);
  }
  heap_stat_add_shared(&h->st_reclaimed_runs, ok ? n : 0);
}

/* A remote free that may be the run's last handed-out block (see
 * small_free_remote). With the owner's lock, the run is checked again: not
 * current (the owner's malloc pops only there without the lock), every
 * handed-out block on thread_free (so the owner holds none and cannot free
 * into it): then the run is taken back and retired here, and its chunk goes
 * to the source when it was the last run (after leaving the owner's frame
 * table, which the owner's free path reads without the lock). */
/* Retires the runs of h whose handed-out blocks (at least one) are all on
 * thread_free and that are not current; then the idle owner's current runs
 * (reclaim_current). h->lock held. The one who sets h->recheck after
 * failing to take the lock leaves this to the holder. */
static void recheck_runs(heap_t *h) {
  chunk_t *c = h->small_chunks;
  while (c) {
    chunk_t *next = c->next;           /* c may go back to the source */
    uint64_t live = ~c->free_runs & ~(uint64_t)1;
    while (live) {
      unsigned i = (unsigned)__builtin_ctzll(live);
      live &= live - 1;
      run_t *run = &c->runs[i];
      /* used > 0: a run the owner's free emptied is retired by that free */
      if (run->state == RUN_FREE || h->cur[run->cls] == run || run_used(run) == 0 || !run_all_free(run))
        continue;
      bool last = (c->free_runs | ((uint64_t)1 << i)) == ~(uint64_t)1;
      collect_list(h, c, run, false);
      small_run_retire(h, c, run, false);
      if (last) break;                 /* the chunk went back to the source */
    }
    c = next;
  }
  reclaim_current(h);
}

/* Releases h->lock; a recheck asked for meanwhile is done first, and again
 * after the release if one was asked for between (the asker tried the lock
 * after setting the flag: one of the two sees the other). */
static void recheck_unlock(heap_t *h) {
  for (;;) {
    if (atomic_load_explicit(&h->recheck, memory_order_relaxed) && atomic_exchange(&h->recheck, 0))
      recheck_runs(h);
    heap_unlock(h);
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load(&h->recheck) || !lock_try(&h->lock)) return;
  }
}

NOINLINE void small_free_last(heap_t *owner, run_t *run, void *p) {
  /* The lock is tried, never waited for: a taken lock (the owner's slow
   * path, another free like this one) leaves the run to its holder, told
   * through h->recheck. Our block keeps the run alive until pushed; after
   * the push, without the lock, the run is not touched again. */
  bool live = heap_state(owner) != HEAP_DEAD;
  bool locked = live && lock_try(&owner->lock);
  void **b = p;
  b[1] = (void *)block_tag(b);
  uintptr_t old = atomic_load_explicit(&run->thread_free, memory_order_relaxed), nw;
  do {
    b[0] = (void *)(old & TF_PTR_MASK);
    nw = (uintptr_t)b | ((old & TF_COUNT_MASK) + TF_COUNT_ONE) | tf_push_state(old);
  } while (!atomic_compare_exchange_weak_explicit(&run->thread_free, &old, nw, memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (old & TF_FULL) small_notify(owner, run);
  if (!locked) {
    if (!live) return;
    atomic_store(&owner->recheck, 1);
    if (!lock_try(&owner->lock)) return;   /* the holder sees the flag after its release */
    recheck_unlock(owner);
    return;
  }
  uintptr_t tf = atomic_load_explicit(&run->thread_free, memory_order_acquire);
  if (run->state != RUN_FREE && owner->cur[run->cls] != run &&
      ((tf & TF_COUNT_MASK) >> TF_COUNT_SHIFT) == run_used(run)) {
    /* Every block of the run is free: the list is checked (double frees)
     * but need not be spliced: the retire drops the run's lists. */
    chunk_t *c = run_chunk(run);
    collect_list(owner, c, run, false);
    if (run->used == 0) small_run_retire(owner, c, run, false);
  }
  reclaim_current(owner);
  recheck_unlock(owner);
}

/* One run at collection: remote frees taken back; empty: retired; else,
 * when parking, marked full. */
static bool collect_run(heap_t *h, chunk_t *c, run_t *run, bool park) {
  small_collect(h, c, run);
  if (run->used == 0) {
    if (h->cur[run->cls] == run) run_unhook_current(h, run);
    small_run_retire(h, c, run, true);
    return true;
  }
  if (!park || run->state == RUN_FULL) return false;
  if (h->cur[run->cls] == run) h->cur[run->cls] = &locus_empty_run;
  else partial_unlink(h, run);
  while (run_mark_full(h, c, run)) {   /* took new remote frees */
    if (run->used == 0) {
      run_enter_full(run);             /* on no list */
      small_run_retire(h, c, run, true);
      return true;
    }
  }
  return false;
}

void small_collect_all(heap_t *h, bool park) {
  if (atomic_load_explicit(&h->notify, memory_order_relaxed)) notify_drain(h);
  chunk_t *c = h->small_chunks;
  while (c) {
    chunk_t *next = c->next;           /* c may go back to the source */
    uint64_t live = ~c->free_runs & ~(uint64_t)1;
    if (!live) {                       /* every run retired (not expected: the last retire releases it) */
      heap_chunk_release(h, c);
      c = next;
      continue;
    }
    while (live) {
      unsigned i = (unsigned)__builtin_ctzll(live);
      live &= live - 1;
      /* the retire of the last run releases the chunk: stop there */
      bool last = (c->free_runs | ((uint64_t)1 << i)) == ~(uint64_t)1;
      if (collect_run(h, c, &c->runs[i], park) && last) break;
    }
    c = next;
  }
}

/* The heap of an exited thread becomes some thread's heap again: its runs
 * were parked full; those with free blocks serve again. */
void small_unpark(heap_t *h) {
  small_collect_all(h, false);
  for (chunk_t *c = h->small_chunks; c; c = c->next)
    for (unsigned i = 1; i < RUNS_PER_CHUNK; i++) {
      run_t *run = &c->runs[i];
      if (run->state == RUN_FULL && run->free) run_unfull(h, run);
    }
}

void small_cache_init(heap_t *h) {
  size_t bytes = locus_opt.thread_cache;
  for (unsigned i = 0; i < NUM_CLASSES; i++) {
    size_t m = bytes / locus_class_size[i];
    if (m > CACHE_COUNT_MAX) m = CACHE_COUNT_MAX;
    /* A bound that is a multiple of 64 puts an emptied list's room on one
     * (small_free_local): a malloc/free ping-pong through the cache then
     * still ticks the adaptive controller, at every push onto the empty list. */
    if (m >= 64) m &= ~(size_t)63;
    h->cache[i].head = NULL;
    h->cache[i].bound = h->cache[i].room = (uint32_t)m;
  }
}

/* The chunk of a cached block: small chunks are aligned on their size. */
static chunk_t *cached_chunk(void **b) {
  chunk_t *c = (chunk_t *)small_chunk_of(b);
  LOCUS_ASSERT(registry_lookup(b) == &c->r && c->r.kind == REGION_SMALL);
  return c;
}

/* Gives a detached list of cached blocks to their runs, as the owner's
 * frees would have (a run may retire, and its chunk go back); blocks of
 * other heaps go to their runs' thread_free (small_free_foreign). */
static void cache_release(heap_t *h, void **b) {
  while (b) {
    void **next = b[0];
    chunk_t *ch = cached_chunk(b);
    size_t off;
    run_t *run = chunk_run_of(ch, b, &off);
    if (ch->r.heap == h) small_free_run(h, ch, run, b, block_tag(b));
    else small_free_remote(ch->r.heap, run, b);
    b = next;
  }
}

/* Walks each list once; the blocks kept stay in their order (most recently
 * freed first). The flag makes this free when no foreign block was cached
 * since the last flush (a thread that only frees what it allocated). */
void small_cache_exit(heap_t *h) {
  if (!h->cache_foreign) return;
  for (unsigned i = 0; i < NUM_CLASSES; i++) {
    tcache_t *t = &h->cache[i];
    void **link = (void **)&t->head, **b;
    uint32_t gone = 0;
    while ((b = *link)) {
      chunk_t *ch = cached_chunk(b);
      if (ch->r.heap == h) {
        link = b;                      /* word 0: the next block */
        continue;
      }
      *link = b[0];
      size_t off;
      small_free_remote(ch->r.heap, chunk_run_of(ch, b, &off), b);
      gone++;
    }
    t->room += gone;                   /* an emptied list is on and empty: room == bound */
  }
  h->cache_foreign = false;
}

bool small_cache_empty(const heap_t *h) {
  for (unsigned i = 0; i < NUM_CLASSES; i++)
    if (h->cache[i].head) return false;
  return true;
}

/* Every class's list back to the runs; the cache left on and empty, or off. */
static void cache_drain(heap_t *h, bool on) {
  h->cache_foreign = false;
  for (unsigned i = 0; i < NUM_CLASSES; i++) {
    tcache_t *t = &h->cache[i];
    void **b = t->head;
    t->head = NULL;
    t->room = on ? t->bound : 0;
    cache_release(h, b);
  }
}

void small_cache_flush(heap_t *h) { cache_drain(h, true); }

/* A free found its class's list full: a run of frees (a structure torn
 * down, or a thread that frees what others allocated). The block goes to
 * its run, and the whole cache, every class, goes back and is off until
 * each class's next malloc that finds its run's list empty (tcache_t): a
 * class freed only a few times in the streak would otherwise keep its
 * blocks, and their runs and chunks, for as long as the thread does not
 * allocate again. */
NOINLINE void small_cache_off(heap_t *h) { cache_drain(h, false); }

NOINLINE void small_cache_overflow(heap_t *h, chunk_t *c, run_t *run, void *p, uintptr_t tag) {
  small_free_run(h, c, run, p, tag);
  small_cache_off(h);
}

NOINLINE void small_free_foreign_full(heap_t *h, heap_t *owner, run_t *run, void *p) {
  small_free_remote(owner, run, p);
  small_cache_off(h);
}

/* fork() child: a thread that no longer exists may have been between the
 * two steps of small_notify (state TF_NOTIFYING, the run pushed on the owner's
 * notify stack or not yet). Every later remote free into the run, and the
 * owner's retire, would wait for that thread forever. The child has one
 * thread and every heap lock is held (taken by the fork handlers): the push
 * is finished here if it was not done, and the state cleared. */
void small_fork_child_queue(void) { waitq_reset(&notify_wq); }

void small_fork_child(heap_t *h) {
  for (chunk_t *c = h->small_chunks; c; c = c->next)
    for (unsigned i = 1; i < RUNS_PER_CHUNK; i++) {
      run_t *run = &c->runs[i];
      uintptr_t tf = atomic_load_explicit(&run->thread_free, memory_order_relaxed);
      if (run->state == RUN_FREE || !(tf & TF_NOTIFYING)) continue;
      run_t *r = atomic_load_explicit(&h->notify, memory_order_relaxed);
      while (r && r != run) r = atomic_load_explicit(&r->notify_next, memory_order_relaxed);
      if (!r) {                        /* the push had not happened */
        atomic_store_explicit(&run->notify_next, atomic_load_explicit(&h->notify, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&h->notify, run, memory_order_relaxed);
      }
      atomic_store_explicit(&run->thread_free, tf & ~TF_STATE_MASK, memory_order_relaxed);
    }
}
