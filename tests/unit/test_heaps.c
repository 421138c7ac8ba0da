/* User heaps (locus_heap_*, docs/heaps.md): every function, every bad input,
 * a guarded segment filled to exhaustion by four threads, growth through a
 * user source, the limit, reset and destroy, capture, arenas, fork. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <malloc.h>
#include <unistd.h>

#include "locus.h"
#include "unit/check.h"

#define MiB ((size_t)1 << 20)

/* A pattern that survives a move (check.h's depends on the address). */
static void ifill(char *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (char)(i * 7 + 3);
}
static int iverify(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (char)(i * 7 + 3)) return 0;
  return 1;
}

static locus_heap_config_t cfg_default(void) {
  locus_heap_config_t c = LOCUS_HEAP_CONFIG_INIT;
  return c;
}

/* A segment with PROT_NONE guard pages on both sides: a touch outside it
 * faults. Aligned on 64 KiB, locus's page granule on aarch64. */
static char *guarded(size_t size) {
  size_t g = 64 * 1024;
  char *p = mmap(NULL, size + 3 * g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(p != MAP_FAILED, "mmap");
  char *seg = (char *)(((uintptr_t)p + 2 * g - 1) & ~(uintptr_t)(g - 1));
  CHECK(mprotect(seg, size, PROT_READ | PROT_WRITE) == 0, "mprotect");
  return seg;
}

static void basic(void) {
  locus_heap_config_t c = cfg_default();
  c.name = "basic";
  locus_heap_t *h = locus_heap_create(&c);
  CHECK(h, "create: %s", strerror(errno));
  CHECK(strcmp(locus_heap_name(h), "basic") == 0, "name");
  size_t sizes[] = {1, 16, 100, 8192, 9000, 200000, 3 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    char *p = locus_heap_malloc(h, sizes[i]);
    CHECK(p, "malloc %zu", sizes[i]);
    CHECK(locus_heap_of(p) == h, "heap_of %zu", sizes[i]);
    CHECK(malloc_usable_size(p) >= sizes[i], "usable");
    ifill(p, sizes[i]);
    char *q = realloc(p, sizes[i] * 2 + 1);          /* plain realloc keeps it in h */
    CHECK(q && locus_heap_of(q) == h && iverify(q, sizes[i]), "realloc keeps heap and data");
    free(q);
    char *z = locus_heap_calloc(h, sizes[i], 1);
    CHECK(z && locus_heap_of(z) == h, "calloc");
    for (size_t k = 0; k < sizes[i]; k++) CHECK(!z[k], "calloc zero");
    memset(z, 0xab, sizes[i]);
    free(z);
    z = locus_heap_calloc(h, 1, sizes[i]);           /* recycled: cleared again */
    for (size_t k = 0; k < sizes[i]; k++) CHECK(!z[k], "calloc zero after reuse");
    free(z);
  }
  for (size_t a = 16; a <= 2 * MiB; a *= 4) {
    char *p = locus_heap_aligned_alloc(h, a, 100);
    CHECK(p && ((uintptr_t)p & (a - 1)) == 0 && locus_heap_of(p) == h, "aligned %zu", a);
    free(p);
  }
  errno = 0;
  CHECK(!locus_heap_aligned_alloc(h, 24, 100) && errno == EINVAL, "aligned: not a power of two");
  errno = 0;
  CHECK(!locus_heap_malloc(h, SIZE_MAX / 2) && errno == ENOMEM, "huge size");
  errno = 0;
  CHECK(!locus_heap_calloc(h, SIZE_MAX / 2, 4) && errno == ENOMEM, "calloc overflow");
  /* A default block moves into h; h's block stays with locus_heap_realloc(h). */
  char *d = malloc(50);
  CHECK(locus_heap_of(d) == NULL, "default heap is NULL");
  ifill(d, 50);
  char *m = locus_heap_realloc(h, d, 60);
  CHECK(m && locus_heap_of(m) == h && iverify(m, 50), "heap_realloc moves into h");
  m = locus_heap_realloc(h, m, 5000);
  CHECK(locus_heap_of(m) == h, "heap_realloc within h");
  free(m);
  CHECK(locus_heap_of(NULL) == NULL && locus_heap_of(&c) == NULL, "heap_of foreign");
  locus_stats_t st;
  CHECK(locus_heap_stats(h, &st) == 0 && st.heaps_live == 1 && st.bytes_in_use > 0 && st.cache_hits > 20, "stats");
  CHECK(locus_heap_check() == 0, "heap check");
  locus_heap_destroy(h);
}

/* A file segment whose /proc/self/maps line is longer than the check's
 * buffer (a path of ~4000 characters): judged by the line's head, accepted;
 * and an unmapped range just above it refused (the line's tail is no line). */
static void long_path_segment(void) {
  char path[4200] = "/tmp/locus-longpath-XXXXXX";
  if (!mkdtemp(path)) return;
  char top[64];
  snprintf(top, sizeof top, "%s", path);
  char comp[241];
  memset(comp, 'd', 240);
  comp[240] = 0;
  while (strlen(path) + 242 < 4050) {
    strcat(path, "/");
    strcat(path, comp);
    CHECK(mkdir(path, 0700) == 0, "mkdir");
  }
  strcat(path, "/f0000000-ffffffff rw");   /* what a tail read as a line would say */
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  CHECK(fd >= 0 && ftruncate(fd, 8 * MiB) == 0, "long-path file (%zu chars)", strlen(path));
  char *seg = guarded(8 * MiB);
  CHECK(mmap(seg, 4 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == seg, "map the file");
  CHECK(munmap(seg + 4 * MiB, 4 * MiB) == 0, "a hole above it");
  locus_heap_config_t c = cfg_default();
  c.segment = seg; c.segment_size = 4 * MiB;
  locus_heap_t *h = locus_heap_create(&c);
  CHECK(h && locus_heap_malloc(h, 100), "long-path file segment accepted: %s", strerror(errno));
  locus_heap_destroy(h);
  c.segment = seg + 4 * MiB;
  errno = 0;
  CHECK(!locus_heap_create(&c) && errno == EINVAL, "the unmapped range above it refused (errno %d)", errno);
  close(fd);
  unlink(path);
  munmap(seg, 4 * MiB);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", top);
  CHECK(system(rm) == 0, "cleanup");
}

static void bad_configs(void) {
  locus_heap_config_t c;
  char *seg = guarded(8 * MiB);
#define BAD(what)                                                             \
  do {                                                                        \
    errno = 0;                                                                \
    CHECK(!locus_heap_create(&c) && errno == EINVAL, "%s: errno %d", what, errno); \
  } while (0)
  c = cfg_default(); c.struct_size = 8; BAD("struct_size small");
  c = cfg_default(); c.struct_size = sizeof c + 64; BAD("struct_size large");
  errno = 0;
  CHECK(!locus_heap_create(NULL) && errno == EINVAL, "NULL config");
  c = cfg_default(); c.segment = NULL; c.segment_size = 8 * MiB; BAD("NULL segment");
  c = cfg_default(); c.segment = seg; c.segment_size = 0; BAD("empty segment");
  c = cfg_default(); c.segment = seg; c.segment_size = 512 * 1024; BAD("segment too small");
  c = cfg_default(); c.segment = seg + 8; c.segment_size = 4 * MiB; BAD("misaligned segment");
  /* pages the heap could not write: refused now, not a crash at the first malloc */
  char *ro = guarded(4 * MiB);
  CHECK(mprotect(ro, 4 * MiB, PROT_READ) == 0, "read-only mapping");
  c = cfg_default(); c.segment = ro; c.segment_size = 4 * MiB; BAD("read-only segment");
  CHECK(mprotect(ro, 4 * MiB, PROT_READ | PROT_WRITE) == 0 && mprotect(ro + 2 * MiB, 4096, PROT_NONE) == 0, "hole");
  c = cfg_default(); c.segment = ro; c.segment_size = 4 * MiB; BAD("segment with an inaccessible page");
  CHECK(munmap(ro + 2 * MiB, 2 * MiB) == 0, "tail unmapped");
  c = cfg_default(); c.segment = ro; c.segment_size = 4 * MiB; BAD("segment partly unmapped");
  c = cfg_default(); c.segment = ro; c.segment_size = 2 * MiB;
  locus_heap_t *w = locus_heap_create(&c);
  CHECK(w && locus_heap_malloc(w, 100), "its writable part is a good segment: %s", strerror(errno));
  locus_heap_destroy(w);
  munmap(ro, 2 * MiB);
  c = cfg_default(); c.flags = 0x100; BAD("unknown flags");
  c = cfg_default(); c.node = 4000; BAD("node not allowed");
  c = cfg_default(); c.node = -7; BAD("negative node");
  c = cfg_default(); c.interleave = 2; BAD("interleave 2");
  c = cfg_default(); c.segment = seg; c.segment_size = 8 * MiB; c.node = 0; BAD("segment with node");
  locus_source_ops_t ops = {0};
  c = cfg_default(); c.source = &ops; BAD("source without map");
  /* a segment in locus's own memory (a block of malloc) */
  char *blk = malloc(16 * MiB);
  char *inner = (char *)(((uintptr_t)blk + 4 * MiB) & ~(uintptr_t)(64 * 1024 - 1));
  c = cfg_default(); c.segment = inner; c.segment_size = 4 * MiB; BAD("segment inside a malloc block");
  free(blk);
  /* overlapping another heap's segment */
  c = cfg_default(); c.segment = seg; c.segment_size = 8 * MiB;
  locus_heap_t *a = locus_heap_create(&c);
  CHECK(a, "segment heap: %s", strerror(errno));
  c.segment = seg + 4 * MiB; c.segment_size = 4 * MiB; BAD("overlapping segment");
  locus_heap_destroy(a);
  c.segment = seg + 4 * MiB; c.segment_size = 4 * MiB;   /* free again once destroyed */
  a = locus_heap_create(&c);
  CHECK(a, "segment reusable after destroy");
  locus_heap_destroy(a);
  /* an older, shorter config (up to flags) is accepted */
  c = cfg_default(); c.struct_size = offsetof(locus_heap_config_t, name);
  a = locus_heap_create(&c);
  CHECK(a && strncmp(locus_heap_name(a), "heap#", 5) == 0, "old config size");
  locus_heap_destroy(a);
}

/* ---- a guarded segment filled to exhaustion by four threads ------------- */
#define SEG (64 * MiB)
static char *g_seg;
static locus_heap_t *g_heap;
typedef struct { void **v; size_t n; uint64_t seed; } fill_t;

static void *filler(void *arg) {
  fill_t *f = arg;
  f->v = mmap(NULL, 1 << 22, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  unsigned fails = 0;
  while (fails < 200) {
    f->seed = f->seed * 6364136223846793005u + 1442695040888963407u;
    unsigned k = (unsigned)(f->seed >> 60);
    size_t size = k < 10 ? 16 + (f->seed >> 40) % 2000 : k < 14 ? 8192 + (f->seed >> 40) % 300000
                                                               : MiB + (f->seed >> 40) % (2 * MiB);
    char *p = locus_heap_malloc(g_heap, size);
    if (!p) {
      CHECK(errno == ENOMEM, "exhaustion gives ENOMEM");
      fails++;
      continue;
    }
    CHECK(p >= g_seg && p + size <= g_seg + SEG, "block %p+%zu outside the segment", (void *)p, size);
    p[0] = (char)size;
    p[size - 1] = (char)(size >> 3);
    *(size_t *)(p + (size >= 16 ? 8 : 0)) = size;
    f->v[f->n++] = p;
  }
  return NULL;
}

static void *freer(void *arg) {               /* frees another thread's blocks */
  fill_t *f = arg;
  for (size_t i = 0; i < f->n; i++) {
    char *p = f->v[i];
    size_t size = *(size_t *)(p + 8);
    CHECK(p[0] == (char)size && p[size - 1] == (char)(size >> 3), "block content");
    free(p);
  }
  return NULL;
}

/* A segment on a 4 MiB boundary (chunks of exactly 4 MiB), in `raw`. */
static char *aligned_segment(char **raw, size_t size) {
  size_t four = (size_t)4 << 20;
  *raw = mmap(NULL, size + four, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(*raw != MAP_FAILED, "mmap");
  return (char *)(((uintptr_t)*raw + four - 1) & ~(uintptr_t)(four - 1));
}

static locus_heap_t *segment_heap(char *seg, size_t size, unsigned flags) {
  locus_heap_config_t hc = LOCUS_HEAP_CONFIG_INIT;
  hc.segment = seg;
  hc.segment_size = size;
  hc.flags = flags;
  locus_heap_t *h = locus_heap_create(&hc);
  CHECK(h, "a heap over a %zu MiB segment: %s", size / MiB, strerror(errno));
  return h;
}

/* An emptied 4 MiB chunk kept as a spare starved a bounded segment: a
 * 4 MiB aligned segment of 8 MiB, a small chunk, then a medium chunk
 * emptied into the spare; the next medium request found no free extent and
 * got ENOMEM with half the segment idle (test_fork_locks failed that way
 * once in 64 runs, when ASLR aligned its static segment). */
static void spare_chunk(void) {
  size_t four = (size_t)4 << 20;
  char *raw = mmap(NULL, 3 * four, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(raw != MAP_FAILED, "mmap");
  char *seg = (char *)(((uintptr_t)raw + four - 1) & ~(uintptr_t)(four - 1));
  locus_heap_config_t hc = LOCUS_HEAP_CONFIG_INIT;
  hc.segment = seg;
  hc.segment_size = 2 * four;
  locus_heap_t *h = locus_heap_create(&hc);
  CHECK(h, "a heap over a 4 MiB aligned segment");
  free(locus_heap_malloc(h, 100));
  for (int i = 0; i < 8; i++) {          /* 16 B ... 21 KiB: small, then medium */
    void *u = locus_heap_malloc(h, 16 + (size_t)i * 3000);
    CHECK(u, "malloc(%zu) in the heap after a medium chunk went to the spare (errno %d)", 16 + (size_t)i * 3000, errno);
    free(u);
  }
  locus_heap_destroy(h);
  munmap(raw, 3 * four);
}

/* Chunks are not typed: a 4 MiB segment whose one chunk served small blocks
 * serves a medium block once they are free (the chunk was held by the
 * thread cache and the empty current run), and, after a reset that kept
 * the small chunk, a large block; an arena's chunks kept by a reset serve
 * a large block. */
static void untyped_chunks(void) {
  char *raw;
  char *seg = aligned_segment(&raw, 8 * MiB);
  locus_heap_t *h = segment_heap(seg, 4 * MiB, 0);
  free(locus_heap_malloc(h, 100));
  void *m = locus_heap_malloc(h, 20000);
  CHECK(m, "a medium block after the small chunk's only block was freed (errno %d)", errno);
  free(m);
  void *l = locus_heap_malloc(h, 3 * MiB);
  CHECK(l, "a large block once the medium chunk emptied (errno %d)", errno);
  free(l);
  void *s = locus_heap_malloc(h, 64);
  CHECK(s, "small");
  locus_heap_reset(h);                 /* keeps the small chunk */
  l = locus_heap_malloc(h, 3 * MiB);
  CHECK(l, "a large block after a reset that kept a small chunk (errno %d)", errno);
  free(l);
  locus_heap_destroy(h);

  h = segment_heap(seg, 8 * MiB, LOCUS_HEAP_ARENA);
  size_t n = 0;
  while (locus_heap_malloc(h, 4000)) n++;
  CHECK(n > 1000, "arena filled: %zu blocks", n);
  locus_heap_reset(h);
  l = locus_heap_malloc(h, 6 * MiB);
  CHECK(l, "a large block in an arena whose chunks a reset kept (errno %d)", errno);
  locus_heap_destroy(h);
  munmap(raw, 12 * MiB);
}

/* Threads that exited leave their parts of the heap parked; blocks the
 * others free into them afterwards must not keep the segment. Three
 * threads fill a 12 MiB segment with mixed sizes and exit; this thread
 * frees every block; then one block takes most of the segment. */
#define EXIT_BLOCKS 4096
typedef struct { locus_heap_t *h; void *v[EXIT_BLOCKS]; int n; unsigned seed; } exit_fill_t;
static void *exit_filler(void *arg) {
  exit_fill_t *f = arg;
  for (f->n = 0; f->n < EXIT_BLOCKS; f->n++) {
    f->seed = f->seed * 1103515245u + 12345u;
    unsigned r = f->seed >> 8;
    size_t sz = r % 4 ? 16 + r % 8000 : 9000 + r % 300000;
    if (!(f->v[f->n] = locus_heap_malloc(f->h, sz))) break;
  }
  return NULL;
}

static void exited_threads(void) {
  char *raw;
  char *seg = aligned_segment(&raw, 12 * MiB);
  static exit_fill_t f[3];
  locus_heap_t *h = segment_heap(seg, 12 * MiB, 0);
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    f[i] = (exit_fill_t){.h = h, .seed = 77u * (unsigned)i + 1};
    pthread_create(&t[i], NULL, exit_filler, &f[i]);
  }
  size_t n = 0;
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL), n += (size_t)f[i].n;
  CHECK(n > 100, "%zu blocks", n);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < f[i].n; j++) free(f[i].v[j]);
  void *l = locus_heap_malloc(h, 10 * MiB);
  CHECK(l, "10 MiB of a 12 MiB segment once every block of the exited threads is free (errno %d)", errno);
  free(l);
  locus_stats_t st;
  CHECK(locus_heap_stats(h, &st) == 0 && st.peak_footprint <= 12 * MiB, "peak %llu within the segment",
        (unsigned long long)st.peak_footprint);
  locus_heap_destroy(h);
  munmap(raw, 16 * MiB);
}

/* A live thread's emptied chunk goes back to the segment at once (no
 * spare): a thread that freed its medium block and waits must not hold
 * half the segment from another thread's request. */
static pthread_barrier_t idle_bar;
static void *idle_owner(void *arg) {
  free(locus_heap_malloc(arg, 100000));
  pthread_barrier_wait(&idle_bar);     /* freed */
  pthread_barrier_wait(&idle_bar);     /* the other thread allocated */
  return NULL;
}

/* Medium blocks another thread frees wait for their owner, which takes
 * them back at its next medium allocation, its exit or its locus_collect. */
static void *collecting_owner(void *arg) {
  void **v = arg;
  for (int i = 0; i < 3; i++) v[i] = locus_heap_malloc(v[3], 100000);
  pthread_barrier_wait(&idle_bar);     /* handed over */
  pthread_barrier_wait(&idle_bar);     /* freed by the other thread */
  locus_collect();
  pthread_barrier_wait(&idle_bar);     /* collected */
  pthread_barrier_wait(&idle_bar);     /* the other thread allocated */
  return NULL;
}

static void live_thread_chunk(void) {
  char *raw;
  char *seg = aligned_segment(&raw, 8 * MiB);
  locus_heap_t *h = segment_heap(seg, 8 * MiB, 0);
  pthread_t t;
  pthread_barrier_init(&idle_bar, NULL, 2);
  pthread_create(&t, NULL, idle_owner, h);
  pthread_barrier_wait(&idle_bar);
  locus_stats_t st;
  CHECK(locus_heap_stats(h, &st) == 0 && st.bytes_in_use == 0, "an emptied chunk is not held: %llu",
        (unsigned long long)st.bytes_in_use);
  void *l = locus_heap_malloc(h, 6 * MiB);
  CHECK(l, "6 MiB of an 8 MiB segment beside a live thread that freed its block (errno %d)", errno);
  pthread_barrier_wait(&idle_bar);
  pthread_join(t, NULL);
  free(l);

  void *v[4] = {0, 0, 0, h};
  pthread_create(&t, NULL, collecting_owner, v);
  pthread_barrier_wait(&idle_bar);
  CHECK(v[0] && v[1] && v[2], "three medium blocks");
  for (int i = 0; i < 3; i++) free(v[i]);
  pthread_barrier_wait(&idle_bar);
  pthread_barrier_wait(&idle_bar);
  l = locus_heap_malloc(h, 6 * MiB);
  CHECK(l, "6 MiB once the owner collected the blocks another thread freed (errno %d)", errno);
  pthread_barrier_wait(&idle_bar);
  pthread_join(t, NULL);
  free(l);
  locus_heap_destroy(h);
  munmap(raw, 12 * MiB);

  /* Over locus's memory without a limit, a part keeps a spare: counted. */
  locus_heap_config_t c = cfg_default();
  h = locus_heap_create(&c);
  free(locus_heap_malloc(h, 100000));
  CHECK(locus_heap_stats(h, &st) == 0 && st.bytes_in_use > 0, "a spare chunk counts in bytes_in_use");
  locus_heap_destroy(h);
}

static void guarded_exhaustion(void) {
  g_seg = guarded(SEG);
  locus_heap_config_t c = cfg_default();
  c.segment = g_seg;
  c.segment_size = SEG;
  c.name = "guarded";
  for (int round = 0; round < 3; round++) {
    g_heap = locus_heap_create(&c);
    CHECK(g_heap, "create over segment: %s", strerror(errno));
    pthread_t t[4];
    fill_t f[4] = {{0}};
    for (int i = 0; i < 4; i++) {
      f[i].seed = 0x1234567ull * (i + 1) + round;
      pthread_create(&t[i], NULL, filler, &f[i]);
    }
    size_t n = 0;
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL), n += f[i].n;
    locus_stats_t st;
    CHECK(locus_heap_stats(g_heap, &st) == 0, "stats");
    CHECK(st.bytes_in_use > SEG / 2 && st.bytes_in_use <= SEG, "held %llu of the segment",
          (unsigned long long)st.bytes_in_use);
    if (round == 0) {                  /* free everything from other threads, then refill */
      for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, freer, &f[(i + 1) % 4]);
      for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
      char *p = locus_heap_malloc(g_heap, 4 * MiB);
      CHECK(p, "memory freed by other threads is reused");
      free(p);
    } else if (round == 1) {
      locus_heap_reset(g_heap);          /* every block gone at once, memory kept */
      char *p = locus_heap_malloc(g_heap, 100);
      CHECK(p && p >= g_seg && p < g_seg + SEG, "allocation after reset");
    }
    for (int i = 0; i < 4; i++) munmap(f[i].v, 1 << 22);
    printf("guarded round %d: %zu blocks, %llu bytes held\n", round, n, (unsigned long long)st.bytes_in_use);
    locus_heap_destroy(g_heap);
  }
}

