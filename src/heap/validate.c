/* The heap validator: walks one heap and checks every invariant that
 * docs/design.md states, so that a corruption is reported where it can still
 * be understood rather than as a crash far away. Only the owner thread calls
 * it (its lists change under nobody else); blocks freed remotely and still
 * queued count as used. */
#include "heap/heap.h"
#include "os/os.h"

#define FAIL(...) locus_fatal("heap check: " __VA_ARGS__)

static void check_region(heap_t *h, chunk_t *c, region_kind_t kind) {
  if (registry_lookup(c) != &c->r || (registry_find(c) & REG_KIND_MASK) != (uintptr_t)kind)
    FAIL("chunk %p is not recorded in the registry as a %s chunk", c, kind == REGION_SMALL ? "small" : "medium");
  if (c->r.heap != h) FAIL("chunk %p on heap %p's list belongs to heap %p", c, h, c->r.heap);
  if (c->r.kind != kind) FAIL("chunk %p has kind %u on a list of kind %u", c, c->r.kind, (unsigned)kind);
  if (kind == REGION_SMALL && (c->r.size != CHUNK_SIZE || small_chunk_of(c) != (uintptr_t)c))
    FAIL("small chunk %p of %zu bytes is not aligned on CHUNK_SIZE", c, c->r.size);
}

/* Walks one of a run's owner lists: every entry a carved block of the run,
 * on a block boundary, tagged as freed; no cycle. Returns its length. */
static size_t check_list(chunk_t *c, run_t *run, void **head, const char *name) {
  size_t idx = (size_t)(run - c->runs), n = 0;
  char *start = run_start(c, run);
  for (void **b = head; b; b = *b) {
    size_t off = (size_t)((char *)b - start);
    if ((char *)b < start || off >= RUN_SIZE || off % run->bsize || !run_carved(run, off / run->bsize))
      FAIL("run %zu of chunk %p: %s entry %p is not a carved block of the run", idx, c, name, (void *)b);
    if ((uintptr_t)b[1] != block_tag(b))
      FAIL("run %zu of chunk %p: %s block %p lost its freed tag (written after free?)", idx, c, name, (void *)b);
    if (++n > run->carved) FAIL("run %zu of chunk %p: %s longer than the carved blocks (cycle?)", idx, c, name);
  }
  return n;
}

/* free + used == carved (used counts the blocks on thread_free,
 * which other threads change under us: only its count is checked, <= used);
 * TF_FULL only on a full run. */
static void check_run(chunk_t *c, run_t *run) {
  size_t idx = (size_t)(run - c->runs);
  if (run->carved > run->capacity || run->used > run->carved)
    FAIL("run %zu of chunk %p: used %u, carved %u, capacity %u", idx, c, run->used, run->carved, run->capacity);
  if (run->capacity != RUN_SIZE / run->bsize || run->bsize != locus_class_size[run->cls])
    FAIL("run %zu of chunk %p: block size %u does not match class %u", idx, c, run->bsize, run->cls);
  if (run->first >= run->capacity || run->first + run->carved > run->capacity)
    FAIL("run %zu of chunk %p: carved %u blocks from block %u of %u", idx, c, run->carved, run->first,
         run->capacity);
  size_t n = check_list(c, run, run->free, "free list");
  if (n + run->used != run->carved)
    FAIL("run %zu of chunk %p: %zu free + %u used != %u carved", idx, c, n, run->used, run->carved);
  uintptr_t tf = atomic_load_explicit(&run->thread_free, memory_order_acquire);
  if ((tf & TF_COUNT_MASK) >> TF_COUNT_SHIFT > run->used)
    FAIL("run %zu of chunk %p: %zu blocks freed remotely, only %u handed out", idx, c,
         (size_t)((tf & TF_COUNT_MASK) >> TF_COUNT_SHIFT), run->used);
  if ((tf & TF_STATE_MASK) == TF_FULL && run->state != RUN_FULL)
    FAIL("run %zu of chunk %p: marked full for remote frees but not full (state %u)", idx, c, run->state);
}

