/* Test helper: what /proc/self/smaps says about the mapping that holds an address. */
#ifndef LOCUS_TEST_SMAPS_H
#define LOCUS_TEST_SMAPS_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

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
/* Whether the mapping holding p has VmFlags "mg"; -1 when smaps lacks it. */
static inline int mergeable(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  CHECK(f, "smaps");
  char line[512];
  int in = 0, r = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && !strncmp(line, "VmFlags:", 8)) {
      r = strstr(line, " mg") != NULL;
      break;
    }
  }
  fclose(f);
  return r;
}

#endif /* LOCUS_TEST_SMAPS_H */