/* ---- a user source ------------------------------------------------------ */
static atomic_int maps, unmaps;
static atomic_size_t mapped;
static void *src_map(void *ctx, size_t size, size_t align) {
  CHECK(ctx == (void *)0x42, "ctx");
  char *p = mmap(NULL, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  char *a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
  if (a > p) munmap(p, (size_t)(a - p));
  munmap(a + size, (size_t)(p + size + align - (a + size)));
  atomic_fetch_add(&maps, 1);
  atomic_fetch_add(&mapped, size);
  void *x = malloc(10);                 /* a map may call malloc (the default heap) */
  free(x);
  return a;
}
static void src_unmap(void *ctx, void *p, size_t size) {
  atomic_fetch_add(&unmaps, 1);
  atomic_fetch_sub(&mapped, size);
  munmap(p, size);
}

static void user_source(void) {
  locus_source_ops_t ops = {src_map, src_unmap, (void *)0x42};
  locus_heap_config_t c = cfg_default();
  c.source = &ops;
  c.limit = 64 * MiB;
  locus_heap_t *h = locus_heap_create(&c);
  CHECK(h, "create with a source");
  CHECK(maps == 0, "no map before the first allocation");
  void *v[4096];
  size_t n = 0, held = 0;
  for (;;) {
    size_t size = n % 3 == 0 ? 3 * MiB : n % 3 == 1 ? 100000 : 48;
    void *p = locus_heap_malloc(h, size);
    if (!p) {
      CHECK(errno == ENOMEM, "limit gives ENOMEM");
      break;
    }
    CHECK(n < 4096, "the limit stops it");
    v[n++] = p;
  }
  locus_stats_t st;
  locus_heap_stats(h, &st);
  held = st.bytes_in_use;
  CHECK(held <= 64 * MiB && held > 32 * MiB, "held %zu within the limit", held);
  CHECK(maps > 1, "grown through the source (%d maps)", maps);
  /* With the segment pieces free again, the limit lets it allocate again. */
  for (size_t i = 0; i < n; i++) free(v[i]);
  void *p = locus_heap_malloc(h, 3 * MiB);
  CHECK(p, "after frees");
  locus_heap_destroy(h);
  CHECK(maps == unmaps && mapped == 0, "every map given back (%d maps, %d unmaps)", maps, unmaps);
}

/* Threads churning at the edge of a bound: two threads, one 500,000-byte
 * block each at a time, under an 8 MiB limit (two medium chunks) never get
 * ENOMEM (the limit once counted a chunk going from one thread's part to
 * the other's twice: thousands of failures a second); eight threads over
 * a 9 MiB segment never see bytes_in_use or the peak above it. */
static locus_heap_t *churn_heap;
static atomic_int churn_stop;
static atomic_long churn_fail;
static void *churner(void *arg) {
  size_t size = (size_t)(uintptr_t)arg;
  for (int i = 0; i < 100000 && !atomic_load(&churn_stop); i++) {
    void *p = locus_heap_malloc(churn_heap, size);
    if (!p) atomic_fetch_add(&churn_fail, 1);
    free(p);
  }
  return NULL;
}

static void churn_at_bound(void) {
  locus_heap_config_t c = cfg_default();
  c.limit = 8 * MiB;
  churn_heap = locus_heap_create(&c);
  pthread_t t[8];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churner, (void *)(uintptr_t)500000);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECK(churn_fail == 0, "two threads with one block each under a two-chunk limit: %ld ENOMEM", (long)churn_fail);
  locus_heap_destroy(churn_heap);

  char *raw;
  char *seg = aligned_segment(&raw, 9 * MiB);
  churn_heap = segment_heap(seg, 9 * MiB, 0);
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, churner, (void *)(uintptr_t)(i % 2 ? 500000 : 100));
  size_t most = 0;
  locus_stats_t st;
  for (int i = 0; i < 20000; i++) {
    CHECK(locus_heap_stats(churn_heap, &st) == 0, "stats");
    if (st.bytes_in_use > most) most = st.bytes_in_use;
  }
  atomic_store(&churn_stop, 1);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  CHECK(locus_heap_stats(churn_heap, &st) == 0 && most <= 9 * MiB && st.peak_footprint <= 9 * MiB,
        "within the 9 MiB segment: bytes_in_use up to %zu, peak %llu", most, (unsigned long long)st.peak_footprint);
  locus_heap_destroy(churn_heap);
  munmap(raw, 13 * MiB);
}

