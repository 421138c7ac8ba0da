/* NUMA first touch (the serial-initialisation example of Valat, talk slides,
 * 2018; first-touch placement: Valat, PhD thesis, 2014, §4.11): four arrays
 * of --mib MiB each are allocated with malloc by the main thread and
 * initialised either by memset on the main thread ("serial") or each thread
 * initialising the part it will later use ("parallel"); then all threads run
 * a triad a = b + s*c + d over their own part several times.  On a NUMA
 * machine serial initialisation puts every page on one node (first touch);
 * an allocator may counter this (interleave, local placement).  On one node
 * both should be equal.  The result is verified.
 *
 * Threads are bound to NUMA nodes (sched_setaffinity to the CPUs of
 * /sys/devices/system/node/nodeN/cpulist): worker t to the t-th node that has
 * CPUs (round robin), the main thread, which allocates the arrays and does
 * the serial initialisation, to the first node, as OpenMP with
 * OMP_PROC_BIND does (--main-unbound lets it run on the CPUs of every node,
 * --no-bind binds no thread).  On a one-node machine this changes nothing.  After each compute
 * phase the share of every thread's part that lies on the thread's own node
 * is read with move_pages (a query; nothing moves): where the pages landed.
 *
 * The parallel-init run comes after the serial one in the same process, so an
 * allocator that keeps the serial run's freed arrays hands back pages that
 * are already placed; --fresh keeps the serial run's arrays allocated until
 * the end, so that both runs get memory never touched before.
 *
 * Metric: time of the parallel compute phase after serial initialisation;
 * the parallel-init time, the ratio and the local shares are extra fields. */
#include "numa_common.h"

#define PAGE 4096

static bench_nodes_t nd;
static int bind_threads = 1;

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
    if (bind_threads && bench_bind(&nd.cpus[w->id % nd.n]) != 0)
        bench_fail("bind", "thread %d: sched_setaffinity: %s", w->id, strerror(errno));
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

/* Share (percent) of the pages of every thread's part of the four arrays
 * that lie on that thread's node; -1 when the kernel cannot tell.  One DATA
 * line per thread. */
static double local_share(double *const arr[4], size_t n, int nt, const char *init) {
    size_t cap = 4 * (n * sizeof(double) / PAGE + 2 * (size_t)nt) + 16;
    void **pages = (void **)bench_xmalloc(cap * sizeof(void *));
    long on = 0, all = 0;
    for (int t = 0; t < nt; t++) {
        size_t lo = n * (size_t)t / (size_t)nt, hi = n * (size_t)(t + 1) / (size_t)nt;
        if (hi <= lo) continue;
        size_t np = 0;
        for (int k = 0; k < 4; k++) {
            char *p = (char *)(arr[k] + lo), *end = (char *)(arr[k] + hi);
            for (; p < end; p += PAGE) pages[np++] = p;
            if (((uintptr_t)(end - 1) & ~(uintptr_t)(PAGE - 1)) != ((uintptr_t)pages[np - 1] & ~(uintptr_t)(PAGE - 1)))
                pages[np++] = end - 1;
        }
        long absent = 0;
        long o = bench_count_on(pages, np, nd.id[t % nd.n], &absent);
        if (o < 0) {
            free(pages);
            return -1;
        }
        printf("DATA name=numa_first_touch series=placement_thread init=%s thread=%d node=%d pages=%zu "
               "local_pct=%.2f absent=%ld\n", init, t, nd.id[t % nd.n], np, 100.0 * (double)o / (double)np, absent);
        on += o, all += (long)np;
    }
    free(pages);
    return all ? 100.0 * (double)on / (double)all : -1;
}

/* One run; keep != NULL: the arrays stay allocated and are returned there. */
static double run(size_t n, int nt, long reps, int parallel_init, double *local, double **keep) {
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
    /* Where the pages are, before the main thread reads the result. */
    double *const arr[4] = {a, b, c, d};
    *local = bind_threads ? local_share(arr, n, nt, parallel_init ? "parallel" : "serial") : -1;
    for (size_t i = 0; i < n; i++)
        if (a[i] != (double)(i & 1023) + 2.0)
            bench_fail("result", "a[%zu] = %g, expected %g", i, a[i], (double)(i & 1023) + 2.0);
    if (keep) {
        for (int k = 0; k < 4; k++) keep[k] = arr[k];
    } else {
        free(a);
        free(b);
        free(c);
        free(d);
    }
    return tmax;
}

static int has_flag(int argc, char **argv, const char *f) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], f)) return 1;
    return 0;
}

static void fmt_pct(char *buf, size_t len, double v) {
    if (v < 0) snprintf(buf, len, "na");
    else snprintf(buf, len, "%.2f", v);
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "numa_first_touch");
    size_t mib = (size_t)bench_opt_u64(&a, "--mib", a.quick ? 32 : 256);
    long reps = (long)bench_opt_u64(&a, "--reps", a.quick ? 4 : 20);
    int fresh = has_flag(argc, argv, "--fresh");
    int main_bound = !has_flag(argc, argv, "--main-unbound");
    bind_threads = !has_flag(argc, argv, "--no-bind");
    nd = bench_nodes();
    if (!bind_threads) main_bound = 0;
    if (bind_threads) {
        /* bound: the first node's CPUs; unbound: every node's (whatever
         * affinity the program was started with) */
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int i = 0; i < nd.n; i++) CPU_OR(&all, &all, &nd.cpus[i]);
        if (bench_bind(main_bound ? &nd.cpus[0] : &all) != 0)
            bench_fail("bind", "main thread: sched_setaffinity: %s", strerror(errno));
    }
    size_t n = mib * (1u << 20) / sizeof(double);
    double ls, lp, *kept[4] = {0};
    double ts = run(n, a.threads, reps, 0, &ls, fresh ? kept : NULL);
    double tp = run(n, a.threads, reps, 1, &lp, NULL);
    for (int k = 0; k < 4; k++) free(kept[k]);
    char s_ls[16], s_lp[16];
    fmt_pct(s_ls, sizeof s_ls, ls);
    fmt_pct(s_lp, sizeof s_lp, lp);
    printf("DATA name=numa_first_touch series=use_time serial_init_s=%.6f parallel_init_s=%.6f\n", ts, tp);
    printf("DATA name=numa_first_touch series=placement nodes=%d bound=%d main_bound=%d fresh=%d "
           "local_serial_pct=%s local_parallel_pct=%s\n", nd.n, bind_threads, main_bound, fresh, s_ls, s_lp);
    double gbs = 4.0 * (double)n * sizeof(double) * (double)reps / 1e9;
    bench_result("numa_first_touch", "time", ts, "s", "lower",
                 "threads=%d mib_per_array=%zu parallel_init_s=%.6f serial_over_parallel=%.3f gb_per_s=%.2f "
                 "nodes=%d bound=%d main_bound=%d fresh=%d local_serial_pct=%s local_parallel_pct=%s malloc_from=%s",
                 a.threads, mib, tp, ts / tp, gbs / ts, nd.n, bind_threads, main_bound, fresh, s_ls, s_lp,
                 bench_malloc_from());
    return 0;
}
