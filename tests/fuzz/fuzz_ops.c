/*
 * libFuzzer target: the input bytes are a program of allocator operations,
 * run against locus (locus_* names, from a -DLOCUS_NO_OVERRIDE=1 build) and
 * checked against a shadow model of the live blocks.
 *
 * Each operation is one opcode byte, one slot byte, then its own operands
 * (sizes, alignments, counts) read from the following bytes; running out of
 * bytes ends the program (missing operand bytes read as 0). The model holds up
 * to NSLOTS blocks: pointer, requested size, bytes covered by the pattern,
 * random tag, kind and alignment. Every block is filled with a pattern derived
 * from its address, size and tag and checked before it is freed, reallocated
 * or handed to another thread; alignment, usable size, calloc zeroing, the
 * preserved prefix of realloc, and the error returns (EINVAL/ENOMEM) of bad
 * requests are checked too. A failed check calls abort() so that libFuzzer
 * saves the input.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt):
 *   fuzz_ops     clang -fsanitize=fuzzer,address,undefined (libFuzzer main)
 *   fuzz_replay  any compiler, with FUZZ_STANDALONE_MAIN: replays input files
 *                and directories (tests/fuzz/regressions/) and, with
 *                --random N, N pseudo-random inputs.
 */
#define _GNU_SOURCE 1
#include "locus.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NSLOTS 32
#define MAX_SIZE ((size_t)4 << 20)
#define FULL_FILL_LIMIT ((size_t)64 << 10) /* above this, fill head, tail and a stripe per page */

/* ------------------------------------------------------------------------ */

typedef struct {
  const uint8_t *d;
  size_t n, pos;
} reader_t;

static uint8_t rd8(reader_t *r) { return r->pos < r->n ? r->d[r->pos++] : 0; }
static uint16_t rd16(reader_t *r) { uint16_t v = rd8(r); return (uint16_t)(v | (uint16_t)rd8(r) << 8); }
static bool more(const reader_t *r) { return r->pos < r->n; }

enum kind { K_MALLOC, K_CALLOC, K_REALLOC, K_REALLOCARRAY, K_POSIX_MEMALIGN, K_ALIGNED_ALLOC,
            K_MEMALIGN, K_VALLOC, K_PVALLOC, K_THREAD };

typedef struct {
  unsigned char *p; /* NULL: empty slot */
  size_t size;
  size_t filled;
  uint64_t tag;
  size_t align;     /* power of two asked for, 0 if none */
  int kind;
  bool used;        /* slot holds a block (p may still be NULL for size 0) */
} blk_t;

static blk_t slots[NSLOTS];
static uint64_t tag_state;
static size_t page_size;

