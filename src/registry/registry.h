/* The region registry: address -> region (chunk or large block) in two
 * dependent reads, without a lock and without aligning regions on their size
 * (Valat, PhD thesis, 2014, §4.6.4). */
#ifndef LOCUS_REGISTRY_H
#define LOCUS_REGISTRY_H

#include "types.h"

/* Records r (its size and kind are set) over every slice it covers. False
 * when the OS refused memory for a new leaf of the table; nothing is recorded
 * then. */
bool registry_add(region_t *r);
void registry_remove(region_t *r);
/* Whether a recorded region overlaps [base, base + size). */
bool registry_overlaps(uintptr_t base, size_t size);

/* Leaves set aside for a region whose address is not known yet (mremap may
 * move a block anywhere): once registry_reserve(rv, span) succeeded,
 * registry_add_reserved of any one region of at most `span` bytes cannot
 * fail. What is not used goes back with registry_unreserve. */
typedef struct { void *leaves; } registry_resv_t;
/* Makes the leaves of the known range [start, start+size); false if the OS
 * refused memory. Cheap when they exist. */
bool registry_prepare(uintptr_t start, size_t size);
bool registry_reserve(registry_resv_t *rv, size_t span);
bool registry_add_reserved(region_t *r, registry_resv_t *rv);
void registry_unreserve(registry_resv_t *rv);

/* Two-level index over SLICE_SIZE slices. Each slice entry names the region
 * covering the slice's first byte and the (at most one) region starting inside
 * it. Lock-free reads: entries are written only while their region is private
 * to the writer (just mapped, or about to be unmapped). */
typedef struct {
  _Atomic(uintptr_t) cover;
  _Atomic(uintptr_t) inside;
} slice_entry_t;

/* Entries hold the region address (page-aligned) with its kind in the low
 * byte, so the free fast path learns the kind without touching the header. */
#define REG_KIND_MASK ((uintptr_t)0xff)

#define REG_ADDR_BITS 48              /* user space of x86-64 and of aarch64 with 48-bit VAs */
#define REG_L2_BITS 13
#define REG_L1_BITS (REG_ADDR_BITS - SLICE_SHIFT - REG_L2_BITS)
extern _Atomic(slice_entry_t *) registry_l1[(size_t)1 << REG_L1_BITS];

/* The tagged entry of the region that may contain p, 0 if none. The caller
 * still checks that p lies below the region's end. */
static ALWAYS_INLINE uintptr_t registry_find(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t s = a >> SLICE_SHIFT;
  if (unlikely(s >> (REG_L1_BITS + REG_L2_BITS))) return 0;
  slice_entry_t *leaf = atomic_load_explicit(&registry_l1[s >> REG_L2_BITS], memory_order_acquire);
  if (unlikely(!leaf)) return 0;
  slice_entry_t *e = &leaf[s & (((uintptr_t)1 << REG_L2_BITS) - 1)];
  uintptr_t in = atomic_load_explicit(&e->inside, memory_order_acquire);
  uintptr_t cv = atomic_load_explicit(&e->cover, memory_order_acquire);
  /* a >= start of `inside`, without a branch (a block is as likely below a
   * chunk starting in its slice as above: a branch mispredicts often on
   * remote frees); an empty `inside` (0)
   * gives 0 - 1, above every address. */
  uintptr_t above = (uintptr_t)0 - (uintptr_t)(a > (in & ~REG_KIND_MASK) - 1);   /* all ones or 0 */
  return (in & above) | (cv & ~above);   /* a select GCC does not turn back into a branch */
}

/* The tagged entry of the region covering the first byte of p's slice, 0 if
 * none: the region of p when that region starts on a slice boundary (small
 * chunks do: they are aligned on their size), so the caller compares it
 * with the region it expects. One load fewer than registry_find. */
static ALWAYS_INLINE uintptr_t registry_cover(const void *p) {
  uintptr_t s = (uintptr_t)p >> SLICE_SHIFT;
  if (unlikely(s >> (REG_L1_BITS + REG_L2_BITS))) return 0;
  slice_entry_t *leaf = atomic_load_explicit(&registry_l1[s >> REG_L2_BITS], memory_order_acquire);
  if (unlikely(!leaf)) return 0;
  return atomic_load_explicit(&leaf[s & (((uintptr_t)1 << REG_L2_BITS) - 1)].cover, memory_order_acquire);
}

static ALWAYS_INLINE region_t *registry_lookup(const void *p) {
  region_t *r = (region_t *)(registry_find(p) & ~REG_KIND_MASK);
  if (unlikely(!r || (uintptr_t)p - (uintptr_t)r >= r->size)) return NULL;
  return r;
}

#endif /* LOCUS_REGISTRY_H */
