/* Time-step temporaries (the HydroBench pattern, Valat, PhD thesis, 2014,
 * §5.8.2, Table 5.1): 2 threads; at every step each thread allocates 8 arrays
 * of 4-32 MiB, writes every page, computes a checksum over what it wrote and
 * frees them.  An allocator that keeps and reuses the big blocks avoids the
 * page faults of every step.  Metric: total time; 200 steps in full mode. */
#include "common.h"

#define NARR 8

typedef struct {
    int id;
    long steps;
    uint64_t seed;
    uint64_t bytes;
    pthread_barrier_t *bar;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed ^ ((uint64_t)a->id << 32));
    pthread_barrier_wait(a->bar);
    for (long s = 0; s < a->steps; s++) {
        uint64_t *arr[NARR];
        size_t len[NARR];
        uint64_t expect = 0, got = 0;
        for (int k = 0; k < NARR; k++) {
            len[k] = (size_t)rng_range(&r, 4u << 20, 32u << 20) & ~(size_t)7;
            arr[k] = (uint64_t *)bench_xmalloc(len[k]);
            a->bytes += len[k];
            expect += arr_touch(arr[k], len[k], mix64(((uint64_t)a->id << 40) ^ ((uint64_t)s << 8) ^ (uint64_t)k));
        }
        for (int k = 0; k < NARR; k++) got += arr_sum(arr[k], len[k]);
        if (got != expect)
            bench_fail("checksum", "thread %d step %ld: checksum %" PRIx64 " expected %" PRIx64,
                       a->id, s, got, expect);
        for (int k = 0; k < NARR; k++) free(arr[k]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "timestep");
    long steps = (long)bench_opt_u64(&a, "--steps", a.quick ? 8 : 200);
    pthread_t th[a.threads];
    arg_t args[a.threads];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)a.threads + 1);
    for (int t = 0; t < a.threads; t++) {
        args[t] = (arg_t){t, steps, a.seed, 0, &bar};
        bench_spawn(&th[t], worker, &args[t]);
    }
    pthread_barrier_wait(&bar);
    double t0 = now_s();
    uint64_t bytes = 0;
    for (int t = 0; t < a.threads; t++) {
        pthread_join(th[t], NULL);
        bytes += args[t].bytes;
    }
    double el = now_s() - t0;
    bench_result("timestep", "time", el, "s", "lower", "threads=%d steps=%ld gib_allocated=%.2f ms_per_step=%.3f",
                 a.threads, steps, (double)bytes / (1 << 30), el * 1e3 / (double)steps);
    return 0;
}
