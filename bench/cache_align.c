/* Cache alignment (Valat, PhD thesis, 2014, §3.4: arrays aligned on the same
 * large power of two share cache sets, and 4K aliasing; §3.7: random start
 * offsets as the remedy): x[i] = a1[i] + ... + a9[i] over ten arrays
 * whose start addresses are
 *   2m      aligned on 2 MiB (all the same cache colour),
 *   4k      aligned on 4 KiB but at different 2 MiB offsets,
 *   rand64  offset by a random multiple of 64 B inside a 4 KiB page,
 *   malloc  wherever the allocator puts ten separate malloc() blocks;
 * the first three are carved from one posix_memalign block so that the
 * benchmark controls the placement.  Then a[i] = b[i-1] with a and b
 * congruent modulo 4 KiB ("alias") or not ("noalias"): 4K aliasing.
 * Every result is verified.  Metric: time of the "malloc" variant of the
 * nine-array sum (the allocator's own placement); the other variants are
 * extra fields and DATA lines (ns per element). */
#include "common.h"

#define NA 9
#define MiB2 (2u << 20)

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static double sum9(double *x, double *a[NA], size_t n, long reps) {
    for (int k = 0; k < NA; k++)
        for (size_t i = 0; i < n; i++) a[k][i] = (double)(k + 1) + (double)(i % 13);
    double t0 = now_s();
    for (long r = 0; r < reps; r++) {
        for (size_t i = 0; i < n; i++)
            x[i] = a[0][i] + a[1][i] + a[2][i] + a[3][i] + a[4][i] + a[5][i] + a[6][i] + a[7][i] + a[8][i];
        __asm__ volatile("" ::: "memory");
    }
    double el = now_s() - t0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != 45.0 + 9.0 * (double)(i % 13))
            bench_fail("result", "x[%zu] = %g, expected %g", i, x[i], 45.0 + 9.0 * (double)(i % 13));
    return el;
}

static double shift(double *a, double *b, size_t n, long reps) {
    for (size_t i = 0; i < n; i++) b[i] = (double)(i % 101);
    double t0 = now_s();
    for (long r = 0; r < reps; r++) {
        for (size_t i = 1; i < n; i++) a[i] = b[i - 1];
        __asm__ volatile("" ::: "memory");
    }
    double el = now_s() - t0;
    for (size_t i = 1; i < n; i++)
        if (a[i] != (double)((i - 1) % 101))
            bench_fail("result", "a[%zu] = %g, expected %g", i, a[i], (double)((i - 1) % 101));
    return el;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "cache_align");
    size_t n = (size_t)bench_opt_u64(&a, "--elems", 64 * 1024);
    long reps = (long)bench_opt_u64(&a, "--reps", a.quick ? 300 : 3000);
    size_t bytes = n * sizeof(double);
    rng_t r = rng_seed(a.seed);
    double ns_el = 1e9 / ((double)n * (double)reps);

    /* one big block for the controlled placements: 10 slots of S2 bytes */
    size_t s2 = round_up(bytes, MiB2) + MiB2;
    unsigned char *blk;
    if (posix_memalign((void **)&blk, MiB2, 10 * s2 + MiB2))
        bench_fail("enomem", "posix_memalign(2 MiB, %zu) failed", 10 * s2 + MiB2);
    if ((uintptr_t)blk % MiB2) bench_fail("align", "posix_memalign returned %p, not 2 MiB aligned", (void *)blk);
    memset(blk, 0, 10 * s2 + MiB2);

    const char *modes[] = {"2m", "4k", "rand64"};
    double t_mode[4];
    for (int m = 0; m < 3; m++) {
        double *arr[NA + 1];
        for (int k = 0; k <= NA; k++) {
            size_t off = (size_t)k * s2;
            if (m == 1) off += (size_t)(k + 1) * 4096 * 37 % MiB2; /* 4 KiB aligned, varied 2 MiB colour */
            if (m == 2) off += 64 * (size_t)rng_range(&r, 0, 63);
            arr[k] = (double *)(blk + off);
        }
        t_mode[m] = sum9(arr[NA], arr, n, reps);
        printf("DATA name=cache_align series=sum9 mode=%s ns_per_elem=%.4f\n", modes[m], t_mode[m] * ns_el);
    }
    /* the allocator's own placement */
    {
        double *arr[NA + 1];
        char offs[256];
        int o = 0;
        for (int k = 0; k <= NA; k++) {
            arr[k] = (double *)bench_xmalloc(bytes);
            o += snprintf(offs + o, sizeof offs - (size_t)o, "%s%lu", k ? "," : "",
                          (unsigned long)((uintptr_t)arr[k] % 4096));
        }
        t_mode[3] = sum9(arr[NA], arr, n, reps);
        printf("DATA name=cache_align series=sum9 mode=malloc ns_per_elem=%.4f offsets_mod_4k=%s\n",
               t_mode[3] * ns_el, offs);
        for (int k = 0; k <= NA; k++) free(arr[k]);
    }
    /* 4K aliasing: b at a 4 KiB boundary, a either congruent or 512+64 B off */
    long sreps = reps * 4;
    double t_alias = shift((double *)(blk + s2), (double *)blk, n, sreps);
    double t_noalias = shift((double *)(blk + s2 + 576), (double *)blk, n, sreps);
    double ns_sh = 1e9 / ((double)n * (double)sreps);
    printf("DATA name=cache_align series=shift mode=alias ns_per_elem=%.4f\n", t_alias * ns_sh);
    printf("DATA name=cache_align series=shift mode=noalias ns_per_elem=%.4f\n", t_noalias * ns_sh);
    free(blk);
    bench_result("cache_align", "time", t_mode[3], "s", "lower",
                 "elems=%zu reps=%ld ns_2m=%.4f ns_4k=%.4f ns_rand64=%.4f ns_malloc=%.4f "
                 "ns_alias=%.4f ns_noalias=%.4f",
                 n, reps, t_mode[0] * ns_el, t_mode[1] * ns_el, t_mode[2] * ns_el, t_mode[3] * ns_el,
                 t_alias * ns_sh, t_noalias * ns_sh);
    return 0;
}
