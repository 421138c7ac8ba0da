/* Small ring (a workload of locus's own, for small-block speed): two threads;
 * the producer allocates blocks of random sizes 8 B - 1 KiB, writes a pattern
 * and passes them through a bounded lock-free ring to the consumer, which
 * checks and frees them.  Metric: blocks per second. */
#include "common.h"

typedef struct {
    spsc_t q;
    long count;
} ctx_t;

static void *consumer(void *vp) {
    ctx_t *c = (ctx_t *)vp;
    for (long i = 0; i < c->count; i++) {
        bench_item_t it = spsc_pop(&c->q);
        pat_check(it.p, it.n, it.tag, "small_ring consumer");
        free(it.p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "small_ring");
    long count = (long)bench_opt_u64(&a, "--count", a.quick ? 3000000 : 20000000);
    size_t cap = (size_t)bench_opt_u64(&a, "--ring", 256);
    rng_t r = rng_seed(a.seed);
    ctx_t c;
    spsc_init(&c.q, cap);
    c.count = count;
    pthread_t th;
    double t0 = now_s();
    bench_spawn(&th, consumer, &c);
    for (long k = 0; k < count; k++) {
        size_t n = rng_range(&r, 8, 1024);
        bench_item_t it = {bench_xmalloc(n), n, (uint64_t)k};
        pat_fill(it.p, n, it.tag);
        spsc_push(&c.q, it);
    }
    pthread_join(th, NULL);
    double el = now_s() - t0;
    free(c.q.slots);
    bench_result("small_ring", "throughput", (double)count / el, "blocks/s", "higher",
                 "blocks=%ld ring=%zu time_s=%.4f", count, cap, el);
    return 0;
}
