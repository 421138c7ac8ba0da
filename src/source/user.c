/* User memory: the source of a user heap given a segment or a memory source
 * of its own (locus_heap_create; S. Valat, PhD thesis, 2014, §4.13: a local
 * heap over a special segment, growing only through the user's source).
 *
 * The memory is the user's: it is never mapped, unmapped, advised, bound or
 * remapped here. It comes in *pieces* (piece 0: the segment; then one per
 * call of the user's map) and is handed out as regions cut from *free
 * extents*. Invariants, under the source lock (checked by usrc_check in the
 * debug build): extents are page-granule aligned, lie inside their piece, do
 * not overlap each other, and no two extents of one piece touch (a free
 * merges its neighbours, so a piece entirely free is one extent); the bytes
 * of the extents plus in_use equal the bytes of the pieces; the extent
 * table has room for next + regions + 1 entries, so that a free, which adds
 * at most one extent and removes a region, never needs memory. Pieces of
 * different maps never merge: each goes back whole to the user's unmap.
 *
 * The tables live in locus's own pages, outside the user's memory: a heap
 * over a segment touches nothing of it but the regions it hands out
 * (their headers included). */
#include <errno.h>
#include <string.h>

#include "source/source.h"
#include "os/os.h"
#include "registry/registry.h"

typedef struct { uintptr_t base; size_t size; uint32_t piece; } uext_t;
typedef struct { uintptr_t base; size_t size; } upiece_t;

typedef struct usrc_s {
  locus_source_ops_t ops;      /* ops.map NULL: no growth */
  uext_t *ext;                 /* free extents, unordered */
  size_t next, cap_ext;
  upiece_t *piece;
  size_t npiece, cap_piece;
  size_t total, free_bytes;
  size_t regions;              /* handed out and not back */
  /* A fork child: bytes handed to threads that did not follow the fork
   * (caught anywhere between the source and their heap's count): never
   * back, left out of the figures. Part of in_use, as far as the counts
   * tell (a region the other thread had out of its lists but still
   * counted is not: `forked` lets the destroy find it in use). */
  size_t lost;
  bool forked;
} usrc_t;

/* The record: the source, then its user part, in locus's own pages. */
typedef struct usrc_record_s {
  source_t s;
  usrc_t u;
  struct usrc_record_s *next, *prev;   /* the live list */
} usrc_record_t;

/* Every live user source, for fork's prepare handler: it takes list_lock
 * (a class of its own, ranked just below) before it walks the list to take
 * each source's lock, so the list is stable meanwhile. */
LOCK_STATIC(list_lock, LOCK_RANK_USER_SOURCE - 1, "user sources (the list)")
static usrc_record_t *live;

static void usrc_each_lock(void (*fn)(lock_t *)) {
  for (usrc_record_t *r = live; r; r = r->next) fn(&r->s.lock);
}
static lock_class_t usrc_locks = {.name = "user source (a user heap's memory)", .rank = LOCK_RANK_USER_SOURCE,
                                  .each = usrc_each_lock};
__attribute__((constructor(101))) static void usrc_locks_register(void) { lock_class_register(&usrc_locks); }

/* Grows a table of `elem`-byte entries (n of them used) so that it has more
 * than `want` slots; false if the OS refused memory. */
static size_t table_bytes(size_t cap, size_t elem) { return align_up(cap * elem, PAGE_SIZE); }

static bool table_grow(void **v, size_t n, size_t want, size_t *cap, size_t elem) {
  if (want < *cap) return true;
  size_t ncap = *cap ? 2 * *cap : PAGE_SIZE / elem;
  while (ncap <= want) ncap *= 2;
  void *nv = os_map(table_bytes(ncap, elem));
  if (!nv) return false;
  if (*v) {
    memcpy(nv, *v, n * elem);
    os_unmap(*v, table_bytes(*cap, elem));
  }
  *v = nv;
  *cap = ncap;
  return true;
}

