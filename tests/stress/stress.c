/*
 * Randomized multi-threaded stress test of the allocator.
 *
 * Each thread runs a random sequence of operations over every allocation
 * function (malloc, calloc, realloc, reallocarray, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc, free, free_sized) with sizes from 0
 * to several MiB, skewed to small. Every live block is filled with a pattern
 * derived from its address, its size and a random tag, and the pattern is
 * verified before the block is freed or reallocated; a corrupted, overlapping
 * or doubly handed-out block shows up as a pattern mismatch. Each thread keeps
 * a shadow model of its live blocks (pointer, size, kind, alignment, tag) and
 * checks alignment, usable size >= requested size, calloc zeroing and the
 * preserved prefix of realloc against it.
 *
 * Blocks travel between threads through shared slots: a thread swaps one of
 * its blocks into a random slot and takes whatever was there, then frees it
 * (a remote free), reallocates it or keeps it. The run is split into waves of
 * threads; blocks left in the slots by one wave are freed by the next, so heaps
 * of exited threads (orphans) are exercised too.
 *
 * Reproduce a run with the seed printed at start:
 *   stress --seed N --threads T --ops N [--waves W] [--max-size BYTES] ...
 * The per-thread operation sequences are fully determined by the seed; the
 * interleaving of threads is not, so a threaded failure may need a few runs.
 *
 * Exit status: 0 when every check passed; on the first failed check the test
 * prints what it found and aborts.
 */
#define _GNU_SOURCE 1
#include "locus_test_api.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

static uint64_t opt_seed;
static int opt_threads = 4;
static long opt_ops = 100000;          /* per thread, over all waves */
static int opt_waves = 3;
static size_t opt_max_size = 8u << 20; /* largest request */
static int opt_live = 256;             /* max live blocks per thread */
static int opt_slots = 64;             /* shared exchange slots */
static bool opt_fill_usable = true;    /* pattern covers usable size, not just size */
static bool opt_api_ops = true;        /* locus_collect/release/set_profile */
static bool opt_inject = false;        /* self-test: corrupt a block on purpose */
static bool opt_verbose = false;

static size_t page_size;

/* ------------------------------------------------------------------------ */
/* Random numbers: splitmix64 to seed, xoshiro256** per thread.              */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct { uint64_t s[4]; } rng_t;

static void rng_seed(rng_t *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
  s[2] ^= t; s[3] = rotl(s[3], 45);
  return result;
}

/* uniform in [0, n) (n > 0); the tiny modulo bias does not matter here */
static inline uint64_t rng_below(rng_t *r, uint64_t n) { return rng_next(r) % n; }
static inline uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi) { return lo + rng_below(r, hi - lo + 1); }

/* ------------------------------------------------------------------------ */
/* Blocks and their patterns                                                 */

enum kind {
  K_MALLOC, K_CALLOC, K_REALLOC, K_REALLOCARRAY, K_POSIX_MEMALIGN,
  K_ALIGNED_ALLOC, K_MEMALIGN, K_VALLOC, K_PVALLOC, K_NKINDS
};
static const char *const kind_name[K_NKINDS] = {
  "malloc", "calloc", "realloc", "reallocarray", "posix_memalign",
  "aligned_alloc", "memalign", "valloc", "pvalloc"
};

typedef struct blk {
  unsigned char *p;
  size_t size;     /* requested */
  size_t filled;   /* bytes covered by the pattern (size, or usable size) */
  uint64_t tag;    /* random, so two blocks at one address differ */
  size_t align;    /* alignment asked for (0: default) */
  uint8_t kind;
  uint8_t owner;   /* thread that allocated (or last reallocated) it */
} blk_t;

static const uint64_t WEYL = 0x9E3779B97F4A7C15ull;

static uint64_t blk_seed(const unsigned char *p, size_t size, uint64_t tag) {
  uint64_t s = (uint64_t)(uintptr_t)p * 0xD6E8FEB86659FD93ull ^ (uint64_t)size * 0xA0761D6478BD642Full ^ tag;
  return splitmix64(&s);
}

