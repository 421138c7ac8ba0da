/* Shared helpers for the locus benchmark workloads.
 *
 * Every workload is a plain program: it never links liblocus, the allocator
 * under test is chosen by LD_PRELOAD in tools/bench.py.  Each one validates
 * the memory it was given (a pattern written into every block and checked
 * before free, or a checksum) and ends with exactly one line
 *
 *   RESULT name=<id> metric=<what> value=<number> unit=<unit> better=<lower|higher> check=ok [key=value ...]
 *
 * or, on a validation failure, "RESULT name=<id> check=fail reason=<word>"
 * followed by a non-zero exit.  Optional "DATA name=<id> series=<label>
 * key=value ..." lines carry detail (histograms, curves) for the plots.
 * See docs/benchmarks.md.
 */
#ifndef LOCUS_BENCH_COMMON_H
#define LOCUS_BENCH_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define BENCH_HAVE_TSC 1
#endif

/* ------------------------------------------------------------------ */
/* Command line: --quick, --full (default), --threads N, --size N,     */
/* --seed N, plus workload-specific options read with bench_opt_*.     */

typedef struct {
    int quick;
    int threads;
    uint64_t seed;
    int argc;
    char **argv;
} bench_args_t;

static const char *bench_name = "unknown";

static inline void bench_usage_exit(const char *msg) {
    fprintf(stderr, "%s: %s\n", bench_name, msg);
    exit(2);
}

static inline bench_args_t bench_parse(int argc, char **argv, const char *name) {
    bench_args_t a = {0, 2, 0x5eed1234abcdULL, argc, argv};
    bench_name = name;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) a.quick = 1;
        else if (!strcmp(argv[i], "--full")) a.quick = 0;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) a.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) a.seed = strtoull(argv[++i], NULL, 0);
    }
    if (a.threads < 1) a.threads = 1;
    return a;
}

/* Value of "--key N" (accepts K/M/G suffixes), or dflt. */
static inline uint64_t bench_opt_u64(const bench_args_t *a, const char *key, uint64_t dflt) {
    for (int i = 1; i + 1 < a->argc; i++) {
        if (!strcmp(a->argv[i], key)) {
            char *end;
            uint64_t v = strtoull(a->argv[i + 1], &end, 0);
            if (*end == 'k' || *end == 'K') v <<= 10;
            else if (*end == 'm' || *end == 'M') v <<= 20;
            else if (*end == 'g' || *end == 'G') v <<= 30;
            return v;
        }
    }
    return dflt;
}

/* ------------------------------------------------------------------ */
/* Results and failures.                                               */

static inline void bench_result(const char *name, const char *metric, double value,
                                const char *unit, const char *better, const char *extra_fmt, ...) {
    printf("RESULT name=%s metric=%s value=%.6g unit=%s better=%s check=ok", name, metric, value,
           unit, better);
    if (extra_fmt && *extra_fmt) {
        va_list ap;
        va_start(ap, extra_fmt);
        putchar(' ');
        vprintf(extra_fmt, ap);
        va_end(ap);
    }
    putchar('\n');
    fflush(stdout);
}

/* Validation failure: loud message, a fail RESULT line, exit 1. */
static inline void __attribute__((noreturn, format(printf, 2, 3)))
bench_fail(const char *reason, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s: ", bench_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    printf("RESULT name=%s check=fail reason=%s\n", bench_name, reason);
    fflush(stdout);
    _exit(1);
}

static inline void *bench_xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) bench_fail("enomem", "malloc(%zu) returned NULL", n);
    return p;
}

/* ------------------------------------------------------------------ */
/* Clocks.                                                             */

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Cycle counter: rdtsc fenced so that it does not drift across the
 * instruction being measured.  Falls back to nanoseconds elsewhere. */
static inline uint64_t cycles(void) {
#ifdef BENCH_HAVE_TSC
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
#else
    return now_ns();
#endif
}

/* TSC ticks per nanosecond, measured against CLOCK_MONOTONIC. */
static inline double tsc_per_ns(void) {
    uint64_t n0 = now_ns(), c0 = cycles();
    while (now_ns() - n0 < 20000000ULL) { }
    uint64_t n1 = now_ns(), c1 = cycles();
    return (double)(c1 - c0) / (double)(n1 - n0);
}

/* ------------------------------------------------------------------ */
/* Random numbers: splitmix64 for seeding, xorshift64* for streams.    */

static inline uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef struct { uint64_t s; } rng_t;

static inline rng_t rng_seed(uint64_t seed) {
    rng_t r = {mix64(seed) | 1};
    return r;
}

static inline uint64_t rng_next(rng_t *r) {
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

/* Uniform in [lo, hi]. */
static inline uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi) {
    return lo + rng_next(r) % (hi - lo + 1);
}

/* ------------------------------------------------------------------ */
/* Block patterns.                                                     */
/* A block of n bytes tagged t gets a 64-bit word derived from (t, off) */
/* at offsets 0, S, 2S, ... and at n-8, with S = 64 for blocks up to   */
/* 4 KiB (every cache line) and S = 4096 above (every page).  Blocks   */
/* under 8 bytes are filled byte by byte.  Two live blocks that overlap */
/* (an allocator handing out the same memory twice) or a block whose   */
/* contents moved (a bad realloc) fail the check.                      */

