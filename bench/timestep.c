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
    int thp_report;
} arg_t;

/* --thp-report: at the middle step (recycled arrays), the share of the
 * resident memory of the mappings holding thread 0's arrays that is backed
 * by huge pages (AnonHugePages / Rss in /proc/self/smaps), as a DATA line. */
static void thp_coverage(uint64_t **arr, const size_t *len) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return;
    char line[512];
    unsigned long lo = 0, hi = 0, rss = 0, huge = 0, tot_rss = 0, tot_huge = 0;
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b, v;
        char *dash = strchr(line, '-'), *sp = strchr(line, ' ');
        if (dash && sp && dash < sp && sscanf(line, "%lx-%lx ", &a, &b) == 2) {
            lo = a, hi = b, in = 0;
            for (int k = 0; k < NARR; k++)
                if ((uintptr_t)arr[k] < hi && (uintptr_t)arr[k] + len[k] > lo) in = 1;
            continue;
        }
        if (in && sscanf(line, "Rss: %lu kB", &v) == 1) rss = v, tot_rss += v;
        if (in && sscanf(line, "AnonHugePages: %lu kB", &v) == 1) huge = v, tot_huge += v;
    }
    fclose(f);
    (void)rss, (void)huge;
    size_t bytes = 0;
    for (int k = 0; k < NARR; k++) bytes += len[k];
    printf("DATA name=timestep series=thp arrays_mib=%.1f rss_mib=%.1f huge_mib=%.1f coverage=%.4f\n",
           (double)bytes / (1 << 20), tot_rss / 1024.0, tot_huge / 1024.0, tot_rss ? (double)tot_huge / tot_rss : 0.0);
}

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
        if (a->thp_report && a->id == 0 && s == a->steps / 2) thp_coverage(arr, len);
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
    int thp_report = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--thp-report")) thp_report = 1;
    pthread_t th[a.threads];
    arg_t args[a.threads];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)a.threads + 1);
    for (int t = 0; t < a.threads; t++) {
        args[t] = (arg_t){t, steps, a.seed, 0, &bar, thp_report};
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
