/* Producer/consumer (Valat, PhD thesis, 2014, §4.15.1, Fig. 4.13): thread 0
 * allocates blocks of one size and writes a pattern into each; the other
 * threads receive them through lock-free bounded rings, check the pattern and
 * free them.  Every block is thus freed by a thread other than the one that
 * allocated it (remote frees).  Sizes used by the harness: 32 B and 2 MiB.
 * Metric: blocks transferred per second. */
#include "common.h"

typedef struct {
    spsc_t q;
    long count;
} cons_t;

static void *consumer(void *vp) {
    cons_t *c = (cons_t *)vp;
    for (long i = 0; i < c->count; i++) {
        bench_item_t it = spsc_pop(&c->q);
        pat_check(it.p, it.n, it.tag, "prodcons consumer");
        free(it.p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "prodcons");
    size_t size = (size_t)bench_opt_u64(&a, "--size", 32);
    long total = (long)bench_opt_u64(&a, "--count", 0);
    if (!total) total = size <= 4096 ? (a.quick ? 4000000 : 30000000) : (a.quick ? 600 : 40000);
    char name[64];
    snprintf(name, sizeof name, "prodcons_%zu", size);
    bench_name = name;
    int ncons = a.threads > 1 ? a.threads - 1 : 1;
    long per = total / ncons;
    total = per * ncons;
    size_t cap = size <= 4096 ? 1024 : 16;

    cons_t *cs = (cons_t *)bench_xmalloc(sizeof(cons_t) * (size_t)ncons);
    pthread_t th[ncons];
    for (int i = 0; i < ncons; i++) {
        spsc_init(&cs[i].q, cap);
        cs[i].count = per;
    }
    double t0 = now_s();
    for (int i = 0; i < ncons; i++) bench_spawn(&th[i], consumer, &cs[i]);
    for (long k = 0; k < total; k++) {
        bench_item_t it = {bench_xmalloc(size), size, (uint64_t)k * 7919 + 1};
        pat_fill(it.p, size, it.tag);
        spsc_push(&cs[k % ncons].q, it);
    }
    for (int i = 0; i < ncons; i++) pthread_join(th[i], NULL);
    double el = now_s() - t0;
    for (int i = 0; i < ncons; i++) free(cs[i].q.slots);
    free(cs);
    bench_result(name, "throughput", (double)total / el, "blocks/s", "higher",
                 "threads=%d size=%zu blocks=%ld time_s=%.4f", ncons + 1, size, total, el);
    return 0;
}