/* Word k of the pattern; byte i of a block is byte i%8 of word i/8. */
static inline uint64_t pat_word(uint64_t seed, size_t k) { return seed + (uint64_t)(k + 1) * WEYL; }

static void pat_fill(unsigned char *p, size_t n, uint64_t seed) {
  size_t k = 0, words = n / 8;
  for (; k < words; k++) {
    uint64_t w = pat_word(seed, k);
    memcpy(p + 8 * k, &w, 8);
  }
  if (n % 8) {
    uint64_t w = pat_word(seed, k);
    for (size_t i = 8 * k; i < n; i++) p[i] = (unsigned char)(w >> (8 * (i % 8)));
  }
}

/* Offset of the first byte that does not match, or SIZE_MAX. */
static size_t pat_check(const unsigned char *p, size_t n, uint64_t seed) {
  size_t k = 0, words = n / 8;
  for (; k < words; k++) {
    uint64_t w;
    memcpy(&w, p + 8 * k, 8);
    if (w != pat_word(seed, k)) break;
  }
  uint64_t w = pat_word(seed, k);
  for (size_t i = 8 * k; i < n; i++)
    if (p[i] != (unsigned char)(w >> (8 * (i % 8)))) return i;
  return SIZE_MAX;
}

static unsigned char pat_byte(uint64_t seed, size_t i) {
  return (unsigned char)(pat_word(seed, i / 8) >> (8 * (i % 8)));
}

/* ------------------------------------------------------------------------ */
/* Threads, slots, failure reports                                           */

typedef struct slot {
  pthread_mutex_t m;
  bool full;
  blk_t b;
} slot_t;

static slot_t *slots;

typedef struct tctx {
  int id;          /* global thread number, over all waves */
  int wave;
  uint64_t seed;
  long ops;
  long op;         /* current op index */
  rng_t rng;
  blk_t *live;
  int nlive;
  /* counters */
  long n_alloc[K_NKINDS];
  long n_free, n_free_sized, n_remote_free, n_remote_realloc, n_exchange, n_verify, n_api;
  uint64_t bytes;
} tctx_t;

static atomic_int failed;
static atomic_int injected; /* --inject-corruption done */

static void dump_blk(const char *what, const blk_t *b) {
  fprintf(stderr, "stress:   %s: %p size=%zu filled=%zu kind=%s align=%zu tag=%016" PRIx64 " owner=t%d\n",
          what, (void *)b->p, b->size, b->filled, kind_name[b->kind], b->align, b->tag, b->owner);
}

static void replay_hint(void) {
  fprintf(stderr, "stress: replay with: stress --seed %" PRIu64 " --threads %d --ops %ld --waves %d"
          " --max-size %zu --live %d --slots %d%s%s\n",
          opt_seed, opt_threads, opt_ops, opt_waves, opt_max_size, opt_live, opt_slots,
          opt_fill_usable ? "" : " --no-fill-usable", opt_api_ops ? "" : " --no-api-ops");
}