static void die(const char *what, const blk_t *b) __attribute__((noreturn));
static void die(const char *what, const blk_t *b) {
  fprintf(stderr, "fuzz_ops: CHECK FAILED: %s", what);
  if (b) fprintf(stderr, " [block %p size=%zu filled=%zu kind=%d align=%zu]", (void *)b->p, b->size, b->filled, b->kind, b->align);
  fprintf(stderr, "\n");
  abort();
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t new_tag(void) { return mix64(tag_state += 0x9E3779B97F4A7C15ull); }

static uint64_t seed_of(const unsigned char *p, size_t size, uint64_t tag) {
  return mix64((uint64_t)(uintptr_t)p ^ (uint64_t)size * 0xA0761D6478BD642Full ^ tag);
}

static inline unsigned char pat(uint64_t seed, size_t i) {
  uint64_t w = seed + (uint64_t)(i / 8 + 1) * 0x9E3779B97F4A7C15ull;
  return (unsigned char)(w >> (8 * (i % 8)));
}

/* The byte ranges of a block of n bytes that carry the pattern. */
typedef void (*range_fn)(unsigned char *p, size_t from, size_t to, uint64_t seed, void *arg);

static void for_ranges(unsigned char *p, size_t n, uint64_t seed, range_fn fn, void *arg) {
  if (n <= FULL_FILL_LIMIT) {
    fn(p, 0, n, seed, arg);
    return;
  }
  fn(p, 0, 4096, seed, arg);
  for (size_t off = 4096; off + 64 <= n - 4096; off += page_size) fn(p, off, off + 64, seed, arg);
  fn(p, n - 4096, n, seed, arg);
}

static void fill_range(unsigned char *p, size_t from, size_t to, uint64_t seed, void *arg) {
  (void)arg;
  for (size_t i = from; i < to; i++) p[i] = pat(seed, i);
}

typedef struct { size_t limit; size_t bad; } check_arg_t;

static void check_range(unsigned char *p, size_t from, size_t to, uint64_t seed, void *argp) {
  check_arg_t *a = argp;
  if (to > a->limit) to = a->limit;
  for (size_t i = from; i < to && a->bad == SIZE_MAX; i++)
    if (p[i] != pat(seed, i)) a->bad = i;
}

static void fill(blk_t *b) {
  b->tag = new_tag();
  for_ranges(b->p, b->filled, seed_of(b->p, b->size, b->tag), fill_range, NULL);
}

static void verify(const blk_t *b) {
  if (!b->p) return;
  check_arg_t a = { b->filled, SIZE_MAX };
  for_ranges(b->p, b->filled, seed_of(b->p, b->size, b->tag), check_range, &a);
  if (a.bad != SIZE_MAX) die("pattern mismatch (corrupted or overlapping block)", b);
}

/* A fresh block: checks, then fill. */
static void adopt(blk_t *b, void *p, size_t size, int kind, size_t align) {
  b->p = p;
  b->size = size;
  b->kind = kind;
  b->align = align;
  b->used = true;
  if (!p) {
    if (size) die("allocation returned NULL", b);
    b->filled = 0;
    return;
  }
  size_t need = align ? align : (size >= 16 ? 16 : size >= 8 ? 8 : 1);
  if ((uintptr_t)p % need) die("misaligned block", b);
  size_t usable = locus_usable_size(p);
  if (usable < size) die("usable size < requested size", b);
  if (kind == K_PVALLOC && usable < (size + page_size - 1) / page_size * page_size)
    die("pvalloc usable size < page-rounded size", b);
  b->filled = usable;
  fill(b);
}

static void release(blk_t *b, bool sized) {
  verify(b);
  if (sized && b->p) {
    if (b->align) locus_free_aligned_sized(b->p, b->align, b->size);
    else locus_free_sized(b->p, b->size);
  } else {
    locus_free(b->p);
  }
  memset(b, 0, sizeof *b);
}

static size_t rd_size(reader_t *r) {
  uint8_t c = rd8(r);
  uint16_t v = rd16(r);
  size_t s;
  if (c < 128) s = v & 0xff;                           /* 0 .. 255 */
  else if (c < 200) s = v & 0x3fff;                    /* .. 16 KiB */
  else if (c < 245) s = (size_t)(v & 0x3fff) << 4;     /* .. 256 KiB */
  else s = (size_t)v << 6;                             /* .. 4 MiB */
  if (s > MAX_SIZE) s = MAX_SIZE;
  return s;
}

static bool all_zero(const unsigned char *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    if (w) return false;
  }
  for (; i < n; i++)
    if (p[i]) return false;
  return true;
}

static bool is_pow2(size_t a) { return a && !(a & (a - 1)); }

/* An alignment: mostly powers of two 1 .. 2 MiB, sometimes an arbitrary value. */
static size_t rd_align(reader_t *r) {
  uint8_t b = rd8(r);
  if (b < 0xe0) return (size_t)1 << (b % 22);
  return rd16(r);
}

/* ------------------------------------------------------------------------ */
/* Another thread: remote frees and reallocs, and blocks from exited threads. */

static pthread_mutex_t hm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hcv = PTHREAD_COND_INITIALIZER;
static blk_t *hjob;       /* block to free or reallocate */
static size_t hjob_size;  /* SIZE_MAX: free; else realloc to this size */
static bool hbusy, hstarted;

static void do_realloc(blk_t *b, size_t nsize, bool arr, size_t n);

static void *helper(void *arg) {
  (void)arg;
  pthread_mutex_lock(&hm);
  for (;;) {
    while (!hbusy) pthread_cond_wait(&hcv, &hm);
    if (hjob_size == SIZE_MAX) release(hjob, false);
    else do_realloc(hjob, hjob_size, false, 0);
    hbusy = false;
    pthread_cond_broadcast(&hcv);
  }
  return NULL;
}

static void on_helper(blk_t *b, size_t nsize) {
  pthread_mutex_lock(&hm);
  if (!hstarted) {
    pthread_t t;
    if (pthread_create(&t, NULL, helper, NULL) != 0) die("pthread_create", NULL);
    pthread_detach(t);
    hstarted = true;
  }
  hjob = b;
  hjob_size = nsize;
  hbusy = true;
  pthread_cond_broadcast(&hcv);
  while (hbusy) pthread_cond_wait(&hcv, &hm);
  pthread_mutex_unlock(&hm);
}

typedef struct { reader_t *r; int first, count; } spawn_t;

