/* The OpenMP pattern of issue 10: --threads (8) OpenMP threads allocate
 * --blocks (2 M) blocks of random sizes 64 B - 1 KiB in one parallel loop
 * (schedule(static): thread t allocates the t-th contiguous share), and a
 * second parallel loop frees them with another mapping (--free-schedule
 * reverse: static over the reversed index, so thread t frees thread
 * (T-1-t)'s share and, with an even T, every free is remote; or dynamic:
 * chunks of 256 to whoever is free).  Then the main thread alone allocates
 * the same set of sizes and frees it.  After each phase's frees it records
 * the resident set (/proc/self/statm) and, where the allocator exposes it,
 * the bytes it counts as in use (locus: locus_stats_get; jemalloc:
 * stats.allocated; tcmalloc: generic.current_allocated_bytes; glibc:
 * mallinfo2; found with dlsym, none is linked; mimalloc: not reported).  An
 * allocator whose remote frees are only reclaimed by their owner keeps the first set's memory and needs a second one for the
 * serial phase: the peak resident set shows it.  Only one word at each end of
 * a block is written (ab_put).  --scale divides the block count (the ctest
 * smoke runs --quick = --scale 40).  Metric: peak resident set (VmHWM,
 * MiB, lower is better); times, resident sets after each phase and bytes in
 * use are extra fields. */
#include "common.h" /* first: it defines _GNU_SOURCE */

#include <dlfcn.h>
#include <malloc.h>
#include <omp.h>

/* Bytes in use according to the allocator, or -1 if it does not say. */
static long long allocator_in_use(void) {
    void (*lstats)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "locus_stats_get");
    if (lstats) {
        uint64_t st[64]; /* locus_stats_t starts with bytes_in_use; room for growth */
        memset(st, 0, sizeof st);
        lstats(st);
        return (long long)st[0];
    }
    int (*mallctl)(const char *, void *, size_t *, void *, size_t) =
        (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
    if (mallctl) {
        uint64_t epoch = 1;
        size_t sz = sizeof epoch, v = 0, vs = sizeof v;
        mallctl("epoch", &epoch, &sz, &epoch, sz);
        if (mallctl("stats.allocated", &v, &vs, NULL, 0) == 0) return (long long)v;
        return -1;
    }
    int (*tcprop)(const char *, size_t *) =
        (int (*)(const char *, size_t *))dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty");
    if (tcprop) {
        size_t v = 0;
        if (tcprop("generic.current_allocated_bytes", &v)) return (long long)v;
        return -1;
    }
    /* glibc's own malloc (no preload): mallinfo2 counts its arenas */
    Dl_info di;
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    if (m && dladdr(m, &di) && di.dli_fname && strstr(di.dli_fname, "libc.so")) {
        struct mallinfo2 mi = mallinfo2();
        return (long long)(mi.uordblks + mi.hblkhd);
    }
    return -1;
}