#ifdef LOCUS_DEBUG
static void usrc_check(const source_t *s) {
  const usrc_t *u = s->user;
  size_t sum = 0;
  for (size_t i = 0; i < u->next; i++) {
    const uext_t *e = &u->ext[i];
    const upiece_t *p = &u->piece[e->piece];
    if (e->piece >= u->npiece || e->base < p->base || e->base + e->size > p->base + p->size || !e->size ||
        (e->base | e->size) & (PAGE_SIZE - 1))
      locus_fatal("internal error: user source %p: extent %#lx+%zu outside its piece", (void *)s,
                  (unsigned long)e->base, e->size);
    for (size_t j = i + 1; j < u->next; j++) {
      const uext_t *f = &u->ext[j];
      if (f->base < e->base + e->size && e->base < f->base + f->size)
        locus_fatal("internal error: user source %p: free extents overlap", (void *)s);
      if (f->piece == e->piece && (f->base == e->base + e->size || e->base == f->base + f->size))
        locus_fatal("internal error: user source %p: free extents not merged", (void *)s);
    }
    sum += e->size;
  }
  if (sum != u->free_bytes || u->free_bytes + atomic_load(&s->in_use) != u->total)
    locus_fatal("internal error: user source %p: %zu free + %zu in use != %zu", (void *)s, sum,
                (size_t)atomic_load(&s->in_use), u->total);
}
#define USRC_CHECK(s) usrc_check(s)
#else
#define USRC_CHECK(s) ((void)0)
#endif

static bool table_room(void **v, size_t n, size_t *cap, size_t elem) {
  return table_grow(v, n, n, cap, elem);
}

/* Adds a free extent, merging it with its free neighbours of the same
 * piece; false only when the table cannot grow (the caller holds the lock). */
static bool ext_insert(usrc_t *u, uintptr_t base, size_t size, uint32_t piece) {
  uintptr_t lo = base, hi = base + size;
  for (size_t i = 0; i < u->next;) {
    uext_t *e = &u->ext[i];
    if (e->piece == piece && e->base + e->size == lo) lo = e->base;
    else if (e->piece == piece && e->base == hi) hi = e->base + e->size;
    else { i++; continue; }
    u->ext[i] = u->ext[--u->next];
  }
  if (!table_room((void **)&u->ext, u->next, &u->cap_ext, sizeof(uext_t))) return false;
  u->ext[u->next++] = (uext_t){.base = lo, .size = hi - lo, .piece = piece};
  return true;
}

/* Adds piece [base, base + size) whole as free memory (lock held). */
static bool piece_add(usrc_t *u, uintptr_t base, size_t size) {
  if (!table_room((void **)&u->piece, u->npiece, &u->cap_piece, sizeof(upiece_t))) return false;
  /* Room for its extent (and the invariant's slot) first: nothing is half added. */
  if (!table_grow((void **)&u->ext, u->next, u->next + u->regions + 1, &u->cap_ext, sizeof(uext_t))) return false;
  u->piece[u->npiece] = (upiece_t){base, size};
  u->ext[u->next++] = (uext_t){.base = base, .size = size, .piece = (uint32_t)u->npiece};
  u->npiece++;
  u->total += size;
  u->free_bytes += size;
  return true;
}

source_t *usrc_new(void *segment, size_t size, const locus_source_ops_t *ops) {
  usrc_record_t *rec = os_map(align_up(sizeof *rec, PAGE_SIZE));
  if (!rec) return NULL;
  source_t *s = &rec->s;
  lock_init(&s->lock, LOCK_RANK_USER_SOURCE);
  s->node = SOURCE_GENERIC;
  s->user = &rec->u;
  if (ops) rec->u.ops = *ops;
  /* piece 0 is the segment, empty when there is none (its slot keeps the
   * numbering: a region's `map` is its piece). */
  if (!piece_add(&rec->u, (uintptr_t)segment, size)) {
    os_unmap(rec, align_up(sizeof *rec, PAGE_SIZE));
    return NULL;
  }
  if (!segment) rec->u.next = 0;       /* no extent for an empty piece 0 */
  lock_acquire(&list_lock);
  rec->next = live;
  if (live) live->prev = rec;
  live = rec;
  lock_release(&list_lock);
  return s;
}

