/* Stencil sweep over large arrays (the case for transparent huge pages): at
 * each step two n^3 grids of doubles are allocated, the first initialised
 * (first touch of every page), then `sweeps` 7-point Jacobi sweeps run
 * between them (neighbours +-1, +-n, +-n^2 elements apart: seven streams
 * spread over 2 n^2 doubles), the result is checksummed and the grids freed.
 * Huge pages cut the first-touch faults 512-fold and the TLB misses of the
 * sweeps. Metric: total time; extra: time in first touch and in sweeps,
 * minor faults. Options: --n N (default 192, quick 128), --steps S (default
 * 8, quick 3), --sweeps K (default 4). */
#include "common.h"

#include <sys/resource.h>

static long minflt(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "stencil");
    size_t n = (size_t)bench_opt_u64(&a, "--n", a.quick ? 128 : 192);
    long steps = (long)bench_opt_u64(&a, "--steps", a.quick ? 3 : 8);
    long sweeps = (long)bench_opt_u64(&a, "--sweeps", 4);
    size_t cells = n * n * n, bytes = cells * sizeof(double), n2 = n * n;
    double t_init = 0, t_sweep = 0, t0 = now_s(), check = 0;
    long f0 = minflt();
    for (long s = 0; s < steps; s++) {
        double *u = (double *)bench_xmalloc(bytes), *v = (double *)bench_xmalloc(bytes);
        double ti = now_s();
        for (size_t i = 0; i < cells; i++) u[i] = (double)((i * 2654435761u + (size_t)s) & 1023) / 1024.0;
        memcpy(v, u, bytes);
        double ts = now_s();
        t_init += ts - ti;
        for (long k = 0; k < sweeps; k++) {
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
        double sum = 0;
        for (size_t i = 0; i < cells; i += 4099) sum += u[i];
        if (!(sum > 0 && sum < (double)cells)) bench_fail("checksum", "step %ld: checksum %g out of range", s, sum);
        check += sum;
        free(u);
        free(v);
    }
    double el = now_s() - t0;
    bench_result("stencil", "time", el, "s", "lower",
                 "n=%zu steps=%ld sweeps=%ld init_s=%.3f sweep_s=%.3f minflt=%ld checksum=%.6g", n, steps, sweeps,
                 t_init, t_sweep, minflt() - f0, check);
    return 0;
}
