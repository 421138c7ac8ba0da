/* Local batches (Valat, PhD thesis, 2014, §4.15.1, Fig. 4.12): every thread,
 * independently, allocates a batch of 1000 blocks of one size, writes a
 * pattern into each, checks it, and frees the batch; repeated for a number of
 * rounds.  Sizes used by the harness: 32 B (small-object fast path) and
 * 128 KiB (around glibc's mmap threshold, where page reuse matters).  Metric:
 * time of the whole run (all threads). */
#include "common.h"

#define BATCH 1000

typedef struct {
    int id;
    size_t size;
    long rounds;
    pthread_barrier_t *bar;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    void **ptr = (void **)bench_xmalloc(BATCH * sizeof(void *));
    pthread_barrier_wait(a->bar);
    for (long r = 0; r < a->rounds; r++) {
        uint64_t base = ((uint64_t)a->id << 48) ^ ((uint64_t)r << 16);
        for (int i = 0; i < BATCH; i++) {
            ptr[i] = bench_xmalloc(a->size);
            pat_fill(ptr[i], a->size, base + (uint64_t)i);
        }
        for (int i = 0; i < BATCH; i++) {
            pat_check(ptr[i], a->size, base + (uint64_t)i, "local_batch");
            free(ptr[i]);
        }
    }
    free(ptr);
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "local_batch");
    size_t size = (size_t)bench_opt_u64(&a, "--size", 32);
    long rounds = (long)bench_opt_u64(&a, "--rounds", 0);
    if (!rounds) {
        /* work proportional to bytes for big blocks, to calls for small ones */
        rounds = size <= 4096 ? (a.quick ? 10000 : 200000) : (a.quick ? 10 : 100);
    }
    char name[64];
    snprintf(name, sizeof name, "local_batch_%zu", size);
    bench_name = name;

    pthread_t th[a.threads];
    arg_t args[a.threads];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)a.threads + 1);
    for (int t = 0; t < a.threads; t++) {
        args[t] = (arg_t){t, size, rounds, &bar};
        bench_spawn(&th[t], worker, &args[t]);
    }
    pthread_barrier_wait(&bar);
    double t0 = now_s();
    for (int t = 0; t < a.threads; t++) pthread_join(th[t], NULL);
    double el = now_s() - t0;
    double ops = 2.0 * BATCH * (double)rounds * a.threads;
    bench_result(name, "time", el, "s", "lower", "threads=%d size=%zu rounds=%ld mops_per_s=%.3f",
                 a.threads, size, rounds, ops / el * 1e-6);
    return 0;
}
