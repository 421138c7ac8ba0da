/* Phase-change workload whose working set changes size several times (the
 * auto profile's second case, issue 28): --phases "48,4,96,8,32,2" (MiB), each
 * held for --phase-ms (1500) ms (--quick: "16,2,8", 1100 ms). In a phase
 * one thread keeps live blocks of random sizes 16 B - 16 KiB (small and medium objects; written whole, the
 * two end words marked) totalling the phase's size; every millisecond it
 * replaces 1/1024 of them at random (free + malloc of a new random size),
 * every tenth also allocates, touches (a word per page) and frees a
 * temporary of 1/8 of the phase's size (a large block: >= 1 MiB), then
 * sleeps 1 ms: a program that mostly waits.
 * Entering a phase frees the surplus blocks newest first (the chunks filled
 * last empty out; the replacements spread some blocks over them) or
 * allocates the missing ones.
 * The resident set is read 1 s after each phase change (the "quiet RSS";
 * DATA lines, one per phase) and the result is the sum over the phases that
 * shrank the working set: what the allocator still holds a second after the
 * program let go. Extra fields: the CPU time, the minor faults, peak RSS
 * (no checksum: the number of operations depends on the time). */
#include "common.h"

#include <dlfcn.h>
#include <sys/resource.h>

#define MAXB (1u << 20)

static void *blk[MAXB];
static size_t sz[MAXB];

/* Under locus (found with dlsym, not linked): the bytes its sources cache,
 * KiB; -1 elsewhere. locus_stats_t: in use, cached, ... (64-bit words). */
static long locus_cached_kib(void) {
    void (*get)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "locus_stats_get");
    if (!get) return -1;
    uint64_t st[64];
    get(st);
    return (long)(st[1] >> 10);
}

/* A block written whole (the resident set then counts all of it, under
 * every allocator alike), then marked at both ends. */
static void *alloc_touched(size_t n, uint64_t tag, uint64_t *sum) {
    void *p = bench_xmalloc(n);
    memset(p, (int)(tag & 0xff), n);
    *sum += ab_put(p, n, tag);
    return p;
}

static long minflt(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_phases");
    const char *spec = a.quick ? "16,2,8" : "48,4,96,8,32,2";
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--phases")) spec = argv[i + 1];
    uint64_t phase_ms = bench_opt_u64(&a, "--phase-ms", a.quick ? 1100 : 1500);
    if (phase_ms < 1100) bench_usage_exit("--phase-ms must be at least 1100 (RSS is read 1 s into a phase)");
    size_t lo = 16, hi = 16384;
    rng_t r = rng_seed(a.seed);
    uint64_t asum = 0, fsum = 0, tag = 1;
    size_t n = 0, bytes = 0, prev = 0;
    long quiet_kib = 0, f0 = minflt();
    double t0 = now_s(), c0 = cpu_s();
    int phase = 0;
    for (const char *p = spec; *p; phase++) {
        char *end;
        size_t mib = strtoull(p, &end, 10);
        if (end == p || (*end && *end != ',')) bench_usage_exit("--phases: a comma-separated list of MiB");
        p = *end ? end + 1 : end;
        size_t target = mib << 20;
        /* Surplus blocks freed newest first (a structure built last, torn
         * down whole), missing ones allocated. */
        while (bytes > target && n) {
            n--;
            bytes -= sz[n];
            ab_free(blk[n], &fsum, "ab_phases shrink");
        }
        while (bytes < target) {
            if (n == MAXB) bench_usage_exit("--phases: a phase holds too many blocks");
            sz[n] = ab_size(rng_next(&r), lo, hi);
            blk[n] = alloc_touched(sz[n], tag++, &asum);
            bytes += sz[n++];
        }
        size_t tmp = target / 8 > (1u << 20) ? target / 8 : (1u << 20);
        double start = now_s();
        int sampled = 0;
        unsigned step = 0;
        while (now_s() - start < (double)phase_ms / 1000) {
            for (size_t k = 0; k < n / 1024 + 1 && n; k++) {
                size_t i = (size_t)(rng_next(&r) % n);
                bytes -= sz[i];
                ab_free(blk[i], &fsum, "ab_phases");
                sz[i] = ab_size(rng_next(&r), lo, hi);
                blk[i] = alloc_touched(sz[i], tag++, &asum);
                bytes += sz[i];
            }
            if (++step % 10 == 0) {
                uint64_t *t = (uint64_t *)bench_xmalloc(tmp);
                uint64_t s = arr_touch(t, tmp, tag);
                if (arr_sum(t, tmp) != s) bench_fail("corrupt", "temporary of %zu bytes lost a page", tmp);
                free(t);
            }
            if (!sampled && now_s() - start >= 1.0) {
                long rss = bench_rss_kib();
                sampled = 1;
                printf("DATA name=ab_phases series=quiet phase=%d mib=%zu rss_kib=%ld shrink=%d cached_kib=%ld\n", phase,
                       mib, rss, phase > 0 && target < prev, locus_cached_kib());
                if (phase > 0 && target < prev) quiet_kib += rss;
            }
            usleep(1000);
        }
        prev = target;
    }
    double cpu = cpu_s() - c0, el = now_s() - t0;
    long faults = minflt() - f0;
    for (size_t i = 0; i < n; i++) ab_free(blk[i], &fsum, "ab_phases final");
    ab_verify(asum, fsum);
    bench_result("ab_phases", "quiet_rss", (double)quiet_kib / 1024, "MiB", "lower",
                 "phases=%d phase_ms=%" PRIu64 " time_s=%.4f cpu_s=%.4f minflt=%ld peak_rss_kib=%ld",
                 phase, phase_ms, el, cpu, faults, bench_peak_rss_kib());
    return 0;
}
