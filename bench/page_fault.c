/* Page-fault cost (the fault micro-benchmark of Valat, PhD thesis, 2014,
 * §5.1; huge pages and zeroing: §5.2, §5.3): each worker maps its own
 * anonymous region and times, with rdtsc, the first write to every page (the
 * fault: allocation of the page, zeroing, page-table update) and then a
 * second write to every page (the access alone).  Configurations: 4 KiB pages
 * (MADV_NOHUGEPAGE) and transparent huge pages (MADV_HUGEPAGE, 2 MiB page =
 * one sample); 1 worker, and 2..N workers as threads of one process (sharing
 * one mm_struct and its locks) or as separate processes.  The workload does
 * not call malloc on its measured path: it is the allocator-independent
 * baseline the allocator benchmarks are read against.  Each page is verified
 * (the written word, and a neighbouring word still zero).  One DATA line per
 * configuration with medians and log2 histograms; metric: median first-write
 * cycles, 4 KiB pages, one worker. */
#include "common.h"
#include <sys/mman.h>
#include <sys/wait.h>

#define HUGE (2u << 20)

typedef struct {
    _Atomic int arrived;
    _Atomic int failed;
} shared_hdr_t;

typedef struct {
    int id, nworkers, thp;
    size_t region, psz, npages;
    uint64_t *first, *second; /* npages samples each, in shared memory */
    shared_hdr_t *hdr;
    long thp_kib;
} job_t;

static long thp_kib_of(void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    long kib = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (in && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1) break;
    }
    fclose(f);
    return kib;
}

static void barrier_all(shared_hdr_t *h, int n) {
    atomic_fetch_add(&h->arrived, 1);
    unsigned spins = 0;
    while (atomic_load(&h->arrived) < n) bench_pause(&spins);
}

static int do_job(job_t *j) {
    size_t maplen = j->region + (j->thp ? HUGE : 0);
    unsigned char *m = (unsigned char *)mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "page_fault: mmap %zu: %s\n", maplen, strerror(errno));
        return 1;
    }
    unsigned char *base = j->thp ? (unsigned char *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1)) : m;
    madvise(base, j->region, j->thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    barrier_all(j->hdr, j->nworkers);
    uint64_t salt = (uint64_t)j->id << 32;
    for (size_t p = 0; p < j->npages; p++) {
        volatile uint64_t *w = (volatile uint64_t *)(base + p * j->psz);
        uint64_t c0 = cycles();
        *w = salt + p;
        j->first[p] = cycles() - c0;
    }
    for (size_t p = 0; p < j->npages; p++) {
        volatile uint64_t *w = (volatile uint64_t *)(base + p * j->psz);
        uint64_t c0 = cycles();
        *w = salt + p + 1;
        j->second[p] = cycles() - c0;
    }
    int bad = 0;
    for (size_t p = 0; p < j->npages; p++) {
        uint64_t *w = (uint64_t *)(base + p * j->psz);
        if (w[0] != salt + p + 1 || w[1] != 0) {
            fprintf(stderr, "FAIL page_fault: worker %d page %zu holds %" PRIx64 ",%" PRIx64 "\n", j->id, p, w[0], w[1]);
            bad = 1;
            break;
        }
    }
    j->thp_kib = j->thp ? thp_kib_of(base) : 0;
    munmap(m, maplen);
    return bad;
}

