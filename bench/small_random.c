/* Small random (a workload of locus's own, for small-block speed): one thread
 * keeps a window of live blocks (1000 slots by default) of random sizes 8 B -
 * 1 KiB; each iteration checks and frees the block in a random slot and
 * replaces it with a new one.  Metric: operations per second, one operation =
 * one free plus one malloc. */
#include "common.h"

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "small_random");
    size_t slots = (size_t)bench_opt_u64(&a, "--slots", 1000);
    long iters = (long)bench_opt_u64(&a, "--iters", a.quick ? 4000000 : 50000000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 8), hi = (size_t)bench_opt_u64(&a, "--max", 1024);
    rng_t r = rng_seed(a.seed);
    bench_item_t *w = (bench_item_t *)bench_xmalloc(slots * sizeof *w);
    for (size_t i = 0; i < slots; i++) {
        w[i].n = rng_range(&r, lo, hi);
        w[i].tag = i;
        w[i].p = bench_xmalloc(w[i].n);
        pat_fill(w[i].p, w[i].n, w[i].tag);
    }
    double t0 = now_s();
    for (long k = 0; k < iters; k++) {
        size_t i = rng_next(&r) % slots;
        pat_check(w[i].p, w[i].n, w[i].tag, "small_random");
        free(w[i].p);
        w[i].n = rng_range(&r, lo, hi);
        w[i].tag = (uint64_t)k + slots;
        w[i].p = bench_xmalloc(w[i].n);
        pat_fill(w[i].p, w[i].n, w[i].tag);
    }
    double el = now_s() - t0;
    for (size_t i = 0; i < slots; i++) {
        pat_check(w[i].p, w[i].n, w[i].tag, "small_random final");
        free(w[i].p);
    }
    free(w);
    bench_result("small_random", "throughput", (double)iters / el, "ops/s", "higher",
                 "iters=%ld slots=%zu time_s=%.4f", iters, slots, el);
    return 0;
}
