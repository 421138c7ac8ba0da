/* Allocator-bound thread churn: --gens (300) generations of --threads (2)
 * short-lived threads.  Each thread mallocs --blocks (3000) blocks of random
 * sizes 16 - 512 B (one word written at each end), frees two thirds of them
 * itself (in reverse order), hands the last third to the main thread and
 * exits; the main thread frees those after joining it, so every generation
 * also frees blocks of threads that no longer exist.  Measures what a thread's
 * birth and death cost the allocator (heap set-up, adoption, caches flushed
 * at exit) and whether the memory of exited threads comes back: the resident
 * set at the end (final_rss_kib, after every block was freed) is reported.
 * Metric: operations per second, one operation = one malloc + one free. */
#include "common.h"

typedef struct {
    int id;
    size_t nblocks, lo, hi;
    uint64_t seed;
    ab_sums_t sums;
    void **keep; /* the third handed to the main thread */
    size_t nkeep;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed);
    void **p = (void **)bench_xmalloc(a->nblocks * sizeof *p);
    uint64_t tag = a->seed & 0xffffffffffULL, asum = 0, fsum = 0;
    for (size_t i = 0; i < a->nblocks; i++) p[i] = ab_alloc(ab_size(rng_next(&r), a->lo, a->hi), tag++, &asum);
    size_t k = 0;
    for (size_t i = a->nblocks; i-- > 0;) {
        if (i % 3 == 0) a->keep[k++] = p[i];
        else ab_free(p[i], &fsum, "ab_churn thread");
    }
    free(p);
    a->nkeep = k;
    a->sums = (ab_sums_t){asum, fsum};
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_churn");
    long gens = (long)bench_opt_u64(&a, "--gens", a.quick ? 30 : 1600);
    size_t nblocks = (size_t)bench_opt_u64(&a, "--blocks", 3000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 16), hi = (size_t)bench_opt_u64(&a, "--max", 512);
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    bench_name = "ab_churn";
    int nt = a.threads;
    pthread_t th[nt];
    arg_t args[nt];
    for (int t = 0; t < nt; t++) args[t].keep = (void **)bench_xmalloc((nblocks / 3 + 1) * sizeof(void *));
    ab_sums_t sums = {0, 0};
    ab_clock_t clk = ab_clock_start();
    for (long g = 0; g < gens; g++) {
        for (int t = 0; t < nt; t++) {
            void **keep = args[t].keep;
            /* seed (and tags) from the generation and lane: the same blocks under every allocator */
            uint64_t seed = (((uint64_t)g * 64 + (uint64_t)t) << 20) ^ (a.seed & 0xfffff);
            args[t] = (arg_t){t, nblocks, lo, hi, seed, {0, 0}, keep, 0};
            bench_spawn(&th[t], worker, &args[t]);
        }
        for (int t = 0; t < nt; t++) {
            pthread_join(th[t], NULL);
            for (size_t i = 0; i < args[t].nkeep; i++) ab_free(args[t].keep[i], &sums.fsum, "ab_churn main");
            ab_sums_add(&sums, args[t].sums);
        }
    }
    double el, cpu;
    ab_clock_stop(&clk, &el, &cpu);
    for (int t = 0; t < nt; t++) free(args[t].keep);
    ab_verify_sums(sums);
    double ops = (double)gens * (double)nt * (double)nblocks;
    bench_result("ab_churn", "throughput", ops / el, "ops/s", "higher",
                 "threads=%d gens=%ld blocks=%zu threads_created=%ld min=%zu max=%zu time_s=%.4f cpu_s=%.4f "
                 "cpu_ops_per_s=%.4g final_rss_kib=%ld peak_rss_kib=%ld checksum=%016" PRIx64,
                 nt, gens, nblocks, gens * nt, lo, hi, el, cpu, ops / cpu, bench_rss_kib(), bench_peak_rss_kib(), sums.asum);
    return 0;
}
