/* Memory sources (Valat, PhD thesis, 2014, §4.7): a cache between the heaps and
 * mmap/munmap/mremap. Freed chunks and large segments are kept; a request
 * takes the cached segment of the closest size and fits it with mremap (grow:
 * the new tail is fresh virtual memory; shrink: split and keep the rest), so
 * cached pages are reused even when sizes do not match, and large segments do
 * not fragment. One source per NUMA node plus a generic one.
 *
 * Invariants: every cached segment is page-aligned, at least one registry
 * slice long, and belongs to no region (it is not in the registry). `cached`
 * is the sum of the cached sizes and never exceeds the profile's bound (the
 * auto profile's bound moves: a lower one is applied at the next tick). A
 * segment or region marked huge starts on a huge-page boundary in a mapping
 * advised for huge pages (when the THP mode asks for advice); splits of huge
 * segments for huge requests fall on huge-page boundaries. An aligned request
 * (SRC_ALIGNED) gets a region that starts on a multiple of its size.
 *
 * Huge pages (LOCUS_THP): fresh mappings for large blocks of 4 MiB or more
 * start on a 2 MiB boundary and are advised as a whole; a cached huge segment
 * that must grow and cannot grow in place moves (mremap, page tables only) to
 * a 2 MiB boundary, so its huge pages move whole instead of being split. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "source/source.h"

#include "os/topology.h"
#include "os/os.h"
#include "registry/registry.h"
#include "source/thp.h"
#include "config/options.h"
#include "util/stats.h"

/* [0] generic, [1] interleaved, [2 + n] node n. */
static source_t sources[2 + TOPO_MAX_NODES];
static int nsources = 2;
#define generic_source sources[0]

void sources_init(void) {
  for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) lock_init(&sources[i].lock, LOCK_RANK_SOURCE);
  nsources = 2 + topology_node_limit();
  sources[0].node = SOURCE_GENERIC;
  sources[0].policy = OS_POLICY_DEFAULT;
  if (locus_opt.numa_policy == NUMA_PREFERRED) {
    sources[0].policy = OS_POLICY_PREFERRED;
    sources[0].policy_nodes = (uint64_t)1 << locus_opt.numa_node;
  }
  sources[1].node = SOURCE_INTERLEAVE;
  sources[1].policy = OS_POLICY_INTERLEAVE;
  sources[1].policy_nodes = topology_allowed_mask();
  for (int n = 0; n < nsources - 2; n++) {
    sources[2 + n].node = n;
    sources[2 + n].policy = OS_POLICY_BIND;
    sources[2 + n].policy_nodes = (uint64_t)1 << n;
  }
}

source_t *source_of_node(int node) {
  LOCUS_ASSERT(topology_node_allowed(node));
  return &sources[2 + node];
}

source_t *source_interleave(void) { return &sources[1]; }

source_t *source_for_node(int node) {
  profile_t p = atomic_load_explicit(&locus_opt.profile, memory_order_relaxed);
  if (node < 0 || (p != PROFILE_NUMA && p != PROFILE_AUTO)) return &generic_source;
  return source_of_node(node);
}

#define FOR_EACH_SOURCE(s) for (source_t *s = sources, *_end = &sources[nsources]; s != _end; s++)

/* Fresh memory with the source's placement policy, set before any page is
 * touched. A policy the kernel refuses (a node taken away by the cpuset since
 * start-up) fails the mapping: memory that would break the promise is not
 * handed out. *huge: asked for huge pages on entry; on return, whether the
 * mapping is advised for them (LOCUS_THP=auto asks the controller, thp.c). */