static void *thread_job(void *vp) {
    job_t *j = (job_t *)vp;
    if (do_job(j)) atomic_store(&j->hdr->failed, 1);
    return NULL;
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static void hist(char *out, size_t cap, const uint64_t *v, size_t n) {
    size_t cnt[64] = {0};
    for (size_t i = 0; i < n; i++) cnt[v[i] ? 63 - __builtin_clzll(v[i]) : 0]++;
    size_t o = 0;
    out[0] = 0;
    for (int b = 0; b < 64; b++)
        if (cnt[b] && o < cap) o += (size_t)snprintf(out + o, cap - o, "%s%d:%zu", o ? "," : "", b, cnt[b]);
}

/* Runs one configuration; returns the median first-write cycles. */
static double run_config(const char *mode, int thp, int n, size_t region, double tpn) {
    size_t psz = thp ? HUGE : 4096, npages = region / psz, tot = npages * (size_t)n;
    size_t shlen = sizeof(shared_hdr_t) + 2 * tot * sizeof(uint64_t) + (size_t)n * sizeof(job_t);
    unsigned char *sh = (unsigned char *)mmap(NULL, shlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) bench_fail("mmap", "shared mmap: %s", strerror(errno));
    memset(sh, 0, shlen); /* fault the sample arrays in before measuring */
    shared_hdr_t *hdr = (shared_hdr_t *)sh;
    uint64_t *first = (uint64_t *)(sh + sizeof(shared_hdr_t)), *second = first + tot;
    job_t *jobs = (job_t *)(second + tot);
    for (int i = 0; i < n; i++)
        jobs[i] = (job_t){i, n, thp, region, psz, npages, first + (size_t)i * npages, second + (size_t)i * npages, hdr, 0};
    if (!strcmp(mode, "processes")) {
        pid_t pids[n];
        for (int i = 0; i < n; i++) {
            pids[i] = fork();
            if (pids[i] < 0) bench_fail("fork", "fork: %s", strerror(errno));
            if (pids[i] == 0) _exit(do_job(&jobs[i]));
        }
        for (int i = 0; i < n; i++) {
            int st;
            if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) atomic_store(&hdr->failed, 1);
        }
    } else {
        pthread_t th[n];
        for (int i = 0; i < n; i++) bench_spawn(&th[i], thread_job, &jobs[i]);
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    }
    if (atomic_load(&hdr->failed)) bench_fail("content", "%s thp=%d n=%d: a page did not hold what was written", mode, thp, n);
    long thpk = 0;
    for (int i = 0; i < n; i++) thpk += jobs[i].thp_kib > 0 ? jobs[i].thp_kib : 0;
    double mean = 0;
    for (size_t i = 0; i < tot; i++) mean += (double)first[i];
    mean /= (double)tot;
    char h1[1024], h2[1024];
    hist(h1, sizeof h1, first, tot);
    hist(h2, sizeof h2, second, tot);
    qsort(first, tot, sizeof(uint64_t), cmp_u64);
    qsort(second, tot, sizeof(uint64_t), cmp_u64);
    double m1 = (double)first[tot / 2], m2 = (double)second[tot / 2];
    printf("DATA name=page_fault series=%s-%s-n%d mode=%s page=%s workers=%d pages_per_worker=%zu "
           "first_median_cyc=%.0f second_median_cyc=%.0f fault_median_cyc=%.0f first_mean_cyc=%.0f "
           "first_median_ns=%.1f mean_cyc_per_4k=%.1f thp_kib=%ld hist_first=%s hist_second=%s\n",
           mode, thp ? "thp" : "4k", n, mode, thp ? "thp" : "4k", n, npages, m1, m2, m1 - m2, mean, m1 / tpn,
           mean / (double)(psz / 4096), thpk, h1, h2);
    fflush(stdout);
    munmap(sh, shlen);
    return m1;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "page_fault");
    int maxw = (int)bench_opt_u64(&a, "--max-workers", (uint64_t)(bench_ncpus() > 2 ? bench_ncpus() : 2));
    size_t r4k = (size_t)bench_opt_u64(&a, "--region-4k", a.quick ? (24u << 20) : (256u << 20));
    size_t rthp = (size_t)bench_opt_u64(&a, "--region-thp", a.quick ? (64u << 20) : (1u << 30));
    r4k &= ~(size_t)4095;
    rthp &= ~(size_t)(HUGE - 1);
    double tpn = tsc_per_ns();
    double single4k = 0, singlethp = 0, thr4k = 0, proc4k = 0;
    for (int thp = 0; thp <= 1; thp++) {
        size_t reg = thp ? rthp : r4k;
        double m = run_config("single", thp, 1, reg, tpn);
        if (thp) singlethp = m; else single4k = m;
        for (int n = 2; n <= maxw; n++) {
            double mt = run_config("threads", thp, n, reg, tpn);
            double mp = run_config("processes", thp, n, reg, tpn);
            if (!thp && n == maxw) { thr4k = mt; proc4k = mp; }
        }
    }
    bench_result("page_fault", "fault_cycles_4k", single4k, "cycles", "lower",
                 "tsc_per_ns=%.3f thp_fault_cycles=%.0f threads%d_4k_cycles=%.0f processes%d_4k_cycles=%.0f",
                 tpn, singlethp, maxw, thr4k, maxw, proc4k);
    return 0;
}
