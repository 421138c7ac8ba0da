/* Memory sources: closest-size reuse with mremap, profile bounds, release,
 * calloc zeroing of recycled memory, settings from the environment. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"
#include "source/source.h"

static locus_stats_t stats(void) {
  locus_stats_t s;
  locus_stats_get(&s);
  return s;
}

#define MB (1u << 20)

static void test_reuse_without_faults(void) {
  locus_set_profile("uma");
  locus_release();
  char *a = malloc(32 * MB);
  memset(a, 1, 32 * MB);
  free(a);
  locus_stats_t s0 = stats();
  CHECK(s0.bytes_cached >= 32 * MB, "freed block cached (%lu)", (unsigned long)s0.bytes_cached);
  /* smaller request: split from the cached block, no new mapping */
  char *b = malloc(8 * MB);
  locus_stats_t s1 = stats();
  CHECK(s1.mmap_calls == s0.mmap_calls && s1.cache_hits == s0.cache_hits + 1, "8 MiB served from the cache");
  /* pages came back without a fault: they are resident already */
  unsigned char vec[8 * MB / 4096];
  CHECK(mincore((void *)((uintptr_t)b & ~(uintptr_t)4095), 8 * MB, vec) == 0, "mincore");
  size_t resident = 0;
  for (size_t i = 0; i < sizeof vec; i++) resident += vec[i] & 1;
  CHECK(resident > sizeof vec * 9 / 10, "recycled pages resident (%zu of %zu)", resident, sizeof vec);
  free(b);
  /* larger request: grow the closest cached block with mremap */
  locus_stats_t s2 = stats();
  char *c = malloc(48 * MB);
  locus_stats_t s3 = stats();
  /* A huge-page segment (LOCUS_THP) that cannot grow in place moves to a
   * 2 MiB boundary: one mmap reserves the destination, mremap fills it. */
  CHECK(s3.mremap_calls == s2.mremap_calls + 1 && s3.mmap_calls <= s2.mmap_calls + 1 &&
        s3.cache_hits == s2.cache_hits + 1 && s3.cache_misses == s2.cache_misses,
        "48 MiB grown from cache by mremap (mremap +%lu, mmap +%lu, hits +%lu, misses +%lu)",
        (unsigned long)(s3.mremap_calls - s2.mremap_calls), (unsigned long)(s3.mmap_calls - s2.mmap_calls),
        (unsigned long)(s3.cache_hits - s2.cache_hits), (unsigned long)(s3.cache_misses - s2.cache_misses));
  memset(c, 2, 48 * MB);
  free(c);
}

/* Small chunks start on a multiple of their size (SRC_ALIGNED): cut from a
 * cached segment that holds such a window, the pieces around it kept
 * cached when a slice or longer; else mapped fresh. */
static void test_aligned_window(void) {
  locus_set_profile("uma");
  locus_release();
  source_t *s = source_for_node(SOURCE_GENERIC);
  size_t seg = 13 * MB;
  region_t *r = source_alloc(s, seg, SRC_EXACT);
  CHECK(r && r->size == seg, "13 MiB region");
  uintptr_t base = (uintptr_t)r;
  source_free(r);
  CHECK(locus_cached_bytes() == seg, "the region is cached (%zu)", locus_cached_bytes());
  locus_stats_t s0 = stats();
  region_t *c = source_alloc(s, CHUNK_SIZE, SRC_EXACT | SRC_ALIGNED);
  locus_stats_t s1 = stats();
  CHECK(c && c->size == CHUNK_SIZE && (uintptr_t)c % CHUNK_SIZE == 0, "aligned chunk (%p)", (void *)c);
  CHECK((uintptr_t)c >= base && (uintptr_t)c + CHUNK_SIZE <= base + seg, "cut from the cached segment");
  CHECK(s1.mmap_calls == s0.mmap_calls && s1.cache_hits == s0.cache_hits + 1, "no new mapping");
  size_t head = (uintptr_t)c - base, tail = seg - head - CHUNK_SIZE;
  size_t kept = (head >= SLICE_SIZE ? head : 0) + (tail >= SLICE_SIZE ? tail : 0);
  CHECK(locus_cached_bytes() == kept, "the pieces around the window stay cached (%zu, expected %zu)",
        locus_cached_bytes(), kept);
  source_free(c);
  CHECK(locus_cached_bytes() == kept + CHUNK_SIZE, "the chunk is cached again");
  /* no cached segment holds a window: a fresh mapping on the boundary */
  locus_release();
  locus_stats_t s2 = stats();
  c = source_alloc(s, CHUNK_SIZE, SRC_EXACT | SRC_ALIGNED);
  locus_stats_t s3 = stats();
  CHECK(c && (uintptr_t)c % CHUNK_SIZE == 0 && s3.cache_misses == s2.cache_misses + 1, "fresh aligned chunk");
  memset((char *)c + sizeof *c, 7, CHUNK_SIZE - sizeof *c);   /* all of it is mapped */
  source_free(c);
  locus_release();
}

