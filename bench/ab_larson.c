/* Allocator-bound server workload, after Larson and Krishnan's benchmark
 * (P. Larson, M. Krishnan, "Memory allocation for long-running server
 * applications", ISMM 1998): --threads lanes (2), each owning an array of
 * --slots (2048) live blocks of random sizes 8 B - 1 KiB.  A lane's thread
 * replaces randomly chosen blocks (so block lifetimes are random, geometric),
 * and after --round operations it starts its successor, hands it the array
 * and exits; the successor frees its predecessor's blocks as it goes, so a
 * server's hand-off of work between threads is reproduced: frees of blocks
 * allocated by another, often exited, thread, and a steady stream of thread
 * creation.  The arrays are filled by the main thread before the timed
 * region (the first generation frees the main thread's blocks).  Metric:
 * operations per second over all lanes, one operation = one free + one
 * malloc; the number of threads created is in the extra fields. */
#include "common.h"

typedef struct lane {
    int id;
    long gens_left, round;
    size_t slots, lo, hi;
    void **w;
    rng_t r;
    uint64_t tag;
    ab_sums_t sums;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *running;
} lane_t;

static void *generation(void *vp) {
    lane_t *l = (lane_t *)vp;
    void **w = l->w;
    size_t mask = l->slots - 1;
    uint64_t tag = l->tag, asum = l->sums.asum, fsum = l->sums.fsum;
    rng_t r = l->r;
    for (long k = 0; k < l->round; k++) {
        uint64_t x = rng_next(&r);
        size_t i = (size_t)x & mask;
        ab_free(w[i], &fsum, "ab_larson");
        w[i] = ab_alloc(ab_size(x, l->lo, l->hi), tag++, &asum);
    }
    l->tag = tag;
    l->sums = (ab_sums_t){asum, fsum};
    l->r = r;
    if (--l->gens_left > 0) {
        /* hand the lane to a fresh thread and exit */
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int e = pthread_create(&t, &at, generation, l);
        if (e) bench_fail("pthread", "pthread_create: %s", strerror(e));
        pthread_attr_destroy(&at);
    } else {
        pthread_mutex_lock(l->mu);
        --*l->running;
        pthread_cond_signal(l->cv);
        pthread_mutex_unlock(l->mu);
    }
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_larson");
    size_t slots = (size_t)bench_opt_u64(&a, "--slots", 2048);
    long round = (long)bench_opt_u64(&a, "--round", 20000);
    long ops = (long)bench_opt_u64(&a, "--ops", a.quick ? 400000 : 24000000); /* per lane */
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 8), hi = (size_t)bench_opt_u64(&a, "--max", 1024);
    if (slots & (slots - 1)) bench_usage_exit("--slots must be a power of two");
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    if (round < 1) bench_usage_exit("--round must be > 0");
    long gens = ops / round;
    if (gens < 1) gens = 1;
    bench_name = "ab_larson";
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    int running = a.threads;
    lane_t *lanes = (lane_t *)bench_xmalloc((size_t)a.threads * sizeof *lanes);
    for (int t = 0; t < a.threads; t++) {
        lane_t *l = &lanes[t];
        *l = (lane_t){t, gens, round, slots, lo, hi, NULL, rng_seed(a.seed + (uint64_t)t * 1000003),
                      (uint64_t)t << 40, {0, 0}, &mu, &cv, &running};
        l->w = (void **)bench_xmalloc(slots * sizeof(void *));
        for (size_t i = 0; i < slots; i++) l->w[i] = ab_alloc(ab_size(rng_next(&l->r), lo, hi), l->tag++, &l->sums.asum);
    }
    ab_clock_t clk = ab_clock_start();
    for (int t = 0; t < a.threads; t++) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int e = pthread_create(&th, &at, generation, &lanes[t]);
        if (e) bench_fail("pthread", "pthread_create: %s", strerror(e));
        pthread_attr_destroy(&at);
    }
    pthread_mutex_lock(&mu);
    while (running) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    double el, cpu;
    ab_clock_stop(&clk, &el, &cpu);
    long rss = bench_rss_kib();
    ab_sums_t sums = {0, 0};
    for (int t = 0; t < a.threads; t++) {
        for (size_t i = 0; i < slots; i++) ab_free(lanes[t].w[i], &lanes[t].sums.fsum, "ab_larson final");
        free(lanes[t].w);
        ab_sums_add(&sums, lanes[t].sums);
    }
    free(lanes);
    ab_verify_sums(sums);
    double total = (double)gens * (double)round * a.threads;
    bench_result("ab_larson", "throughput", total / el, "ops/s", "higher",
                 "threads=%d slots=%zu round=%ld threads_created=%ld min=%zu max=%zu time_s=%.4f cpu_s=%.4f "
                 "cpu_ops_per_s=%.4g end_rss_kib=%ld peak_rss_kib=%ld checksum=%016" PRIx64,
                 a.threads, slots, round, gens * a.threads, lo, hi, el, cpu, total / cpu, rss, bench_peak_rss_kib(), sums.asum);
    return 0;
}