/* The limit counts what the source hands over: a cached segment a little
 * longer than the request (left by the default heap) was taken whole, and
 * a large block grown in place took the short rest behind it: both passed
 * the limit. A fork child gets the count of what the heap's parts hold,
 * not a reservation of a thread that did not follow it (its heap refused
 * 1.5 MiB of an empty segment). */
static locus_heap_t *fork_heap;
static atomic_int fork_stop;
static void *fork_spinner(void *arg) {
  (void)arg;
  while (!atomic_load(&fork_stop)) CHECK(!locus_heap_malloc(fork_heap, 8 * MiB), "8 MiB of 4");
  return NULL;
}

static void *fork_churner(void *arg) {
  (void)arg;
  while (!atomic_load(&fork_stop)) free(locus_heap_malloc(fork_heap, 2 * MiB));
  return NULL;
}

static void limit_exact(void) {
  locus_heap_config_t c = cfg_default();
  c.limit = 1536 * 1024;
  locus_heap_t *h = locus_heap_create(&c);
  void *volatile x = malloc(1900 * 1024);
  free(x);
  void *p = locus_heap_malloc(h, 1100 * 1024);
  locus_stats_t st;
  CHECK(p && locus_heap_stats(h, &st) == 0 && st.bytes_in_use <= c.limit &&
        malloc_usable_size(p) <= c.limit, "a large block within the limit: %llu held",
        (unsigned long long)st.bytes_in_use);
  locus_heap_destroy(h);

  c.limit = 2600 * 1024;
  h = locus_heap_create(&c);
  x = malloc(3000 * 1024);
  ((char *)x)[0] = 1;
  free(x);
  char *a = locus_heap_malloc(h, 1200 * 1024);
  char *b = locus_heap_realloc(h, a, 2400 * 1024);
  CHECK(b && locus_heap_stats(h, &st) == 0 && st.bytes_in_use <= c.limit, "grown within the limit: %llu held",
        (unsigned long long)st.bytes_in_use);
  free(b);
  CHECK(locus_heap_stats(h, &st) == 0 && st.bytes_in_use == 0, "nothing held after the free");
  locus_heap_destroy(h);

  char *raw;
  char *seg = aligned_segment(&raw, 4 * MiB);
  c = cfg_default();
  c.segment = seg;
  c.segment_size = 4 * MiB;
  c.limit = 9 * MiB;
  fork_heap = locus_heap_create(&c);
  pthread_t t;
  pthread_create(&t, NULL, fork_spinner, NULL);
  int fails = 0;
  for (int i = 0; i < 50; i++) {
    pid_t pid = fork();
    if (pid == 0) _exit(locus_heap_malloc(fork_heap, 3 * MiB / 2) ? 0 : 1);
    int ws;
    CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid, "fork");
    fails += !WIFEXITED(ws) || WEXITSTATUS(ws);
  }
  atomic_store(&fork_stop, 1);
  pthread_join(t, NULL);
  CHECK(fails == 0, "%d of 50 fork children got ENOMEM from an empty segment", fails);
  locus_heap_destroy(fork_heap);
  munmap(raw, 8 * MiB);

  /* A child destroys a segment heap whose other thread was between the
   * segment and its count (the debug build found the segment in use). */
  seg = aligned_segment(&raw, 32 * MiB);
  c.segment = seg;
  c.segment_size = 32 * MiB;
  c.limit = 0;
  fork_heap = locus_heap_create(&c);
  atomic_store(&fork_stop, 0);
  pthread_create(&t, NULL, fork_churner, NULL);
  for (int i = 0; i < 50; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      locus_heap_destroy(fork_heap);
      _exit(0);
    }
    int ws;
    CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
          "a fork child's destroy of a heap another thread was using");
  }
  atomic_store(&fork_stop, 1);
  pthread_join(t, NULL);
  locus_heap_destroy(fork_heap);
  munmap(raw, 36 * MiB);
}

