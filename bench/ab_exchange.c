/* Allocator-bound random exchange (t-test1 style, Valat, PhD thesis, 2014,
 * Fig. 4.14): a shared table of --slots (4096) pointers; every thread mallocs a
 * block of random size 8 B - 1 KiB (one word written at each end), swaps it
 * into a random slot with one atomic exchange (no lock, no spinning) and
 * checks and frees the block it displaced, which another thread allocated
 * about half of the time with 2 threads.  At 1 thread the same loop is purely
 * local.  What is left in the table is freed after the timed region.  Metric:
 * operations per second over all threads, one operation = one malloc + one
 * free. */
#include "common.h"

typedef struct {
    int id;
    long ops;
    size_t nslots, lo, hi;
    _Atomic(void *) *slots;
    uint64_t seed;
    ab_sums_t sums;
    ab_team_t *team;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed + (uint64_t)a->id * 1000003);
    uint64_t tag = (uint64_t)a->id << 40, asum = 0, fsum = 0;
    size_t mask = a->nslots - 1;
    ab_team_start(a->team);
    for (long k = 0; k < a->ops; k++) {
        uint64_t x = rng_next(&r);
        void *p = ab_alloc(ab_size(x, a->lo, a->hi), tag++, &asum);
        void *old = atomic_exchange_explicit(&a->slots[x & mask], p, memory_order_acq_rel);
        if (old) ab_free(old, &fsum, "ab_exchange");
    }
    ab_team_end(a->team);
    a->sums = (ab_sums_t){asum, fsum};
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_exchange");
    size_t nslots = (size_t)bench_opt_u64(&a, "--slots", 4096);
    long ops = (long)bench_opt_u64(&a, "--ops", a.quick ? 300000 : 25000000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 8), hi = (size_t)bench_opt_u64(&a, "--max", 1024);
    if (nslots & (nslots - 1)) bench_usage_exit("--slots must be a power of two");
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    char name[64];
    snprintf(name, sizeof name, "ab_exchange_%dt", a.threads);
    bench_name = name;
    _Atomic(void *) *slots = (_Atomic(void *) *)bench_xmalloc(nslots * sizeof *slots);
    for (size_t i = 0; i < nslots; i++) atomic_init(&slots[i], NULL);
    arg_t args[a.threads];
    ab_team_t team;
    for (int t = 0; t < a.threads; t++) args[t] = (arg_t){t, ops, nslots, lo, hi, slots, a.seed, {0, 0}, &team};
    ab_team_result_t res;
    ab_team_run(&team, a.threads, worker, args, sizeof args[0], offsetof(arg_t, sums), &res);
    double el = res.el, cpu = res.cpu;
    ab_sums_t sums = res.sums;
    for (size_t i = 0; i < nslots; i++) {
        void *p = atomic_load(&slots[i]);
        if (p) ab_free(p, &sums.fsum, "ab_exchange final");
    }
    free(slots);
    ab_verify_sums(sums);
    double total = (double)ops * a.threads;
    bench_result(name, "throughput", total / el, "ops/s", "higher",
                 "threads=%d ops=%.0f slots=%zu min=%zu max=%zu time_s=%.4f cpu_s=%.4f cpu_ops_per_s=%.4g "
                 "peak_rss_kib=%ld checksum=%016" PRIx64,
                 a.threads, total, nslots, lo, hi, el, cpu, total / cpu, bench_peak_rss_kib(), sums.asum);
    return 0;
}