static size_t size_of(uint64_t seed, size_t i) { return ab_size(mix64(seed ^ (uint64_t)i), 64, 1024); }

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_omp");
    int threads = 8; /* the pattern; --threads overrides */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--threads")) threads = a.threads;
    uint64_t scale = bench_opt_u64(&a, "--scale", a.quick ? 40 : 1);
    size_t n = (size_t)(bench_opt_u64(&a, "--blocks", 2000000) / (scale ? scale : 1));
    const char *fs = "reverse";
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--free-schedule")) fs = argv[i + 1];
    int dyn = !strcmp(fs, "dynamic");
    if (!dyn && strcmp(fs, "reverse")) bench_usage_exit("--free-schedule must be reverse or dynamic");
    if (n < 1) bench_usage_exit("no blocks");
    omp_set_num_threads(threads);
    void **p = (void **)bench_xmalloc(n * sizeof *p);
    memset(p, 0, n * sizeof *p);
    uint64_t *asum = (uint64_t *)bench_xmalloc((size_t)threads * 64), *fsum = asum + (size_t)threads * 4;
    memset(asum, 0, (size_t)threads * 64);
    long rss0 = bench_rss_kib();

    /* phase 1: parallel allocation, static schedule */
    double t0 = now_s();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        int t = omp_get_thread_num();
        uint64_t s = 0;
        p[i] = ab_alloc(size_of(a.seed, i), i, &s);
        asum[t * 4] += s; /* one slot per 32 B: false sharing is the same for every allocator */
    }
    double t_alloc = now_s() - t0;
    long rss_alloc = bench_rss_kib();
    long long inuse_alloc = allocator_in_use();

    /* phase 2: parallel free with another mapping */
    t0 = now_s();
    if (dyn) {
#pragma omp parallel for schedule(dynamic, 256)
        for (size_t i = 0; i < n; i++) {
            uint64_t s = 0;
            ab_free(p[i], &s, "ab_omp parallel free");
            fsum[omp_get_thread_num() * 4] += s;
        }
    } else {
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) {
            size_t i = n - 1 - j;
            uint64_t s = 0;
            ab_free(p[i], &s, "ab_omp parallel free");
            fsum[omp_get_thread_num() * 4] += s;
        }
    }
    double t_free = now_s() - t0;
    long rss_freed = bench_rss_kib();
    long long inuse_freed = allocator_in_use();
    uint64_t as = 0, fsm = 0;
    for (int t = 0; t < threads; t++) {
        as += asum[t * 4];
        fsm += fsum[t * 4];
    }
    ab_verify(as, fsm);
    uint64_t checksum = as;

    /* phase 3: the main thread allocates the same set serially, then frees it */
    uint64_t as2 = 0, fs2 = 0;
    t0 = now_s();
    for (size_t i = 0; i < n; i++) p[i] = ab_alloc(size_of(a.seed, i), i, &as2);
    double t_serial_alloc = now_s() - t0;
    long rss_serial = bench_rss_kib();
    t0 = now_s();
    for (size_t i = 0; i < n; i++) ab_free(p[i], &fs2, "ab_omp serial free");
    double t_serial_free = now_s() - t0;
    ab_verify(as2, fs2);
    if (as2 != checksum) bench_fail("checksum", "serial set differs from the parallel one");
    free(p);
    free(asum);
    long rss_final = bench_rss_kib();
    long long inuse_final = allocator_in_use();
    long peak = bench_peak_rss_kib();
    double total = t_alloc + t_free + t_serial_alloc + t_serial_free;
    char iu[3][32];
    long long ius[3] = {inuse_alloc, inuse_freed, inuse_final};
    for (int k = 0; k < 3; k++) {
        if (ius[k] < 0) snprintf(iu[k], sizeof iu[k], "na");
        else snprintf(iu[k], sizeof iu[k], "%.1f", (double)ius[k] / 1048576.0);
    }
    bench_result("ab_omp", "peak_rss", (double)peak / 1024.0, "MiB", "lower",
                 "threads=%d blocks=%zu free_schedule=%s time_s=%.4f ops_per_s=%.4g t_alloc_s=%.4f t_free_s=%.4f "
                 "t_serial_alloc_s=%.4f t_serial_free_s=%.4f start_rss_mib=%.1f rss_after_alloc_mib=%.1f "
                 "rss_after_free_mib=%.1f rss_serial_mib=%.1f final_rss_mib=%.1f in_use_after_alloc_mib=%s "
                 "in_use_after_free_mib=%s in_use_final_mib=%s peak_rss_kib=%ld checksum=%016" PRIx64,
                 threads, n, fs, total, 2.0 * (double)n / total, t_alloc, t_free, t_serial_alloc, t_serial_free,
                 rss0 / 1024.0, rss_alloc / 1024.0, rss_freed / 1024.0, rss_serial / 1024.0, rss_final / 1024.0,
                 iu[0], iu[1], iu[2], peak, checksum);
    return 0;
}
