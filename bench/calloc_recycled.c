/* calloc of a recycled large block (a workload of locus's own; calloc that
 * clears only what holds data: Valat, PhD thesis, 2014, Ch.5): a block of
 * --size bytes (default 192 MiB, 64 MiB with --quick: below uma's default
 * LOCUS_CACHE_MAX_SEGMENT, so that it is kept) is allocated, the first
 * --touch percent of its pages written (default 100), freed, and calloc'd
 * again at the same size; only the calloc is timed. An allocator that keeps
 * the segment must clear what the first use left (locus: the pages that hold
 * data), one that unmaps it maps fresh zero pages. Every written page's
 * first word and the block's last byte are checked zero after the calloc.
 * Metric: median time per calloc; `recycled` counts the callocs that
 * returned the freed block's first page (a hint, not proof: the kernel may
 * map a new block where the old one was). */
#include "common.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "calloc_recycled");
    size_t n = (size_t)bench_opt_u64(&a, "--size", a.quick ? 64u << 20 : 192u << 20);
    size_t touch = (size_t)bench_opt_u64(&a, "--touch", 100);
    long reps = (long)bench_opt_u64(&a, "--reps", a.quick ? 5 : 15);
    if (touch > 100 || n < 4096 || reps < 1 || reps > 1000) bench_usage_exit("--touch 0..100, --size >= 4096, --reps 1..1000");
    size_t page = (size_t)sysconf(_SC_PAGESIZE), written = n / page * touch / 100;
    double *t = bench_xmalloc((size_t)reps * sizeof *t);
    long same = 0;
    for (long r = 0; r < reps; r++) {
        unsigned char *p = bench_xmalloc(n);
        for (size_t i = 0; i < written; i++) ((volatile uint64_t *)(p + i * page))[0] = 0x5a5a5a5a00000000ull | i;
        p[n - 1] = 0x5a;
        uintptr_t at = (uintptr_t)p;
        free(p);
        double t0 = now_s();
        unsigned char *q = calloc(1, n);
        t[r] = now_s() - t0;
        if (!q) bench_fail("enomem", "calloc(1, %zu) returned NULL", n);
        same += ((uintptr_t)q & ~(uintptr_t)(page - 1)) == (at & ~(uintptr_t)(page - 1));
        for (size_t i = 0; i < written; i++)
            if (((volatile uint64_t *)(q + i * page))[0] != 0)
                bench_fail("corrupt", "calloc(1, %zu): page %zu holds %#" PRIx64, n, i, ((uint64_t *)(q + i * page))[0]);
        if (q[n - 1] != 0) bench_fail("corrupt", "calloc(1, %zu): the last byte is %d", n, q[n - 1]);
        free(q);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    bench_result("calloc_recycled", "time_per_calloc", t[reps / 2] * 1e6, "us", "lower",
                 "size=%zu touch=%zu reps=%ld recycled=%ld min_us=%.1f max_us=%.1f", n, touch, reps, same,
                 t[0] * 1e6, t[reps - 1] * 1e6);
    free(t);
    return 0;
}
