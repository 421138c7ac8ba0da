/* Allocation cost breakdown (malloc time against first-touch time, as in
 * Valat, talk slides, 2018, "How to measure malloc time"; fault and zeroing
 * cost: Valat, PhD thesis, 2014, §5.1, §5.3): for block sizes 16 B .. 64 MiB
 * (powers of 4), the time spent in malloc, in free, in the first touch of
 * the memory (memset of the whole block: page faults, zeroing, cache
 * misses) and in a second memset (the access alone), per byte.  Blocks are
 * handled in batches (up to 1000 blocks, at most 64 MiB per batch), each
 * phase timed for the whole batch.  Every block gets a pattern, checked
 * before free.  One DATA line per size; metric: geometric mean over sizes
 * of (malloc + free + first touch) nanoseconds per byte. */
#include "common.h"
#include <math.h>

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "alloc_cost");
    uint64_t budget = bench_opt_u64(&a, "--budget", a.quick ? (96u << 20) : (1ull << 31));
    size_t maxsz = (size_t)bench_opt_u64(&a, "--max-size", 64u << 20);
    void **ptr = (void **)bench_xmalloc(1000 * sizeof(void *));
    double lsum = 0;
    int nsz = 0;
    uint64_t tag = 1;
    for (size_t sz = 16; sz <= maxsz; sz *= 4) {
        size_t batch = (size_t)((64u << 20) / sz);
        if (batch > 1000) batch = 1000;
        if (batch < 1) batch = 1;
        uint64_t nblk = budget / sz;
        if (nblk < 8) nblk = 8;
        if (nblk > 200000) nblk = 200000;
        long nbatch = (long)((nblk + batch - 1) / batch);
        double tm = 0, tf = 0, t1 = 0, t2 = 0;
        for (long b = 0; b < nbatch; b++) {
            double s0 = now_s();
            for (size_t i = 0; i < batch; i++) ptr[i] = bench_xmalloc(sz);
            double s1 = now_s();
            for (size_t i = 0; i < batch; i++) memset(ptr[i], (int)(i & 0x7f) + 1, sz);
            double s2 = now_s();
            for (size_t i = 0; i < batch; i++) memset(ptr[i], (int)(i & 0x7f) + 0x40, sz);
            double s3 = now_s();
            for (size_t i = 0; i < batch; i++) pat_fill(ptr[i], sz, tag + i);
            for (size_t i = 0; i < batch; i++) {
                unsigned char *p = (unsigned char *)ptr[i];
                /* a byte of the second memset that the pattern did not cover */
                if (sz > 16 && p[9] != (unsigned char)((i & 0x7f) + 0x40))
                    bench_fail("corrupt", "block %p of %zu bytes: memset content lost", (void *)p, sz);
                pat_check(p, sz, tag + i, "alloc_cost");
            }
            tag += batch;
            double s4 = now_s();
            for (size_t i = 0; i < batch; i++) free(ptr[i]);
            double s5 = now_s();
            tm += s1 - s0;
            t1 += s2 - s1;
            t2 += s3 - s2;
            tf += s5 - s4;
        }
        double nb = (double)nbatch * (double)batch, bytes = nb * (double)sz;
        double cost = (tm + tf + t1) * 1e9 / bytes;
        lsum += log(cost);
        nsz++;
        printf("DATA name=alloc_cost series=breakdown size=%zu blocks=%.0f malloc_ns=%.2f free_ns=%.2f "
               "touch1_ns_per_byte=%.5f touch2_ns_per_byte=%.5f alloc_ns_per_byte=%.5f total_ns_per_byte=%.5f\n",
               sz, nb, tm * 1e9 / nb, tf * 1e9 / nb, t1 * 1e9 / bytes, t2 * 1e9 / bytes,
               (tm + tf) * 1e9 / bytes, cost);
    }
    free(ptr);
    bench_result("alloc_cost", "geomean_cost", exp(lsum / nsz), "ns/B", "lower", "sizes=%d", nsz);
    return 0;
}