static void test_calloc_recycled(void) {
  locus_set_profile("uma");
  size_t sizes[] = {2 * MB, 5 * MB + 12345, 33 * MB};
  for (int round = 0; round < 4; round++)
    for (int i = 0; i < 3; i++) {
      unsigned char *p = calloc(1, sizes[i]);
      CHECK(p, "calloc");
      for (size_t j = 0; j < sizes[i]; j += 97) CHECK(p[j] == 0, "calloc(%zu)[%zu] = %d round %d", sizes[i], j, p[j], round);
      CHECK(p[sizes[i] - 1] == 0, "last byte");
      /* dirty part of it (some pages resident, some not) and free: recycled next round */
      for (size_t j = 0; j < sizes[i]; j += (round + 1) * 8192) p[j] = 0xEE;
      free(p);
    }
}

static void test_realloc_mremap(void) {
  locus_stats_t s0 = stats();
  char *p = malloc(1024);
  memset(p, 3, 1024);
  size_t n = 1024;
  while (n < 64 * MB) {
    p = realloc(p, n * 2);
    CHECK(p && p[0] == 3 && p[n - 1] == 3, "growing realloc to %zu", n * 2);
    memset(p + n, 3, n);
    n *= 2;
  }
  locus_stats_t s1 = stats();
  CHECK(s1.mremap_calls > s0.mremap_calls, "large reallocs use mremap");
  free(p);
}

/* Growth served by copying into a cached segment keeps every usable byte,
 * not only the requested ones. */
static void test_realloc_keeps_usable(void) {
  locus_set_profile("uma");
  char *big = malloc(48 * MB);
  memset(big, 0, 48 * MB);
  free(big);
  char *p = malloc(3 * MB);
  size_t u = malloc_usable_size(p);
  CHECK(u >= 3 * MB, "usable");
  memset(p, 0x5A, u);
  locus_stats_t s0 = stats();
  char *q = realloc(p, 40 * MB);
  locus_stats_t s1 = stats();
  CHECK(q, "realloc");
  CHECK(s1.cache_hits > s0.cache_hits && s1.mremap_calls == s0.mremap_calls, "growth copied into a cached segment");
  for (size_t i = 0; i < u; i += 512) CHECK(q[i] == 0x5A, "byte %zu of %zu usable lost", i, u);
  CHECK(q[u - 1] == 0x5A, "last usable byte lost");
  free(q);
}

/* A block carved from the head of a cached segment grows over the rest of
 * that segment in place: same address, no system call. */
static void test_realloc_extends_in_place(void) {
  locus_set_profile("uma");
  locus_release();
  char *big = malloc(64 * MB);
  memset(big, 0, 64 * MB);
  free(big);
  char *p = malloc(2 * MB);
  memset(p, 0x33, 2 * MB);
  locus_stats_t s0 = stats();
  char *q = realloc(p, 40 * MB);
  locus_stats_t s1 = stats();
  CHECK(q == p, "grown in place (%p -> %p)", (void *)p, (void *)q);
  CHECK(s1.mmap_calls == s0.mmap_calls && s1.mremap_calls == s0.mremap_calls, "no system call");
  for (size_t i = 0; i < 2 * MB; i += 1000) CHECK(q[i] == 0x33, "content at %zu", i);
  CHECK(malloc_usable_size(q) >= 40 * MB, "usable after growth");
  memset(q, 1, 40 * MB);
  free(q);
}