static void *spawned(void *arg) {
  spawn_t *s = arg;
  for (int i = 0; i < s->count; i++) {
    blk_t *b = &slots[(s->first + i) % NSLOTS];
    if (b->used) continue;
    size_t size = rd_size(s->r);
    adopt(b, locus_malloc(size), size, K_THREAD, 0);
  }
  if (rd8(s->r) & 1) locus_collect();
  return NULL; /* the thread exits; its heap keeps the blocks */
}

/* ------------------------------------------------------------------------ */

static void do_realloc(blk_t *b, size_t nsize, bool arr, size_t n) {
  verify(b);
  blk_t old = *b;
  uint64_t oseed = seed_of(old.p, old.size, old.tag);
  void *p;
  if (arr) {
    if (n == 0) n = 1;
    size_t each = nsize / n;
    nsize = n * each;
    p = locus_reallocarray(old.p, n, each);
  } else {
    p = locus_realloc(old.p, nsize);
  }
  if (!p) {
    if (nsize == 0 && old.p) { memset(b, 0, sizeof *b); return; } /* realloc(p, 0) freed p */
    if (nsize == 0) { adopt(b, NULL, 0, K_REALLOC, 0); return; }
    die("realloc returned NULL", &old);
  }
  size_t keep = old.size < nsize ? old.size : nsize;
  if (old.p) {
    check_arg_t a = { keep, SIZE_MAX };
    for_ranges(p, old.filled, oseed, check_range, &a);
    if (a.bad != SIZE_MAX) die("realloc lost part of the preserved prefix", &old);
  }
  adopt(b, p, nsize, arr ? K_REALLOCARRAY : K_REALLOC, 0);
}

static void run(const uint8_t *data, size_t size) {
  reader_t rr = { data, size, 0 }, *r = &rr;
  if (!page_size) page_size = (size_t)sysconf(_SC_PAGESIZE);
  tag_state = 0x1234;
  /* Start every input from the same state as far as possible: the cached
   * segments of the memory sources would otherwise carry over from earlier
   * inputs and a saved crash might not replay. */
  locus_set_profile("uma");
  (void)locus_release();
  while (more(r)) {
    uint8_t op = rd8(r) % 20;
    blk_t *b = &slots[rd8(r) % NSLOTS];
    switch (op) {
    case 0: case 1: { /* malloc */
      if (b->used) release(b, false);
      size_t s = rd_size(r);
      adopt(b, locus_malloc(s), s, K_MALLOC, 0);
      break;
    }
    case 2: { /* calloc */
      if (b->used) release(b, false);
      size_t s = rd_size(r), n = rd8(r) % 16 + 1, each = s / n;
      if (rd8(r) & 1) { size_t t = n; n = each; each = t; }
      unsigned char *p = locus_calloc(n, each);
      if (p && !all_zero(p, n * each)) die("calloc memory not zeroed", NULL);
      adopt(b, p, n * each, K_CALLOC, 0);
      break;
    }
    case 3: case 4: /* realloc */
      do_realloc(b, rd_size(r), false, 0);
      break;
    case 5: /* reallocarray */
      do_realloc(b, rd_size(r), true, rd8(r) % 16);
      break;
    case 6: { /* posix_memalign, including invalid alignments */
      if (b->used) release(b, false);
      size_t a = rd_align(r), s = rd_size(r);
      void *p = (void *)&slots; /* must stay untouched on error */
      int rc = locus_posix_memalign(&p, a, s);
      bool valid = is_pow2(a) && a % sizeof(void *) == 0;
      if (!valid) {
        if (rc != EINVAL) die("posix_memalign with a bad alignment did not return EINVAL", NULL);
        if (p != (void *)&slots) die("posix_memalign changed *out on error", NULL);
        break;
      }
      if (rc != 0) die("posix_memalign failed", NULL);
      adopt(b, p, s, K_POSIX_MEMALIGN, a);
      break;
    }
    case 7: case 8: { /* aligned_alloc, memalign */
      if (b->used) release(b, false);
      size_t a = rd_align(r), s = rd_size(r);
      void *p = op == 7 ? locus_aligned_alloc(a, s) : locus_memalign(a, s);
      if (!is_pow2(a)) {
        /* glibc 2.36 rounds these up to a power of two; the misuse suite pins
         * down what locus does. Here: a block, if any, must be usable. */
        if (p) adopt(b, p, s, op == 7 ? K_ALIGNED_ALLOC : K_MEMALIGN, 0);
        break;
      }
      adopt(b, p, s, op == 7 ? K_ALIGNED_ALLOC : K_MEMALIGN, a);
      break;
    }
    case 9: { /* valloc, pvalloc */
      if (b->used) release(b, false);
      size_t s = rd_size(r);
      if (rd8(r) & 1) adopt(b, locus_valloc(s), s, K_VALLOC, page_size);
      else adopt(b, locus_pvalloc(s), s, K_PVALLOC, page_size);
      break;
    }
    case 10: case 11: /* free */
      if (b->used) release(b, false);
      break;
    case 12: /* free_sized / free_aligned_sized */
      if (b->used) release(b, true);
      break;
    case 13: /* verify, rewrite */
      if (b->used && b->p) {
        verify(b);
        if (locus_usable_size(b->p) < b->size) die("usable size shrank", b);
        fill(b);
      }
      break;
    case 14: /* free from another thread */
      if (b->used) on_helper(b, SIZE_MAX);
      break;
    case 15: /* realloc from another thread */
      if (b->used) on_helper(b, rd_size(r));
      break;
    case 16: { /* a thread allocates into empty slots, then exits */
      spawn_t s = { r, (int)(b - slots), rd8(r) % 4 + 1 };
      pthread_t t;
      if (pthread_create(&t, NULL, spawned, &s) != 0) die("pthread_create", NULL);
      pthread_join(t, NULL);
      break;
    }
    case 17: { /* requests that must fail */
      uint8_t c = rd8(r) % 4;
      errno = 0;
      void *p = NULL;
      if (c == 0) p = locus_malloc(SIZE_MAX - rd8(r));
      else if (c == 1) p = locus_malloc((size_t)PTRDIFF_MAX + 1 + rd16(r));
      else if (c == 2) p = locus_calloc(SIZE_MAX / 2 + 1 + rd8(r), 2 + rd8(r) % 8);
      else if (b->used && b->p) {
        verify(b);
        p = locus_reallocarray(b->p, SIZE_MAX / 4 + 1, 4 + rd8(r) % 8);
        if (!p) verify(b); /* the old block is untouched */
      } else break;
      if (p) die("an impossible request succeeded", NULL);
      if (errno != ENOMEM) die("an impossible request did not set ENOMEM", NULL);
      break;
    }
    case 18: { /* locus API */
      uint8_t c = rd8(r) % 8;
      if (c < 4) locus_collect();
      else if (c < 6) (void)locus_release();
      else {
        static const char *const prof[] = { "eco", "uma", "numa", "bogus" };
        const char *name = prof[rd8(r) % 4];
        int rc = locus_set_profile(name);
        if ((rc == 0) != (strcmp(name, "bogus") != 0)) die("locus_set_profile result", NULL);
      }
      break;
    }
    default: { /* move a block to another slot */
      blk_t *to = &slots[rd8(r) % NSLOTS];
      if (to != b) {
        if (to->used) release(to, false);
        *to = *b;
        memset(b, 0, sizeof *b);
      }
      break;
    }
    }
  }
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].used) release(&slots[i], false);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  run(data, size);
  return 0;
}

