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
#include <stddef.h>
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

/* CPU time of the whole process (all threads), seconds.  On shared cores a
 * thread that is descheduled stretches the wall time of a multi-threaded run
 * but not its CPU time: the ab_* workloads report both (cpu_s and
 * cpu_ops_per_s next to the wall-clock throughput).  CPU time alone would hide
 * an allocator whose threads sleep on a lock, hence both. */
static inline double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
/* Allocator-bound blocks (the ab_* workloads).  Only two words of a   */
/* block are touched: the head word at offset 0 holds the block's tag  */
/* and size, (tag << 16) | n, and blocks of 16 bytes or more get the   */
/* head's complement-mix at offset n-8.  ab_take checks both before    */
/* the block is freed and returns the head, which the workload adds to */
/* a checksum of what it freed; ab_put adds it to a checksum of what   */
/* it allocated.  The two sums must be equal at the end (every block   */
/* freed exactly once, intact at both ends), and since tags and sizes  */
/* come from the seed alone, the sum is the same under every           */
/* allocator: the harness compares it across allocators.  Sizes must   */
/* be 8 .. 65535 bytes and tags below 2^48.                             */

#define AB_TAIL_MIX 0x9e3779b97f4a7c15ULL

static inline uint64_t ab_put(void *p, size_t n, uint64_t tag) {
    uint64_t h = (tag << 16) | (uint64_t)n;
    *(uint64_t *)p = h;
    if (n >= 16) {
        uint64_t t = h ^ AB_TAIL_MIX; /* n - 8 may be unaligned: memcpy is one mov on x86 */
        memcpy((char *)p + n - 8, &t, 8);
    }
    return h;
}

/* malloc(n), marked; adds the head to *sum. */
static inline void *ab_alloc(size_t n, uint64_t tag, uint64_t *sum) {
    void *p = malloc(n);
    if (__builtin_expect(!p, 0)) bench_fail("enomem", "malloc(%zu) returned NULL", n);
    *sum += ab_put(p, n, tag);
    return p;
}

static void __attribute__((noinline, noreturn, unused)) ab_bad(const void *p, uint64_t h, const char *where) {
    bench_fail("corrupt", "%s: block %p lost its head or tail word (head %#" PRIx64 ")", where, p, h);
}

/* Checks the block's two words and returns its head (not freed here). */
static inline uint64_t ab_take(const void *p, const char *where) {
    uint64_t h = *(const uint64_t *)p;
    size_t n = (size_t)(h & 0xffff);
    if (__builtin_expect(n < 8, 0)) ab_bad(p, h, where);
    if (n >= 16) {
        uint64_t t;
        memcpy(&t, (const char *)p + n - 8, 8);
        if (__builtin_expect(t != (h ^ AB_TAIL_MIX), 0)) ab_bad(p, h, where);
    }
    return h;
}

/* Checks, adds to *sum and frees. */
static inline void ab_free(void *p, uint64_t *sum, const char *where) {
    *sum += ab_take(p, where);
    free(p);
}

/* Size in [lo, hi] from the high half of a random word (multiply-shift: no
 * division in the timed loops); the low half is left for a slot index. */
static inline size_t ab_size(uint64_t x, size_t lo, size_t hi) {
    return lo + (size_t)(((x >> 32) * (uint64_t)(hi - lo + 1)) >> 32);
}

/* Final check of a workload: freed == allocated, else check=fail. */
static inline void ab_verify(uint64_t allocated, uint64_t freed) {
    if (allocated != freed)
        bench_fail("checksum", "checksum of freed blocks %#" PRIx64 " != checksum of allocated blocks %#" PRIx64,
                   freed, allocated);
}

/* ------------------------------------------------------------------ */
/* Memory of the process.                                              */

#include <sys/resource.h>

/* Resident set now (/proc/self/statm), KiB; -1 if unreadable. */
static inline long bench_rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
        fclose(f);
    }
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Peak resident set of the program so far, KiB: VmHWM of /proc/self/status
 * (the high-water mark of this address space), else ru_maxrss.  The rusage
 * the harness gets from wait4 is not enough for small peaks: the kernel keeps
 * in ru_maxrss the resident set of the address space replaced by exec, which
 * for a child spawned by Python (vfork) is the harness's own (~15-20 MiB and
 * growing with the results it holds).  The ab_* workloads print this value
 * as peak_rss_kib and the harness prefers it. */
static inline long bench_peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    long kib = -1;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "VmHWM:", 6)) {
                kib = strtol(line + 6, NULL, 10);
                break;
            }
        fclose(f);
    }
    if (kib < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kib = ru.ru_maxrss;
    }
    return kib;
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

/* Wall and CPU time of a timed section (the ab_* workloads report both: see
 * cpu_s). */
typedef struct { double t0, c0; } ab_clock_t;
static inline ab_clock_t ab_clock_start(void) {
    ab_clock_t c;
    c.t0 = now_s();
    c.c0 = cpu_s();
    return c;
}
static inline void ab_clock_stop(const ab_clock_t *c, double *el, double *cpu) {
    *el = now_s() - c->t0;
    *cpu = cpu_s() - c->c0;
}

/* A worker's checksums: of the blocks it allocated (ab_alloc) and of those
 * it freed (ab_free); a workload adds up its workers' and checks the totals
 * with ab_verify_sums. */
typedef struct { uint64_t asum, fsum; } ab_sums_t;
static inline void ab_sums_add(ab_sums_t *total, ab_sums_t s) {
    total->asum += s.asum;
    total->fsum += s.fsum;
}
static inline void ab_verify_sums(ab_sums_t s) { ab_verify(s.asum, s.fsum); }

/* A timed team of worker threads (the ab_* workloads): every worker calls
 * ab_team_start() when it is ready and ab_team_end() when its timed work is
 * done, and leaves its checksums in an ab_sums_t of its argument.
 * ab_team_run() spawns n workers on the n elements (`size` bytes each) of
 * `args`, times from the moment all have started to the moment all have
 * ended (wall time in r->el, CPU time of the process in r->cpu), joins them
 * and adds up their checksums (the ab_sums_t at `sums_at` in each element)
 * into r->sums. */
typedef struct { pthread_barrier_t start, end; } ab_team_t;
typedef struct { double el, cpu; ab_sums_t sums; } ab_team_result_t;
static inline void ab_team_start(ab_team_t *tm) { pthread_barrier_wait(&tm->start); }
static inline void ab_team_end(ab_team_t *tm) { pthread_barrier_wait(&tm->end); }
static inline void ab_team_run(ab_team_t *tm, int n, void *(*fn)(void *), void *args, size_t size,
                               size_t sums_at, ab_team_result_t *r) {
    pthread_t th[n];
    pthread_barrier_init(&tm->start, NULL, (unsigned)n + 1);
    pthread_barrier_init(&tm->end, NULL, (unsigned)n + 1);
    for (int t = 0; t < n; t++) bench_spawn(&th[t], fn, (char *)args + (size_t)t * size);
    pthread_barrier_wait(&tm->start);
    ab_clock_t c = ab_clock_start();
    pthread_barrier_wait(&tm->end);
    ab_clock_stop(&c, &r->el, &r->cpu);
    for (int t = 0; t < n; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&tm->start);
    pthread_barrier_destroy(&tm->end);
    r->sums = (ab_sums_t){0, 0};
    for (int t = 0; t < n; t++) {
        ab_sums_t s;
        memcpy(&s, (const char *)args + (size_t)t * size + sums_at, sizeof s);
        ab_sums_add(&r->sums, s);
    }
}

#endif