/* A source's map may allocate from another heap, even one at its limit
 * (its reclaim only tries the heap list's lock, which ranks before the
 * heap lock the map runs under: the debug build checked the order). */
static locus_heap_t *full_heap;
static void *map_using_full(void *ctx, size_t size, size_t align) {
  (void)ctx;
  void *scratch = locus_heap_malloc(full_heap, 2 * MiB);   /* at the limit: NULL */
  CHECK(!scratch, "the other heap is full");
  char *m = mmap(NULL, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  return (void *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
}

static void map_into_full_heap(void) {
  locus_heap_config_t c = cfg_default();
  c.limit = 4 * MiB;
  full_heap = locus_heap_create(&c);
  CHECK(locus_heap_malloc(full_heap, 3 * MiB), "3 MiB under a 4 MiB limit");
  static locus_source_ops_t ops = {map_using_full, NULL, NULL};
  c = cfg_default();
  c.source = &ops;
  locus_heap_t *h = locus_heap_create(&c);
  CHECK(locus_heap_malloc(h, 100), "an allocation whose growth allocates from a full heap");
  locus_heap_destroy(h);                 /* (no unmap: the pieces stay mapped) */
  locus_heap_destroy(full_heap);
}

/* ---- reset and destroy of many blocks ------------------------------------ */
static void million(void) {
  locus_heap_config_t c = cfg_default();
  locus_heap_t *h = locus_heap_create(&c);
  locus_release();                     /* what earlier tests left cached goes, so RSS shows this heap */
  size_t before = rss_kib();
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 1000000; i++) {
      int *p = locus_heap_malloc(h, 48);
      CHECK(p, "malloc");
      p[0] = i;
    }
    locus_stats_t st;
    locus_heap_stats(h, &st);
    if (round == 0) CHECK(rss_kib() > before + 40 * 1024, "the blocks are resident");
    size_t held = st.bytes_in_use;
    locus_heap_reset(h);
    locus_heap_stats(h, &st);
    CHECK(st.bytes_in_use == held, "reset keeps the memory");
  }
  locus_heap_destroy(h);               /* its memory goes to locus's source, as freed blocks do */
  locus_release();                     /* which gives it to the OS now */
  CHECK(rss_kib() < before + 8 * 1024, "RSS back after destroy: %zu KiB, was %zu", rss_kib(), before);
}