static void fail(tctx_t *t, const blk_t *b, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static void fail(tctx_t *t, const blk_t *b, const char *fmt, ...) {
  if (atomic_fetch_add(&failed, 1) != 0) {
    /* another thread is already reporting; let it finish */
    for (;;) pause();
  }
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "stress: FAILED");
  if (t) fprintf(stderr, " in thread t%d (wave %d, op %ld)", t->id, t->wave, t->op);
  fprintf(stderr, ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (b) dump_blk("block", b);
  replay_hint();
  fflush(stderr);
  if (opt_inject) {
    fprintf(stderr, "stress: corruption injected on purpose was detected: self-test passed\n");
    fflush(stderr);
    _exit(0);
  }
  abort();
}

static void verify_blk(tctx_t *t, const blk_t *b, const char *when) {
  size_t off = pat_check(b->p, b->filled, blk_seed(b->p, b->size, b->tag));
  if (off != SIZE_MAX) {
    uint64_t seed = blk_seed(b->p, b->size, b->tag);
    fail(t, b, "pattern mismatch %s at %p (offset %zu of %zu): expected 0x%02x, found 0x%02x",
         when, (void *)(b->p + off), off, b->filled, pat_byte(seed, off), b->p[off]);
  }
}

static size_t min_align_for(size_t size) {
  /* malloc's result is aligned for any object that fits: alignof(max_align_t),
   * or the largest power of two <= size when that is smaller (C DR 445). */
  size_t a = _Alignof(max_align_t);
  while (a > 1 && a > size) a >>= 1;
  return a ? a : 1;
}

/* Checks on a freshly returned block, then fills it. */
static void adopt_new(tctx_t *t, blk_t *b) {
  uintptr_t u = (uintptr_t)b->p;
  size_t need = b->align ? b->align : min_align_for(b->size);
  if (u % need) fail(t, b, "%s returned %p, not aligned to %zu", kind_name[b->kind], (void *)b->p, need);
  size_t usable = T_USABLE_SIZE(b->p);
  if (usable < b->size) fail(t, b, "usable size %zu < requested %zu", usable, b->size);
  if (b->kind == K_PVALLOC) {
    size_t want = (b->size + page_size - 1) / page_size * page_size; /* glibc: pvalloc(0) is not a page */
    if (usable < want) fail(t, b, "pvalloc usable size %zu < page-rounded size %zu", usable, want);
  }
  b->filled = opt_fill_usable ? usable : b->size;
  b->tag = rng_next(&t->rng);
  b->owner = (uint8_t)t->id;
  pat_fill(b->p, b->filled, blk_seed(b->p, b->size, b->tag));
  t->bytes += b->size;
}

/* ------------------------------------------------------------------------ */
/* Random sizes and alignments                                               */

static size_t rand_between_log(rng_t *r, size_t lo, size_t hi) {
  /* log-uniform-ish in [lo, hi] */
  if (hi <= lo) return lo;
  int blo = 63 - __builtin_clzll((unsigned long long)(lo | 1));
  int bhi = 63 - __builtin_clzll((unsigned long long)hi);
  int b = (int)rng_range(r, (uint64_t)blo, (uint64_t)bhi);
  size_t base = (size_t)1 << b;
  size_t s = base + (size_t)rng_below(r, base);
  if (s < lo) s = lo;
  if (s > hi) s = hi;
  return s;
}

static size_t rand_size(tctx_t *t) {
  rng_t *r = &t->rng;
  size_t max = opt_max_size;
  unsigned c = (unsigned)rng_below(r, 1000);
  size_t s;
  if (c < 10) s = 0;
  else if (c < 600) s = rand_between_log(r, 1, 256);
  else if (c < 850) s = rand_between_log(r, 257, 4096);
  else if (c < 950) s = rand_between_log(r, 4097, 64 << 10);
  else if (c < 990) s = rand_between_log(r, (64 << 10) + 1, 1 << 20);
  else s = rand_between_log(r, (1 << 20) + 1, max);
  /* one time in ten, land on (or next to) a power of two or a page multiple */
  if (s > 2 && rng_below(r, 10) == 0) {
    size_t p2 = (size_t)1 << (63 - __builtin_clzll((unsigned long long)s));
    if (rng_below(r, 2)) p2 = (s + page_size - 1) / page_size * page_size;
    s = p2 + (size_t)rng_range(r, 0, 2) - 1;
  }
  if (s > max) s = max;
  return s;
}

static size_t rand_align(tctx_t *t) {
  rng_t *r = &t->rng;
  int lg;
  if (rng_below(r, 200) == 0) lg = (int)rng_range(r, 17, 21); /* up to 2 MiB */
  else lg = (int)rng_range(r, 3, 16);                         /* 8 B .. 64 KiB */
  size_t a = (size_t)1 << lg;
  if (a < sizeof(void *)) a = sizeof(void *);
  return a;
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */

static bool do_alloc(tctx_t *t, blk_t *out) {
  rng_t *r = &t->rng;
  blk_t b;
  memset(&b, 0, sizeof b);
  unsigned c = (unsigned)rng_below(r, 100);
  size_t size = rand_size(t);
  void *p = NULL;
  if (c < 45) {
    b.kind = K_MALLOC;
    p = LOCUS_API(malloc)(size);
  } else if (c < 65) {
    b.kind = K_CALLOC;
    size_t n = (size_t)rng_range(r, 1, 8), each = size / n;
    if (rng_below(r, 2)) { size_t x = n; n = each; each = x; } /* either order */
    size = n * each;
    p = LOCUS_API(calloc)(n, each);
    if (p) {
      for (size_t i = 0; i < size; i++)
        if (((unsigned char *)p)[i]) {
          b.p = p; b.size = size;
          fail(t, &b, "calloc(%zu, %zu) returned %p whose byte %zu is 0x%02x, not zero", n, each, p, i,
               ((unsigned char *)p)[i]);
        }
    }
  } else if (c < 70) {
    b.kind = K_REALLOC;
    p = LOCUS_API(realloc)(NULL, size);
  } else if (c < 74) {
    b.kind = K_REALLOCARRAY;
    size_t n = (size_t)rng_range(r, 1, 16), each = size / n;
    size = n * each;
    p = LOCUS_API(reallocarray)(NULL, n, each);
  } else if (c < 82) {
    b.kind = K_POSIX_MEMALIGN;
    b.align = rand_align(t);
    void *q = (void *)0x1;
    int rc = LOCUS_API(posix_memalign)(&q, b.align, size);
    if (rc != 0) fail(t, NULL, "posix_memalign(%zu, %zu) returned %d", b.align, size, rc);
    p = q;
    if (!p && size) fail(t, NULL, "posix_memalign(%zu, %zu) returned 0 and NULL", b.align, size);
  } else if (c < 88) {
    b.kind = K_ALIGNED_ALLOC;
    b.align = rand_align(t);
    p = LOCUS_API(aligned_alloc)(b.align, size);
  } else if (c < 94) {
    b.kind = K_MEMALIGN;
    b.align = rand_align(t);
    p = LOCUS_API(memalign)(b.align, size);
  } else if (c < 97) {
    b.kind = K_VALLOC;
    b.align = page_size;
    p = LOCUS_API(valloc)(size);
  } else {
    b.kind = K_PVALLOC;
    b.align = page_size;
    p = LOCUS_API(pvalloc)(size);
  }
  t->n_alloc[b.kind]++;
  b.size = size;
  if (!p) {
    if (size == 0) return false; /* NULL is a valid answer to a 0-byte request */
    fail(t, NULL, "%s of %zu bytes (align %zu) returned NULL (errno %d)", kind_name[b.kind], size, b.align, errno);
  }
  b.p = p;
  adopt_new(t, &b);
  *out = b;
  return true;
}

static void do_free(tctx_t *t, blk_t *b, bool remote) {
  verify_blk(t, b, remote ? "before remote free" : "before free");
  /* free_sized needs the size asked for; aligned blocks need free_aligned_sized */
  if (b->align == 0 && rng_below(&t->rng, 4) == 0) {
    T_FREE_SIZED(b->p, b->size);
    t->n_free_sized++;
  } else {
    LOCUS_API(free)(b->p);
  }
  if (remote) t->n_remote_free++;
  else t->n_free++;
}

/* Reallocates *b in place of it; false if the block was freed (size 0). */
static bool do_realloc(tctx_t *t, blk_t *b) {
  rng_t *r = &t->rng;
  verify_blk(t, b, "before realloc");
  size_t nsize;
  unsigned c = (unsigned)rng_below(r, 10);
  if (c < 4) nsize = b->size + (size_t)rng_range(r, 1, b->size < 64 ? 64 : b->size); /* grow */
  else if (c < 7) nsize = b->size ? (size_t)rng_below(r, b->size) : 0;                  /* shrink */
  else nsize = rand_size(t);
  if (nsize > opt_max_size) nsize = opt_max_size;
  blk_t old = *b;
  uint64_t oseed = blk_seed(old.p, old.size, old.tag);
  void *p;
  bool arr = rng_below(r, 3) == 0 && nsize > 0;
  if (arr) {
    size_t n = (size_t)rng_range(r, 1, 16), each = nsize / n;
    nsize = n * each;
    p = LOCUS_API(reallocarray)(old.p, n, each);
  } else {
    p = LOCUS_API(realloc)(old.p, nsize);
  }
  if (!p) {
    if (nsize == 0) return false; /* realloc(p, 0) freed p (glibc behaviour) */
    fail(t, &old, "%s to %zu bytes returned NULL (errno %d)", arr ? "reallocarray" : "realloc", nsize, errno);
  }
  /* the first min(old, new) bytes are preserved; alignment of an aligned block is not */
  size_t keep = old.size < nsize ? old.size : nsize;
  size_t off = pat_check(p, keep, oseed);
  if (off != SIZE_MAX)
    fail(t, &old, "realloc from %zu to %zu bytes moved %p -> %p and lost byte %zu: expected 0x%02x, found 0x%02x",
         old.size, nsize, (void *)old.p, p, off, pat_byte(oseed, off), ((unsigned char *)p)[off]);
  blk_t nb;
  memset(&nb, 0, sizeof nb);
  nb.p = p;
  nb.size = nsize;
  nb.kind = arr ? K_REALLOCARRAY : K_REALLOC;
  adopt_new(t, &nb);
  *b = nb;
  return true;
}

static void remove_live(tctx_t *t, int i) {
  t->live[i] = t->live[--t->nlive];
}

static void do_exchange(tctx_t *t) {
  rng_t *r = &t->rng;
  slot_t *s = &slots[rng_below(r, (uint64_t)opt_slots)];
  blk_t give, got;
  bool giving = false, getting = false;
  if (t->nlive > 0 && rng_below(r, 4) != 0) {
    int i = (int)rng_below(r, (uint64_t)t->nlive);
    give = t->live[i];
    remove_live(t, i);
    giving = true;
  }
  pthread_mutex_lock(&s->m);
  if (s->full) { got = s->b; getting = true; }
  s->full = giving;
  if (giving) s->b = give;
  pthread_mutex_unlock(&s->m);
  t->n_exchange++;
  if (!getting) return;
  unsigned c = (unsigned)rng_below(r, 4);
  if (c < 2 || t->nlive >= opt_live) {
    do_free(t, &got, true);
  } else if (c == 2) {
    t->n_remote_realloc++;
    if (do_realloc(t, &got)) t->live[t->nlive++] = got;
  } else {
    verify_blk(t, &got, "after handoff");
    t->live[t->nlive++] = got;
  }
}

static void do_api_op(tctx_t *t) {
#ifndef LOCUS_TEST_SYSTEM
  unsigned c = (unsigned)rng_below(&t->rng, 100);
  t->n_api++;
  if (c < 80) {
    locus_collect();
  } else if (c < 95) {
    (void)locus_release();
  } else {
    static const char *const profiles[] = { "uma", "eco", "numa", "auto" };
    const char *want = profiles[rng_below(&t->rng, 4)];
    if (locus_set_profile(want) != 0) fail(t, NULL, "locus_set_profile(\"%s\") failed (errno %d)", want, errno);
    const char *now = locus_get_profile();
    if (!now) fail(t, NULL, "locus_get_profile() returned NULL");
  }
#else
  (void)t;
#endif
}

static void *thread_main(void *arg) {
  tctx_t *t = arg;
  rng_t *r = &t->rng;
  rng_seed(r, t->seed);
  t->live = LOCUS_API(calloc)((size_t)opt_live + 1, sizeof(blk_t)); /* the shadow itself; checked below */
  if (!t->live) fail(t, NULL, "calloc of the shadow table failed");
  for (t->op = 0; t->op < t->ops && !atomic_load_explicit(&failed, memory_order_relaxed); t->op++) {
    unsigned c = (unsigned)rng_below(r, 1000);
    if (c < 400) {
      if (t->nlive < opt_live) {
        blk_t b;
        if (do_alloc(t, &b)) t->live[t->nlive++] = b;
        continue;
      }
      c = 400; /* full: free instead */
    }
    if (c < 620) {
      if (t->nlive == 0) continue;
      int i = (int)rng_below(r, (uint64_t)t->nlive);
      blk_t b = t->live[i];
      remove_live(t, i);
      do_free(t, &b, false);
    } else if (c < 750) {
      if (t->nlive == 0) continue;
      int i = (int)rng_below(r, (uint64_t)t->nlive);
      if (!do_realloc(t, &t->live[i])) remove_live(t, i);
    } else if (c < 900) {
      do_exchange(t);
    } else if (c < 998) {
      if (t->nlive == 0) continue;
      blk_t *b = &t->live[rng_below(r, (uint64_t)t->nlive)];
      verify_blk(t, b, "on a random check");
      size_t u = T_USABLE_SIZE(b->p);
      if (u < b->size) fail(t, b, "usable size %zu < requested %zu on a later check", u, b->size);
      t->n_verify++;
      if (opt_inject && t->id == 0 && t->op >= t->ops / 2 && b->filled > 0 && !atomic_exchange(&injected, 1)) {
        fprintf(stderr, "stress: self-test: flipping one byte of %p\n", (void *)b->p);
        b->p[b->filled - 1] ^= 0x5a;
      }
    } else if (opt_api_ops) {
      do_api_op(t);
    }
  }
  /* Leave up to half of what is left in the slots, for later waves and the
   * main thread to free (this thread's heap becomes an orphan); free the rest. */
  while (t->nlive > 0) {
    blk_t b = t->live[t->nlive - 1];
    t->nlive--;
    bool parked = false;
    if (rng_below(r, 2) == 0) {
      slot_t *s = &slots[rng_below(r, (uint64_t)opt_slots)];
      if (pthread_mutex_trylock(&s->m) == 0) {
        if (!s->full) { s->b = b; s->full = true; parked = true; }
        pthread_mutex_unlock(&s->m);
      }
    }
    if (!parked) do_free(t, &b, false);
  }
  LOCUS_API(free)(t->live);
  t->live = NULL;
  return NULL;
}

/* ------------------------------------------------------------------------ */

static void usage(void) {
  fprintf(stderr,
          "usage: stress [--seed N] [--threads T] [--ops N (per thread)] [--waves W]\n"
          "              [--max-size BYTES] [--live N] [--slots N] [--no-fill-usable]\n"
          "              [--no-api-ops] [--inject-corruption] [--verbose]\n");
  exit(2);
}

static unsigned long long parse_num(const char *s) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end || end == s) usage();
  return v;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  bool seeded = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--seed") && v) { opt_seed = parse_num(v); seeded = true; i++; }
    else if (!strcmp(a, "--threads") && v) { opt_threads = (int)parse_num(v); i++; }
    else if (!strcmp(a, "--ops") && v) { opt_ops = (long)parse_num(v); i++; }
    else if (!strcmp(a, "--waves") && v) { opt_waves = (int)parse_num(v); i++; }
    else if (!strcmp(a, "--max-size") && v) { opt_max_size = (size_t)parse_num(v); i++; }
    else if (!strcmp(a, "--live") && v) { opt_live = (int)parse_num(v); i++; }
    else if (!strcmp(a, "--slots") && v) { opt_slots = (int)parse_num(v); i++; }
    else if (!strcmp(a, "--no-fill-usable")) opt_fill_usable = false;
    else if (!strcmp(a, "--no-api-ops")) opt_api_ops = false;
    else if (!strcmp(a, "--inject-corruption")) opt_inject = true;
    else if (!strcmp(a, "--verbose")) opt_verbose = true;
    else usage();
  }
  if (opt_threads < 1 || opt_threads > 250 || opt_waves < 1 || opt_live < 1 || opt_slots < 1 ||
      opt_max_size < 1 || opt_ops < 0)
    usage();
  if (!seeded) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    opt_seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
  }
  page_size = (size_t)sysconf(_SC_PAGESIZE);