static bool source_advise(void *p, size_t size);
static bool source_grown_huge(void *p, size_t old, size_t size);
static void *source_map(source_t *s, size_t size, bool *huge, bool aligned, bool *zeroed) {
  /* eco gives memory back at once: with the kernel's page reuse it comes
   * again without the clearing, and is then no longer known zero. The
   * kernel pools whole 2 MiB pages too (kernel/0003), so huge segments are
   * marked as well. */
  bool reuse = atomic_load_explicit(&locus_opt.profile, memory_order_relaxed) == PROFILE_ECO &&
               atomic_load_explicit(&locus_opt.page_reuse, memory_order_relaxed);
  *zeroed = true;
  void *p = *huge ? (reuse ? os_map_aligned_reusable(size, os_features.huge_page_size, zeroed)
                           : os_map_aligned(size, os_features.huge_page_size))
                  : aligned ? (reuse ? os_map_aligned_reusable(size, size, zeroed) : os_map_aligned(size, size))
                  : reuse ? os_map_reusable(size, zeroed) : os_map(size);
  if (p && s->policy != OS_POLICY_DEFAULT && !os_set_policy(p, size, (os_policy_t)s->policy, &s->policy_nodes) &&
      os_features.numa) {
    os_unmap(p, size);
    return NULL;
  }
  if (p && *huge) *huge = source_advise(p, size);
  return p;
}

/* The advice covers the whole fresh mapping (no split of the kernel's
 * mapping); the policy set before applies to the huge pages as well. Under
 * LOCUS_THP=auto the first touch is measured here, before the caller writes
 * the region header (which lies in the same first page): a huge-page fault
 * when advised, whose advice is withdrawn at once if huge pages do not pay
 * now (the rest of the mapping is untouched); else the header page and the
 * next one, whose fault is the base-page sample. Returns whether advised. */
static bool source_advise(void *p, size_t size) {
  bool adaptive = thp_adaptive();
  uint64_t now = adaptive ? os_clock_coarse_ns() : 0;
  bool advise = !adaptive || thp_should_advise(now);
  if (advise && os_features.thp == THP_MADVISE) os_advise_huge(p, size);
  if (!adaptive) return true;
  if (!advise) {
    if (os_features.thp == THP_ALWAYS) os_advise_nohuge(p, size);
    *(volatile char *)p = 0;
    thp_base_sample(os_touch_ns((char *)p + PAGE_SIZE, false), now);
    return false;
  }
  if (thp_huge_sample(os_touch_ns(p, true), now)) return true;
  os_advise_nohuge(p, size);
  return false;
}

/* A huge segment grown with mremap to `size`, its tail from `old` fresh:
 * under LOCUS_THP=auto the advice is withdrawn from the whole segment (its
 * huge pages already there stay; new faults take base pages) while huge
 * pages do not pay; while they do, the tail's first huge page is a sample
 * like a fresh mapping's. Returns whether the segment stays advised. */
static bool source_grown_huge(void *p, size_t old, size_t size) {
  if (!thp_adaptive()) return true;
  char *tail = (char *)p + old;
  bool keep = thp_advising();
  if (keep && !((uintptr_t)tail & (os_features.huge_page_size - 1)) && size - old >= os_features.huge_page_size)
    keep = thp_huge_sample(os_touch_ns(tail, true), os_clock_coarse_ns());
  if (!keep) os_advise_nohuge(p, size);
  return keep;
}

size_t huge_span(const void *base, size_t size) {
  size_t hp = os_features.huge_page_size;
  if (!hp) return 0;
  uintptr_t lo = align_up((uintptr_t)base, hp), hi = ((uintptr_t)base + size) & ~(uintptr_t)(hp - 1);
  return hi > lo ? hi - lo : 0;
}

static void huge_count(const region_t *r, bool out) {
  if (!(r->flags & REGION_HUGE)) return;
  size_t n = huge_span(r, r->size);
  if (out) stat_add(&locus_stats.huge, n);
  else stat_sub(&locus_stats.huge, n);
}

size_t source_cached_total(void) {
  size_t n = 0;
  FOR_EACH_SOURCE(s) n += s->cached;
  return n;
}

static void source_check_locked(const source_t *s);

static adapt_kind_t seg_kind(const seg_t *g) { return g->chunk ? ADAPT_CHUNK : ADAPT_LARGE; }