/* calloc after a reset: the kept chunks' memory was handed out before. */
static void reset_calloc(void) {
  locus_heap_config_t c = cfg_default();
  locus_heap_t *h = locus_heap_create(&c);
  size_t sizes[] = {40, 3000, 20000, 300000, 2 * MiB};
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
      for (int k = 0; k < 4; k++) memset(locus_heap_malloc(h, sizes[i]), 0xee, sizes[i]);
    locus_heap_reset(h);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
      for (int k = 0; k < 4; k++) {
        unsigned char *z = locus_heap_calloc(h, 1, sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++) CHECK(!z[j], "calloc after reset: byte %zu of %zu", j, sizes[i]);
        memset(z, 0xee, sizes[i]);
      }
    locus_heap_reset(h);
  }
  locus_heap_destroy(h);
}

/* ---- arenas: the bump's blocks ------------------------------------------- */
static void arena_blocks(void) {
  locus_heap_config_t c = cfg_default();
  c.flags = LOCUS_HEAP_ARENA;
  c.name = "arena-blocks";
  locus_heap_t *h = locus_heap_create(&c);
  for (int round = 0; round < 3; round++) {
    char *p[64];
    for (int i = 0; i < 64; i++) {
      size_t n = (size_t)i * 977 + 1;
      p[i] = locus_heap_malloc(h, n);
      CHECK(p[i] && ((uintptr_t)p[i] & 15) == 0, "arena block aligned");
      CHECK(malloc_usable_size(p[i]) >= n && locus_heap_of(p[i]) == h, "usable and heap_of");
      memset(p[i], 0xcd, n);
    }
    for (int i = 1; i < 64; i++) CHECK((unsigned char)p[i - 1][0] == 0xcd, "no overlap");
    char *z = locus_heap_calloc(h, 1, 50000);
    for (size_t k = 0; k < 50000; k++) CHECK(!z[k], "arena calloc zero (round %d)", round);
    memset(z, 0xee, 50000);
    char *a = locus_heap_aligned_alloc(h, 4096, 100);
    CHECK(a && ((uintptr_t)a & 4095) == 0 && locus_heap_of(a) == h, "arena aligned");
    char *big = locus_heap_malloc(h, 3 * MiB);       /* a large block, dropped with the arena */
    CHECK(big && locus_heap_of(big) == h, "arena large block");
    ifill(p[5], 100);
    char *q = realloc(p[5], 200000);                 /* moves; the old block stays */
    CHECK(q && locus_heap_of(q) == h && iverify(q, 100), "arena realloc");
    CHECK(realloc(q, 10) == q, "arena shrink stays");
    locus_heap_reset(h);
  }
  locus_stats_t st;
  locus_heap_stats(h, &st);
  CHECK(st.bytes_in_use >= 4 * MiB && st.bytes_in_use <= 12 * MiB, "reset keeps the arena chunks: %llu",
        (unsigned long long)st.bytes_in_use);
  locus_heap_destroy(h);
}