bool usrc_grow(source_t *s, size_t size, size_t align) {
  usrc_t *u = s->user;
  if (!u->ops.map) {
    errno = ENOMEM;
    return false;
  }
  if (align < PAGE_SIZE) align = PAGE_SIZE;
  void *p = u->ops.map(u->ops.ctx, size, align);
  if (!p) {
    errno = ENOMEM;
    return false;
  }
  uintptr_t b = (uintptr_t)p;
  if (b & (align - 1) || registry_overlaps(b, size) || sources_overlap(b, size) || usrc_any_overlaps(b, size, NULL)) {
    locus_warn("user heap source: map(%zu, %zu) returned %p, %s; given back", size, align, p,
               b & (align - 1) ? "not aligned as asked" : "memory locus or a heap already manages");
    if (u->ops.unmap && !(b & (align - 1))) u->ops.unmap(u->ops.ctx, p, size);
    errno = EINVAL;
    return false;
  }
  lock_acquire(&s->lock);
  bool ok = piece_add(u, b, size);
  USRC_CHECK(s);
  lock_release(&s->lock);
  if (!ok) {
    if (u->ops.unmap) u->ops.unmap(u->ops.ctx, p, size);
    errno = ENOMEM;
  }
  return ok;
}

bool usrc_any_overlaps(uintptr_t base, size_t size, const source_t *except) {
  bool hit = false;
  lock_acquire(&list_lock);
  for (usrc_record_t *r = live; r && !hit; r = r->next) {
    if (&r->s == except) continue;
    lock_acquire(&r->s.lock);
    hit = usrc_overlaps(&r->s, base, size);
    lock_release(&r->s.lock);
  }
  lock_release(&list_lock);
  return hit;
}

bool usrc_overlaps(source_t *s, uintptr_t base, size_t size) {
  usrc_t *u = s->user;
  for (size_t i = 0; i < u->npiece; i++)
    if (u->piece[i].size && base < u->piece[i].base + u->piece[i].size && u->piece[i].base < base + size)
      return true;
  return false;
}

void usrc_sizes(source_t *s, size_t *total, size_t *free_bytes) {
  lock_acquire(&s->lock);
  *total = s->user->total - s->user->lost;
  *free_bytes = s->user->free_bytes;
  lock_release(&s->lock);
}

size_t usrc_largest(source_t *s) {
  usrc_t *u = s->user;
  size_t best = 0;
  lock_acquire(&s->lock);
  for (size_t i = 0; i < u->next; i++)
    if (u->ext[i].size > best) best = u->ext[i].size;
  lock_release(&s->lock);
  return best;
}

/* Best fit: the smallest extent that holds an `align`-aligned window of
 * `size` bytes; the pieces around the window stay free. A request that is
 * not exact takes a whole extent whose rest would be under a slice (a
 * region needs one: types.h). */