static void seg_remove(source_t *s, size_t i) {
  s->cached -= s->seg[i].size;
  s->seg[i] = s->seg[--s->nseg];
}

/* The closest size, looked for above first: the smallest segment that holds
 * `size` (split, no page fault), else the largest one below it (grown with
 * mremap: only the new tail faults). Either way the most cached pages are
 * reused for the request. */
static ptrdiff_t seg_closest(source_t *s, size_t size) {
  ptrdiff_t above = -1, below = -1;
  for (size_t i = 0; i < s->nseg; i++) {
    size_t z = s->seg[i].size;
    if (z >= size) {
      if (above < 0 || z < s->seg[above].size) above = (ptrdiff_t)i;
      if (z == size) break;
    } else if (below < 0 || z > s->seg[below].size) {
      below = (ptrdiff_t)i;
    }
  }
  return above >= 0 ? above : below;
}

static void accounting_out(source_t *s, size_t size) {
  stat_add(&locus_stats.in_use, size);
  s->in_use += size;
  stats_update_peak();
}

/* Kernel mappings are numbered: a cached segment remembers the mapping it lies
 * in, and only pieces of one mapping merge, because mremap cannot grow a
 * range that spans two mappings (EFAULT). A region moved by mremap lands in
 * a mapping of its own. */
static uint32_t new_map_id(void) {
  static atomic_uint next;
  return atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) + 1;
}

uint32_t source_new_map_id(void) { return new_map_id(); }

static region_t *region_init(source_t *s, void *base, size_t size, bool zeroed, uint32_t map, bool huge, bool merge) {
  region_t *r = base;
  /* Huge only while it starts on a huge-page boundary (mremap may move it off one). */
  huge = huge && !((uintptr_t)base & (os_features.huge_page_size - 1));
  *r = (region_t){.size = size, .zeroed = zeroed, .flags = (huge ? REGION_HUGE : 0) | (merge ? REGION_MERGEABLE : 0),
                  .map = map, .source = s};
  LOCUS_ASSERT(!(r->flags & REGION_HUGE) || os_features.huge_page_size);
  accounting_out(s, size);
  huge_count(r, true);
  return r;
}

/* SRC_ALIGNED from the cache: a window of `size` bytes on a multiple of
 * `size`, cut from the smallest cached segment that holds one (no mremap:
 * a moved or grown segment is aligned only by chance). The pieces before
 * and after the window stay cached when a slice long (the segment's slot is
 * free again for the first), else are unmapped. NULL if no segment holds
 * such a window. */
static region_t *take_aligned(source_t *s, size_t size, uint64_t now) {
  lock_acquire(&s->lock);
  ptrdiff_t best = -1;
  for (size_t i = 0; i < s->nseg; i++) {
    uintptr_t b = (uintptr_t)s->seg[i].base;
    if (align_up(b, size) + size <= b + s->seg[i].size && (best < 0 || s->seg[i].size < s->seg[best].size))
      best = (ptrdiff_t)i;
  }
  if (best < 0) {
    lock_release(&s->lock);
    return NULL;
  }
  seg_t g = s->seg[best];
  char *a = (char *)align_up((uintptr_t)g.base, size);
  size_t head = (size_t)(a - (char *)g.base), tail = g.size - head - size, kept = 0;
  s->hits++;
  if (now) adapt_hit(&s->adapt, seg_kind(&g), g.ns, now);
  seg_remove(s, (size_t)best);
  bool keep_head = head >= SLICE_SIZE, keep_tail = tail >= SLICE_SIZE && s->nseg + keep_head < SOURCE_SLOTS;
  if (keep_head) {
    s->seg[s->nseg] = g;
    s->seg[s->nseg++].size = head;
    kept += head;
  }
  if (keep_tail) {
    seg_t t = g;
    t.base = a + size;
    t.size = tail;
    t.huge = g.huge && !((uintptr_t)t.base & (os_features.huge_page_size - 1));
    s->seg[s->nseg++] = t;
    kept += tail;
  }
  s->cached += kept;
  LOCUS_DEBUG_ONLY(source_check_locked(s));
  lock_release(&s->lock);
  stat_sub(&locus_stats.cached, g.size - kept);
  if (head && !keep_head) os_unmap(g.base, head);   /* too short for any region */
  if (tail && !keep_tail) os_unmap(a + size, tail);
  stat_add(&locus_stats.hits, 1);
  return region_init(s, a, size, false, g.map, g.huge, g.merge);
}

