/* The region registry: lookups of regions that are not aligned on their size,
 * two regions sharing a slice, gaps, removal. Uses the internal interface. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "registry/registry.h"

static region_t *make(char *at, size_t size, uint8_t kind) {
  region_t *r = (region_t *)at;
  memset(r, 0, sizeof *r);
  r->size = size;
  r->kind = kind;
  registry_add(r);
  return r;
}

int main(void) {
  /* A 64 MiB playground; regions placed at page (not slice) boundaries. */
  size_t span = 64 << 20;
  char *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(base != MAP_FAILED, "mmap");
  char *s0 = (char *)(((uintptr_t)base + SLICE_SIZE) & ~(SLICE_SIZE - 1));   /* first slice boundary */
  /* A: starts 12 KiB into a slice, 1.5 slices long; B: right after A, in the same slice;
   * C: after a gap, exactly slice-aligned and 3 slices long. */
  region_t *A = make(s0 + 3 * 4096, SLICE_SIZE + SLICE_SIZE / 2, REGION_LARGE);
  region_t *B = make((char *)A + A->size, 2 * SLICE_SIZE, REGION_SMALL);
  char *gap = (char *)B + B->size;
  region_t *C = make(s0 + 8 * SLICE_SIZE, 3 * SLICE_SIZE, REGION_MEDIUM);

  CHECK(registry_lookup((char *)A + 64) == A, "A start");
  CHECK(registry_lookup((char *)A + A->size - 1) == A, "A last byte");
  CHECK(registry_lookup((char *)B) == B, "B first byte (same slice as A's end)");
  CHECK(registry_lookup((char *)B + B->size - 1) == B, "B last byte");
  CHECK(registry_lookup(gap) == NULL, "gap after B");
  CHECK(registry_lookup(gap + 4096) == NULL, "gap");
  CHECK(registry_lookup(s0) == NULL, "before A in its slice");
  CHECK(registry_lookup((char *)C) == C && registry_lookup((char *)C + C->size - 1) == C, "C bounds");
  CHECK(registry_lookup((char *)C + C->size) == NULL, "after C");
  CHECK((registry_find((char *)B + 100) & REG_KIND_MASK) == REGION_SMALL, "kind in the entry");
  for (size_t off = 0; off < A->size; off += 4096) CHECK(registry_lookup((char *)A + off + 100) == A, "A interior %zu", off);
  CHECK(registry_lookup((void *)16) == NULL && registry_lookup((void *)~(uintptr_t)0) == NULL, "wild addresses");

  registry_remove(A);
  CHECK(registry_lookup((char *)A + 64) == NULL, "A removed");
  CHECK(registry_lookup((char *)B + 10) == B, "B survives A's removal");
  registry_remove(B);
  registry_remove(C);
  CHECK(registry_lookup((char *)B + 10) == NULL && registry_lookup((char *)C + 10) == NULL, "all removed");
  munmap(base, span);
  return TEST_DONE();
}
