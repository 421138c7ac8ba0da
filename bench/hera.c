/* Hera-like mix (the allocation profile of the CEA code Hera, Valat, PhD
 * thesis, 2014, §4.5 and Fig. 4.4): 2 threads, each running iterations of
 *  - a burst of short-lived small objects (16-512 B) kept in a window of
 *    256 live objects, the oldest replaced first;
 *  - one 1-4 MiB block per iteration, every page written, kept alive for
 *    4 iterations;
 *  - a buffer grown by realloc (x1.5 per iteration) from 64 KiB up to
 *    ~20 MiB, then freed and restarted; after every growth the old contents
 *    are verified and the new tail written.
 * Metric: total time. */
#include "common.h"

#define SMALL_WIN 256
#define SMALL_PER_ITER 64
#define BIG_WIN 4
#define GROW_MAX (20u << 20)
#define GROW_STEP 256 /* one checked word every 256 B of the growing buffer */

typedef struct {
    int id;
    long iters;
    uint64_t seed;
    pthread_barrier_t *bar;
} arg_t;

static inline uint64_t grow_word(uint64_t gen, size_t off) { return pat_word(gen, off) | 1; }

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    rng_t r = rng_seed(a->seed + (uint64_t)a->id * 77);
    bench_item_t small[SMALL_WIN] = {{0}}, big[BIG_WIN] = {{0}};
    size_t si = 0;
    unsigned char *buf = NULL;
    size_t blen = 0;
    uint64_t gen = (uint64_t)a->id << 50, tag = (uint64_t)a->id << 56;
    pthread_barrier_wait(a->bar);
    for (long it = 0; it < a->iters; it++) {
        for (int k = 0; k < SMALL_PER_ITER; k++) {
            bench_item_t *s = &small[si++ % SMALL_WIN];
            if (s->p) {
                pat_check(s->p, s->n, s->tag, "hera small");
                free(s->p);
            }
            s->n = rng_range(&r, 16, 512);
            s->tag = ++tag;
            s->p = bench_xmalloc(s->n);
            pat_fill(s->p, s->n, s->tag);
        }
        bench_item_t *b = &big[it % BIG_WIN];
        if (b->p) {
            pat_check(b->p, b->n, b->tag, "hera big");
            free(b->p);
        }
        b->n = rng_range(&r, 1u << 20, 4u << 20);
        b->tag = ++tag;
        b->p = bench_xmalloc(b->n);
        pat_fill(b->p, b->n, b->tag);

        size_t nlen = blen ? blen + blen / 2 : 64u << 10;
        if (nlen > GROW_MAX) {
            free(buf);
            buf = NULL;
            blen = 0;
            gen++;
            nlen = 64u << 10;
        }
        unsigned char *nb = (unsigned char *)realloc(buf, nlen);
        if (!nb) bench_fail("enomem", "realloc(%zu) returned NULL", nlen);
        for (size_t off = 0; off + 8 <= blen; off += GROW_STEP) {
            uint64_t w;
            memcpy(&w, nb + off, 8);
            if (w != grow_word(gen, off))
                bench_fail("realloc", "thread %d: realloc %zu -> %zu lost contents at offset %zu", a->id,
                           blen, nlen, off);
        }
        for (size_t off = (blen + GROW_STEP - 1) / GROW_STEP * GROW_STEP; off + 8 <= nlen; off += GROW_STEP) {
            uint64_t w = grow_word(gen, off);
            memcpy(nb + off, &w, 8);
        }
        buf = nb;
        blen = nlen;
    }
    for (int i = 0; i < SMALL_WIN; i++)
        if (small[i].p) {
            pat_check(small[i].p, small[i].n, small[i].tag, "hera small final");
            free(small[i].p);
        }
    for (int i = 0; i < BIG_WIN; i++)
        if (big[i].p) {
            pat_check(big[i].p, big[i].n, big[i].tag, "hera big final");
            free(big[i].p);
        }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "hera");
    long iters = (long)bench_opt_u64(&a, "--iters", a.quick ? 500 : 10000);
    pthread_t th[a.threads];
    arg_t args[a.threads];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)a.threads + 1);
    for (int t = 0; t < a.threads; t++) {
        args[t] = (arg_t){t, iters, a.seed, &bar};
        bench_spawn(&th[t], worker, &args[t]);
    }
    pthread_barrier_wait(&bar);
    double t0 = now_s();
    for (int t = 0; t < a.threads; t++) pthread_join(th[t], NULL);
    double el = now_s() - t0;
    bench_result("hera", "time", el, "s", "lower", "threads=%d iters=%ld ms_per_iter=%.3f", a.threads, iters,
                 el * 1e3 / (double)iters);
    return 0;
}