/* Auto profile: the controller's clock, 0 otherwise (no clock read). */
static uint64_t auto_now(void) { return adapt_active() ? adapt_now() : 0; }

static region_t *source_take(source_t *s, size_t size, unsigned flags);

/* A failed attempt on the way (a grow by mremap refused, a mapping refused
 * under RLIMIT_AS before the caches are dropped) sets errno; an allocation
 * that succeeds leaves it as it was (malloc and calloc report through their
 * return value). */
region_t *source_alloc(source_t *s, size_t size, unsigned flags) {
  int saved = errno;
  region_t *r = unlikely(s->user) ? usrc_alloc(s, size, flags) : source_take(s, size, flags);
  if (r) errno = saved;
  return r;
}

static region_t *source_take(source_t *s, size_t size, unsigned flags) {
  bool exact = flags & SRC_EXACT;
  adapt_kind_t kind = flags & SRC_CHUNK ? ADAPT_CHUNK : ADAPT_LARGE;
  uint64_t now = auto_now();
  if (now) adapt_tick(now);
  if (flags & SRC_ALIGNED) {
    LOCUS_ASSERT(exact && is_pow2(size));
    region_t *r = s->nseg ? take_aligned(s, size, now) : NULL;
    if (r) return r;
  } else if (s->nseg) {
    lock_acquire(&s->lock);
    ptrdiff_t i = seg_closest(s, size);
    if (i >= 0 && (flags & SRC_CACHED_ONLY) && s->seg[i].size < size) i = -1;
    if (i >= 0) {
      seg_t g = s->seg[i];
      s->hits++;
      if (now) adapt_hit(&s->adapt, seg_kind(&g), g.ns, now);
      /* A huge segment split for a huge request is cut on a huge-page
       * boundary: the rest starts on one and keeps whole huge pages. */
      if ((flags & SRC_HUGE) && g.huge && !exact && align_up(size, os_features.huge_page_size) <= g.size)
        size = align_up(size, os_features.huge_page_size);
      if (g.size >= size) {
        size_t rest = g.size - size;
        if (!exact && rest < SLICE_SIZE) size = g.size, rest = 0;  /* take it whole: no munmap */
        if (rest >= SLICE_SIZE) {          /* split: the tail stays cached */
          s->seg[i].base = (char *)g.base + size;
          s->seg[i].size = rest;
          s->seg[i].huge = g.huge && !(((uintptr_t)g.base + size) & (os_features.huge_page_size - 1));
          s->cached -= size;
        } else {
          seg_remove(s, (size_t)i);
        }
        lock_release(&s->lock);
        stat_sub(&locus_stats.cached, rest >= SLICE_SIZE ? size : g.size);
        if (rest && rest < SLICE_SIZE) os_unmap((char *)g.base + size, rest);  /* too short for any region */
        stat_add(&locus_stats.hits, 1);
        return region_init(s, g.base, size, false, g.map, g.huge, g.merge);
      }
      seg_remove(s, (size_t)i);
      /* Grown with mremap: the new tail faults as a miss would, and a longer
       * window might have kept a segment that holds the whole request. */
      if (now) adapt_miss(&s->adapt, kind, size - g.size, now);
      lock_release(&s->lock);
      stat_sub(&locus_stats.cached, g.size);
      void *p = g.huge ? os_remap_aligned(g.base, g.size, size, os_features.huge_page_size)
                       : os_remap(g.base, g.size, size, true);
      if (p) {
        stat_add(&locus_stats.hits, 1);
        bool huge = g.huge && source_grown_huge(p, g.size, size);
        /* withdrawn advice splits the kernel's mapping: a mapping of its own */
        return region_init(s, p, size, false, p == g.base && huge == g.huge ? g.map : new_map_id(), huge,
                           g.merge);      /* the kernel's mapping keeps its advice when it grows or moves */
      }
      os_unmap(g.base, g.size);           /* cannot grow: give it back and map anew */
    } else {
      lock_release(&s->lock);
    }
  }
  if (flags & SRC_CACHED_ONLY) return NULL;
  s->misses++;
  stat_add(&locus_stats.misses, 1);
  if (now) {
    lock_acquire(&s->lock);
    adapt_miss(&s->adapt, kind, size, now);
    lock_release(&s->lock);
    if (adapt_fresh_needs_room(size)) {  /* the mapping would eat into the reserve: cache first */
      size_t n = 0;
      FOR_EACH_SOURCE(t) {
        size_t k = source_trim(t, 0);
        atomic_fetch_add_explicit(&t->adapt.pressured, k, memory_order_relaxed);
        n += k;
      }
      stat_add(&locus_stats.pressured, n);
    }
  }
  bool want = (flags & SRC_HUGE) && os_features.huge_page_size, huge = want;
  bool zeroed;
  bool aligned = flags & SRC_ALIGNED;
  void *p = source_map(s, size, &huge, aligned, &zeroed);
  if (!p && source_release_all()) {      /* under RLIMIT_AS: drop caches first */
    huge = want;
    p = source_map(s, size, &huge, aligned, &zeroed);
  }
  if (!p) return NULL;
  return region_init(s, p, size, zeroed, new_map_id(), huge, false);
}