/* ------------------------------------------------------------------------ */
#ifdef FUZZ_STANDALONE_MAIN

static long replayed;

static void replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  size_t k;
  while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) { fprintf(stderr, "fuzz_replay: out of memory\n"); exit(1); }
  printf("fuzz_replay: %s (%zu bytes)\n", path, n);
  fflush(stdout);
  run(buf, n);
  free(buf);
  replayed++;
}

static void replay_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) { perror(path); exit(1); }
  if (!S_ISDIR(st.st_mode)) { replay_file(path); return; }
  DIR *d = opendir(path);
  if (!d) { perror(path); exit(1); }
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (e->d_name[0] == '.' || (l > 3 && !strcmp(e->d_name + l - 3, ".md"))) continue;
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, e->d_name);
    replay_file(full);
  }
  closedir(d);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--random") && i + 1 < argc) {
      /* pseudo-random programs, reproducible from --seed */
      long count = strtol(argv[++i], NULL, 0);
      uint64_t seed = 1;
      if (i + 2 < argc && !strcmp(argv[i + 1], "--seed")) { seed = strtoull(argv[i + 2], NULL, 0); i += 2; }
      printf("fuzz_replay: %ld random inputs, --seed %llu\n", count, (unsigned long long)seed);
      uint8_t buf[4096];
      for (long j = 0; j < count; j++) {
        size_t n = (size_t)(mix64(seed + (uint64_t)j * 7919) % sizeof buf);
        uint64_t s = mix64(seed ^ ((uint64_t)j << 32));
        for (size_t q = 0; q < n; q++) buf[q] = (uint8_t)(mix64(s + q) >> 17);
        run(buf, n);
        replayed++;
      }
    } else {
      replay_path(argv[i]);
    }
  }
  printf("fuzz_replay: %ld inputs replayed, no failure\n", replayed);
  return 0;
}
#endif