static void check_small(heap_t *h) {
  size_t active[NUM_CLASSES] = {0};    /* active runs that are not current: all on the partial lists */
  for (chunk_t *c = h->small_chunks; c; c = c->next) {
    check_region(h, c, REGION_SMALL);
    if (c->free_runs & 1) FAIL("chunk %p: run slot 0 (the header) is marked free", c);
    for (unsigned i = 1; i < RUNS_PER_CHUNK; i++) {
      run_t *run = &c->runs[i];
      bool slot_free = c->free_runs >> i & 1;
      if (slot_free != (run->state == RUN_FREE))
        FAIL("chunk %p: run %u has state %u but its slot is %s", c, i, run->state, slot_free ? "free" : "used");
      if (run->state != RUN_FREE) check_run(c, run);
      if (run->state == RUN_ACTIVE && h->cur[run->cls] != run) active[run->cls]++;
    }
  }
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    run_t *cur = h->cur[cls];
    if (cur != &locus_empty_run && (cur->state != RUN_ACTIVE || cur->cls != cls))
      FAIL("current run %p of class %u has state %u, class %u", (void *)cur, cls, cur->state, cur->cls);
    size_t n = 0;
    run_t *prev = NULL;
    for (run_t *r = h->partial[cls]; r; prev = r, r = r->next) {
      if (r->state != RUN_ACTIVE || r->cls != cls || r->prev != prev || r == cur)
        FAIL("partial run %p of class %u: state %u, class %u, or broken links", (void *)r, cls, r->state, r->cls);
      if (++n > 1u << 20) FAIL("partial list of class %u does not end (cycle?)", cls);
    }
    if (h->partial_tail[cls] != prev) FAIL("partial list of class %u: tail is not the last run", cls);
    if (n != active[cls])
      FAIL("class %u: %zu active runs besides the current one, %zu on the partial list", cls, active[cls], n);
  }
}

/* The thread cache (heap.h, tcache_t): each list as long as its count and
 * within its bound; every block a carved block of a live small run of the
 * list's class, tagged freed, of this heap or (a live heap flagged
 * cache_foreign) of a main heap of its node. */
static void check_cache(heap_t *h) {
  for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
    tcache_t *t = &h->cache[cls];
    if (t->room > t->bound || t->bound > CACHE_COUNT_MAX)
      FAIL("thread cache of class %u: room %u, bound %u", cls, t->room, t->bound);
    uint32_t len = t->bound - t->room;   /* on; off: room 0 and no list */
    if (!t->room && !t->head) len = 0;
    size_t n = 0;
    for (void **b = t->head; b; b = *b) {
      if (++n > len) FAIL("thread cache of class %u: longer than its count %u (cycle?)", cls, len);
      uintptr_t e = registry_find(b);
      chunk_t *c = (chunk_t *)(e - REGION_SMALL);
      if ((e & REG_KIND_MASK) != REGION_SMALL || (uintptr_t)b - (uintptr_t)c >= CHUNK_SIZE)
        FAIL("thread cache of class %u: block %p is not in a small chunk", cls, (void *)b);
      heap_t *owner = c->r.heap;
      if (owner != h && (heap_state(h) != HEAP_LIVE || !h->cache_foreign))
        FAIL("thread cache of class %u: block %p of heap %p in the cache of heap %p (%s)", cls, (void *)b,
             (void *)owner, (void *)h, heap_state(h) != HEAP_LIVE ? "an orphan keeps only its own" : "not flagged foreign");
      if (owner != h && (owner->place != PLACE_MAIN || __atomic_load_n(&owner->node, __ATOMIC_RELAXED) != h->node))
        FAIL("thread cache of class %u: block %p of heap %p (place %d, node %d) in a heap of node %d", cls,
             (void *)b, (void *)owner, owner->place, owner->node, h->node);
      size_t off;
      run_t *run = chunk_run_of(c, b, &off);
      /* another heap's run: only what its owner cannot change while a block is live (not its state) */
      bool carved = owner == h ? run_carved(run, off / run->bsize) : run_carved_shared(run, off / run->bsize);
      if ((owner == h && run->state == RUN_FREE) || run->cls != cls || off % run->bsize || !carved)
        FAIL("thread cache of class %u: %p is not a carved block of a run of the class", cls, (void *)b);
      if ((uintptr_t)b[1] != block_tag(b))
        FAIL("thread cache of class %u: block %p lost its freed tag (written after free?)", cls, (void *)b);
    }
    if (n != len) FAIL("thread cache of class %u: %zu blocks, count %u", cls, n, len);
  }
}

/* Blocks tile the chunk from the first offset to the end tag; sizes and
 * prev_size agree; no two free blocks touch (they merge at once); every free
 * block is on the bin of its size. Returns the number of free blocks. */