#ifdef LOCUS_TEST_SYSTEM
  opt_api_ops = false;
#endif

  printf("stress: allocator=%s seed=%" PRIu64 " threads=%d ops=%ld waves=%d max-size=%zu live=%d slots=%d\n",
         T_ALLOCATOR_NAME, opt_seed, opt_threads, opt_ops, opt_waves, opt_max_size, opt_live, opt_slots);
  printf("stress: replay: stress --seed %" PRIu64 " --threads %d --ops %ld --waves %d --max-size %zu\n",
         opt_seed, opt_threads, opt_ops, opt_waves, opt_max_size);
  fflush(stdout);

  slots = LOCUS_API(calloc)((size_t)opt_slots, sizeof(slot_t));
  if (!slots) fail(NULL, NULL, "calloc of the slots failed");
  for (int i = 0; i < opt_slots; i++) pthread_mutex_init(&slots[i].m, NULL);

  int total_threads = opt_threads * opt_waves;
  tctx_t *ctx = LOCUS_API(calloc)((size_t)total_threads, sizeof(tctx_t));
  pthread_t *tid = LOCUS_API(calloc)((size_t)opt_threads, sizeof(pthread_t));
  if (!ctx || !tid) fail(NULL, NULL, "calloc of the thread table failed");
  uint64_t sm = opt_seed;
  double t0 = now_s();
  for (int w = 0; w < opt_waves; w++) {
    long ops = opt_ops / opt_waves + (w < opt_ops % opt_waves ? 1 : 0);
    for (int i = 0; i < opt_threads; i++) {
      tctx_t *t = &ctx[w * opt_threads + i];
      t->id = w * opt_threads + i;
      t->wave = w;
      t->ops = ops;
      t->seed = splitmix64(&sm);
      int rc = pthread_create(&tid[i], NULL, thread_main, t);
      if (rc) { fprintf(stderr, "stress: pthread_create: %s\n", strerror(rc)); return 1; }
    }
    for (int i = 0; i < opt_threads; i++) pthread_join(tid[i], NULL);
    if (opt_verbose) fprintf(stderr, "stress: wave %d done after %.2f s\n", w, now_s() - t0);
  }

  /* Blocks still parked in the slots: their owners have exited. */
  tctx_t mainctx;
  memset(&mainctx, 0, sizeof mainctx);
  mainctx.id = -1;
  rng_seed(&mainctx.rng, splitmix64(&sm));
  long parked = 0;
  for (int i = 0; i < opt_slots; i++) {
    if (slots[i].full) {
      do_free(&mainctx, &slots[i].b, true);
      slots[i].full = false;
      parked++;
    }
    pthread_mutex_destroy(&slots[i].m);
  }
  double dt = now_s() - t0;

  long tot[K_NKINDS] = { 0 }, nfree = 0, nfs = 0, nrf = 0, nrr = 0, nx = 0, nv = 0, napi = 0, allops = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < total_threads; i++) {
    tctx_t *t = &ctx[i];
    for (int k = 0; k < K_NKINDS; k++) tot[k] += t->n_alloc[k];
    nfree += t->n_free; nfs += t->n_free_sized; nrf += t->n_remote_free; nrr += t->n_remote_realloc;
    nx += t->n_exchange; nv += t->n_verify; napi += t->n_api; bytes += t->bytes; allops += t->op;
  }
  printf("stress: %ld ops in %.2f s;", allops, dt);
  for (int k = 0; k < K_NKINDS; k++) printf(" %s=%ld", kind_name[k], tot[k]);
  printf("\nstress: free=%ld free_sized=%ld remote_free=%ld (+%ld parked) remote_realloc=%ld exchanges=%ld"
         " checks=%ld api=%ld bytes=%.1f MiB\n",
         nfree, nfs, nrf, parked, nrr, nx, nv, napi, (double)bytes / (1 << 20));
  LOCUS_API(free)(ctx);
  LOCUS_API(free)(tid);
  LOCUS_API(free)(slots);
  if (opt_inject) {
    printf("stress: FAILED self-test: the injected corruption was not detected\n");
    return 1;
  }
  printf("stress: PASSED\n");
  return 0;
}