/* Caller holds the lock. Evicts the oldest segments until `need` more bytes fit;
 * returns them through out[] for unmapping outside the lock. */
static size_t evict_for(source_t *s, size_t need, size_t bound, seg_t *out, size_t max_out) {
  size_t n = 0;
  while (s->nseg && n < max_out && (s->cached + need > bound || s->nseg == SOURCE_SLOTS)) {
    size_t old = 0;
    for (size_t i = 1; i < s->nseg; i++)
      if (s->seg[i].stamp < s->seg[old].stamp) old = i;
    out[n++] = s->seg[old];
    seg_remove(s, old);
  }
  return n;
}

static void unmap_all(seg_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    stat_sub(&locus_stats.cached, v[i].size);
    os_unmap(v[i].base, v[i].size);
  }
}

void source_free(region_t *r) {
  source_t *s = r->source;
  if (unlikely(s->user)) {
    usrc_free(r);
    return;
  }
  void *p = r;
  size_t size = r->size;
  uint32_t map = r->map;
  bool huge = r->flags & REGION_HUGE;
  bool merge = r->flags & REGION_MERGEABLE;
  bool chunk = r->kind == REGION_SMALL || r->kind == REGION_MEDIUM;
  huge_count(r, false);
  stat_sub(&locus_stats.in_use, size);
  s->in_use -= size;
  uint64_t now = auto_now();
  if (now) adapt_tick(now);
  size_t bound = now ? adapt_bound(&s->adapt) : atomic_load_explicit(&locus_opt.cache_bound, memory_order_relaxed);
  /* Pages moved away from a placed source's node (next-touch) must not be
   * handed out again as that node's memory. */
  bool misplaced = (r->flags & REGION_MISPLACED) && s->node != SOURCE_GENERIC;
  /* LOCUS_KSM=auto advised this block for what it held: the next block of
   * the segment is another array (unmapped, no unmerge copying its pages). */
  if (misplaced || (r->flags & REGION_KSM_AUTO) || size > atomic_load_explicit(&locus_opt.cache_max_segment, memory_order_relaxed) ||
      size > bound) {
    os_unmap(p, size);
    return;
  }
  if (atomic_load_explicit(&locus_opt.lazy_release, memory_order_relaxed)) os_free_lazily(p, size);
  seg_t victims[8];
  lock_acquire(&s->lock);
  size_t nv = evict_for(s, size, bound, victims, 8);
  if (s->cached + size > bound || s->nseg == SOURCE_SLOTS) {
    lock_release(&s->lock);
    unmap_all(victims, nv);
    os_unmap(p, size);
    return;
  }
  /* Merge with cached neighbours of the same mapping: one larger segment
   * serves more requests than two pieces. */
  char *lo = p, *hi = (char *)p + size;
  for (size_t i = 0; i < s->nseg;) {
    seg_t *g = &s->seg[i];
    if (g->map == map && (char *)g->base + g->size == lo) lo = g->base;
    else if (g->map == map && (char *)g->base == hi) hi = hi + g->size;
    else { i++; continue; }
    merge = merge && g->merge;          /* advised only if every piece was */
    s->cached -= g->size;
    s->seg[i] = s->seg[--s->nseg];
  }
  s->seg[s->nseg++] = (seg_t){.base = lo, .size = (size_t)(hi - lo), .stamp = ++s->clock, .ns = now, .map = map,
                              .huge = huge && !((uintptr_t)lo & (os_features.huge_page_size - 1)), .chunk = chunk,
                              .merge = merge};
  s->cached += (size_t)(hi - lo);      /* the merged neighbours were subtracted above */
  LOCUS_DEBUG_ONLY(source_check_locked(s));
  lock_release(&s->lock);
  stat_add(&locus_stats.cached, size);
  stats_update_peak();
  unmap_all(victims, nv);
}