/* ---- a heap used by several threads: a sub-heap each ---------------------- */
static locus_heap_t *multi;
static pthread_barrier_t multi_bar;
static void *multi_thread(void *arg) {
  for (int i = 0; i < 1000; i++) CHECK(locus_heap_malloc(multi, 64), "thread alloc");
  void *p = locus_heap_malloc(multi, 100);
  pthread_barrier_wait(&multi_bar);      /* all four alive at once: four default heaps */
  return p;
}

static void sub_heaps(void) {
  locus_heap_config_t c = cfg_default();
  c.limit = 24 * MiB;
  multi = locus_heap_create(&c);
  pthread_barrier_init(&multi_bar, NULL, 4);
  pthread_t t[4];
  void *r[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, multi_thread, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], &r[i]);
  locus_stats_t st;
  locus_heap_stats(multi, &st);
  CHECK(st.heaps_live == 4 && st.cache_hits == 4004, "4 sub-heaps (%llu), 4004 blocks (%llu)",
        (unsigned long long)st.heaps_live, (unsigned long long)st.cache_hits);
  for (int i = 0; i < 4; i++) free(r[i]);          /* blocks of exited threads' sub-heaps */
  /* the limit counts every sub-heap: 4 threads' chunks hold 16 MiB, room for 2 more chunks */
  int n = 0;
  while (locus_heap_malloc(multi, 1000000) && n < 100) n++;
  CHECK(errno == ENOMEM && n >= 1 && n < 24, "the limit over all sub-heaps: %d large blocks", n);
  locus_heap_destroy(multi);
}

