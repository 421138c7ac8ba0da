/* Time-step temporaries on several NUMA nodes (the HydroBench pattern of
 * bench/timestep.c, Valat, PhD thesis, 2014, §5.8.2, with the threads placed
 * as in §4.11): one thread per node that has CPUs (--per-node K: K threads),
 * each bound with sched_setaffinity to its node's CPUs
 * (/sys/devices/system/node/nodeN/cpulist).  At every step each thread
 *
 *   1. allocates --arrays temporaries of --array-min..--array-max bytes (the
 *      size varies from step to step) and --small objects of 16..512 bytes,
 *   2. writes one word per page of each array (and its last word) and one
 *      word per small object: the allocator and the placement are measured,
 *      not memset,
 *   3. reads those words back into a checksum and compares it with what it
 *      wrote,
 *   4. asks the kernel where the pages it touched are (move_pages with a
 *      NULL node list: a query, outside the timed part),
 *   5. frees everything,
 *
 * and all threads meet at a barrier before the next step, so memory one
 * thread freed can be handed to a thread of another node at the next step,
 * as in a real time-step code.  The allocator is whatever is preloaded; with
 * locus, locus_rebind() is called after binding (found with dlsym).
 *
 * Metric: time per step and thread (allocate + touch + checksum + free, the
 * placement query excluded), in ms.  Extra fields: the share of the touched
 * pages that are on the thread's own node, over the whole run (local_pct),
 * for the arrays and the small objects' pages separately, and its minimum
 * over the steps (local_min_step_pct; each step's share counts all threads).
 * DATA lines: one per thread, one per step.  Under TCG (QEMU guests) the
 * time is only meaningful as a ratio between allocators within one run. */
#include "numa_common.h"

#define PAGE 4096

typedef struct {
    int idx, nidx, node;        /* thread index, node index, kernel node number */
    const cpu_set_t *cpus;
    long steps;
    int narr, nsmall;
    size_t amin, amax;
    uint64_t seed;
    pthread_barrier_t *bar;
    /* results */
    double t_work;
    uint64_t bytes;
    long large_on, large_all, small_on, small_all, absent;
    long *step_on, *step_all;   /* per step, this thread's counts */
    int locus_node, cpu_off_node;
} arg_t;

