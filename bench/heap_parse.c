/* Parse, then discard (issue 30, user heaps): per round, one thread builds a
 * list of --nodes (10^6) nodes of 24-200 B (a node: its mark at offset 0, the
 * next node at 8, the tail mark at n-8), walks it once checking every node,
 * then drops the whole structure; --rounds (10) rounds. Variants
 * (heap_common.h): free every node walking the list (free), a locus arena
 * heap created per round and destroyed (locus-destroy; the harness's `heap`
 * under locus), or reset (locus-reset), a mimalloc heap destroyed
 * (mimalloc-heap), a glibc obstack freed to the round's mark (obstack).
 * Metric: total time; the drop alone (drop_s, and per node) and the resident
 * set just before and after the last round's drop are extras: the issue's
 * goal is a destroy in less than 1 % of the one-by-one frees, and the RSS
 * back down after it. */
#include "heap_common.h"

typedef struct node {
    uint64_t mark;
    struct node *next;
} node_t;

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "heap_parse");
    long rounds = (long)bench_opt_u64(&a, "--rounds", a.quick ? 2 : 10);
    size_t nnodes = (size_t)bench_opt_u64(&a, "--nodes", a.quick ? 100000 : 1000000);
    size_t lo = (size_t)bench_opt_u64(&a, "--min", 24), hi = (size_t)bench_opt_u64(&a, "--max", 200);
    if (lo < 24 || hi < lo || hi >= (1u << HB_SIZE_BITS)) bench_usage_exit("sizes must satisfy 24 <= --min <= --max");
    hb_variant_t v = hb_variant(&a, "free", V_LOCUS_DESTROY);
    hb_region_t r;
    hb_region_init(&r, v, NULL, 0);
    rng_t rng = rng_seed(a.seed);
    uint64_t tag = 1, asum = 0, fsum = 0, bytes = 0;
    double drop_s = 0, drop_max = 0, el, cpu;
    long rss_before = 0, rss_after = 0;
    long rss_start = bench_rss_kib();
    ab_clock_t c = ab_clock_start();
    for (long k = 0; k < rounds; k++) {
        hb_region_begin(&r);
        node_t *head = NULL, **link = &head;
        for (size_t i = 0; i < nnodes; i++) {
            size_t n = ab_size(rng_next(&rng), lo, hi);
            node_t *x = (node_t *)hb_region_alloc(&r, n);
            asum += hb_put(x, n, tag++);
            bytes += n;
            *link = x;
            link = &x->next;
        }
        *link = NULL;
        size_t seen = 0;
        for (node_t *x = head; x; x = x->next, seen++) fsum += hb_take(x, 0, "heap_parse");
        if (seen != nnodes) bench_fail("corrupt", "the list holds %zu nodes, not %zu", seen, nnodes);
        if (k == rounds - 1) rss_before = bench_rss_kib();
        double t0 = now_s();
        if (v == V_FREE) {
            for (node_t *x = head, *nx; x; x = nx) {
                nx = x->next;
                free(x);
            }
        } else {
            hb_region_drop(&r);
        }
        double d = now_s() - t0;
        drop_s += d;
        if (d > drop_max) drop_max = d;
        if (k == rounds - 1) rss_after = bench_rss_kib();
    }
    ab_clock_stop(&c, &el, &cpu);
    hb_region_fini(&r);
    ab_verify(asum, fsum);
    bench_result("heap_parse", "time", el, "s", "lower",
                 "variant=%s rounds=%ld nodes=%zu mib_per_round=%.1f time_s=%.4f cpu_s=%.4f drop_s=%.6f "
                 "drop_ms_per_round=%.4f drop_ms_max=%.4f drop_ns_per_node=%.3f rss_start_kib=%ld "
                 "rss_before_drop_kib=%ld rss_after_drop_kib=%ld peak_rss_kib=%ld checksum=%016" PRIx64,
                 hb_variant_names[v], rounds, nnodes, (double)bytes / rounds / (1 << 20), el,
                 cpu, drop_s, drop_s * 1e3 / rounds, drop_max * 1e3, drop_s * 1e9 / ((double)rounds * nnodes),
                 rss_start, rss_before, rss_after, bench_peak_rss_kib(), asum);
    return 0;
}