/* ---- capture --------------------------------------------------------------- */
static void capture(void) {
  locus_heap_config_t c = cfg_default();
  locus_heap_t *h = locus_heap_create(&c), *h2 = locus_heap_create(&c);
  char *before = malloc(32);
  CHECK(locus_heap_capture(h) == NULL, "no capture before");
  char *a = malloc(32), *b = calloc(10, 1000), *d = malloc(5 * MiB), *s = strdup("captured");
  void *al = aligned_alloc(4096, 4096);
  CHECK(locus_heap_of(a) == h && locus_heap_of(b) == h && locus_heap_of(d) == h, "malloc, calloc captured");
  CHECK(locus_heap_of(s) == h, "a library's malloc (strdup) captured");
  CHECK(locus_heap_of(al) == h && ((uintptr_t)al & 4095) == 0, "aligned_alloc captured");
  char *r = realloc(before, 5000);                   /* an old block stays in the default heap */
  CHECK(locus_heap_of(r) == NULL, "realloc of a default block stays default");
  CHECK(locus_heap_capture(h2) == h, "nested capture returns the previous");
  char *e = malloc(10);
  CHECK(locus_heap_of(e) == h2, "second heap");
  CHECK(locus_heap_capture(h) == h2, "back");
  CHECK(locus_heap_capture(NULL) == h, "restore");
  char *f = malloc(10);
  CHECK(locus_heap_of(f) == NULL, "default again");
  free(a), free(b), free(d), free(s), free(al), free(r), free(e), free(f);
  locus_heap_destroy(h);
  locus_heap_destroy(h2);
}

static void *capture_exit(void *arg) {
  locus_heap_capture(arg);
  free(malloc(100));
  return malloc(64);                     /* the thread exits captured */
}

static void capture_thread_exit(void) {
  locus_heap_config_t c = cfg_default();
  locus_heap_t *h = locus_heap_create(&c);
  pthread_t t;
  void *p;
  pthread_create(&t, NULL, capture_exit, h);
  pthread_join(t, &p);
  CHECK(locus_heap_of(p) == h, "thread's block in h");
  free(p);
  locus_heap_destroy(h);                 /* the exit ended the capture: no abort */
}

/* ---- many threads on one heap ------------------------------------------- */
static locus_heap_t *shared;
static void *_Atomic slots[1024];
static void *churn(void *arg) {
  uint64_t s = (uintptr_t)arg;
  for (int i = 0; i < 200000; i++) {
    s = s * 6364136223846793005u + 1442695040888963407u;
    size_t size = (s >> 33) % 3 == 0 ? 16 + (s >> 40) % 20000 : 16 + (s >> 40) % 200;
    void *p = locus_heap_malloc(shared, size);
    CHECK(p, "shared malloc");
    *(size_t *)p = size;
    void *old = atomic_exchange(&slots[(s >> 20) % 1024], p);
    if (old) free(old);
  }
  return NULL;
}

static void threads_one_heap(void) {
  locus_heap_config_t c = cfg_default();
  shared = locus_heap_create(&c);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i * 977 + 1));
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 1024; i++)
    if (slots[i]) free(slots[i]), slots[i] = NULL;
  locus_heap_destroy(shared);
}

