/* ab_exchange's operation in two threads that take turns, one operation
 * each (a futex hand-off), for tracing rather than timing: under a tracer
 * that runs one thread at a time (valgrind), the trace then interleaves the
 * threads as finely as two cores do, which a real ab_exchange run under
 * valgrind (a thread switch every 100,000 blocks or so) does not.
 * tools/sharing.py reads valgrind's lackey trace of it and counts the cache
 * lines that one thread's access takes from the other's cache, by function
 * (docs/benchmarks.md). Timed on its own it measures the hand-off, not the
 * allocator: it is not in the harness's table.
 *
 * Operation (as ab_exchange): malloc a block of random size --min..--max
 * (8 B - 1 KiB), one word written at each end, swapped into a random slot of
 * a shared table of 4096 with one atomic exchange; the block displaced is
 * checked and freed. --warm operations first (not counted), then --ops per
 * thread between two markers on stderr ("=====MARK=====", "=====END====="),
 * after one "MOD <name> <base> <lo> <hi>" line per executable segment so
 * that the trace's instruction addresses can be named, and "SYNC <addr>",
 * the hand-off's own word, which the analysis leaves out. */
#include "common.h"   /* first: it defines _GNU_SOURCE */

#include <link.h>
#include <linux/futex.h>
#include <sys/syscall.h>

static _Atomic int turn;
static long warm_ops, ops;
static size_t lo, hi;
static _Atomic(void *) slots[4096];

static void wait_turn(int me) {
    while (atomic_load(&turn) != me) syscall(SYS_futex, &turn, FUTEX_WAIT_PRIVATE, 1 - me, NULL, NULL, 0);
}
static void pass_turn(int me) {
    atomic_store(&turn, 1 - me);
    syscall(SYS_futex, &turn, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
static void marker(const char *m) {
    if (write(2, m, strlen(m)) < 0) bench_fail("io", "cannot write a marker");
}

typedef struct { int id; uint64_t seed; ab_sums_t sums; ab_team_t *team; } arg_t;

static void *worker(void *vp) {
    arg_t *a = vp;
    rng_t r = rng_seed(a->seed + (uint64_t)a->id * 1000003);
    uint64_t tag = (uint64_t)a->id << 40, asum = 0, fsum = 0;
    ab_team_start(a->team);
    for (long k = 0; k < warm_ops + ops; k++) {
        wait_turn(a->id);
        if (a->id == 0 && k == warm_ops) marker("=====MARK=====\n");
        uint64_t x = rng_next(&r);
        void *p = ab_alloc(ab_size(x, lo, hi), tag++, &asum);
        void *old = atomic_exchange(&slots[x & 4095], p);
        if (old) ab_free(old, &fsum, "ab_lockstep");
        if (a->id == 1 && k == warm_ops + ops - 1) marker("=====END=====\n");
        pass_turn(a->id);
    }
    ab_team_end(a->team);
    a->sums = (ab_sums_t){asum, fsum};
    return NULL;
}

static int segment(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size, (void)data;
    for (int k = 0; k < info->dlpi_phnum; k++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uintptr_t b = info->dlpi_addr;
        fprintf(stderr, "MOD %s %lx %lx %lx\n", info->dlpi_name[0] ? info->dlpi_name : "main", (unsigned long)b,
                (unsigned long)(b + ph->p_vaddr), (unsigned long)(b + ph->p_vaddr + ph->p_memsz));
    }
    return 0;
}

int main(int argc, char **argv) {
    bench_args_t a = bench_parse(argc, argv, "ab_lockstep");
    warm_ops = (long)bench_opt_u64(&a, "--warm", 2000);
    ops = (long)bench_opt_u64(&a, "--ops", a.quick ? 2000 : 20000);
    lo = (size_t)bench_opt_u64(&a, "--min", 8);
    hi = (size_t)bench_opt_u64(&a, "--max", 1024);
    if (lo < 8 || hi < lo || hi > 65535) bench_usage_exit("sizes must satisfy 8 <= --min <= --max <= 65535");
    dl_iterate_phdr(segment, NULL);
    fprintf(stderr, "SYNC %p\n", (void *)&turn);   /* the hand-off's line: not the operation's */
    ab_team_t team;
    arg_t args[2] = {{0, a.seed, {0, 0}, &team}, {1, a.seed, {0, 0}, &team}};
    ab_team_result_t res;   /* the times are not reported: see the top */
    ab_team_run(&team, 2, worker, args, sizeof args[0], offsetof(arg_t, sums), &res);
    ab_sums_t sums = res.sums;
    for (size_t i = 0; i < 4096; i++) {
        void *p = atomic_load(&slots[i]);
        if (p) ab_free(p, &sums.fsum, "ab_lockstep final");
    }
    ab_verify_sums(sums);
    bench_result("ab_lockstep", "operations", (double)ops * 2, "ops", "higher",
                 "warm=%ld min=%zu max=%zu checksum=%016" PRIx64, warm_ops, lo, hi, sums.asum);
    return 0;
}