static _Atomic int no_query;

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    if (bench_bind(a->cpus) != 0)
        bench_fail("bind", "thread %d: sched_setaffinity to node %d: %s", a->idx, a->node, strerror(errno));
    a->locus_node = bench_locus_thread_node();
    rng_t r = rng_seed(a->seed ^ ((uint64_t)(a->idx + 1) << 32));
    /* Work space for the placement query, allocated once before step 0. */
    size_t maxpages = (size_t)a->narr * (a->amax / PAGE + 2);
    void **pages = (void **)bench_xmalloc((maxpages + (size_t)a->nsmall) * sizeof(void *));
    void **spages = pages + maxpages;
    uint64_t **arr = (uint64_t **)bench_xmalloc((size_t)a->narr * sizeof(uint64_t *));
    size_t *len = (size_t *)bench_xmalloc((size_t)a->narr * sizeof(size_t));
    uint64_t **small = (uint64_t **)bench_xmalloc((size_t)(a->nsmall ? a->nsmall : 1) * sizeof(uint64_t *));
    pthread_barrier_wait(a->bar);
    for (long s = 0; s < a->steps; s++) {
        uint64_t expect = 0, got = 0;
        double t0 = now_s();
        for (int k = 0; k < a->narr; k++) {
            len[k] = (size_t)rng_range(&r, a->amin, a->amax) & ~(size_t)7;
            arr[k] = (uint64_t *)bench_xmalloc(len[k]);
            a->bytes += len[k];
            expect += arr_touch(arr[k], len[k], mix64(((uint64_t)a->idx << 40) ^ ((uint64_t)s << 8) ^ (uint64_t)k));
        }
        for (int j = 0; j < a->nsmall; j++) {
            size_t sz = (size_t)rng_range(&r, 16, 512);
            small[j] = (uint64_t *)bench_xmalloc(sz);
            uint64_t w = mix64(((uint64_t)a->idx << 48) ^ ((uint64_t)s << 20) ^ (uint64_t)j);
            small[j][0] = w;
            expect += w;
            a->bytes += sz;
        }
        for (int k = 0; k < a->narr; k++) got += arr_sum(arr[k], len[k]);
        for (int j = 0; j < a->nsmall; j++) got += small[j][0];
        a->t_work += now_s() - t0;
        if (got != expect)
            bench_fail("checksum", "thread %d step %ld: checksum %" PRIx64 " expected %" PRIx64, a->idx, s, got,
                       expect);

        /* Where are the touched pages?  (Not timed.) */
        size_t np = 0;
        for (int k = 0; k < a->narr; k++) {
            size_t words = len[k] / 8;
            for (size_t i = 0; i < words - 1; i += PAGE / 8) pages[np++] = &arr[k][i];
            if (((uintptr_t)&arr[k][words - 1] & ~(uintptr_t)(PAGE - 1)) !=
                ((uintptr_t)pages[np - 1] & ~(uintptr_t)(PAGE - 1)))
                pages[np++] = &arr[k][words - 1];
        }
        size_t ns = 0;
        for (int j = 0; j < a->nsmall; j++) spages[j] = (void *)((uintptr_t)small[j] & ~(uintptr_t)(PAGE - 1));
        if (a->nsmall) {
            qsort(spages, (size_t)a->nsmall, sizeof(void *), cmp_ptr);
            for (int j = 0; j < a->nsmall; j++)
                if (ns == 0 || spages[ns - 1] != spages[j]) spages[ns++] = spages[j];
        }
        long lon = bench_count_on(pages, np, a->node, &a->absent);
        long son = bench_count_on(spages, ns, a->node, &a->absent);
        if (lon < 0 || son < 0) {
            if (errno != ENOSYS && errno != EPERM)
                bench_fail("move_pages", "move_pages: %s", strerror(errno));
            no_query = 1;           /* a kernel without NUMA: time only */
            lon = son = 0;
        }
        a->large_on += lon, a->large_all += (long)np;
        a->small_on += son, a->small_all += (long)ns;
        a->step_on[s] = lon + son, a->step_all[s] = (long)(np + ns);
        int cpu = sched_getcpu();
        if (cpu >= 0 && !CPU_ISSET(cpu, a->cpus)) a->cpu_off_node++;

        t0 = now_s();
        for (int k = 0; k < a->narr; k++) free(arr[k]);
        for (int j = 0; j < a->nsmall; j++) free(small[j]);
        a->t_work += now_s() - t0;
        pthread_barrier_wait(a->bar);
    }
    free(pages);
    free(arr);
    free(len);
    free(small);
    return NULL;
}

