/* The region registry (Valat, PhD thesis, 2014, §4.6.4): address -> region in at most
 * two dependent reads, without a lock and without aligning regions on their
 * size. Writers only touch the entries of a region they own exclusively
 * (freshly mapped, or being unmapped), so writers never race each other on an
 * entry; leaves are created with a CAS. */
#include "registry/registry.h"

#include "os/os.h"
#include "util/lock.h"

_Atomic(slice_entry_t *) registry_l1[(size_t)1 << REG_L1_BITS];

#define L2_ENTRIES ((size_t)1 << REG_L2_BITS)

#define LEAF_BYTES (L2_ENTRIES * sizeof(slice_entry_t))   /* 128 KiB of virtual memory, touched sparsely */

/* Spare leaves: made for a reservation and not used, or lost in a race. A
 * spare is zero but for its first word, the link. */
LOCK_STATIC(spare_lock, LOCK_RANK_REGISTRY_SPARE, "registry spare leaves")
static void *spare_leaves;

static void *leaf_take(void **list) {
  void *leaf = *list;
  if (leaf) {
    *list = *(void **)leaf;
    *(void **)leaf = NULL;
  }
  return leaf;
}

static void leaf_put(void **list, void *leaf) {
  *(void **)leaf = *list;
  *list = leaf;
}

/* A zeroed leaf: from the reservation, the spares, or the OS; NULL if refused. */
static slice_entry_t *leaf_new(registry_resv_t *rv) {
  void *leaf = rv ? leaf_take(&rv->leaves) : NULL;
  if (leaf) return leaf;
  lock_acquire(&spare_lock);
  leaf = leaf_take(&spare_leaves);
  lock_release(&spare_lock);
  return leaf ? leaf : os_map(LEAF_BYTES);
}

static void leaf_spare(void *leaf) {
  lock_acquire(&spare_lock);
  leaf_put(&spare_leaves, leaf);
  lock_release(&spare_lock);
}

/* The leaf of `slice`, created if `create`; NULL when absent (or when the OS
 * refused memory for it). Leaves are never freed. */
static slice_entry_t *leaf_for(uintptr_t slice, bool create, registry_resv_t *rv) {
  _Atomic(slice_entry_t *) *slot = &registry_l1[slice >> REG_L2_BITS];
  slice_entry_t *leaf = atomic_load_explicit(slot, memory_order_acquire);
  if (leaf || !create) return leaf;
  slice_entry_t *fresh = leaf_new(rv);
  if (!fresh) return NULL;
  if (atomic_compare_exchange_strong_explicit(slot, &leaf, fresh, memory_order_acq_rel,
                                              memory_order_acquire))
    return fresh;
  leaf_spare(fresh);
  return leaf;
}

/* Leaves a region of `span` bytes can touch wherever it lies. */
static size_t leaves_for_span(size_t span) {
  return span / (SLICE_SIZE * L2_ENTRIES) + 2;
}

bool registry_prepare(uintptr_t start, size_t size) {
  uintptr_t first = start >> SLICE_SHIFT, last = (start + size - 1) >> SLICE_SHIFT;
  if (last >> (REG_L1_BITS + REG_L2_BITS)) return false;
  for (uintptr_t s = first; s <= last; s += L2_ENTRIES - (s & (L2_ENTRIES - 1)))
    if (!leaf_for(s, true, NULL)) return false;
  return true;
}

bool registry_reserve(registry_resv_t *rv, size_t span) {
  rv->leaves = NULL;
  for (size_t i = 0, n = leaves_for_span(span); i < n; i++) {
    void *leaf = leaf_new(NULL);
    if (!leaf) {
      registry_unreserve(rv);
      return false;
    }
    leaf_put(&rv->leaves, leaf);
  }
  return true;
}

void registry_unreserve(registry_resv_t *rv) {
  void *leaf;
  while ((leaf = leaf_take(&rv->leaves))) leaf_spare(leaf);
}

/* Writes `value` into the entries of every slice r covers. An entry being set
 * was empty or already named r (a spare chunk registered again, a large block
 * grown in place); an entry being cleared named r. */
static void registry_set(region_t *r, uintptr_t value) {
  uintptr_t start = (uintptr_t)r, end = start + r->size;
  uintptr_t first = start >> SLICE_SHIFT, last = (end - 1) >> SLICE_SHIFT;
  for (uintptr_t s = first; s <= last; s++) {
    slice_entry_t *leaf = leaf_for(s, false, NULL);
    LOCUS_ASSERT(leaf != NULL);
    slice_entry_t *e = &leaf[s & (L2_ENTRIES - 1)];
    _Atomic(uintptr_t) *slot = s == first && (start & (SLICE_SIZE - 1)) ? &e->inside : &e->cover;
    LOCUS_DEBUG_ONLY(uintptr_t old = atomic_load_explicit(slot, memory_order_relaxed));
    LOCUS_ASSERT(old == 0 || (old & ~REG_KIND_MASK) == start);
    atomic_store_explicit(slot, value, memory_order_release);
  }
}

bool registry_add_reserved(region_t *r, registry_resv_t *rv) {
  uintptr_t start = (uintptr_t)r;
  LOCUS_ASSERT((start & (os_page_size() - 1)) == 0 && r->size % PAGE_SIZE == 0);
  LOCUS_ASSERT(r->kind == REGION_SMALL || r->kind == REGION_MEDIUM || r->kind == REGION_LARGE ||
               r->kind == REGION_ARENA);
  if (r->size < SLICE_SIZE) locus_fatal("internal error: region %p of %zu bytes is below a slice", r, r->size);
  /* Leaves first: a failure leaves nothing half-recorded. */
  uintptr_t first = start >> SLICE_SHIFT, last = (start + r->size - 1) >> SLICE_SHIFT;
  if (last >> (REG_L1_BITS + REG_L2_BITS)) return false;      /* beyond the table: not ours to track */
  for (uintptr_t s = first; s <= last; s += L2_ENTRIES - (s & (L2_ENTRIES - 1)))
    if (!leaf_for(s, true, rv)) return false;
  registry_set(r, start | r->kind);
  return true;
}

bool registry_add(region_t *r) { return registry_add_reserved(r, NULL); }

void registry_remove(region_t *r) { registry_set(r, 0); }

/* A region overlapping the range either holds its first byte or starts
 * inside it, in one of its slices: as that slice's `cover` (at the slice's
 * first byte) or its `inside` (regions span a slice or more, so no other
 * region starts in a slice). */
bool registry_overlaps(uintptr_t base, size_t size) {
  if (registry_lookup((void *)base)) return true;
  for (uintptr_t s = base >> SLICE_SHIFT; s <= (base + size - 1) >> SLICE_SHIFT; s++) {
    if (s >> (REG_L1_BITS + REG_L2_BITS)) break;
    slice_entry_t *leaf = atomic_load_explicit(&registry_l1[s >> REG_L2_BITS], memory_order_acquire);
    if (!leaf) continue;
    slice_entry_t *e = &leaf[s & (((uintptr_t)1 << REG_L2_BITS) - 1)];
    uintptr_t in = atomic_load_explicit(&e->inside, memory_order_acquire) & ~REG_KIND_MASK;
    uintptr_t cv = atomic_load_explicit(&e->cover, memory_order_acquire) & ~REG_KIND_MASK;
    if ((in && in >= base && in - base < size) || (cv && cv >= base && cv - base < size)) return true;
  }
  return false;
}
