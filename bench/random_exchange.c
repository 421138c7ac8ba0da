/* Random exchange, t-test1 style (Valat, PhD thesis, 2014, §4.15.1,
 * Fig. 4.14): a shared table of slots; every thread repeatedly picks a random
 * slot, puts a freshly allocated block of random size (1 .. --max-size) there
 * and takes the previous occupant out, checks its pattern and frees it.
 * Blocks therefore migrate between threads at random.  Max sizes used by the
 * harness: 64 B and 2 MiB.  Metric: operations (one malloc + one free) per
 * second. */
#include "common.h"

typedef struct {
    atomic_flag lock;
    void *p;
    size_t n;
    uint64_t tag;
} slot_t;

typedef struct {
    int id;
    long ops;
    size_t maxsz, nslots;
    slot_t *slots;
    uint64_t seed;
    pthread_barrier_t *bar;
} arg_t;

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed + (uint64_t)a->id * 1000003);
    pthread_barrier_wait(a->bar);
    for (long k = 0; k < a->ops; k++) {
        size_t n = rng_range(&r, 1, a->maxsz);
        uint64_t tag = ((uint64_t)a->id << 40) | (uint64_t)k;
        void *p = bench_xmalloc(n);
        pat_fill(p, n, tag);
        slot_t *s = &a->slots[rng_next(&r) % a->nslots];
        unsigned spins = 0;
        while (atomic_flag_test_and_set_explicit(&s->lock, memory_order_acquire)) bench_pause(&spins);
        void *op = s->p;
        size_t on = s->n;
        uint64_t ot = s->tag;
        s->p = p;
        s->n = n;
        s->tag = tag;
        atomic_flag_clear_explicit(&s->lock, memory_order_release);
        if (op) {
            pat_check(op, on, ot, "random_exchange");
            free(op);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "random_exchange");
    size_t maxsz = (size_t)bench_opt_u64(&a, "--max-size", 64);
    int big = maxsz > 4096;
    size_t nslots = (size_t)bench_opt_u64(&a, "--slots", big ? 64 : 4096);
    long ops = (long)bench_opt_u64(&a, "--ops", big ? (a.quick ? 3000 : 100000) : (a.quick ? 3000000 : 50000000));
    char name[64];
    snprintf(name, sizeof name, "random_exchange_%zu", maxsz);
    bench_name = name;
    slot_t *slots = (slot_t *)bench_xmalloc(nslots * sizeof(slot_t));
    for (size_t i = 0; i < nslots; i++) {
        atomic_flag_clear(&slots[i].lock);
        slots[i].p = NULL;
    }
    pthread_t th[a.threads];
    arg_t args[a.threads];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)a.threads + 1);
    for (int t = 0; t < a.threads; t++) {
        args[t] = (arg_t){t, ops, maxsz, nslots, slots, a.seed, &bar};
        bench_spawn(&th[t], worker, &args[t]);
    }
    pthread_barrier_wait(&bar);
    double t0 = now_s();
    for (int t = 0; t < a.threads; t++) pthread_join(th[t], NULL);
    double el = now_s() - t0;
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].p) {
            pat_check(slots[i].p, slots[i].n, slots[i].tag, "random_exchange final");
            free(slots[i].p);
        }
    free(slots);
    double total = (double)ops * a.threads;
    bench_result(name, "throughput", total / el, "ops/s", "higher",
                 "threads=%d max_size=%zu ops=%.0f time_s=%.4f", a.threads, maxsz, total, el);
    return 0;
}