static void test_profiles(void) {
  locus_set_profile("uma");
  for (int i = 0; i < 8; i++) {
    char *p = malloc(40 * MB);
    memset(p, 4, 40 * MB);
    free(p);
  }
  CHECK(locus_cached_bytes() > 0 && locus_cached_bytes() <= 500u * MB, "uma bound");
  size_t before = rss_kib();
  size_t released = locus_release();
  size_t after = rss_kib();
  CHECK(released >= 40 * MB && locus_cached_bytes() == 0, "release %zu", released);
  CHECK(after + 30 * 1024 < before, "RSS must go down on release: %zu -> %zu KiB", before, after);
  CHECK(locus_set_profile("eco") == 0, "eco");
  char *p = malloc(40 * MB);
  free(p);
  CHECK(locus_cached_bytes() == 0, "eco caches nothing");
  /* switching to a profile with a smaller bound trims at once */
  locus_set_profile("uma");
  p = malloc(40 * MB);
  free(p);
  CHECK(locus_cached_bytes() >= 40 * MB, "cached in uma");
  locus_set_profile("eco");
  CHECK(locus_cached_bytes() == 0, "switch to eco trims");
  locus_set_profile("numa");
  CHECK(strcmp(locus_get_profile(), "numa") == 0, "numa");
  p = malloc(40 * MB);
  free(p);
  CHECK(locus_cached_bytes() >= 40 * MB, "numa caches (one node: like uma)");
  locus_set_profile("uma");
}

/* Runs this test binary with an environment and a mode; returns its stderr. */
static void run_child(const char *env, const char *mode, char *out, size_t len) {
  char cmd[1024];
  char self[512];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0, "readlink");
  self[n] = 0;
  /* LOCUS_TEST_EMULATOR: cross builds run the child under qemu-user too (tests/cross) */
  const char *emu = getenv("LOCUS_TEST_EMULATOR");
  snprintf(cmd, sizeof cmd, "env %s %s %s %s 2>&1", env, emu ? emu : "", self, mode);
  FILE *f = popen(cmd, "r");
  CHECK(f, "popen");
  size_t got = fread(out, 1, len - 1, f);
  out[got] = 0;
  CHECK(pclose(f) == 0, "child %s %s failed: %s", env, mode, out);
}

static void test_environment(void) {
  char out[4096];
  run_child("LOCUS_CACHE_MAX=12X", "--print-config", out, sizeof out);
  CHECK(strstr(out, "LOCUS_CACHE_MAX=\"12X\"") && strstr(out, "warning"), "warning for a bad size: %s", out);
  CHECK(strstr(out, "using the default 500M") && strstr(out, "T suffix"), "warning names the real default and T: %s", out);
  CHECK(strstr(out, "profile=auto cached_max_ok"), "default kept: %s", out);
  /* uma (no longer the default) keeps its bound too: the cached half of the check */
  run_child("LOCUS_PROFILE=uma LOCUS_CACHE_MAX=12X", "--print-config", out, sizeof out);
  CHECK(strstr(out, "profile=uma cached_max_ok"), "uma's default bound kept: %s", out);
  run_child("LOCUS_PROFILE=fast", "--print-config", out, sizeof out);
  CHECK(strstr(out, "LOCUS_PROFILE=\"fast\"") && strstr(out, "profile=auto"), "bad profile falls back to the default: %s", out);
  run_child("LOCUS_PROFILE=eco LOCUS_LARGE_THRESHOLD=2M", "--print-config", out, sizeof out);
  CHECK(!strstr(out, "warning") && strstr(out, "profile=eco"), "eco: %s", out);
  run_child("LOCUS_STATS=1", "--noop", out, sizeof out);
  char title[64];
  snprintf(title, sizeof title, "locus %s statistics", locus_version());
  CHECK(strstr(out, title) && strstr(out, "source generic"), "LOCUS_STATS report: %s", out);
  run_child("LOCUS_LAZY_RELEASE=maybe", "--noop", out, sizeof out);
  CHECK(strstr(out, "LOCUS_LAZY_RELEASE"), "bad boolean warned: %s", out);
}

static int print_config(void) {
  char json[4096];
  free(malloc(1));
  locus_stats_json(json, sizeof json);
  /* the default bound must have survived a bad LOCUS_CACHE_MAX (and, under
   * uma, still cache a 40 MB block) */
  char v[32];
  bool bound = locus_option_get("cache_max", v, sizeof v) > 0 && !strcmp(v, "500M");
  char *p = malloc(40 * MB);
  free(p);
  bool cached = locus_cached_bytes() >= 40 * MB || strcmp(locus_get_profile(), "uma");
  printf("profile=%s %s\n", locus_get_profile(), bound && cached ? "cached_max_ok" : "cached_max_bad");
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--print-config")) return print_config();
  if (argc > 1 && !strcmp(argv[1], "--noop")) return 0;
  test_reuse_without_faults();
  test_aligned_window();
  test_calloc_recycled();
  test_realloc_mremap();
  test_realloc_keeps_usable();
  test_realloc_extends_in_place();
  test_profiles();
  test_environment();
  return TEST_DONE();
}