bool sources_overlap(uintptr_t base, size_t size) {
  bool hit = false;
  FOR_EACH_SOURCE(s) {
    lock_acquire(&s->lock);
    for (size_t i = 0; i < s->nseg && !hit; i++)
      hit = (uintptr_t)s->seg[i].base < base + size && base < (uintptr_t)s->seg[i].base + s->seg[i].size;
    lock_release(&s->lock);
    if (hit) return true;
  }
  return false;
}

void source_advise_merge(region_t *r, bool chunk) {
  ksm_opt_t k = atomic_load_explicit(&locus_opt.ksm, memory_order_relaxed);
  if (likely(k == KSM_OPT_OFF) || k == KSM_OPT_AUTO || (chunk && k != KSM_OPT_ALL) ||
      (r->flags & (REGION_MERGEABLE | REGION_USER | REGION_FILE)))
    return;
  if (os_merge(r, r->size, true) == 0) r->flags |= REGION_MERGEABLE;
}

void source_free_to_os(region_t *r) {
  source_t *s = r->source;
  LOCUS_ASSERT(!s->user);
  size_t size = r->size;
  huge_count(r, false);
  stat_sub(&locus_stats.in_use, size);
  s->in_use -= size;
  os_unmap(r, size);
}

/* Grows r in place over the cached segment that follows it in the same
 * mapping, if that segment is long enough: no system call, no copy, and the
 * pages are already resident. A growing buffer carved from the head of a
 * cached segment finds the rest of that segment right behind it. */
bool source_extend(region_t *r, size_t new_size, unsigned flags) {
  source_t *s = r->source;
  if (unlikely(s->user)) return usrc_extend(r, new_size, flags);
  char *end = (char *)r + r->size;
  size_t need = new_size - r->size;
  if (!s->nseg) return false;
  lock_acquire(&s->lock);
  for (size_t i = 0; i < s->nseg; i++) {
    seg_t *g = &s->seg[i];
    if (g->base != end || g->map != r->map || g->size < need) continue;
    /* A rest too short for any region is taken whole, or, for an exact
     * growth (a limit counts its bytes), given back to the OS. */
    size_t drop = 0;
    if (g->size - need < SLICE_SIZE) {
      if (flags & SRC_EXACT) drop = g->size - need;
      else need = g->size;
    }
    adapt_kind_t kind = seg_kind(g);
    uint64_t ns = g->ns;               /* (seg_remove moves another segment into g) */
    if (need + drop == g->size) {
      seg_remove(s, i);
    } else {
      g->base = end + need;
      g->size -= need;
      g->huge = g->huge && !((uintptr_t)g->base & (os_features.huge_page_size - 1));
      s->cached -= need;
    }
    s->hits++;
    uint64_t now = auto_now();
    if (now) adapt_hit(&s->adapt, kind, ns, now);
    lock_release(&s->lock);
    stat_sub(&locus_stats.cached, need + drop);
    if (drop) os_unmap(end + need, drop);
    stat_add(&locus_stats.hits, 1);
    huge_count(r, false);
    r->size += need;
    huge_count(r, true);
    accounting_out(s, need);
    return true;
  }
  lock_release(&s->lock);
  return false;
}

