/* Allocator-bound random replacement (issue 10's single-thread loop): every
 * thread keeps its own window of live blocks (8192 by default) of random sizes
 * 8 B - 1 KiB; each operation frees the block in a random slot and mallocs a
 * new one there.  Only the first and last word of a block are written and
 * checked (ab_put/ab_take in common.h), so the allocator, not memset, is
 * measured.  --threads 1 and 2 in the harness; with 2 threads the windows are
 * private, so this measures the thread-local path side by side.  Metric:
 * operations per second over all threads, one operation = one free + one
 * malloc. */
#include "common.h"

typedef struct {
    int id;
    long iters;
    size_t slots, lo, hi;
    uint64_t seed;
    ab_sums_t sums;
    ab_team_t *team;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed + (uint64_t)a->id * 1000003);
    void **w = (void **)bench_xmalloc(a->slots * sizeof *w);
    uint64_t tag = (uint64_t)a->id << 40, asum = 0, fsum = 0;
    size_t mask = a->slots - 1;
    for (size_t i = 0; i < a->slots; i++) w[i] = ab_alloc(ab_size(rng_next(&r), a->lo, a->hi), tag++, &asum);
    ab_team_start(a->team);
    for (long k = 0; k < a->iters; k++) {
        uint64_t x = rng_next(&r);
        size_t i = (size_t)x & mask;
        ab_free(w[i], &fsum, "ab_random");
        w[i] = ab_alloc(ab_size(x, a->lo, a->hi), tag++, &asum);
    }
    ab_team_end(a->team);
    for (size_t i = 0; i < a->slots; i++) ab_free(w[i], &fsum, "ab_random final");
    free(w);
    a->sums = (ab_sums_t){asum, fsum};
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_random");
    size_t slots = (size_t)bench_opt_u64(&a, "--slots", 8192);
    long iters = (long)bench_opt_u64(&a, "--iters", a.quick ? 300000 : 40000000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 8), hi = (size_t)bench_opt_u64(&a, "--max", 1024);
    if (slots & (slots - 1)) bench_usage_exit("--slots must be a power of two");
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    char name[64];
    snprintf(name, sizeof name, "ab_random_%dt", a.threads);
    bench_name = name;
    arg_t args[a.threads];
    ab_team_t team;
    for (int t = 0; t < a.threads; t++) args[t] = (arg_t){t, iters, slots, lo, hi, a.seed, {0, 0}, &team};
    ab_team_result_t res;
    ab_team_run(&team, a.threads, worker, args, sizeof args[0], offsetof(arg_t, sums), &res);
    ab_verify_sums(res.sums);
    double el = res.el, cpu = res.cpu;
    uint64_t asum = res.sums.asum;
    double ops = (double)iters * a.threads;
    bench_result(name, "throughput", ops / el, "ops/s", "higher",
                 "threads=%d iters=%ld slots=%zu min=%zu max=%zu time_s=%.4f cpu_s=%.4f cpu_ops_per_s=%.4g peak_rss_kib=%ld checksum=%016" PRIx64,
                 a.threads, iters, slots, lo, hi, el, cpu, ops / cpu, bench_peak_rss_kib(), asum);
    return 0;
}
