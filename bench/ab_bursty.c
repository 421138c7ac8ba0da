/* Allocator-bound bursty cross-thread workload (the adaptive controller's
 * hard case, issue 28): two threads work in --rounds (500) rounds; in each,
 * every thread allocates --per-round (1,000) blocks of random sizes
 * --min..--max (8 B - 16 KiB; one word written at each end), hands the batch
 * to the other thread, and checks and frees the batch the other handed it in
 * the same round (--lag 0, the default) or in the round before (--lag 1: two
 * batches live). Between rounds both threads pause --pause-us (2,000 us,
 * 0 for none), and after every --idle-every'th round (50; 0: never) they
 * idle --idle-us (700,000 us: longer than any window of the auto profile
 * before issue 28, 500 ms; a server between bursts of requests). So each
 * thread's memory is freed by the other thread, in bursts, and the
 * program's footprint drops between rounds only as far as
 * the allocator gives it back: an allocator that returns memory during the
 * pause pays to fault it in again at the next round. What is left after the
 * last round is freed after the timed region. Metric: operations per CPU
 * second (one operation = one malloc + one free; wall time stretches with
 * the pauses), with the wall time and the run's minor faults in the extra
 * fields. */
#include <stddef.h>
#include "common.h"

#include <sys/resource.h>

typedef struct {
    void **b;                         /* one batch */
    size_t n;
} batch_t;

typedef struct {
    int id;
    long rounds;
    size_t per, lo, hi;
    unsigned pause_us, lag, idle_every, idle_us;
    batch_t *mine, *theirs;           /* mine[r & 1]: what I hand over in round r */
    pthread_barrier_t *bar;
    uint64_t seed;
    ab_sums_t sums;                   /* checksums of what this worker allocated and freed */
    ab_team_t *team;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed + (uint64_t)a->id * 1000003);
    uint64_t tag = (uint64_t)a->id << 40, asum = 0, fsum = 0;
    ab_team_start(a->team);
    for (long k = 0; k < a->rounds; k++) {
        batch_t *out = &a->mine[k & 1];
        for (size_t i = 0; i < a->per; i++) out->b[i] = ab_alloc(ab_size(rng_next(&r), a->lo, a->hi), tag++, &asum);
        out->n = a->per;
        /* lag 0: the other's batch of this round, complete after the
         * barrier; lag 1: its batch of the round before (complete since that
         * round's barrier). Either way the other thread writes that buffer
         * again only after the next barrier. */
        if (!a->lag) pthread_barrier_wait(a->bar);
        batch_t *in = &a->theirs[(k + a->lag) & 1];
        for (size_t i = 0; i < in->n; i++) ab_free(in->b[i], &fsum, "ab_bursty");
        in->n = 0;
        if (a->lag) pthread_barrier_wait(a->bar);
        unsigned us = a->idle_every && (k + 1) % a->idle_every == 0 ? a->idle_us : a->pause_us;
        if (us) usleep(us);
    }
    ab_team_end(a->team);
    a->sums = (ab_sums_t){asum, fsum};
    return NULL;
}

static long minflt(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_bursty");
    long rounds = (long)bench_opt_u64(&a, "--rounds", a.quick ? 100 : 500);
    size_t per = (size_t)bench_opt_u64(&a, "--per-round", 1000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 8), hi = (size_t)bench_opt_u64(&a, "--max", 16384);
    unsigned pause_us = (unsigned)bench_opt_u64(&a, "--pause-us", 2000);
    unsigned lag = (unsigned)bench_opt_u64(&a, "--lag", 0);
    unsigned idle_every = (unsigned)bench_opt_u64(&a, "--idle-every", 50);
    unsigned idle_us = (unsigned)bench_opt_u64(&a, "--idle-us", 700000);
    if (lag > 1) bench_usage_exit("--lag must be 0 or 1");
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    if (rounds < 1 || per < 1) bench_usage_exit("--rounds and --per-round must be positive");
    a.threads = 2;                    /* a pair by construction */
    batch_t q[2][2];
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 2; j++) q[t][j] = (batch_t){(void **)bench_xmalloc(per * sizeof(void *)), 0};
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    ab_team_t team;
    arg_t args[2];
    for (int t = 0; t < 2; t++)
        args[t] = (arg_t){t, rounds, per, lo, hi, pause_us, lag, idle_every, idle_us, q[t], q[1 - t], &bar, a.seed, {0, 0}, &team};
    long f0 = minflt();
    ab_team_result_t res;
    ab_team_run(&team, 2, worker, args, sizeof args[0], offsetof(arg_t, sums), &res);
    double el = res.el, cpu = res.cpu;
    long faults = minflt() - f0;
    uint64_t asum = res.sums.asum, fsum = res.sums.fsum;
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 2; j++) {
            for (size_t i = 0; i < q[t][j].n; i++) ab_free(q[t][j].b[i], &fsum, "ab_bursty final");
            free(q[t][j].b);
        }
    pthread_barrier_destroy(&bar);
    ab_verify(asum, fsum);
    double total = (double)rounds * (double)per * 2;
    bench_result("ab_bursty", "cpu_throughput", total / cpu, "ops/s", "higher",
                 "threads=2 rounds=%ld per_round=%zu min=%zu max=%zu pause_us=%u idle_every=%u idle_us=%u lag=%u ops=%.0f time_s=%.4f cpu_s=%.4f "
                 "cpu_ops_per_s=%.4g wall_ops_per_s=%.4g minflt=%ld peak_rss_kib=%ld checksum=%016" PRIx64,
                 rounds, per, lo, hi, pause_us, idle_every, idle_us, lag, total, el, cpu, total / cpu, total / el, faults, bench_peak_rss_kib(), asum);
    return 0;
}
