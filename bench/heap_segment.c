/* A heap over a segment the program got elsewhere (issue 30, user heaps): a
 * --seg-mib (256) MiB anonymous mapping, aligned on 64 MiB and every page
 * written before timing, stands for an MPI window or a shared-memory
 * segment. Per round, one thread allocates --blocks (10^5) blocks of
 * 16 B - 16 KiB (90 % of 16-256 B), one word written at each end; after each
 * allocation, one time in three, a random live block is checked and freed;
 * at the round's end the live blocks are checked and all dropped; --rounds
 * (30). Variants (heap_common.h): a locus heap over the segment (not an
 * arena: the frees are free()), reset per round (locus-segment, the
 * harness's `heap-segment` under locus); a mimalloc heap in an exclusive
 * arena over the segment, destroyed per round (mimalloc-arena: by name only,
 * it hangs in mi_heap_destroy with mimalloc 2.0.9, see heap_common.h); a
 * hand-written bump allocator over the segment that ignores the frees and
 * resets at the round's end (bump: what MPI codes do today); malloc and free
 * of every block, the segment unused (free). Metric: total time. */
#include "heap_common.h"

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "heap_segment");
    long rounds = (long)bench_opt_u64(&a, "--rounds", a.quick ? 3 : 30);
    size_t nblocks = (size_t)bench_opt_u64(&a, "--blocks", a.quick ? 20000 : 100000);
    size_t seg_size = (size_t)bench_opt_u64(&a, "--seg-mib", 256) << 20;
    hb_variant_t v = hb_variant(&a, "free", V_LOCUS_SEGMENT);
    if (v != V_FREE && v != V_BUMP && v != V_LOCUS_SEGMENT && v != V_MI_ARENA)
        bench_usage_exit("heap_segment's variants: free, bump, locus-segment, mimalloc-arena, heap-segment");
    const size_t align = (size_t)64 << 20;
    char *map = (char *)mmap(NULL, seg_size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) bench_fail("mmap", "mmap of %zu MiB: %s", (seg_size + align) >> 20, strerror(errno));
    char *seg = (char *)(((uintptr_t)map + align - 1) & ~(uintptr_t)(align - 1));
    for (size_t off = 0; off < seg_size; off += 4096) seg[off] = 1; /* resident, as a window is */
    void **live = (void **)bench_xmalloc(nblocks * sizeof *live);
    memset(live, 0, nblocks * sizeof *live);
    hb_region_t r;
    hb_region_init(&r, v, seg, seg_size);
    rng_t rng = rng_seed(a.seed);
    uint64_t tag = 1, asum = 0, fsum = 0, bytes = 0, frees = 0;
    double drop_s = 0, el, cpu;
    ab_clock_t c = ab_clock_start();
    for (long k = 0; k < rounds; k++) {
        hb_region_begin(&r);
        size_t nlive = 0;
        for (size_t i = 0; i < nblocks; i++) {
            size_t n = hb_size(rng_next(&rng), 16, 256, 16384, 10);
            void *p = hb_region_alloc(&r, n);
            asum += hb_put(p, n, tag++);
            bytes += n;
            live[nlive++] = p;
            uint64_t x = rng_next(&rng);
            if (((x >> 32) * 3) >> 32 == 0) { /* one time in three */
                size_t j = (size_t)(((x & 0xffffffffu) * (uint64_t)nlive) >> 32);
                fsum += hb_take(live[j], 0, "heap_segment");
                hb_region_free_one(&r, live[j]);
                live[j] = live[--nlive];
                frees++;
            }
        }
        for (size_t i = 0; i < nlive; i++) fsum += hb_take(live[i], 0, "heap_segment");
        double t0 = now_s();
        if (v == V_FREE)
            for (size_t i = 0; i < nlive; i++) free(live[i]);
        else
            hb_region_drop(&r);
        drop_s += now_s() - t0;
    }
    ab_clock_stop(&c, &el, &cpu);
    hb_region_fini(&r);
    ab_verify(asum, fsum);
    free(live);
    munmap(map, seg_size + align);
    bench_result("heap_segment", "time", el, "s", "lower",
                 "variant=%s rounds=%ld blocks=%zu seg_mib=%zu mib_per_round=%.1f frees=%" PRIu64
                 " time_s=%.4f cpu_s=%.4f drop_s=%.5f ns_per_block=%.1f peak_rss_kib=%ld checksum=%016" PRIx64,
                 hb_variant_names[v], rounds, nblocks, seg_size >> 20, (double)bytes / rounds / (1 << 20), frees, el,
                 cpu, drop_s, el * 1e9 / ((double)rounds * (double)nblocks), bench_peak_rss_kib(), asum);
    return 0;
}