region_t *source_resize(region_t *r, size_t new_size) {
  source_t *s = r->source;
  if (unlikely(s->user)) return NULL;  /* never mremap the user's memory: the caller copies */
  size_t old_size = r->size;
  uint64_t now = auto_now();
  if (now && new_size > old_size) {    /* the new tail faults: nothing cached could serve it */
    lock_acquire(&s->lock);
    adapt_miss(&s->adapt, ADAPT_LARGE, new_size - old_size, now);
    lock_release(&s->lock);
  }
  huge_count(r, false);
  region_t *q = (r->flags & REGION_HUGE) && new_size > old_size
                    ? os_remap_aligned(r, old_size, new_size, os_features.huge_page_size)
                    : os_remap(r, old_size, new_size, true);
  if (!q) {
    huge_count(r, true);
    return NULL;
  }
  if (q != r) q->map = new_map_id();
  q->size = new_size;
  if ((uintptr_t)q & (os_features.huge_page_size - 1)) q->flags &= (uint8_t)~REGION_HUGE;
  if ((q->flags & REGION_HUGE) && new_size > old_size && !source_grown_huge(q, old_size, new_size)) {
    q->flags &= (uint8_t)~REGION_HUGE;
    q->map = new_map_id();             /* withdrawn advice splits the kernel's mapping */
  }
  huge_count(q, true);
  if (new_size > old_size) {
    stat_add(&locus_stats.in_use, new_size - old_size);
    s->in_use += new_size - old_size;
    stats_update_peak();
  } else {
    stat_sub(&locus_stats.in_use, old_size - new_size);
    s->in_use -= old_size - new_size;
    stat_add(&locus_stats.returned, old_size - new_size);
  }
  return q;
}

size_t source_trim(source_t *s, size_t keep) {
  size_t freed = 0;
  for (;;) {
    seg_t victims[16];
    size_t n = 0;
    lock_acquire(&s->lock);
    while (s->nseg && n < 16 && s->cached > keep) {
      victims[n++] = s->seg[s->nseg - 1];
      seg_remove(s, s->nseg - 1);
    }
    lock_release(&s->lock);
    if (!n) return freed;
    for (size_t i = 0; i < n; i++) freed += victims[i].size;
    unmap_all(victims, n);
  }
}

size_t source_release_all(void) {
  size_t n = 0;
  FOR_EACH_SOURCE(s) n += source_trim(s, 0);
  return n;
}

void sources_apply_bound(void) {
  FOR_EACH_SOURCE(s) source_trim(s, atomic_load(&locus_opt.cache_bound));
}

