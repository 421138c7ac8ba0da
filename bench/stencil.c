/* Stencil sweep over large arrays (the case for transparent huge pages): at
 * each step two n^3 grids of doubles are allocated, the first initialised
 * (first touch of every page on the first step; recycled segments after),
 * then `sweeps` 7-point Jacobi sweeps run between them (neighbours +-1, +-n,
 * +-n^2 elements apart: seven streams spread over 2 n^2 doubles), the result
 * is checksummed and the grids freed.
 *
 * Sizes: the default n = 256 makes each grid 128 MiB, both 256 MiB: 32x the
 * reach of a 2,048-entry second-level TLB with 4 KiB pages (8 MiB), well
 * within it with 2 MiB pages (4 GiB), and within uma's cache (500 MiB), so
 * the steps after the first recycle both grids as a time-stepping code would.
 * What huge pages change: 512x fewer first-touch faults (the same bytes are
 * cleared), and one TLB miss per 2 MiB instead of per 4 KiB of each stream in
 * the sweeps. The sweeps stream (x innermost), so the page walks they save
 * are few per byte moved: the gain there is bounded by the walks' share of a
 * memory-bound loop, not by the array size.
 *
 * Metric: total time. Extra: wall and CPU time of the first touch and of the
 * sweeps, minor faults of the first step and per later step (recycled
 * segments). Options: --n N (default 256, quick 128), --steps S (default 6,
 * quick 3), --sweeps K (default 6), --order xyz|zyx (default xyz: x
 * innermost; zyx is a diagnostic, see below). */
#include "common.h"

#include <sys/resource.h>

static long minflt(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "stencil");
    size_t n = (size_t)bench_opt_u64(&a, "--n", a.quick ? 128 : 256);
    long steps = (long)bench_opt_u64(&a, "--steps", a.quick ? 3 : 6);
    long sweeps = (long)bench_opt_u64(&a, "--sweeps", 6);
    /* --order zyx: z innermost, every access 8 n^2 bytes after the previous
     * one (a new 4 KiB page each time): a diagnostic of the TLB's share, not
     * how a stencil code orders its loops. */
    int zyx = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--order")) zyx = !strcmp(argv[i + 1], "zyx");
    if (n < 3 || steps < 1) bench_usage_exit("--n must be >= 3 and --steps >= 1");
    size_t cells = n * n * n, bytes = cells * sizeof(double), n2 = n * n;
    double t_init = 0, t_sweep = 0, c_init = 0, c_sweep = 0, t0 = now_s(), check = 0;
    long f0 = minflt(), f_first = 0;
    for (long s = 0; s < steps; s++) {
        double *u = (double *)bench_xmalloc(bytes), *v = (double *)bench_xmalloc(bytes);
        double ti = now_s(), ci = cpu_s();
        for (size_t i = 0; i < cells; i++) u[i] = (double)((i * 2654435761u + (size_t)s) & 1023) / 1024.0;
        memcpy(v, u, bytes);
        double ts = now_s(), cs = cpu_s();
        t_init += ts - ti;
        c_init += cs - ci;
        for (long k = 0; k < sweeps; k++) {
            if (zyx)
                for (size_t x = 1; x < n - 1; x++)
                    for (size_t y = 1; y < n - 1; y++)
                        for (size_t z = 1; z < n - 1; z++) {
                            size_t i = z * n2 + y * n + x;
                            v[i] = (u[i] * 2.0 + u[i - 1] + u[i + 1] + u[i - n] + u[i + n] + u[i - n2] + u[i + n2]) * 0.125;
                        }
            else
            for (size_t z = 1; z < n - 1; z++)
                for (size_t y = 1; y < n - 1; y++) {
                    size_t base = z * n2 + y * n;
                    for (size_t x = 1; x < n - 1; x++) {
                        size_t i = base + x;
                        v[i] = (u[i] * 2.0 + u[i - 1] + u[i + 1] + u[i - n] + u[i + n] + u[i - n2] + u[i + n2]) * 0.125;
                    }
                }
            double *t = u;
            u = v;
            v = t;
        }
        t_sweep += now_s() - ts;
        c_sweep += cpu_s() - cs;
        double sum = 0;
        for (size_t i = 0; i < cells; i += 4099) sum += u[i];
        if (!(sum > 0 && sum < (double)cells)) bench_fail("checksum", "step %ld: checksum %g out of range", s, sum);
        check += sum;
        free(u);
        free(v);
        if (s == 0) f_first = minflt() - f0;
    }
    double el = now_s() - t0;
    bench_result("stencil", "time", el, "s", "lower",
                 "order=%s n=%zu mib_per_grid=%zu steps=%ld sweeps=%ld init_s=%.3f sweep_s=%.3f init_cpu_s=%.3f sweep_cpu_s=%.3f "
                 "minflt=%ld minflt_first_step=%ld minflt_per_later_step=%.1f checksum=%.6g",
                 zyx ? "zyx" : "xyz", n, bytes >> 20, steps, sweeps, t_init, t_sweep, c_init, c_sweep, minflt() - f0, f_first,
                 steps > 1 ? (double)(minflt() - f0 - f_first) / (double)(steps - 1) : 0.0, check);
    return 0;
}
