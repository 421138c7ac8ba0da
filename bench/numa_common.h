/* NUMA helpers for the benchmark workloads (no libnuma: sysfs and raw system
 * calls, so the programs run unchanged on one node, on several, and in the
 * QEMU guests of tests/numa/guest/):
 *
 *   bench_nodes()        the nodes that have CPUs, with their CPU sets
 *                        (/sys/devices/system/node/online and nodeN/cpulist)
 *   bench_bind()         sched_setaffinity of the calling thread to a CPU set,
 *                        then locus_rebind() if locus is the allocator (found
 *                        with dlsym: the programs never link liblocus)
 *   bench_count_on()     how many of a list of addresses are on a node
 *                        (move_pages with a NULL node list only queries)
 *   bench_malloc_from()  the file name of the object that provides malloc,
 *                        to check that LD_PRELOAD took
 */
#ifndef LOCUS_BENCH_NUMA_COMMON_H
#define LOCUS_BENCH_NUMA_COMMON_H

#include "common.h"
#include <dlfcn.h>
#include <sys/syscall.h>

#define BENCH_MAXNODES 64

typedef struct {
    int n;                              /* nodes with at least one CPU */
    int total;                          /* nodes online (memory-only ones too) */
    int id[BENCH_MAXNODES];             /* kernel node number of each */
    int ncpus[BENCH_MAXNODES];
    cpu_set_t cpus[BENCH_MAXNODES];
} bench_nodes_t;

/* Parses a kernel list ("0-3,8,10-11") into set; returns the count, -1 if
 * malformed.  An empty list (a node without CPUs) gives 0. */
static inline int bench_parse_list(const char *s, cpu_set_t *set) {
    CPU_ZERO(set);
    int count = 0;
    while (*s && *s != '\n') {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0) return -1;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a) return -1;
            s = end;
        }
        for (long i = a; i <= b && i < CPU_SETSIZE; i++) {
            if (!CPU_ISSET((int)i, set)) count++;
            CPU_SET((int)i, set);
        }
        if (*s == ',') s++;
        else if (*s && *s != '\n') return -1;
    }
    return count;
}

static inline int bench_read_line(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (!ok) buf[0] = 0;
    return 0;
}

/* The nodes that have CPUs, with their CPUs.  The affinity the process was
 * started with is no limit (taskset or numactl --cpunodebind place the main
 * thread; the workloads bind their threads themselves).  Without sysfs (not Linux, or a container that
 * hides it): one pseudo node 0 with the CPUs the process may use. */
static inline bench_nodes_t bench_nodes(void) {
    bench_nodes_t nd;
    memset(&nd, 0, sizeof nd);
    char buf[4096];
    cpu_set_t online;
    if (bench_read_line("/sys/devices/system/node/online", buf, sizeof buf) != 0 ||
        bench_parse_list(buf, &online) <= 0) {
        nd.n = nd.total = 1;
        nd.id[0] = 0;
        if (sched_getaffinity(0, sizeof nd.cpus[0], &nd.cpus[0]) != 0) CPU_ZERO(&nd.cpus[0]);
        nd.ncpus[0] = CPU_COUNT(&nd.cpus[0]);
        return nd;
    }
    for (int node = 0; node < CPU_SETSIZE && nd.n < BENCH_MAXNODES; node++) {
        if (!CPU_ISSET(node, &online)) continue;
        nd.total++;
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
        cpu_set_t s;
        if (bench_read_line(path, buf, sizeof buf) != 0 || bench_parse_list(buf, &s) <= 0) continue;
        nd.id[nd.n] = node;
        nd.cpus[nd.n] = s;
        nd.ncpus[nd.n] = CPU_COUNT(&s);
        nd.n++;
    }
    if (nd.n == 0) {                    /* no node lists a CPU: one pseudo node */
        nd.n = 1;
        nd.id[0] = 0;
        if (sched_getaffinity(0, sizeof nd.cpus[0], &nd.cpus[0]) != 0) CPU_ZERO(&nd.cpus[0]);
        nd.ncpus[0] = CPU_COUNT(&nd.cpus[0]);
    }
    return nd;
}

/* Binds the calling thread to cpus; tells locus (when it is the allocator)
 * to re-evaluate the thread's node.  Returns 0, or -1 with errno. */
static inline int bench_bind(const cpu_set_t *cpus) {
    if (sched_setaffinity(0, sizeof *cpus, cpus) != 0) return -1;
    int (*rebind)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "locus_rebind");
    if (rebind) rebind();
    return 0;
}

/* locus_thread_node() of the calling thread, -2 when locus is not there. */
static inline int bench_locus_thread_node(void) {
    int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "locus_thread_node");
    return f ? f() : -2;
}

/* Of the n addresses in pages (any address inside a page will do), how many
 * lie on node (returned) and how many are not resident at all (*absent).
 * Asks the kernel with move_pages(pid 0, nodes NULL): no page moves.
 * Returns -1 if the system call itself failed (e.g. ENOSYS). */
static inline long bench_count_on(void *const *pages, size_t n, int node, long *absent) {
    enum { BATCH = 512 };
    int st[BATCH];
    long on = 0, miss = 0;
    for (size_t i = 0; i < n; i += BATCH) {
        size_t k = n - i < BATCH ? n - i : BATCH;
        if (syscall(SYS_move_pages, 0, (unsigned long)k, (void **)(pages + i), NULL, st, 0) != 0) return -1;
        for (size_t j = 0; j < k; j++) {
            if (st[j] == node) on++;
            else if (st[j] < 0) miss++;
        }
    }
    if (absent) *absent += miss;
    return on;
}

/* The base name of the object that provides malloc ("libc.so.6" for glibc),
 * or "unknown". */
static inline const char *bench_malloc_from(void) {
    Dl_info info;
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    if (m && dladdr(m, &info) && info.dli_fname && *info.dli_fname) {
        const char *s = strrchr(info.dli_fname, '/');
        return s ? s + 1 : info.dli_fname;
    }
    return "unknown";
}

#endif
