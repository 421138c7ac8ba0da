/* Medium blocks (SMALL_MAX < size <= large threshold): boundary-tagged blocks
 * inside medium chunks (Valat, PhD thesis, 2014, §4.6.2). Each block starts with a
 * 16-byte tag (size of the previous block, own size | in-use bit). Freed
 * blocks merge at once with free neighbours and go to segregated, doubly
 * linked FIFO lists (4 bins per power of two); the remainder of a split goes
 * to the head of its list so it is reused first.
 *
 * Chunk layout: [chunk header][block][block]...[end tag]. The end tag is a
 * zero-size in-use block, so merging to the right stops there; the first
 * block has prev_size 0, so merging to the left stops there. */
#include <string.h>

#include "heap/heap.h"

unsigned medium_bin_of(size_t size) {
  if (size < 8 * KiB) return 0;
  int k = log2_floor(size);
  unsigned b = 1 + (unsigned)(k - 13) * 4 + (unsigned)((size >> (k - 2)) & 3);
  return b < MEDIUM_BINS ? b : MEDIUM_BINS - 1;
}

static void bin_unlink(heap_t *h, mblock_t *b) {
  unsigned i = medium_bin_of(mb_size(b));
  mbin_t *bin = &h->mbins[i];
  if (b->prev) b->prev->next = b->next;
  else bin->head = b->next;
  if (b->next) b->next->prev = b->prev;
  else bin->tail = b->prev;
  if (!bin->head) h->mbits[i / 64] &= ~((uint64_t)1 << (i % 64));
}

static void bin_insert(heap_t *h, mblock_t *b, bool at_head) {
  unsigned i = medium_bin_of(mb_size(b));
  mbin_t *bin = &h->mbins[i];
  if (!bin->head) {
    b->next = b->prev = NULL;
    bin->head = bin->tail = b;
    h->mbits[i / 64] |= (uint64_t)1 << (i % 64);
  } else if (at_head) {
    b->prev = NULL;
    b->next = bin->head;
    bin->head->prev = b;
    bin->head = b;
  } else {
    b->next = NULL;
    b->prev = bin->tail;
    bin->tail->next = b;
    bin->tail = b;
  }
}

static void mb_set_size(mblock_t *b, size_t size, bool inuse) {
  b->head = size | (inuse ? MB_INUSE : 0);
  mb_next(b)->prev_size = size;
}

void medium_chunk_init(heap_t *h, chunk_t *c) {
  mblock_t *first = (mblock_t *)((char *)c + MEDIUM_FIRST_OFF);
  mblock_t *end = (mblock_t *)((char *)c + c->r.size - MB_HDR);
  first->prev_size = 0;
  end->head = MB_INUSE;
  mb_set_size(first, (size_t)((char *)end - (char *)first), false);
  c->hiwater = MEDIUM_FIRST_OFF + sizeof(mblock_t);
  bin_insert(h, first, false);
}

/* First fit in the request's own bin (bounded scan, FIFO order), else the
 * head of the next non-empty bin, whose blocks are all large enough. */
static mblock_t *find_fit(heap_t *h, size_t need) {
  unsigned i = medium_bin_of(need);
  unsigned scanned = 0;
  for (mblock_t *b = h->mbins[i].head; b && scanned < 16; b = b->next, scanned++)
    if (mb_size(b) >= need) return b;
  for (unsigned w = (i + 1) / 64; w < 2; w++) {
    uint64_t bits = h->mbits[w];
    if (w == (i + 1) / 64) bits &= ~(uint64_t)0 << ((i + 1) % 64);
    if (bits) return h->mbins[w * 64 + (unsigned)__builtin_ctzll(bits)].head;
  }
  return NULL;
}

static inline chunk_t *chunk_of(const void *p) { return (chunk_t *)registry_lookup(p); }

/* Splits the free block b (off any list) so that it keeps `size` bytes; the
 * rest becomes a free block reused first, merged with a free right neighbour. */
static void split_tail(heap_t *h, chunk_t *c, mblock_t *b, size_t size, bool inuse) {
  size_t total = mb_size(b);
  if (total - size < MB_MIN) {
    mb_set_size(b, total, inuse);
    return;
  }
  mb_set_size(b, size, inuse);
  mblock_t *rest = mb_next(b);
  rest->prev_size = size;
  size_t rsize = total - size;
  mblock_t *after = (mblock_t *)((char *)rest + rsize);
  if (!mb_inuse(after)) {
    bin_unlink(h, after);
    rsize += mb_size(after);
  }
  mb_set_size(rest, rsize, false);
  bin_insert(h, rest, true);
}

