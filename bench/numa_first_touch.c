/* NUMA first touch (the serial-initialisation example of Valat, talk slides,
 * 2018; first-touch placement: Valat, PhD thesis, 2014, §4.11): four arrays
 * of --mib MiB each are allocated with malloc and initialised either by
 * memset on one thread ("serial") or each thread initialising the part it
 * will later use ("parallel"); then all threads run a triad a = b + s*c + d
 * over their own part several times.  On a NUMA machine serial initialisation
 * puts every page on one node (first touch); an allocator may counter this
 * (interleave, local placement).  On one node both should be equal.  The
 * result is verified.  Metric: time of the parallel compute phase after
 * serial initialisation; the parallel-init time and the ratio are printed as
 * extra fields. */
#include "common.h"

typedef struct {
    int id, nt, init;
    size_t n;
    long reps;
    double *a, *b, *c, *d;
    pthread_barrier_t *bar;
    double t_use;
} arg_t;

static void *worker(void *vp) {
    arg_t *w = (arg_t *)vp;
    size_t lo = w->n * (size_t)w->id / (size_t)w->nt, hi = w->n * (size_t)(w->id + 1) / (size_t)w->nt;
    if (w->init) {
        memset(w->a + lo, 0, (hi - lo) * sizeof(double));
        for (size_t i = lo; i < hi; i++) {
            w->b[i] = (double)(i & 1023);
            w->c[i] = 2.0;
            w->d[i] = 1.0;
        }
    }
    pthread_barrier_wait(w->bar);
    double t0 = now_s();
    for (long r = 0; r < w->reps; r++)
        for (size_t i = lo; i < hi; i++) w->a[i] = w->b[i] + 0.5 * w->c[i] + w->d[i];
    w->t_use = now_s() - t0;
    return NULL;
}

static double run(size_t n, int nt, long reps, int parallel_init) {
    double *a = (double *)bench_xmalloc(n * sizeof(double));
    double *b = (double *)bench_xmalloc(n * sizeof(double));
    double *c = (double *)bench_xmalloc(n * sizeof(double));
    double *d = (double *)bench_xmalloc(n * sizeof(double));
    if (!parallel_init) {
        memset(a, 0, n * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            b[i] = (double)(i & 1023);
            c[i] = 2.0;
            d[i] = 1.0;
        }
    }
    pthread_t th[nt];
    arg_t args[nt];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    for (int t = 0; t < nt; t++) {
        args[t] = (arg_t){t, nt, parallel_init, n, reps, a, b, c, d, &bar, 0};
        bench_spawn(&th[t], worker, &args[t]);
    }
    double tmax = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        if (args[t].t_use > tmax) tmax = args[t].t_use;
    }
    pthread_barrier_destroy(&bar);
    for (size_t i = 0; i < n; i++)
        if (a[i] != (double)(i & 1023) + 2.0)
            bench_fail("result", "a[%zu] = %g, expected %g", i, a[i], (double)(i & 1023) + 2.0);
    free(a);
    free(b);
    free(c);
    free(d);
    return tmax;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "numa_first_touch");
    size_t mib = (size_t)bench_opt_u64(&a, "--mib", a.quick ? 32 : 256);
    long reps = (long)bench_opt_u64(&a, "--reps", a.quick ? 4 : 20);
    size_t n = mib * (1u << 20) / sizeof(double);
    double ts = run(n, a.threads, reps, 0);
    double tp = run(n, a.threads, reps, 1);
    printf("DATA name=numa_first_touch series=use_time serial_init_s=%.6f parallel_init_s=%.6f\n", ts, tp);
    double gbs = 4.0 * (double)n * sizeof(double) * (double)reps / 1e9;
    bench_result("numa_first_touch", "time", ts, "s", "lower",
                 "threads=%d mib_per_array=%zu parallel_init_s=%.6f serial_over_parallel=%.3f gb_per_s=%.2f",
                 a.threads, mib, tp, ts / tp, gbs / ts);
    return 0;
}
