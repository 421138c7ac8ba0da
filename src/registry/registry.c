/* The region registry (SPEC §2, seed 000 §4.6.4): address -> region in at most
 * two dependent reads, without a lock and without aligning regions on their
 * size. Writers only touch the entries of a region they own exclusively
 * (freshly mapped, or being unmapped), so writers never race each other on an
 * entry; leaves are created with a CAS. */
#include "internal.h"

_Atomic(slice_entry_t *) registry_l1[(size_t)1 << REG_L1_BITS];

#define L2_ENTRIES ((size_t)1 << REG_L2_BITS)

static slice_entry_t *leaf_for(uintptr_t slice) {
  _Atomic(slice_entry_t *) *slot = &registry_l1[slice >> REG_L2_BITS];
  slice_entry_t *leaf = atomic_load_explicit(slot, memory_order_acquire);
  if (leaf) return leaf;
  /* 8192 entries x 16 bytes = 128 KiB of virtual memory, touched sparsely. */
  slice_entry_t *fresh = os_map(L2_ENTRIES * sizeof(slice_entry_t));
  if (!fresh) locus_fatal("out of memory for the region registry");
  if (atomic_compare_exchange_strong_explicit(slot, &leaf, fresh, memory_order_acq_rel,
                                              memory_order_acquire))
    return fresh;
  os_unmap(fresh, L2_ENTRIES * sizeof(slice_entry_t));
  return leaf;
}

static void registry_set(region_t *r, uintptr_t value) {
  uintptr_t start = (uintptr_t)r, end = start + r->size;
  uintptr_t first = start >> SLICE_SHIFT, last = (end - 1) >> SLICE_SHIFT;
  for (uintptr_t s = first; s <= last; s++) {
    slice_entry_t *e = &leaf_for(s)[s & (L2_ENTRIES - 1)];
    if (s == first && (start & (SLICE_SIZE - 1)))
      atomic_store_explicit(&e->inside, value, memory_order_release);
    else
      atomic_store_explicit(&e->cover, value, memory_order_release);
  }
}

void registry_add(region_t *r) {
  if (r->size < SLICE_SIZE) locus_fatal("internal error: region %p of %zu bytes is below a slice", r, r->size);
  registry_set(r, (uintptr_t)r | r->kind);
}

void registry_remove(region_t *r) { registry_set(r, 0); }