size_t source_decay(source_t *s, uint64_t now) {
  size_t freed = 0;
  adapt_t *a = &s->adapt;
  for (;;) {
    seg_t victims[16];
    size_t n = 0;
    lock_acquire(&s->lock);
    if (!freed) adapt_age(a);           /* once per tick */
    uint64_t w[ADAPT_KINDS] = {adapt_window(a, ADAPT_LARGE), adapt_window(a, ADAPT_CHUNK)};
    while (n < 16) {                     /* the oldest stale segment first */
      ptrdiff_t old = -1;
      for (size_t i = 0; i < s->nseg; i++) {
        seg_t *g = &s->seg[i];
        if (g->ns + w[seg_kind(g)] >= now) continue;
        /* A chunk goes at a second look, ADAPT_CHUNK_GRACE_NS after the first
         * found it stale: a tick after a silence (no slow path while the
         * program paused) would otherwise release what the next burst takes
         * back at once. */
        if (g->chunk && !g->stale_ns) g->stale_ns = now;
        if (g->chunk && now - g->stale_ns < ADAPT_CHUNK_GRACE_NS) continue;
        if (old < 0 || g->stamp < s->seg[old].stamp) old = (ptrdiff_t)i;
      }
      if (old < 0) break;
      victims[n++] = s->seg[old];
      seg_remove(s, (size_t)old);
    }
    size_t bytes = 0, kb[ADAPT_KINDS] = {0};
    uint64_t oldest[ADAPT_KINDS] = {UINT64_MAX, UINT64_MAX};
    for (size_t i = 0; i < n; i++) {
      adapt_kind_t k = seg_kind(&victims[i]);
      bytes += victims[i].size;
      kb[k] += victims[i].size;
      if (victims[i].ns < oldest[k]) oldest[k] = victims[i].ns;
    }
    for (int k = 0; k < ADAPT_KINDS; k++)
      if (kb[k]) adapt_released(a, (adapt_kind_t)k, kb[k], oldest[k], now);
    lock_release(&s->lock);
    if (!n) break;
    unmap_all(victims, n);
    freed += bytes;
  }
  if (freed) {
    atomic_fetch_add_explicit(&a->decayed, freed, memory_order_relaxed);
    stat_add(&locus_stats.decayed, freed);
  }
  return freed;
}

void sources_for_each(void (*fn)(source_t *, void *), void *ctx) {
  FOR_EACH_SOURCE(s) fn(s, ctx);
}

/* Every source's lock, for the lock registry (fork; util/lock.h). */
static void sources_each_lock(void (*fn)(lock_t *)) { FOR_EACH_SOURCE(s) fn(&s->lock); }
static lock_class_t source_locks = {.name = "source (cached segments)", .rank = LOCK_RANK_SOURCE,
                                    .each = sources_each_lock};
__attribute__((constructor(101))) static void source_locks_register(void) { lock_class_register(&source_locks); }

void sources_report(void (*line)(void *, const source_t *), void *ctx) {
  FOR_EACH_SOURCE(s) line(ctx, s);
}

/* Caller holds s->lock. The invariants of the file comment, one by one. */
static void source_check_locked(const source_t *s) {
  size_t sum = 0;
  if (s->nseg > SOURCE_SLOTS) locus_fatal("source %d: %zu cached segments, above %d", s->node, (size_t)s->nseg, SOURCE_SLOTS);
  for (size_t i = 0; i < s->nseg; i++) {
    const seg_t *g = &s->seg[i];
    uintptr_t a = (uintptr_t)g->base;
    if ((a & (os_page_size() - 1)) || g->size % PAGE_SIZE || g->size < SLICE_SIZE)
      locus_fatal("source %d: cached segment %p of %zu bytes is misaligned or below a slice", s->node, g->base, g->size);
    if (g->huge && (a & (os_features.huge_page_size - 1)))
      locus_fatal("source %d: cached huge segment %p does not start on a huge-page boundary", s->node, g->base);
    if (registry_lookup(g->base))
      locus_fatal("source %d: cached segment %p is still recorded as a region", s->node, g->base);
    for (size_t j = i + 1; j < s->nseg; j++) {
      uintptr_t b = (uintptr_t)s->seg[j].base;
      if (a < b + s->seg[j].size && b < a + g->size)
        locus_fatal("source %d: cached segments %p and %p overlap", s->node, g->base, s->seg[j].base);
    }
    sum += g->size;
  }
  if (sum != s->cached)
    locus_fatal("source %d: cached bytes %zu differ from the sum of its segments %zu", s->node, (size_t)s->cached, sum);
}

void sources_validate(void) {
  FOR_EACH_SOURCE(s) {
    lock_acquire(&s->lock);
    source_check_locked(s);
    lock_release(&s->lock);
  }
}
