/* Phased workload (the auto profile's case): a time-step phase with large
 * temporaries (each step: 8 arrays of 4-32 MiB allocated, every page
 * written, checksummed, freed), then a long phase with small allocations only
 * (a window of 4096 live objects of 16-512 B, the oldest replaced, each
 * checked before it is freed). A sampler thread records the resident set
 * every 20 ms; DATA lines carry the curve (t in s from the start, RSS in MiB,
 * phase), the result is the RSS one second after the phase change.
 * Options: --steps N (time-step phase, default 40, quick 10), --small-ms M
 * (small phase, default 3000, quick 1500). */
#include "common.h"

#include <fcntl.h>

#define NARR 8
#define WIN 4096
#define MAXS 4096

static double t_start;
static _Atomic int phase;              /* 1 time step, 2 small, 3 done */
static _Atomic int stop;
static struct { float t, rss; int phase; } samples[MAXS];
static _Atomic int nsamples;

static double rss_mib(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    unsigned long size, res;
    if (sscanf(buf, "%lu %lu", &size, &res) != 2) return -1;
    return (double)res * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

static void *sampler(void *unused) {
    (void)unused;
    while (!atomic_load(&stop)) {
        int i = atomic_load(&nsamples);
        if (i < MAXS) {
            samples[i].t = (float)(now_s() - t_start);
            samples[i].rss = (float)rss_mib();
            samples[i].phase = atomic_load(&phase);
            atomic_store(&nsamples, i + 1);
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "phased");
    long steps = (long)bench_opt_u64(&a, "--steps", a.quick ? 10 : 40);
    double small_s = (double)bench_opt_u64(&a, "--small-ms", a.quick ? 1500 : 3000) / 1000.0;
    rng_t r = rng_seed(a.seed);
    t_start = now_s();
    atomic_store(&phase, 1);
    pthread_t th;
    bench_spawn(&th, sampler, NULL);
    for (long s = 0; s < steps; s++) {
        uint64_t *arr[NARR];
        size_t len[NARR];
        uint64_t expect = 0, got = 0;
        for (int k = 0; k < NARR; k++) {
            len[k] = (size_t)rng_range(&r, 4u << 20, 32u << 20) & ~(size_t)7;
            arr[k] = (uint64_t *)bench_xmalloc(len[k]);
            expect += arr_touch(arr[k], len[k], mix64(((uint64_t)s << 8) ^ (uint64_t)k));
        }
        for (int k = 0; k < NARR; k++) got += arr_sum(arr[k], len[k]);
        if (got != expect) bench_fail("checksum", "step %ld: checksum mismatch", s);
        for (int k = 0; k < NARR; k++) free(arr[k]);
    }
    double t_change = now_s();
    double phase1 = t_change - t_start;
    atomic_store(&phase, 2);
    bench_item_t win[WIN] = {{0}};
    uint64_t ops = 0, tag = 1;
    while (now_s() - t_change < small_s) {
        for (int k = 0; k < 1024; k++, ops++) {
            bench_item_t *it = &win[rng_next(&r) % WIN];
            if (it->p) {
                pat_check(it->p, it->n, it->tag, "small phase");
                free(it->p);
            }
            it->n = (size_t)rng_range(&r, 16, 512);
            it->tag = tag++;
            it->p = bench_xmalloc(it->n);
            pat_fill(it->p, it->n, it->tag);
        }
    }
    for (int i = 0; i < WIN; i++)
        if (win[i].p) {
            pat_check(win[i].p, win[i].n, win[i].tag, "end");
            free(win[i].p);
        }
    atomic_store(&phase, 3);
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    int n = atomic_load(&nsamples);
    double peak = 0, at1 = -1, end = -1;
    double rel = t_change - t_start;
    for (int i = 0; i < n; i++) {
        printf("DATA name=phased series=rss t=%.3f rss_mib=%.1f phase=%d\n", samples[i].t, samples[i].rss,
               samples[i].phase);
        if (samples[i].rss > peak) peak = samples[i].rss;
        if (at1 < 0 && samples[i].t >= rel + 1.0) at1 = samples[i].rss;
        if (samples[i].phase == 2) end = samples[i].rss;
    }
    if (at1 < 0) bench_fail("short", "the small phase ended before 1 s");
    bench_result("phased", "rss_1s_after", at1, "MiB", "lower",
                 "rss_peak_mib=%.1f rss_end_mib=%.1f phase1_s=%.3f small_ops=%" PRIu64, peak, end, phase1, ops);
    return 0;
}