/* ---- misuse: each in a child, which must abort naming the heap ----------- */
static void expect_abort(void (*fn)(void), const char *needle) {
  int pfd[2];
  CHECK(pipe(pfd) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 2);
    fn();
    _exit(0);
  }
  close(pfd[1]);
  char buf[4096] = {0};
  size_t got = 0;
  ssize_t k;
  while ((k = read(pfd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)k;
  close(pfd[0]);
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: child did not abort (%s)", needle, buf);
  CHECK(strstr(buf, needle), "message '%s' lacks '%s'", buf, needle);
}

static locus_heap_t *named(const char *name, unsigned flags) {
  locus_heap_config_t c = cfg_default();
  c.name = name;
  c.flags = flags;
  return locus_heap_create(&c);
}
static void m_arena_free(void) { free(locus_heap_malloc(named("arena-a", LOCUS_HEAP_ARENA), 40)); }
static void m_arena_free_large(void) { free(locus_heap_malloc(named("arena-b", LOCUS_HEAP_ARENA), 4 * MiB)); }
static void m_arena_free_medium(void) { free(locus_heap_malloc(named("arena-c", LOCUS_HEAP_ARENA), 40000)); }
static void m_destroy_twice(void) {
  locus_heap_t *h = named("twice", 0);
  locus_heap_destroy(h);
  locus_heap_destroy(h);
}
static void m_alloc_destroyed(void) {
  locus_heap_t *h = named("gone", 0);
  locus_heap_destroy(h);
  locus_heap_malloc(h, 10);
}
static void m_capture_destroyed(void) {
  locus_heap_t *h = named("gone-capture", 0);
  locus_heap_destroy(h);
  locus_heap_capture(h);
}
static void m_destroy_captured(void) {
  locus_heap_t *h = named("held", 0);
  locus_heap_capture(h);
  locus_heap_capture(NULL);
  locus_heap_capture(h);
  locus_heap_destroy(h);
}
/* A stale handle of a heap destroyed long ago, its record reused since by
 * a live heap (white box: a handle's low 48 bits are its record's address)
 * still names the destroy, not the heap now there. */
static void stale_after_reuse(void (*use)(locus_heap_t *)) {
  locus_heap_t *old = named("long-gone", 0), *now = NULL;
  locus_heap_destroy(old);
  uintptr_t mask = ((uintptr_t)1 << 48) - 1;
  for (int i = 0; i < 100000 && !now; i++) {   /* create and destroy: the dead queue turns */
    locus_heap_t *h = named("current", 0);
    if (((uintptr_t)h & mask) == ((uintptr_t)old & mask)) now = h;
    else locus_heap_destroy(h);
  }
  CHECK(now && now != old, "the record was reused");
  use(old);
}
static void destroy(locus_heap_t *h) { locus_heap_destroy(h); }
static void malloc_from(locus_heap_t *h) { locus_heap_malloc(h, 10); }
static void m_destroy_after_reuse(void) { stale_after_reuse(destroy); }
static void m_malloc_after_reuse(void) { stale_after_reuse(malloc_from); }
/* The stale handle's record reused by a heap that was destroyed in turn:
 * the message must not name that later heap ('current'). */
static void destroy_current_then_use(locus_heap_t *old) {
  /* white box: 'current' has old's record, one generation later */
  locus_heap_t *cur = (locus_heap_t *)((uintptr_t)old + ((uintptr_t)1 << 48));
  CHECK(strcmp(locus_heap_name(cur), "current") == 0, "the record's next generation");
  locus_heap_destroy(cur);
  locus_heap_malloc(old, 10);
}
static void m_stale_after_two_lives(void) { stale_after_reuse(destroy_current_then_use); }
static void *null_heap_thread(void *arg) {
  (void)arg;
  locus_heap_malloc(NULL, 10);        /* a thread that never used a heap: no sub-heap cached */
  return NULL;
}
static void m_malloc_null_fresh_thread(void) {
  pthread_t t;
  pthread_create(&t, NULL, null_heap_thread, NULL);
  pthread_join(t, NULL);
}
static void m_double_free(void) {
  locus_heap_t *h = named("df", 0);
  void *p = locus_heap_malloc(h, 64);
  free(p);
  free(p);
}

static void misuse(void) {
  expect_abort(m_arena_free, "arena heap 'arena-a'");
  expect_abort(m_arena_free_large, "arena heap 'arena-b'");
  expect_abort(m_arena_free_medium, "arena heap 'arena-c'");
  expect_abort(m_destroy_twice, "heap 'twice'");
  expect_abort(m_alloc_destroyed, "heap 'gone'");
  expect_abort(m_capture_destroyed, "heap 'gone-capture'");
  expect_abort(m_destroy_captured, "heap 'held'");
  expect_abort(m_double_free, "double free");
  expect_abort(m_destroy_after_reuse, "locus_heap_destroy(): heap handle");
  expect_abort(m_malloc_after_reuse, "locus_heap_malloc(): heap handle");
  expect_abort(m_stale_after_two_lives, "is stale (its heap was destroyed)");
  expect_abort(m_malloc_null_fresh_thread, "locus_heap_malloc(): NULL heap");
  /* a live heap's handle is stable: the same from create, of and capture */
  {
    locus_heap_t *a = named("stable", 0);
    void *p = locus_heap_malloc(a, 10);
    CHECK(locus_heap_of(p) == a && locus_heap_capture(a) == NULL && locus_heap_capture(NULL) == a, "handles");
    locus_heap_destroy(a);
  }
  /* arena: realloc works, reset releases */
  locus_heap_t *h = named("arena-ok", LOCUS_HEAP_ARENA);
  for (int r = 0; r < 3; r++) {
    char *p = locus_heap_malloc(h, 100);
    ifill(p, 100);
    p = realloc(p, 100000);
    CHECK(p && iverify(p, 100) && locus_heap_of(p) == h, "arena realloc");
    locus_heap_reset(h);
  }
  locus_heap_destroy(h);
}

/* ---- fork: the child uses the heap -------------------------------------- */
static void fork_child(void) {
  locus_heap_t *h = named("forked", 0);
  void *p = locus_heap_malloc(h, 100);
  pid_t pid = fork();
  if (pid == 0) {
    free(p);
    for (int i = 0; i < 1000; i++) free(locus_heap_malloc(h, (size_t)i * 37 + 1));
    locus_heap_destroy(h);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child used the heap");
  free(p);
  locus_heap_destroy(h);
}

int main(void) {
  basic();
  bad_configs();
  long_path_segment();
  guarded_exhaustion();
  spare_chunk();
  untyped_chunks();
  exited_threads();
  live_thread_chunk();
  churn_at_bound();
  map_into_full_heap();
  limit_exact();
  user_source();
  million();
  reset_calloc();
  arena_blocks();
  sub_heaps();
  capture();
  capture_thread_exit();
  threads_one_heap();
  misuse();
  fork_child();
  return TEST_DONE();
}