static size_t check_medium_chunk(heap_t *h, chunk_t *c) {
  check_region(h, c, REGION_MEDIUM);
  char *lo = (char *)c + MEDIUM_FIRST_OFF, *end = (char *)c + c->r.size - MB_HDR;
  size_t prev = 0, nfree = 0;
  bool prev_free = false;
  mblock_t *b = (mblock_t *)lo;
  while ((char *)b < end) {
    size_t sz = mb_size(b);
    if (sz < MB_MIN || sz % 16 || (char *)b + sz > end)
      FAIL("medium block %p of chunk %p has a bad size %zu", (void *)b, c, sz);
    if (b->prev_size != prev) FAIL("medium block %p: prev_size %zu, previous block %zu", (void *)b, b->prev_size, prev);
    bool free_ = !mb_inuse(b);
    if (free_ && prev_free) FAIL("medium blocks before %p are both free: not merged", (void *)b);
    if (free_) {
      unsigned i = medium_bin_of(sz);
      mblock_t *x = h->mbins[i].head;
      while (x && x != b) x = x->next;
      if (!x) FAIL("free medium block %p (%zu bytes) is not on bin %u", (void *)b, sz, i);
      nfree++;
    }
    prev = sz;
    prev_free = free_;
    b = mb_next(b);
  }
  if ((char *)b != end || !mb_inuse(b) || mb_size(b) != 0 || b->prev_size != prev)
    FAIL("medium chunk %p: blocks do not end on the end tag", c);
  return nfree;
}

static void check_medium(heap_t *h) {
  size_t free_blocks = 0, listed = 0;
  for (chunk_t *c = h->medium_chunks; c; c = c->next) free_blocks += check_medium_chunk(h, c);
  for (unsigned i = 0; i < MEDIUM_BINS; i++) {
    bool bit = h->mbits[i / 64] >> (i % 64) & 1;
    if (bit != (h->mbins[i].head != NULL)) FAIL("medium bin %u: bitmap says %s", i, bit ? "non-empty" : "empty");
    mblock_t *prev = NULL;
    for (mblock_t *b = h->mbins[i].head; b; prev = b, b = b->next) {
      if (b->prev != prev || mb_inuse(b) || medium_bin_of(mb_size(b)) != i)
        FAIL("medium bin %u: block %p is in use, of another bin, or badly linked", i, (void *)b);
      if (++listed > free_blocks) FAIL("medium bins hold more blocks than the chunks have free (cycle?)");
    }
    if (h->mbins[i].tail != prev) FAIL("medium bin %u: tail is not the last block", i);
  }
  if (listed != free_blocks) FAIL("%zu free medium blocks, %zu on the bins", free_blocks, listed);
}

/* The process-wide frame table (heap.h): every entry is empty or a chunk
 * address in the entry of its frame (other heaps' chunks may come and go
 * meanwhile: only the values are checked), and h's spare chunk, which
 * serves no block, is in none. */
static void check_frames(heap_t *h) {
  for (unsigned i = 0; i < SMALL_FRAMES; i++) {
    uintptr_t e = atomic_load_explicit(&locus_small_frames[i], memory_order_relaxed);
    if (e != FRAME_NONE && (e != small_chunk_of((void *)e) || small_frame_of(e) != i))
      FAIL("frame table entry %u: %p is not a chunk address of that frame", i, (void *)e);
  }
  if (h->spare && small_frame_holds((uintptr_t)h->spare))
    FAIL("the spare chunk %p is in the frame table", (void *)h->spare);
}

/* The owner is outside its pop (it validates): `pop` is idle or probed,
 * and a probed heap was probed at a recorded time (heap.h, HEAP_IDLE_NS). */
static void check_pop(heap_t *h) {
  unsigned v = __atomic_load_n(&h->pop, __ATOMIC_ACQUIRE);
  if (v != HEAP_IDLE && v != HEAP_PROBED) FAIL("pop window %u outside a pop", v);
  if (v == HEAP_PROBED && (h->probe_ns == 0 || h->probe_ns > os_clock_coarse_ns()))
    FAIL("heap probed without a probe time (%llu)", (unsigned long long)h->probe_ns);
}

/* The cache key follows the state (heap_set_state). Only the owner
 * validates, and only it changes its heap's state (at its exit). */
static void check_cache_node(heap_t *h) {
  int st = heap_state(h);
  int want = heap_cache_node_for(h, st);
  int cn = __atomic_load_n(&h->cache_node, __ATOMIC_RELAXED);
  if (cn != want) FAIL("cache key %d, but the heap's state %d, place %d and node %d say %d", cn, st, h->place, h->node, want);
}

void heap_validate(heap_t *h) {
  if (h == &locus_oom_heap) return;
  check_cache_node(h);
  heap_lock(h);              /* a remote free may retire a run meanwhile */
  check_small(h);
  check_cache(h);
  check_frames(h);
  check_pop(h);
  heap_unlock(h);
  check_medium(h);
  if (h->spare && registry_lookup(h->spare) != &h->spare->r) FAIL("spare chunk %p is not recorded", h->spare);
  /* A heap over bounded memory gives every emptied chunk back (heap_t.bounded). */
  if (h->spare && h->bounded) FAIL("user sub-heap over bounded memory holds a spare chunk %p", h->spare);
}

#ifdef LOCUS_DEBUG
/* Called on slow paths of h; a placed sub-heap validates itself only. */

#endif
