/* Growing realloc (a workload of locus's own; the growing reallocs of Hera
 * are described in Valat, PhD thesis, 2014, §4.5): a buffer starts at 1 KiB
 * and is doubled by realloc up to 64 MiB; after every growth the old contents
 * are checked (one word per page and the last word) and the new half is
 * written (one word per page, as an application filling it would fault every
 * page).  The sequence is repeated; an allocator that resizes large blocks
 * with mremap moves page tables instead of copying.  Metric: time per
 * sequence.  --min-ms M repeats the sequence beyond --reps until M ms have
 * passed, so that a fast allocator's sample lasts long enough to time; the
 * checksum covers the first --reps sequences, the same under every
 * allocator. */
#include "common.h"

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "realloc_grow");
    long reps = (long)bench_opt_u64(&a, "--reps", a.quick ? 10 : 100);
    size_t top = (size_t)bench_opt_u64(&a, "--max", 64u << 20);
    double min_s = (double)bench_opt_u64(&a, "--min-ms", 0) / 1000.0;
    uint64_t copied_check = 0;
    double t0 = now_s();
    long rep = 0;
    for (; rep < reps || now_s() - t0 < min_s; rep++) {
        uint64_t tag = (uint64_t)rep << 32;
        size_t n = 1024;
        unsigned char *p = bench_xmalloc(n);
        pat_fill(p, n, tag);
        while (n < top) {
            size_t m = n * 2;
            unsigned char *q = realloc(p, m);
            if (!q) bench_fail("enomem", "realloc(%p, %zu) failed", (void *)p, m);
            if (!pat_ok(q, n, tag))
                bench_fail("corrupt", "realloc %zu -> %zu lost the old contents", n, m);
            pat_fill(q, m, tag);   /* rewrites the whole pattern for the new length */
            if (rep < reps) copied_check += q[m - 1];
            p = q;
            n = m;
        }
        free(p);
    }
    double el = now_s() - t0;
    bench_result("realloc_grow", "time_per_sequence", el / (double)rep * 1e3, "ms", "lower",
                 "reps=%ld max=%zu time_s=%.4f checksum=%llu", rep, top, el, (unsigned long long)copied_check);
    return 0;
}
