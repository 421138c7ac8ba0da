/* Test helper: what /proc/self/smaps says about the mapping that holds an address. */
#ifndef LOCUS_TEST_SMAPS_H
#define LOCUS_TEST_SMAPS_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* AnonHugePages (bytes) of the mapping that holds p. */
static inline size_t huge_bytes(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  size_t kb = 0;
  int in = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char *dash = strchr(line, '-'), *sp = strchr(line, ' ');
    if (dash && sp && dash < sp && sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) break;
  }
  if (f) fclose(f);
  return kb * 1024;
}
#endif /* LOCUS_TEST_SMAPS_H */
