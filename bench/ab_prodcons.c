/* Allocator-bound producer/consumer: thread 0 mallocs blocks of random sizes
 * 8 B - 1 KiB (one word written at each end) and hands them to thread 1,
 * which checks and frees them: every free is remote.  Blocks travel in
 * batches of --batch pointers (256) through a bounded queue of --depth
 * batches (8) protected by a mutex, with condition variables to wait on: no
 * thread spins, so on 2 shared cores the time does not depend on who gets
 * descheduled while spinning (a per-object spinning ring spreads tenfold from
 * run to run).  The batch arrays are allocated once and recycled through a
 * second queue, so the queue itself never calls malloc.  Metric: blocks moved
 * per second, total time to move --count blocks. */
#include "common.h"

#define BQ_MAX 256 /* the ring lives in the struct: the queue never calls malloc */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t nonempty, nonfull;
    size_t cap, head, len; /* ring of batch indices */
    int ring[BQ_MAX];
} bq_t;

static void bq_init(bq_t *q, size_t cap) {
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->nonempty, NULL);
    pthread_cond_init(&q->nonfull, NULL);
    q->cap = cap;
    q->head = q->len = 0;
}

static void bq_push(bq_t *q, int b) {
    pthread_mutex_lock(&q->mu);
    while (q->len == q->cap) pthread_cond_wait(&q->nonfull, &q->mu);
    q->ring[(q->head + q->len++) % q->cap] = b;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
}

static int bq_pop(bq_t *q) {
    pthread_mutex_lock(&q->mu);
    while (q->len == 0) pthread_cond_wait(&q->nonempty, &q->mu);
    int b = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    pthread_cond_signal(&q->nonfull);
    pthread_mutex_unlock(&q->mu);
    return b;
}

typedef struct {
    bq_t full, empty;
    void ***batches; /* depth + 2 arrays of `batch` pointers */
    size_t batch;
    long nbatches;
    uint64_t fsum;
} ctx_t;

static void *consumer(void *vp) {
    ctx_t *c = (ctx_t *)vp;
    uint64_t fsum = 0;
    for (long k = 0; k < c->nbatches; k++) {
        int b = bq_pop(&c->full);
        void **p = c->batches[b];
        for (size_t i = 0; i < c->batch; i++) ab_free(p[i], &fsum, "ab_prodcons consumer");
        bq_push(&c->empty, b);
    }
    c->fsum = fsum;
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_prodcons");
    size_t batch = (size_t)bench_opt_u64(&a, "--batch", 256);
    size_t depth = (size_t)bench_opt_u64(&a, "--depth", 8);
    long count = (long)bench_opt_u64(&a, "--count", a.quick ? 300000 : 20000000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 8), hi = (size_t)bench_opt_u64(&a, "--max", 1024);
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    if (!batch || !depth || depth + 2 > BQ_MAX) bench_usage_exit("--batch must be > 0, --depth 1 .. 254");
    bench_name = "ab_prodcons";
    ctx_t c;
    c.batch = batch;
    c.nbatches = (long)((size_t)count / batch);
    if (c.nbatches < 1) c.nbatches = 1;
    count = c.nbatches * (long)batch;
    size_t nb = depth + 2;
    bq_init(&c.full, nb);
    bq_init(&c.empty, nb);
    c.batches = (void ***)bench_xmalloc(nb * sizeof(void **));
    for (size_t b = 0; b < nb; b++) {
        c.batches[b] = (void **)bench_xmalloc(batch * sizeof(void *));
        memset(c.batches[b], 0, batch * sizeof(void *));
        bq_push(&c.empty, (int)b);
    }
    /* at most `depth` full batches queued: the producer can run ahead of the
     * consumer by depth batches and no more (bounded memory) */
    c.full.cap = depth;
    rng_t r = rng_seed(a.seed);
    uint64_t tag = 0, asum = 0;
    pthread_t th;
    ab_clock_t clk = ab_clock_start();
    bench_spawn(&th, consumer, &c);
    for (long k = 0; k < c.nbatches; k++) {
        int b = bq_pop(&c.empty);
        void **p = c.batches[b];
        for (size_t i = 0; i < batch; i++) p[i] = ab_alloc(ab_size(rng_next(&r), lo, hi), tag++, &asum);
        bq_push(&c.full, b);
    }
    pthread_join(th, NULL);
    double el, cpu;
    ab_clock_stop(&clk, &el, &cpu);
    ab_verify(asum, c.fsum);
    for (size_t b = 0; b < nb; b++) free(c.batches[b]);
    free(c.batches);
    bench_result("ab_prodcons", "throughput", (double)count / el, "blocks/s", "higher",
                 "threads=2 blocks=%ld batch=%zu depth=%zu min=%zu max=%zu time_s=%.4f cpu_s=%.4f cpu_ops_per_s=%.4g peak_rss_kib=%ld checksum=%016" PRIx64,
                 count, batch, depth, lo, hi, el, cpu, (double)count / cpu, bench_peak_rss_kib(), asum);
    return 0;
}
