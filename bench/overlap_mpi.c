/* Overlap of MPI communication with computation (issue 32): the ping-pong
 * with computation of A. Lescouet's thesis (Chapter 3, "Evaluation of the
 * overlapping potential"), 2 ranks.  One iteration:
 *
 *   rank 0: send(sbuf) ; compute C/2 ; write sbuf ; recv(rbuf) ; compute C/2 ; read rbuf
 *   rank 1: recv(rbuf) ; compute C/2 ; read rbuf  ; send(sbuf) ; compute C/2 ; write sbuf
 *
 * The compute phases never touch the buffers (a calibrated arithmetic loop
 * on a small array of its own); the read or write that follows a phase is
 * the program's first access to the buffer after the call, where an overlap
 * library (liblocus-overlap.so, LD_PRELOAD) must make it wait for the
 * transfer.  Variants (--variant):
 *
 *   blocking     MPI_Send / MPI_Recv: what the overlap library transforms;
 *   nonblocking  MPI_Isend / MPI_Irecv, the MPI_Wait placed late, just
 *                before the access: the hand-written upper bound;
 *   nocompute    blocking with no compute phase at all (C = 0): the cost of
 *                an overlap library where nothing can overlap.
 *
 * Buffers: two malloc'd blocks of --size bytes rounded up to whole pages,
 * page-aligned (posix_memalign, or plain malloc with --alloc malloc), so
 * that an overlap library can protect them page-wise.  Every word of a page
 * is set once at start-up (pat_fill); each message carries a stamp derived
 * from (iteration, direction) in its first and last words, and rank 1 sends
 * back a stamp derived from the one it received (a real ping-pong: the
 * answer depends on the question).  The reader checks both stamps and one
 * page word that rotates over the message, so stale or partial data fails
 * (RESULT check=fail, exit 1).
 *
 * Output (rank 0): RESULT name=overlap_mpi metric=iter_time value=<median
 * time of one iteration, us, as rank 0 sees it> unit=us better=lower check=ok
 * mean_us=... (total / iterations) variant=... size=... compute_us=... and
 * details (measured compute time per iteration, calibration).  The median:
 * on 2 cores shared with other jobs, a preempted iteration is noise, not
 * overlap.
 *
 * Options: --variant V, --size N (K/M suffixes), --compute-us C (total per
 * iteration, two phases of C/2), --iters N, --warmup N, --work-per-us W
 * (compute loop units per microsecond; calibrated here when absent),
 * --alloc memalign|malloc, --quick. */
#include "common.h"

#include <mpi.h>

/* ------------------------------------------------------------------ */
/* Compute: a dependent chain of multiply-adds over a private array (one
 * unit = 64 of them), calibrated against CLOCK_MONOTONIC.                */

#define WORK_LEN 64
static double work_arr[WORK_LEN];
static volatile double work_sink;

static void __attribute__((noinline)) work(uint64_t units) {
    double x = work_sink;
    for (uint64_t u = 0; u < units; u++)
        for (int j = 0; j < WORK_LEN; j++) x = x * 0.999999 + work_arr[j];
    work_sink = x;
}

/* Units per microsecond: the fastest of several 2 ms trials (the slower
 * ones were preempted: 2 cores shared by both ranks and other jobs). */
static double calibrate(void) {
    for (int j = 0; j < WORK_LEN; j++) work_arr[j] = 1e-3 * (j + 1);
    uint64_t units = 64;
    double t;
    for (;;) { /* grow to about 2 ms */
        double t0 = now_s();
        work(units);
        t = now_s() - t0;
        if (t > 2e-3) break;
        units *= 2;
    }
    double best = t;
    for (int k = 0; k < 15; k++) {
        double t0 = now_s();
        work(units);
        double d = now_s() - t0;
        if (d < best) best = d;
    }
    return (double)units / (best * 1e6);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* ------------------------------------------------------------------ */

enum { V_BLOCKING, V_NONBLOCKING, V_NOCOMPUTE };

static const char *opt_str(int argc, char **argv, const char *key, const char *dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], key)) return argv[i + 1];
    return dflt;
}

static double opt_double(int argc, char **argv, const char *key, double dflt) {
    const char *s = opt_str(argc, argv, key, NULL);
    return s ? strtod(s, NULL) : dflt;
}