static double pct(long on, long all) { return all ? 100.0 * (double)on / (double)all : 0.0; }

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "numa_timestep");
    long steps = (long)bench_opt_u64(&a, "--steps", a.quick ? 6 : 30);
    int per_node = (int)bench_opt_u64(&a, "--per-node", 1);
    int narr = (int)bench_opt_u64(&a, "--arrays", 3);
    size_t amin = (size_t)bench_opt_u64(&a, "--array-min", 2u << 20);
    size_t amax = (size_t)bench_opt_u64(&a, "--array-max", 4u << 20);
    int nsmall = (int)bench_opt_u64(&a, "--small", 2000);
    if (steps < 1 || per_node < 1 || narr < 1 || amin < 64 || amax < amin || nsmall < 0)
        bench_usage_exit("usage: numa_timestep [--quick] [--steps N] [--per-node K] [--arrays N] "
                         "[--array-min SIZE] [--array-max SIZE] [--small N] [--seed N]");
    bench_nodes_t nd = bench_nodes();
    int nt = nd.n * per_node;

    pthread_t th[nt];
    arg_t args[nt];
    long *counts = (long *)calloc((size_t)nt * (size_t)steps * 2, sizeof(long));
    if (!counts) bench_fail("enomem", "calloc of the step counters");
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
    for (int t = 0; t < nt; t++) {
        int ni = t % nd.n;
        args[t] = (arg_t){.idx = t, .nidx = ni, .node = nd.id[ni], .cpus = &nd.cpus[ni], .steps = steps,
                          .narr = narr, .nsmall = nsmall, .amin = amin, .amax = amax, .seed = a.seed,
                          .bar = &bar, .step_on = counts + (size_t)t * (size_t)steps * 2,
                          .step_all = counts + (size_t)t * (size_t)steps * 2 + steps};
        bench_spawn(&th[t], worker, &args[t]);
    }
    pthread_barrier_wait(&bar);
    double t0 = now_s();
    for (long s = 0; s < steps; s++) pthread_barrier_wait(&bar);
    double wall = now_s() - t0;
    long lon = 0, lall = 0, son = 0, sall = 0, absent = 0, off = 0;
    double work = 0;
    uint64_t bytes = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        arg_t *w = &args[t];
        lon += w->large_on, lall += w->large_all, son += w->small_on, sall += w->small_all;
        absent += w->absent, off += w->cpu_off_node, work += w->t_work, bytes += w->bytes;
        printf("DATA name=numa_timestep series=thread thread=%d node=%d cpus=%d locus_thread_node=%d "
               "local_pct=%.2f local_large_pct=%.2f local_small_pct=%.2f ms_per_step=%.3f\n",
               t, w->node, nd.ncpus[w->nidx], w->locus_node, pct(w->large_on + w->small_on, w->large_all + w->small_all),
               pct(w->large_on, w->large_all), pct(w->small_on, w->small_all), w->t_work * 1e3 / (double)steps);
    }
    double minstep = 100.0;
    long minstep_at = 0;
    for (long s = 0; s < steps; s++) {
        long on = 0, all = 0;
        for (int t = 0; t < nt; t++) on += args[t].step_on[s], all += args[t].step_all[s];
        printf("DATA name=numa_timestep series=step step=%ld local_pct=%.2f pages=%ld\n", s, pct(on, all), all);
        if (pct(on, all) < minstep) minstep = pct(on, all), minstep_at = s;
    }
    pthread_barrier_destroy(&bar);
    free(counts);
    if (off) bench_fail("bind", "%ld step(s) ran on a CPU outside the thread's node", off);
    double ms = work * 1e3 / (double)steps / (double)nt;
    if (no_query) {
        bench_result("numa_timestep", "time_per_step", ms, "ms", "lower",
                     "nodes=%d nodes_online=%d threads=%d steps=%ld placement=unavailable checksum=ok "
                     "wall_s=%.3f gib_allocated=%.3f malloc_from=%s",
                     nd.n, nd.total, nt, steps, wall, (double)bytes / (1 << 30), bench_malloc_from());
        return 0;
    }
    bench_result("numa_timestep", "time_per_step", ms, "ms", "lower",
                 "nodes=%d nodes_online=%d threads=%d steps=%ld local_pct=%.2f local_min_step_pct=%.2f "
                 "local_min_step=%ld local_large_pct=%.2f local_small_pct=%.2f pages=%ld absent=%ld "
                 "checksum=ok wall_s=%.3f gib_allocated=%.3f malloc_from=%s",
                 nd.n, nd.total, nt, steps, pct(lon + son, lall + sall), minstep, minstep_at, pct(lon, lall),
                 pct(son, sall), lall + sall, absent, wall, (double)bytes / (1 << 30), bench_malloc_from());
    return 0;
}