void *medium_alloc(heap_t *h, size_t size, size_t align, bool zero) {
  size_t need = align_up(size, 16) + MB_HDR;
  if (need < MB_MIN) need = MB_MIN;
  size_t search = align > 16 ? need + align + MB_MIN : need;
  if (unlikely(h == &locus_oom_heap)) {     /* no heap yet: the OS may have memory now */
    h = heap_get_slow();
    if (h == &locus_oom_heap) return NULL;
  }
  heap_debug_tick(h);
  if (atomic_load_explicit(&h->remote, memory_order_relaxed)) heap_drain_remote(h);
  mblock_t *b = find_fit(h, search);
  if (!b) {
    chunk_t *c = heap_chunk_alloc(h, REGION_MEDIUM);
    if (!c) return NULL;
    b = find_fit(h, search);
    if (!b) return NULL;   /* request larger than a chunk: the caller checked */
  }
  chunk_t *c = chunk_of(b);
  bin_unlink(h, b);
  if (align > 16) {
    uintptr_t pay = (uintptr_t)b + MB_HDR;
    uintptr_t want = align_up(pay, align);
    while (want != pay && want - pay < MB_MIN) want += align;
    if (want != pay) {                 /* free the front gap as its own block */
      size_t gap = want - pay, total = mb_size(b);
      mb_set_size(b, gap, false);
      bin_insert(h, b, false);
      b = (mblock_t *)((char *)b + gap);
      b->prev_size = gap;
      mb_set_size(b, total - gap, true);
    }
  }
  split_tail(h, c, b, need, true);
  void *p = (char *)b + MB_HDR;
  size_t end = (size_t)((char *)b + mb_size(b) - (char *)c);
  if (zero) {
    /* Bytes above the chunk's high-water mark were never handed out: a chunk
     * fresh from the OS still has them zero. */
    size_t off = (size_t)((char *)p - (char *)c);
    size_t dirty_end = c->r.zeroed ? (c->hiwater < end ? c->hiwater : end) : end;
    if (dirty_end > off) memset(p, 0, dirty_end - off);
  }
  /* a split wrote the remainder's tag and links just past the block */
  if (end + sizeof(mblock_t) > c->hiwater) c->hiwater = end + sizeof(mblock_t);
  ((void **)p)[1] = NULL;              /* clear a stale free tag */
  return p;
}

/* Validates that p is the payload of a live block of chunk c; aborts with a
 * message naming the error otherwise. Another thread than the owner only
 * reads what the owner cannot change while the block is live: its own tag and
 * the next block's prev_size (the previous block may be merging right now). */
mblock_t *medium_check(chunk_t *c, const void *p, const char *fn, bool local) {
  mblock_t *b = mb_of(p);
  uintptr_t lo = (uintptr_t)c + MEDIUM_FIRST_OFF, hi = (uintptr_t)c + c->r.size - MB_HDR;
  size_t sz = mb_size(b);
  if (((uintptr_t)p & 15) || (uintptr_t)b < lo || (uintptr_t)b >= hi || sz < MB_MIN ||
      sz > hi - (uintptr_t)b || mb_next(b)->prev_size != sz ||
      (local && b->prev_size && ((uintptr_t)b - b->prev_size < lo || mb_size(mb_of((char *)b - b->prev_size + MB_HDR)) != b->prev_size)))
    locus_fatal("%s(): invalid pointer %p (not the start of a block allocated by locus)", fn, p);
  if (!mb_inuse(b) || ((uintptr_t *)p)[1] == block_tag(p))
    locus_fatal("%s(): double free of %p (medium block already freed)", fn, p);
  return b;
}

/* Whether free block b of `size` bytes is the whole of chunk c. */
static bool spans_chunk(const chunk_t *c, const mblock_t *b, size_t size) {
  return (const char *)b == (const char *)c + MEDIUM_FIRST_OFF && size == c->r.size - MEDIUM_FIRST_OFF - MB_HDR;
}

void medium_free_local(heap_t *h, chunk_t *c, void *p) {
  mblock_t *b = mb_of(p);
  size_t size = mb_size(b);
  mblock_t *next = mb_next(b);
  if (!mb_inuse(next)) {
    bin_unlink(h, next);
    size += mb_size(next);
  }
  if (b->prev_size) {
    mblock_t *prev = (mblock_t *)((char *)b - b->prev_size);
    if (!mb_inuse(prev)) {
      bin_unlink(h, prev);
      size += mb_size(prev);
      b = prev;
    }
  }
  mb_set_size(b, size, false);
  ((uintptr_t *)p)[1] = block_tag(p);  /* a later free of p is caught even after merging */
  if (spans_chunk(c, b, size)) {
    heap_chunk_release(h, c);
    return;
  }
  bin_insert(h, b, false);
}

/* A chunk is empty when its first block is free and spans it (as after
 * medium_chunk_init; a free that empties a chunk releases it at once). */
void medium_release_empty(heap_t *h) {
  for (chunk_t *c = h->medium_chunks, *next; c; c = next) {
    next = c->next;
    mblock_t *first = (mblock_t *)((char *)c + MEDIUM_FIRST_OFF);
    if (mb_inuse(first) || !spans_chunk(c, first, mb_size(first))) continue;
    bin_unlink(h, first);
    heap_chunk_release(h, c);
  }
}

size_t medium_usable(const void *p) { return mb_size(mb_of(p)) - MB_HDR; }

/* realloc in place, owner only: grow into a free right neighbour, or shrink
 * by splitting off the tail. Returns false when the block must move. */
bool medium_resize_in_place(heap_t *h, chunk_t *c, void *p, size_t size) {
  mblock_t *b = mb_of(p);
  size_t need = align_up(size, 16) + MB_HDR, cur = mb_size(b);
  if (need < MB_MIN) need = MB_MIN;
  if (need <= cur) {
    if (cur - need >= MB_MIN) split_tail(h, c, b, need, true);
    return true;
  }
  mblock_t *next = mb_next(b);
  if (mb_inuse(next) || cur + mb_size(next) < need) return false;
  bin_unlink(h, next);
  size_t nsize = mb_size(next);
  mb_set_size(b, cur + nsize, true);
  split_tail(h, c, b, need, true);
  size_t end = (size_t)((char *)mb_next(b) - (char *)c) + sizeof(mblock_t);
  if (end > c->hiwater) c->hiwater = end;
  return true;
}