static uint64_t stamp(long it, int dir) { return mix64(((uint64_t)it << 1) ^ (uint64_t)dir ^ 0x0e71a9ULL); }

static size_t nwords;

static void put_stamp(uint64_t *b, uint64_t s) {
    b[0] = s;
    b[nwords - 1] = ~s;
}

/* Offset of the pattern word checked at iteration it (pat_fill's words are
 * every 64 bytes up to 4 KiB, at page starts above): page 1 + it mod (the
 * pages before the tail word); 0 when there is none besides the stamps. */
static size_t msg_size;
static size_t check_off(long it) {
    if (msg_size <= 4096) return msg_size >= 80 ? 64 : 0;
    size_t maxp = (msg_size - 16) / 4096;
    return maxp ? (1 + (size_t)it % maxp) * 4096 : 0;
}

/* Checks a received message: both stamps and one pattern word. */
static void check_msg(const uint64_t *b, uint64_t s, int peer, long it, const char *where) {
    if (b[0] != s || b[nwords - 1] != ~s)
        bench_fail("data", "%s: iteration %ld: stamps %#" PRIx64 "/%#" PRIx64 ", expected %#" PRIx64 "/%#" PRIx64,
                   where, it, b[0], b[nwords - 1], s, ~s);
    size_t off = check_off(it);
    if (!off) return;
    uint64_t w;
    memcpy(&w, (const char *)b + off, 8);
    if (w != pat_word((uint64_t)peer + 1, off))
        bench_fail("data", "%s: iteration %ld: word at offset %zu is %#" PRIx64 ", expected %#" PRIx64, where, it,
                   off, w, pat_word((uint64_t)peer + 1, off));
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "overlap_mpi");
    const char *vs = opt_str(argc, argv, "--variant", "blocking");
    int variant;
    if (!strcmp(vs, "blocking")) variant = V_BLOCKING;
    else if (!strcmp(vs, "nonblocking")) variant = V_NONBLOCKING;
    else if (!strcmp(vs, "nocompute")) variant = V_NOCOMPUTE;
    else bench_usage_exit("--variant must be blocking, nonblocking or nocompute");
    size_t size = (size_t)bench_opt_u64(&a, "--size", 1 << 20);
    double compute_us = variant == V_NOCOMPUTE ? 0 : opt_double(argc, argv, "--compute-us", 4000);
    long iters = (long)bench_opt_u64(&a, "--iters", a.quick ? 10 : 100);
    long warmup = (long)bench_opt_u64(&a, "--warmup", a.quick ? 2 : 5);
    double wpu = opt_double(argc, argv, "--work-per-us", 0);
    const char *alloc = opt_str(argc, argv, "--alloc", "memalign");
    if (size < 16 || iters < 1 || compute_us < 0) bench_usage_exit("bad --size, --iters or --compute-us");

    int provided = 0, rank = 0, np = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np != 2) {
        if (rank == 0) bench_fail("usage", "needs exactly 2 ranks, has %d", np);
        MPI_Finalize();
        return 2;
    }
    int peer = 1 - rank;

    /* Calibration: rank 0's, so both ranks run the same loop. */
    double my_wpu = calibrate();
    if (wpu <= 0) wpu = my_wpu;
    MPI_Bcast(&wpu, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    uint64_t half_units = (uint64_t)(wpu * compute_us / 2 + 0.5);

    size_t bytes = (size + 4095) & ~(size_t)4095;
    nwords = size / 8;
    msg_size = size;
    if (size % 8) bench_usage_exit("--size must be a multiple of 8");
    uint64_t *sbuf = NULL, *rbuf = NULL;
    if (!strcmp(alloc, "malloc")) {
        sbuf = (uint64_t *)bench_xmalloc(bytes);
        rbuf = (uint64_t *)bench_xmalloc(bytes);
    } else if (posix_memalign((void **)&sbuf, 4096, bytes) || posix_memalign((void **)&rbuf, 4096, bytes)) {
        bench_fail("enomem", "posix_memalign(4096, %zu) failed", bytes);
    }
    pat_fill(sbuf, size, (uint64_t)rank + 1);
    memset(rbuf, 0, bytes);
    int aligned = ((uintptr_t)sbuf & 4095) == 0 && ((uintptr_t)rbuf & 4095) == 0;

    const int tag = 32;
    double comp_s = 0, t0 = 0, t_prev = 0;
    double *iter_s = (double *)bench_xmalloc((size_t)iters * sizeof(double));
    uint64_t sum = 0; /* xor of the stamps received: the same under every variant */
    long total = warmup + iters;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long it = 0; it < total; it++) {
        if (it == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = t_prev = now_s();
            comp_s = 0;
        }
        MPI_Request req;
        uint64_t s0 = stamp(it, 0);
        if (rank == 0) {
            /* ping */
            put_stamp(sbuf, s0);
            if (variant == V_NONBLOCKING) MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
            else MPI_Send(sbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
            if (half_units) { double c = now_s(); work(half_units); comp_s += now_s() - c; }
            if (variant == V_NONBLOCKING) MPI_Wait(&req, MPI_STATUS_IGNORE);
            sbuf[0] = 0; /* first write after the send */
            /* pong */
            if (variant == V_NONBLOCKING) MPI_Irecv(rbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
            else MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (half_units) { double c = now_s(); work(half_units); comp_s += now_s() - c; }
            if (variant == V_NONBLOCKING) MPI_Wait(&req, MPI_STATUS_IGNORE);
            uint64_t s1 = mix64(s0 ^ 0x1ULL); /* what rank 1 answers to s0 */
            check_msg(rbuf, s1, peer, it, "rank 0 pong");
            sum ^= s1;
            if (it >= warmup) {
                double t = now_s();
                iter_s[it - warmup] = t - t_prev;
                t_prev = t;
            }
        } else {
            if (variant == V_NONBLOCKING) MPI_Irecv(rbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
            else MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (half_units) { double c = now_s(); work(half_units); comp_s += now_s() - c; }
            if (variant == V_NONBLOCKING) MPI_Wait(&req, MPI_STATUS_IGNORE);
            check_msg(rbuf, s0, peer, it, "rank 1 ping"); /* first read after the receive */
            sum ^= s0;
            put_stamp(sbuf, mix64(rbuf[0] ^ 0x1ULL));
            if (variant == V_NONBLOCKING) MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
            else MPI_Send(sbuf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
            if (half_units) { double c = now_s(); work(half_units); comp_s += now_s() - c; }
            if (variant == V_NONBLOCKING) MPI_Wait(&req, MPI_STATUS_IGNORE);
            sbuf[0] = 0; /* first write after the send */
        }
    }
    double el = now_s() - t0;
    /* The two ranks' checksums of what they received, compared at rank 0. */
    uint64_t sums[2] = {0, 0};
    MPI_Gather(&sum, 1, MPI_UINT64_T, sums, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    double comp_max = 0;
    MPI_Reduce(&comp_s, &comp_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint64_t e0 = 0, e1 = 0;
        for (long it = 0; it < total; it++) {
            e1 ^= stamp(it, 0);
            e0 ^= mix64(stamp(it, 0) ^ 0x1ULL);
        }
        if (sums[0] != e0 || sums[1] != e1)
            bench_fail("checksum", "received stamps: rank 0 %#" PRIx64 " (expected %#" PRIx64 "), rank 1 %#" PRIx64
                       " (expected %#" PRIx64 ")", sums[0], e0, sums[1], e1);
        qsort(iter_s, (size_t)iters, sizeof(double), cmp_double);
        double med = iters % 2 ? iter_s[iters / 2] : (iter_s[iters / 2 - 1] + iter_s[iters / 2]) / 2;
        bench_result("overlap_mpi", "iter_time", med * 1e6, "us", "lower",
                     "mean_us=%.1f min_us=%.1f max_us=%.1f "
                     "variant=%s size=%zu compute_us=%.0f iters=%ld compute_us_measured=%.1f "
                     "work_per_us=%.4f my_work_per_us=%.4f aligned=%d thread=%d checksum=%016" PRIx64,
                     el * 1e6 / (double)iters, iter_s[0] * 1e6, iter_s[iters - 1] * 1e6,
                     vs, size, compute_us, iters, comp_max * 1e6 / (double)iters, wpu, my_wpu, aligned,
                     provided, sums[0] ^ sums[1]);
    }
    free(iter_s);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
