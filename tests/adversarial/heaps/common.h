/* Shared helpers for the v2 adversarial reproducers (sub-heaps, arenas,
 * copy-on-write copies, KSM, shared tables). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <malloc.h>
#include <time.h>
#include "locus.h"
#define MiB ((size_t)1 << 20)
#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define OK(...) do { fprintf(stderr, "ok: " __VA_ARGS__); fprintf(stderr, "\n"); } while (0)
#define NOTE(...) do { fprintf(stderr, "  " __VA_ARGS__); fprintf(stderr, "\n"); } while (0)
static inline char *guarded(size_t size) {
  size_t g = 64 * 1024;
  char *p = mmap(NULL, size + 2 * g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) FAIL("mmap");
  if (mprotect(p + g, size, PROT_READ | PROT_WRITE)) FAIL("mprotect");
  return p + g;
}
static inline locus_heap_t *mkheap_cfg(void *seg, size_t size, size_t limit, unsigned flags, const char *name) {
  locus_heap_config_t c = LOCUS_HEAP_CONFIG_INIT;
  c.segment = seg;
  c.segment_size = size;
  c.limit = limit;
  c.flags = flags;
  c.name = name;
  locus_heap_t *h = locus_heap_create(&c);
  if (!h) FAIL("create %s: %s", name ? name : "", strerror(errno));
  return h;
}
static inline uint64_t rnd(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static inline double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
