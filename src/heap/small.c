/* Small blocks (<= SMALL_MAX): size classes served from 64 KiB runs, each run
 * holding blocks of one class, linked in a free list through their first
 * word: jemalloc-style runs, which the thesis found would beat its 16-byte
 * boundary tags for small sizes (Valat, PhD thesis, 2014, §4.6).
 *
 * Classes: 16..128 in steps of 16, then 4 classes per power of two up to
 * 8 KiB. Worst-case internal waste: 15 bytes for requests <= 128 (e.g. 17 B
 * in a 32 B block), under 20% above 128 (129 B in a 160 B block).
 *
 * A run is the heap's current run for its class (RUN_ACTIVE, in cur[]),
 * partially used (RUN_ACTIVE, in partial[]), full (RUN_FULL, on no list:
 * found again through the chunk when one of its blocks is freed), or unused
 * (RUN_FREE, its slot free in the chunk's bitmap). */
#include <string.h>

#include "heap/heap.h"

uint8_t locus_class_of16[SMALL_MAX / 16 + 1];
uint32_t locus_class_size[NUM_CLASSES];

void small_init(void) {
  unsigned n = 0;
  for (uint32_t s = 16; s <= 128; s += 16) locus_class_size[n++] = s;
  for (uint32_t base = 128; base < SMALL_MAX; base *= 2)
    for (uint32_t k = 1; k <= 4; k++) locus_class_size[n++] = base + k * base / 4;
  unsigned c = 0;
  for (unsigned i = 0; i <= SMALL_MAX / 16; i++) {
    while (locus_class_size[c] < i * 16) c++;
    locus_class_of16[i] = (uint8_t)c;
  }
}

static void run_init(run_t *run, unsigned cls) {
  uint32_t bs = locus_class_size[cls];
  run->free = NULL;
  run->used = 0;
  run->carved = 0;
  run->capacity = (uint16_t)(RUN_SIZE / bs);
  run->cls = (uint8_t)cls;
  run->bsize = bs;
  run->recip = (uint32_t)(((uint64_t)1 << 32) / bs + 1);
  run->state = RUN_ACTIVE;
  run->next = run->prev = NULL;
}

/* Threads the next page's worth of never-used blocks into the free list.
 * Carving lazily keeps untouched pages of a fresh run untouched. */
static void run_extend(chunk_t *c, run_t *run) {
  uint32_t bs = run->bsize;
  unsigned n = CARVE_SIZE / bs;
  if (n == 0) n = 1;
  if (n > (unsigned)(run->capacity - run->carved)) n = run->capacity - run->carved;
  char *b = run_start(c, run) + (size_t)run->carved * bs;
  run->carved = (uint16_t)(run->carved + n);
  /* Carved blocks carry the freed tag like freed ones: every block on a free
   * list has it (the validator checks), and freeing a block that was never
   * handed out is caught as a double free. */
  for (unsigned i = 0; i + 1 < n; i++, b += bs) {
    ((void **)b)[0] = b + bs;
    ((uintptr_t *)b)[1] = block_tag(b);
  }
  ((void **)b)[0] = run->free;
  ((uintptr_t *)b)[1] = block_tag(b);
  run->free = run_start(c, run) + (size_t)(run->carved - n) * bs;
}

static void partial_push(heap_t *h, run_t *run) {
  run->prev = NULL;
  run->next = h->partial[run->cls];
  if (run->next) run->next->prev = run;
  h->partial[run->cls] = run;
}

static void partial_unlink(heap_t *h, run_t *run) {
  if (run->prev) run->prev->next = run->next;
  else h->partial[run->cls] = run->next;
  if (run->next) run->next->prev = run->prev;
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
  run_init(run, cls);
  h->hot = (uintptr_t)c;
  *out = c;
  return run;
}

static inline void *run_pop(run_t *run) {
  LOCUS_ASSERT(run->state == RUN_ACTIVE && run->used < run->carved && run->carved <= run->capacity);
  void **b = run->free;
  run->free = *b;
  run->used++;
  b[1] = NULL;
  return b;
}

void *small_alloc_slow(heap_t *h, unsigned cls) {
  if (unlikely(h == &locus_oom_heap)) {     /* no heap yet: the OS may have memory now */
    h = heap_get_slow();
    if (h == &locus_oom_heap) return NULL;
  }
  heap_debug_tick(h);
  run_t *run = h->cur[cls];
  if (run != &locus_empty_run) {
    if (run->carved < run->capacity) {
      run_extend((chunk_t *)registry_lookup(run), run);   /* descriptors live in their chunk */
      return run_pop(run);
    }
  }
  if (atomic_load_explicit(&h->remote, memory_order_relaxed)) {
    heap_drain_remote(h);
    run = h->cur[cls];
    if (run->free) return run_pop(run);
  }
  if (run != &locus_empty_run) run->state = RUN_FULL;
  run = h->partial[cls];
  if (run) {
    partial_unlink(h, run);
    h->cur[cls] = run;
    if (!run->free) run_extend((chunk_t *)registry_lookup(run), run);
    return run_pop(run);
  }
  chunk_t *c;
  run = run_new(h, cls, &c);
  if (!run) {
    h->cur[cls] = &locus_empty_run;
    return NULL;
  }
  h->cur[cls] = run;
  run_extend(c, run);
  return run_pop(run);
}

/* Retires an empty run that is not current; its chunk goes back when all of
 * its runs are unused. */
static void small_run_retire(heap_t *h, chunk_t *c, run_t *run) {
  partial_unlink(h, run);
  run->state = RUN_FREE;
  run->carved = run->capacity = 0;     /* a late free into the slot is caught as invalid */
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
  if (c->free_runs == ~(uint64_t)1) heap_chunk_release(h, c);
}

/* Rare cases of a local free: the run was full, or became empty. */
NOINLINE void small_free_update(heap_t *h, chunk_t *c, run_t *run) {
  if (run->state == RUN_FULL) {
    run->state = RUN_ACTIVE;
    partial_push(h, run);
  }
  if (run->used == 0 && h->cur[run->cls] != run) small_run_retire(h, c, run);
}