region_t *usrc_alloc(source_t *s, size_t size, unsigned flags) {
  usrc_t *u = s->user;
  size_t align = flags & SRC_ALIGNED ? size : PAGE_SIZE;
  lock_acquire(&s->lock);
  /* The cut adds at most one extent and one region: room for both, and the
   * free's slot (see the invariant above), before anything changes. */
  if (!table_grow((void **)&u->ext, u->next, u->next + u->regions + 2, &u->cap_ext, sizeof(uext_t))) {
    lock_release(&s->lock);
    errno = ENOMEM;
    return NULL;
  }
  ptrdiff_t best = -1;
  for (size_t i = 0; i < u->next; i++) {
    uext_t *e = &u->ext[i];
    if (align_up(e->base, align) + size <= e->base + e->size && (best < 0 || e->size < u->ext[best].size))
      best = (ptrdiff_t)i;
  }
  if (best < 0) {
    s->misses++;
    lock_release(&s->lock);
    errno = ENOMEM;
    return NULL;
  }
  uext_t e = u->ext[best];
  u->ext[best] = u->ext[--u->next];
  uintptr_t a = align_up(e.base, align);
  size_t head = a - e.base, tail = e.base + e.size - a - size;
  if (!(flags & SRC_EXACT) && !head && tail < SLICE_SIZE) size += tail, tail = 0;
  /* Room was made above: neither insert needs memory. */
  bool ok = (!head || ext_insert(u, e.base, head, e.piece)) && (!tail || ext_insert(u, a + size, tail, e.piece));
  LOCUS_ASSERT(ok);
  (void)ok;
  u->regions++;
  u->free_bytes -= size;
  s->in_use += size;
  s->hits++;
  USRC_CHECK(s);
  lock_release(&s->lock);
  region_t *r = (region_t *)a;
  *r = (region_t){.size = size, .zeroed = 0, .node = NODE_NONE, .flags = REGION_USER, .map = e.piece, .source = s};
  return r;
}

void usrc_free(region_t *r) {
  source_t *s = r->source;
  usrc_t *u = s->user;
  uintptr_t base = (uintptr_t)r;
  size_t size = r->size;
  uint32_t piece = r->map;
  lock_acquire(&s->lock);
  /* The table has a slot for it (the invariant above): no memory needed. */
  bool ok = ext_insert(u, base, size, piece);
  LOCUS_ASSERT(ok);
  (void)ok;
  u->regions--;
  u->free_bytes += size;
  s->in_use -= size;
  USRC_CHECK(s);
  lock_release(&s->lock);
}

bool usrc_extend(region_t *r, size_t new_size, unsigned flags) {
  source_t *s = r->source;
  usrc_t *u = s->user;
  uintptr_t end = (uintptr_t)r + r->size;
  size_t more = new_size - r->size;
  bool ok = false;
  lock_acquire(&s->lock);
  for (size_t i = 0; i < u->next; i++) {
    uext_t *e = &u->ext[i];
    if (e->piece != r->map || e->base != end || e->size < more) continue;
    if (!(flags & SRC_EXACT) && e->size - more < SLICE_SIZE) more = e->size;   /* no sliver left behind */
    e->base += more;
    e->size -= more;
    if (!e->size) u->ext[i] = u->ext[--u->next];
    u->free_bytes -= more;
    s->in_use += more;
    r->size += more;
    ok = true;
    break;
  }
  USRC_CHECK(s);
  lock_release(&s->lock);
  return ok;
}

void usrc_fork_child(source_t *s, size_t held) {
  size_t in_use = atomic_load(&s->in_use);
  s->user->lost = in_use > held ? in_use - held : 0;
  s->user->forked = true;
}

void usrc_destroy(source_t *s) {
  usrc_record_t *rec = (usrc_record_t *)s;
  usrc_t *u = s->user;
  LOCUS_ASSERT(atomic_load(&s->in_use) == u->lost || u->forked);
  lock_acquire(&list_lock);
  if (rec->prev) rec->prev->next = rec->next;
  else live = rec->next;
  if (rec->next) rec->next->prev = rec->prev;
  lock_release(&list_lock);
  if (u->ops.unmap)
    for (size_t i = 1; i < u->npiece; i++) u->ops.unmap(u->ops.ctx, (void *)u->piece[i].base, u->piece[i].size);
  if (u->ext) os_unmap(u->ext, table_bytes(u->cap_ext, sizeof(uext_t)));
  if (u->piece) os_unmap(u->piece, table_bytes(u->cap_piece, sizeof(upiece_t)));
  os_unmap(rec, align_up(sizeof *rec, PAGE_SIZE));
}
