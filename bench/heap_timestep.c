/* Per-time-step temporaries dropped at once (issue 30, user heaps): at every
 * step, --blocks (10^5) blocks of 16 B - 4 KiB (90 % of 16-256 B) and
 * --arrays (4) arrays of 64 KiB - 2 MiB are allocated, one word written at
 * each end of each, then all are checked and dropped; --steps (100) steps,
 * one thread. How they are dropped is the variant (--variant, see
 * heap_common.h): free each block (any allocator), a locus arena heap reset
 * per step (locus-reset) or created and destroyed per step (locus-destroy),
 * a mimalloc heap created and destroyed per step (mimalloc-heap), a glibc
 * obstack freed back to the step's mark (obstack). The harness runs `free`,
 * `obstack`, `heap` (locus-reset / mimalloc-heap / free) and `heap-destroy`.
 * Metric: total time of the steps; the drop alone (drop_s) is an extra. */
#include "heap_common.h"

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "heap_timestep");
    long steps = (long)bench_opt_u64(&a, "--steps", a.quick ? 5 : 100);
    size_t nblocks = (size_t)bench_opt_u64(&a, "--blocks", a.quick ? 10000 : 100000);
    size_t narrays = (size_t)bench_opt_u64(&a, "--arrays", 4);
    hb_variant_t v = hb_variant(&a, "free", V_LOCUS_RESET);
    size_t total = nblocks + narrays;
    void **p = (void **)bench_xmalloc(total * sizeof *p);
    memset(p, 0, total * sizeof *p); /* paged in before timing */
    hb_region_t r;
    hb_region_init(&r, v, NULL, 0);
    rng_t rng = rng_seed(a.seed);
    uint64_t tag = 1, asum = 0, fsum = 0, bytes = 0;
    double drop_s = 0, el, cpu;
    long rss_peak_step = 0;
    ab_clock_t c = ab_clock_start();
    for (long s = 0; s < steps; s++) {
        hb_region_begin(&r);
        size_t k = 0;
        for (size_t i = 0; i < nblocks; i++, k++) {
            size_t n = hb_size(rng_next(&rng), 16, 256, 4096, 10);
            p[k] = hb_region_alloc(&r, n);
            asum += hb_put(p[k], n, tag++);
            bytes += n;
            if (narrays && i % (nblocks / narrays + 1) == nblocks / narrays / 2) { /* arrays amid the blocks */
                size_t m = ab_size(rng_next(&rng), 64 << 10, 2 << 20) & ~(size_t)7;
                p[++k] = hb_region_alloc(&r, m);
                asum += hb_put(p[k], m, tag++);
                bytes += m;
            }
        }
        for (size_t i = 0; i < k; i++) fsum += hb_take(p[i], 0, "heap_timestep");
        if (s == steps / 2) rss_peak_step = bench_rss_kib();
        double t0 = now_s();
        if (v == V_FREE)
            for (size_t i = 0; i < k; i++) free(p[i]);
        else
            hb_region_drop(&r);
        drop_s += now_s() - t0;
    }
    ab_clock_stop(&c, &el, &cpu);
    hb_region_fini(&r);
    ab_verify(asum, fsum);
    free(p);
    bench_result("heap_timestep", "time", el, "s", "lower",
                 "variant=%s steps=%ld blocks=%zu arrays=%zu mib_per_step=%.1f time_s=%.4f cpu_s=%.4f drop_s=%.4f "
                 "ns_per_block=%.1f drop_ns_per_block=%.2f rss_mid_kib=%ld peak_rss_kib=%ld checksum=%016" PRIx64,
                 hb_variant_names[v], steps, nblocks, narrays, (double)bytes / steps / (1 << 20), el, cpu, drop_s,
                 el * 1e9 / ((double)steps * (double)total), drop_s * 1e9 / ((double)steps * (double)total),
                 rss_peak_step, bench_peak_rss_kib(), asum);
    return 0;
}
