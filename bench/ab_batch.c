/* Allocator-bound batches: every thread, independently, mallocs a batch of
 * blocks of random sizes (one word written at each end), then checks and frees
 * the whole batch in allocation order; repeated for --rounds.  Two shapes in
 * the harness: batches of 1000 blocks of 8 B - 1 KiB (the local-batch pattern
 * of Valat, PhD thesis, 2014, Fig. 4.12, at 1 and 2 threads), and one batch of
 * 10^6 blocks of 16 - 256 B (a bulk alloc-then-free, where the allocator must
 * carve and then take back a million objects).  Metric: operations per second
 * over all threads, one operation = one malloc + one free. */
#include "common.h"

typedef struct {
    int id;
    long rounds;
    size_t batch, lo, hi;
    uint64_t seed;
    ab_sums_t sums;
    ab_team_t *team;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed + (uint64_t)a->id * 1000003);
    void **p = (void **)bench_xmalloc(a->batch * sizeof *p);
    for (size_t i = 0; i < a->batch; i++) p[i] = NULL; /* page the array in before timing */
    uint64_t tag = (uint64_t)a->id << 40, asum = 0, fsum = 0;
    ab_team_start(a->team);
    for (long k = 0; k < a->rounds; k++) {
        for (size_t i = 0; i < a->batch; i++) p[i] = ab_alloc(ab_size(rng_next(&r), a->lo, a->hi), tag++, &asum);
        for (size_t i = 0; i < a->batch; i++) ab_free(p[i], &fsum, "ab_batch");
    }
    ab_team_end(a->team);
    free(p);
    a->sums = (ab_sums_t){asum, fsum};
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_batch");
    size_t batch = (size_t)bench_opt_u64(&a, "--batch", 1000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 8), hi = (size_t)bench_opt_u64(&a, "--max", 1024);
    /* about the same number of operations whatever the batch */
    long rounds = (long)bench_opt_u64(&a, "--rounds", 0);
    if (!rounds) {
        uint64_t ops = batch >= 100000 ? (a.quick ? 1 : 20000000) : (a.quick ? 300000 : 40000000);
        rounds = (long)(ops / batch);
        if (rounds < 1) rounds = 1;
    }
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    if (!batch) bench_usage_exit("--batch must be > 0");
    char name[64];
    if (batch >= 1000000 && batch % 1000000 == 0)
        snprintf(name, sizeof name, "ab_bulk%zum_%dt", batch / 1000000, a.threads);
    else
        snprintf(name, sizeof name, "ab_batch_%dt", a.threads);
    bench_name = name;
    arg_t args[a.threads];
    ab_team_t team;
    for (int t = 0; t < a.threads; t++) args[t] = (arg_t){t, rounds, batch, lo, hi, a.seed, {0, 0}, &team};
    ab_team_result_t res;
    ab_team_run(&team, a.threads, worker, args, sizeof args[0], offsetof(arg_t, sums), &res);
    ab_verify_sums(res.sums);
    double el = res.el, cpu = res.cpu;
    uint64_t asum = res.sums.asum;
    double ops = (double)rounds * (double)batch * a.threads;
    bench_result(name, "throughput", ops / el, "ops/s", "higher",
                 "threads=%d batch=%zu rounds=%ld min=%zu max=%zu time_s=%.4f cpu_s=%.4f cpu_ops_per_s=%.4g final_rss_kib=%ld peak_rss_kib=%ld checksum=%016" PRIx64,
                 a.threads, batch, rounds, lo, hi, el, cpu, ops / cpu, bench_rss_kib(), bench_peak_rss_kib(), asum);
    return 0;
}