/* Large arrays of the time-step workloads: one word written in every 4 KiB
 * page and the last word, so each page is touched once and the allocator, not
 * memset, is measured. Returns the sum of what was written; arr_sum reads it
 * back (a cheap check that no page was lost or mixed up). */
static inline uint64_t arr_touch(uint64_t *a, size_t bytes, uint64_t v) {
  size_t words = bytes / 8;
  uint64_t sum = 0;
  for (size_t i = 0; i < words - 1; i += 4096 / 8) {
    a[i] = v + i;
    sum += v + i;
  }
  a[words - 1] = ~v;
  return sum + ~v;
}
static inline uint64_t arr_sum(const uint64_t *a, size_t bytes) {
  size_t words = bytes / 8;
  uint64_t sum = 0;
  for (size_t i = 0; i < words - 1; i += 4096 / 8) sum += a[i];
  return sum + a[words - 1];
}

static inline uint64_t pat_word(uint64_t tag, size_t off) {
    return mix64(tag * 0x100000001b3ULL ^ (uint64_t)off);
}

static inline size_t pat_step(size_t n) { return n <= 4096 ? 64 : 4096; }

static inline void pat_fill(void *p, size_t n, uint64_t tag) {
    unsigned char *b = (unsigned char *)p;
    if (n < 8) {
        for (size_t i = 0; i < n; i++) b[i] = (unsigned char)pat_word(tag, i);
        return;
    }
    size_t st = pat_step(n);
    for (size_t off = 0; off + 8 <= n; off += st) {
        uint64_t w = pat_word(tag, off);
        memcpy(b + off, &w, 8);
    }
    uint64_t w = pat_word(tag, n - 8) ^ 0xa5a5a5a5a5a5a5a5ULL;
    memcpy(b + n - 8, &w, 8);
}

/* Returns 1 if the pattern is intact, 0 otherwise. */
static inline int pat_ok(const void *p, size_t n, uint64_t tag) {
    const unsigned char *b = (const unsigned char *)p;
    if (n < 8) {
        for (size_t i = 0; i < n; i++)
            if (b[i] != (unsigned char)pat_word(tag, i)) return 0;
        return 1;
    }
    uint64_t w;
    memcpy(&w, b + n - 8, 8);
    if (w != (pat_word(tag, n - 8) ^ 0xa5a5a5a5a5a5a5a5ULL)) return 0;
    size_t st = pat_step(n);
    for (size_t off = 0; off + 8 <= n - 8; off += st) {
        /* a word overlapped by the tail word is legitimately overwritten */
        memcpy(&w, b + off, 8);
        if (w != pat_word(tag, off)) return 0;
    }
    return 1;
}

static inline void pat_check(const void *p, size_t n, uint64_t tag, const char *where) {
    if (!pat_ok(p, n, tag))
        bench_fail("corrupt", "%s: block %p of %zu bytes (tag %" PRIu64 ") lost its pattern",
                   where, p, n, tag);
}

/* ------------------------------------------------------------------ */
/* Single-producer single-consumer bounded ring (lock-free).           */

typedef struct {
    void *p;
    size_t n;
    uint64_t tag;
} bench_item_t;

typedef struct {
    _Alignas(64) _Atomic size_t head; /* next slot to read (consumer) */
    _Alignas(64) _Atomic size_t tail; /* next slot to write (producer) */
    _Alignas(64) size_t cap;          /* power of two */
    bench_item_t *slots;
} spsc_t;

static inline void spsc_init(spsc_t *q, size_t cap) {
    atomic_init(&q->head, 0);
    atomic_init(&q->tail, 0);
    q->cap = cap;
    q->slots = (bench_item_t *)bench_xmalloc(cap * sizeof(bench_item_t));
}

static inline void bench_pause(unsigned *spins) {
    if (++*spins < 64) {
#ifdef BENCH_HAVE_TSC
        _mm_pause();
#endif
    } else {
        *spins = 0;
        sched_yield(); /* 2 shared cores: never spin for long */
    }
}

static inline void spsc_push(spsc_t *q, bench_item_t it) {
    size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    unsigned spins = 0;
    while (t - atomic_load_explicit(&q->head, memory_order_acquire) >= q->cap) bench_pause(&spins);
    q->slots[t & (q->cap - 1)] = it;
    atomic_store_explicit(&q->tail, t + 1, memory_order_release);
}

static inline bench_item_t spsc_pop(spsc_t *q) {
    size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
    unsigned spins = 0;
    while (atomic_load_explicit(&q->tail, memory_order_acquire) == h) bench_pause(&spins);
    bench_item_t it = q->slots[h & (q->cap - 1)];
    atomic_store_explicit(&q->head, h + 1, memory_order_release);
    return it;
}

/* ------------------------------------------------------------------ */

static inline int bench_ncpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static inline void bench_spawn(pthread_t *t, void *(*fn)(void *), void *arg) {
    int e = pthread_create(t, NULL, fn, arg);
    if (e) bench_fail("pthread", "pthread_create: %s", strerror(e));
}

#endif
