/* Guest tests of the MAP_PAGE_REUSE kernel series (kernel/), run inside a
 * QEMU guest by tests/kernel/guest_init.sh.  Static, no locus.
 *
 *   page_reuse_test patched|stock TEST...   runs the tests; exit 0 if all pass
 *   page_reuse_test scan SECRET MIB         (helper) maps MIB MiB of fresh
 *                                           anonymous memory, flagged and not,
 *                                           and fails if SECRET is in it
 *   page_reuse_test bench ROUNDS PAGES      first-touch cost after reuse
 *   page_reuse_test bench-huge ROUNDS N     the same per 2 MiB page (THP)
 *   page_reuse_test costs-huge ROUNDS N     what clearing costs in a 2 MiB fault
 *   page_reuse_test syscost ROUNDS MIB      eco's system calls per block, no faults
 *   page_reuse_test costs ROUNDS PAGES      what clearing costs in a fault
 *   page_reuse_test rss PROGRAM [ARGS...]   runs PROGRAM, prints its peak RSS
 *
 * TESTS: flags reuse secret pressure limit huge (all when none is named).
 * Each test prints "PASS name" or "FAIL name: why".  On a stock kernel
 * ("stock") only what a stock kernel must do is checked: the advice is
 * rejected, the flag has no effect, nothing is reused. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_PAGE_REUSE
#define MAP_PAGE_REUSE 0x200000
#endif
#ifndef MADV_PAGE_REUSE
#define MADV_PAGE_REUSE 26
#endif
#ifndef MADV_NO_PAGE_REUSE
#define MADV_NO_PAGE_REUSE 27
#endif
#define MADV_UNDEFINED 0x4c50 /* no kernel defines it */

#define PG 4096UL
static int patched;
static int failures;
static const char *self;

#define FAIL(name, ...)                                  \
  do {                                                   \
    printf("FAIL %s: ", name);                           \
    printf(__VA_ARGS__);                                 \
    printf("\n");                                        \
    fflush(stdout);                                      \
    failures++;                                          \
    return;                                              \
  } while (0)
#define PASS(name, ...)                                  \
  do {                                                   \
    printf("PASS %s", name);                             \
    printf(__VA_ARGS__);                                 \
    printf("\n");                                        \
    fflush(stdout);                                      \
  } while (0)

/* The number after KEY and SEP on a line of a /proc file, -1 when absent. */
static long proc_value(const char *path, const char *key, char sep) {
  FILE *f = fopen(path, "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == sep) { v = strtol(line + n + 1, NULL, 10); break; }
  fclose(f);
  return v;
}

/* A value of /proc/self/status ("PageReuse:"), -1 when absent. */
static long status_value(const char *key) { return proc_value("/proc/self/status", key, ':'); }

/* The page-reuse figures: /proc/vmstat's events (system-wide; the guest runs
 * one test at a time) and the PageReuse line of /proc/<pid>/status, or the
 * six PageReuse* status lines of the series before issue 27's second round
 * (so that the tests also run on that series); -1 when absent (stock). */
static long reuse_event(const char *event, const char *old_status) {
  long v = proc_value("/proc/vmstat", event, ' ');
  return v >= 0 ? v : status_value(old_status);
}
static long reuse_hits(void) { return reuse_event("page_reuse_hit", "PageReuseHits"); }
static long reuse_fills(void) { return reuse_event("page_reuse_fill", "PageReuseFills"); }
static long reuse_thp_hits(void) { return reuse_event("page_reuse_thp_hit", "PageReuseHugeHits"); }
static long reuse_thp_fills(void) { return reuse_event("page_reuse_thp_fill", "PageReuseHugeFills"); }
/* This process's pool (kB): "PageReuse:", or the older "PageReusePool:". */
static long pool_kb_of(const char *status) {
  long v = proc_value(status, "PageReuse", ':');
  return v >= 0 ? v : proc_value(status, "PageReusePool", ':');
}
static long reuse_pool_kb(void) { return pool_kb_of("/proc/self/status"); }
/* The 2 MiB part of it: the older series' own line, else the whole pool
 * (the huge test empties the pool first). */
static long reuse_huge_pool_kb(void) {
  long v = status_value("PageReuseHugePool");
  return v >= 0 ? v : reuse_pool_kb();
}
/* Pages in all pools: nr_page_reuse in /proc/vmstat, or the older series'
 * vm.page_reuse_pages. */
static long sysctl_read(const char *name);
static long reuse_global_pages(void) {
  long v = proc_value("/proc/vmstat", "nr_page_reuse", ' ');
  return v >= 0 ? v : sysctl_read("page_reuse_pages");
}

static long sysctl_read(const char *name) {
  char path[128], buf[64];
  snprintf(path, sizeof path, "/proc/sys/vm/%s", name);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t r = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (r <= 0) return -1;
  buf[r] = 0;
  return strtol(buf, NULL, 10);
}

static int sysctl_write(const char *name, long v) {
  char path[128], buf[64];
  snprintf(path, sizeof path, "/proc/sys/vm/%s", name);
  int fd = open(path, O_WRONLY);
  if (fd < 0) return -1;
  int n = snprintf(buf, sizeof buf, "%ld\n", v);
  int ok = write(fd, buf, n) == n;
  close(fd);
  return ok ? 0 : -1;
}

/* The line of /proc/self/smaps that starts with `key` in the block of the
 * vma starting at p, copied to line: 1; vma or key not found: 0; no file: -1. */
static int smaps_line(void *p, const char *key, char *line, size_t len) {
  FILE *f = fopen("/proc/self/smaps", "r");
  int in = 0, found = 0;
  if (!f) return -1;
  while (fgets(line, (int)len, f)) {
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (a == (unsigned long)p);
      continue;
    }
    if (in && !strncmp(line, key, strlen(key))) {
      found = 1;
      break;
    }
  }
  fclose(f);
  return found;
}

/* Does /proc/self/smaps show VmFlags "pr" for the vma starting at p? */
static int smaps_has_pr(void *p) {
  char line[512];
  int r = smaps_line(p, "VmFlags:", line, sizeof line);
  return r < 0 ? -1 : r && strstr(line, " pr") != NULL;
}

static void *map_anon(size_t len, int extra) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void pin_cpu0(void) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(0, &s);
  sched_setaffinity(0, sizeof s, &s);
}

/* ------------------------------------------------------------ flags */
static void test_flags(void) {
  const char *t = "flags";
  size_t len = 16 * PG;
  char *p = map_anon(len, 0);
  if (!p) FAIL(t, "mmap: %s", strerror(errno));
  int r = madvise(p, len, MADV_UNDEFINED);
  if (r == 0 || errno != EINVAL) FAIL(t, "undefined advice 0x4c50 accepted");
  r = madvise(p, len, MADV_PAGE_REUSE);
  if (!patched) {
    if (r == 0 || errno != EINVAL) FAIL(t, "stock kernel accepted MADV_PAGE_REUSE");
    char *q = map_anon(len, MAP_PAGE_REUSE); /* ignored, as any unknown private flag */
    if (!q) FAIL(t, "stock mmap with the flag: %s", strerror(errno));
    if (smaps_has_pr(q) != 0) FAIL(t, "stock kernel shows pr in VmFlags");
    munmap(q, len);
    munmap(p, len);
    PASS(t, " (stock: advice rejected with EINVAL, flag without effect)");
    return;
  }
  if (r != 0) FAIL(t, "MADV_PAGE_REUSE on private anonymous memory: %s", strerror(errno));
  if (smaps_has_pr(p) != 1) FAIL(t, "no pr in VmFlags after MADV_PAGE_REUSE");
  if (madvise(p, len, MADV_NO_PAGE_REUSE) != 0) FAIL(t, "MADV_NO_PAGE_REUSE: %s", strerror(errno));
  if (smaps_has_pr(p) != 0) FAIL(t, "pr still in VmFlags after MADV_NO_PAGE_REUSE");
  munmap(p, len);

  char *q = map_anon(len, MAP_PAGE_REUSE);
  if (!q) FAIL(t, "mmap MAP_PRIVATE|MAP_ANONYMOUS|MAP_PAGE_REUSE: %s", strerror(errno));
  if (smaps_has_pr(q) != 1) FAIL(t, "no pr in VmFlags of a MAP_PAGE_REUSE mapping");
  munmap(q, len);

  /* Where it does not apply the flag is ignored, as by kernels without it
   * (MAP_SHARED drops unknown flags); MAP_SHARED_VALIDATE rejects it. */
  void *s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_PAGE_REUSE, -1, 0);
  if (s == MAP_FAILED) FAIL(t, "MAP_SHARED|MAP_PAGE_REUSE failed: %s", strerror(errno));
  if (smaps_has_pr(s) != 0) FAIL(t, "shared memory got pr in VmFlags");
  munmap(s, len);
  s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_ANONYMOUS | MAP_PAGE_REUSE, -1, 0);
  if (s != MAP_FAILED) FAIL(t, "MAP_SHARED_VALIDATE|MAP_PAGE_REUSE accepted");
  int fd = open("/tmp/page_reuse_file", O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, len) != 0) FAIL(t, "cannot make a tmpfs file");
  s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_PAGE_REUSE, fd, 0);
  if (s == MAP_FAILED) FAIL(t, "private file mapping with MAP_PAGE_REUSE failed: %s", strerror(errno));
  if (smaps_has_pr(s) != 0) FAIL(t, "a file mapping got pr in VmFlags");
  munmap(s, len);
  s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (s == MAP_FAILED) FAIL(t, "file mmap: %s", strerror(errno));
  if (madvise(s, len, MADV_PAGE_REUSE) == 0 || errno != EINVAL) FAIL(t, "MADV_PAGE_REUSE on a file mapping not rejected");
  munmap(s, len);
  close(fd);
  unlink("/tmp/page_reuse_file");
  s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) FAIL(t, "shared mmap: %s", strerror(errno));
  if (madvise(s, len, MADV_PAGE_REUSE) == 0 || errno != EINVAL) FAIL(t, "MADV_PAGE_REUSE on shared memory not rejected");
  munmap(s, len);
  s = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_PAGE_REUSE, -1, 0);
  if (s != MAP_FAILED && smaps_has_pr(s) != 0) FAIL(t, "MAP_HUGETLB memory got pr in VmFlags");
  if (s != MAP_FAILED) munmap(s, 2 << 20);
  PASS(t, " (advice and flag accepted, pr in VmFlags; the flag ignored on shared, file, hugetlb memory; the advice rejected there with EINVAL)");
}

/* ------------------------------------------------------------ reuse */
/* Fills page i with words (tag << 32 | i). */
static void fill(char *p, size_t pages, uint32_t tag) {
  for (size_t i = 0; i < pages; i++) {
    uint64_t *w = (uint64_t *)(p + i * PG);
    for (size_t k = 0; k < PG / 8; k++) w[k] = ((uint64_t)tag << 32) | (uint32_t)i;
  }
}

/* Classifies page contents after a refault: 0 zero page, 1 one of our
 * own tag's pages (whole and consistent), 2 anything else. */
static int classify(const char *pg, uint32_t tag) {
  const uint64_t *w = (const uint64_t *)pg;
  int zero = 1;
  for (size_t k = 0; k < PG / 8; k++)
    if (w[k]) { zero = 0; break; }
  if (zero) return 0;
  if ((uint32_t)(w[1] >> 32) != tag) return 2;
  for (size_t k = 1; k < PG / 8; k++)
    if (w[k] != w[1]) return 2;
  return 1;
}

static void test_reuse(void) {
  const char *t = "reuse";
  const size_t n = 512;
  uint32_t tag = 0x5eed0000u ^ (uint32_t)getpid();
  pin_cpu0();
  char *p = map_anon(n * PG, MAP_PAGE_REUSE);
  if (!p) FAIL(t, "mmap: %s", strerror(errno));
  long h0 = reuse_hits();
  if (patched && h0 < 0) FAIL(t, "no page_reuse_hit in /proc/vmstat (nor PageReuseHits in /proc/self/status)");
  if (!patched && h0 >= 0) FAIL(t, "stock kernel has page_reuse_hit");

  /* MADV_DONTNEED, then refault by writing the first word only. */
  fill(p, n, tag);
  if (madvise(p, n * PG, MADV_DONTNEED) != 0) FAIL(t, "MADV_DONTNEED: %s", strerror(errno));
  long pool = reuse_pool_kb();
  size_t own = 0, zero = 0, other = 0;
  for (size_t i = 0; i < n; i++) p[i * PG] = 0; /* write fault */
  for (size_t i = 0; i < n; i++) {
    int c = classify(p + i * PG, tag);
    own += c == 1, zero += c == 0, other += c == 2;
  }
  long h1 = reuse_hits();
  if (other) FAIL(t, "%zu pages show data that is neither zero nor this process's own", other);
  if (!patched) {
    if (own) FAIL(t, "stock kernel returned %zu uncleared pages", own);
    munmap(p, n * PG);
    PASS(t, " (stock: all %zu pages cleared)", zero);
    return;
  }
  if (h1 - h0 != (long)own) FAIL(t, "hits went up by %ld but %zu pages hold old data", h1 - h0, own);
  if (own < n * 9 / 10) FAIL(t, "only %zu of %zu pages reused after MADV_DONTNEED (pool was %ld kB)", own, n, pool);

  /* munmap, then a new mapping: also reused; a mapping without the flag
   * never gets pool pages. */
  fill(p, n, tag);
  munmap(p, n * PG);
  long pool_kb = reuse_pool_kb();
  if (pool_kb < (long)(n * 4 * 9 / 10)) FAIL(t, "pool has %ld kB after munmap of %zu kB", pool_kb, n * 4);
  char *plain = map_anon(n * PG, 0);
  long h2 = reuse_hits();
  for (size_t i = 0; i < n; i++) plain[i * PG] = 1;
  for (size_t i = 0; i < n; i++) /* the first byte is the one just written */
    for (size_t k = 1; k < PG; k++)
      if (plain[i * PG + k]) FAIL(t, "a mapping without the flag got old data (page %zu)", i);
  if (reuse_hits() != h2) FAIL(t, "a mapping without the flag took pool pages");
  munmap(plain, n * PG);
  char *q = map_anon(n * PG, MAP_PAGE_REUSE);
  for (size_t i = 0; i < n; i++) q[i * PG] = 0;
  size_t own2 = 0;
  for (size_t i = 0; i < n; i++) {
    int c = classify(q + i * PG, tag);
    if (c == 2) FAIL(t, "foreign data after munmap/mmap");
    own2 += c == 1;
  }
  if (own2 < n * 9 / 10) FAIL(t, "only %zu of %zu pages reused after munmap", own2, n);

  /* mremap shrink frees the tail into the pool. */
  fill(q, n, tag);
  long f0 = reuse_fills();
  char *r = mremap(q, n * PG, n * PG / 2, 0);
  if (r == MAP_FAILED) FAIL(t, "mremap: %s", strerror(errno));
  long f1 = reuse_fills();
  if (f1 - f0 < (long)(n / 2 * 9 / 10)) FAIL(t, "mremap shrink put %ld pages in the pool, expected %zu", f1 - f0, n / 2);
  munmap(r, n * PG / 2);
  PASS(t, " (MADV_DONTNEED: %zu/%zu pages reused, munmap: %zu/%zu, mremap shrink: %ld pages pooled; unflagged mapping untouched)",
       own, n, own2, n, f1 - f0);
}

/* ------------------------------------------------------------ secret */
static uint64_t secret_value(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 17 ^ 0xa5a5c3c3d00dfeedull;
  return x | 1; /* never zero */
}

static void *map_huge(size_t len, int extra);

/* Maps mib MiB flagged, mib MiB plain and mib MiB flagged for 2 MiB pages
 * (MADV_HUGEPAGE, 2 MiB aligned), frees and refaults the flagged parts once
 * (their own pool), and counts words equal to secret. */
static long scan_fresh(uint64_t secret, size_t mib) {
  size_t len = mib << 20;
  long hits = 0;
  for (int flagged = 0; flagged < 3; flagged++) {
    uint64_t *p = flagged == 2 ? map_huge(len, MAP_PAGE_REUSE) : map_anon(len, flagged ? MAP_PAGE_REUSE : 0);
    if (!p) return -1;
    for (int round = 0; round < 2; round++) {
      for (size_t i = 0; i < len / PG; i++) ((volatile char *)p)[i * PG + 5] = 0x11; /* write fault */
      for (size_t k = 0; k < len / 8; k++) hits += p[k] == secret;
      if (flagged && round == 0) madvise(p, len, MADV_DONTNEED);
    }
    munmap(p, len);
  }
  return hits;
}

static int run_scan(const char *secret_hex, const char *mib) {
  uint64_t secret = strtoull(secret_hex, NULL, 16);
  long pool = reuse_pool_kb();
  long hits = scan_fresh(secret, strtoul(mib, NULL, 10));
  printf("scan (pid %d): pool at start %ld kB, secret words found %ld\n", (int)getpid(), pool, hits);
  if (hits < 0) return 2;
  if (pool > 0) return 3; /* a fresh exec'd process must start with an empty pool */
  return hits ? 1 : 0;
}

static void test_secret(void) {
  const char *t = "secret";
  const size_t mib = 32, n = (mib << 20) / PG;
  uint64_t secret = secret_value();
  char hex[32];
  snprintf(hex, sizeof hex, "%llx", (unsigned long long)secret);
  pin_cpu0();
  /* Secret pages, freed into this process's pool (and some into the
   * page allocator: a plain mapping freed as usual). */
  uint64_t *p = map_anon(n * PG, MAP_PAGE_REUSE);
  uint64_t *plain = map_anon(n * PG, 0);
  if (!p || !plain) FAIL(t, "mmap: %s", strerror(errno));
  for (size_t k = 0; k < n * PG / 8; k++) p[k] = plain[k] = secret;
  munmap(p, n * PG);
  munmap(plain, n * PG);
  long pool = reuse_pool_kb();
  if (patched && pool < (long)(mib << 10) / 2) FAIL(t, "only %ld kB of secret pages in the pool", pool);

  /* 1. A forked child: no pool of its own, never sees the secret. */
  pid_t c = fork();
  if (c == 0) {
    long cp = reuse_pool_kb();
    long h = scan_fresh(secret, 2 * mib);
    printf("  forked child: pool at start %ld kB, secret words %ld, hits %ld\n", cp, h, reuse_hits());
    _exit(h != 0 || cp > 0 ? 1 : 0);
  }
  int st;
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "the forked child saw the secret or inherited the pool");

  /* 2. Another process (exec'd from a fork) while this one still holds
   * the secret in its pool. */
  c = fork();
  if (c == 0) {
    execl(self, self, "scan", hex, "64", (char *)NULL);
    _exit(127);
  }
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "another process saw the secret (status %d)", WEXITSTATUS(st));
  if (patched && reuse_pool_kb() < pool / 2) FAIL(t, "pool shrank while the other process ran");

  /* 3. exec: this process's pool is dropped, the new image starts
   * without it and never sees the secret. */
  c = fork();
  if (c == 0) {
    /* the child refills its own pool with the secret, then execs */
    uint64_t *q = map_anon(n * PG, MAP_PAGE_REUSE);
    for (size_t k = 0; k < n * PG / 8; k++) q[k] = secret;
    munmap(q, n * PG);
    if (patched && reuse_pool_kb() <= 0) _exit(4);
    execl(self, self, "scan", hex, "64", (char *)NULL);
    _exit(127);
  }
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "after exec the secret or the pool was visible (status %d)", WEXITSTATUS(st));

  /* 4. The process's own exit frees the pool to the allocator (cleared
   * on the next allocation): a process started after that never sees it. */
  c = fork();
  if (c == 0) {
    uint64_t *q = map_anon(n * PG, MAP_PAGE_REUSE);
    for (size_t k = 0; k < n * PG / 8; k++) q[k] = secret;
    munmap(q, n * PG);
    _exit(0);
  }
  waitpid(c, &st, 0);
  c = fork();
  if (c == 0) {
    execl(self, self, "scan", hex, "96", (char *)NULL);
    _exit(127);
  }
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "a process started after an exit saw the secret (status %d)", WEXITSTATUS(st));
  PASS(t, " (secret in %ld kB of pool: not seen by a forked child, another process, an exec'd image, a later process)", pool);
}

/* ------------------------------------------------------------ pressure */
/* In a forked child: allocates (4 KiB pages, not flagged) until the
 * parent's pool shrinks below pool_kb, at most MemAvailable, the pool and
 * 128 MiB (MemAvailable counts only part of the pool, as of any
 * reclaimable kernel memory, and the free reserves come first, so how much
 * it takes varies; if the pool were not drained this ends in the OOM
 * killer, a failure).  Never returns. */
static void pressure_child(long pool_kb) {
  long avail_kb = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  char line[128];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "MemAvailable:", 13)) avail_kb = strtol(line + 13, NULL, 10);
  if (f) fclose(f);
  size_t blen = ((size_t)avail_kb + (size_t)pool_kb + (128 << 10)) << 10;
  /* MAP_NORESERVE: with MemAvailable counting the pool (kernel 0004) blen
   * may exceed RAM, which the overcommit heuristic refuses for one mapping;
   * the child stops long before it has touched that much. */
  char *big = map_anon(blen, MAP_NORESERVE);
  if (!big) _exit(2);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", (int)getppid());
  for (size_t i = 0; i < blen; i += PG) {
    big[i] = 1;
    if (i % (4 << 20) == 0) {
      long now = pool_kb_of(path);
      if (now >= 0 && now < pool_kb) _exit(0);
    }
  }
  _exit(0);
}

static void test_pressure(void) {
  const char *t = "pressure";
  if (!patched) { PASS(t, " (stock: nothing to drain)"); return; }
  const size_t n = (64 << 20) / PG;
  uint32_t tag = 0x77770000u ^ (uint32_t)getpid();
  pin_cpu0();
  /* Live data that must survive, and freed data in the pool. */
  char *live = map_anon(n * PG, MAP_PAGE_REUSE);
  char *p = map_anon(n * PG, MAP_PAGE_REUSE);
  if (!live || !p) FAIL(t, "mmap");
  fill(live, n, tag ^ 1);
  fill(p, n, tag);
  long pool0 = reuse_pool_kb(), krec0 = proc_value("/proc/meminfo", "KReclaimable", ':');
  munmap(p, n * PG);
  long pool = reuse_pool_kb(), global = reuse_global_pages();
  long krec = proc_value("/proc/meminfo", "KReclaimable", ':');
  /* nr_page_reuse is a node stat: per-CPU deltas (up to ~125 pages per CPU)
   * are not folded in yet. */
  if (pool < (long)(n * 4) / 2 || global < pool / 4 - 512) FAIL(t, "pool %ld kB, %ld pages in all pools (nr_page_reuse) before pressure", pool, global);
  /* Pooled pages are reclaimable kernel memory (KReclaimable, and so
   * MemAvailable, count them); slab may move by a few hundred kB meanwhile. */
  if (krec0 < 0 || krec - krec0 < (pool - pool0) - 1024)
    FAIL(t, "KReclaimable %ld -> %ld kB while the pool grew %ld -> %ld kB", krec0, krec, pool0, pool);
  /* drop_caches runs the shrinkers. */
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0 || write(fd, "2\n", 2) != 2) FAIL(t, "cannot write drop_caches");
  close(fd);
  long pool2 = reuse_pool_kb(), krec2 = proc_value("/proc/meminfo", "KReclaimable", ':');
  if (pool2 > pool / 10) FAIL(t, "drop_caches left %ld of %ld kB in the pool", pool2, pool);
  if (krec - krec2 < (pool - pool2) - 1024)
    FAIL(t, "KReclaimable %ld -> %ld kB while drop_caches emptied the pool %ld -> %ld kB", krec, krec2, pool, pool2);
  /* Refill, then real pressure: a child allocates until the pool shrinks. */
  p = map_anon(n * PG, MAP_PAGE_REUSE);
  fill(p, n, tag);
  munmap(p, n * PG);
  long pool3 = reuse_pool_kb();
  pid_t c = fork();
  if (c == 0) pressure_child(pool3);
  int st;
  waitpid(c, &st, 0);
  long pool4 = reuse_pool_kb();
  for (size_t i = 0; i < n; i++)
    if (classify(live + i * PG, tag ^ 1) != 1) FAIL(t, "live data lost under pressure (page %zu)", i);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "the pressure child failed (status %d: OOM?)", st);
  if (pool4 >= pool3) FAIL(t, "pressure did not drain the pool (%ld -> %ld kB)", pool3, pool4);
  /* Faults after the drain: cleared pages, no error. */
  p = map_anon(n * PG, MAP_PAGE_REUSE);
  for (size_t i = 0; i < n; i++) p[i * PG] = 0;
  for (size_t i = 0; i < n; i++)
    if (classify(p + i * PG, tag) == 2) FAIL(t, "foreign data after the drain");
  munmap(p, n * PG);
  munmap(live, n * PG);
  PASS(t, " (KReclaimable +%ld kB with the pool; drop_caches: pool %ld -> %ld kB; allocation pressure: %ld -> %ld kB; live data intact)",
       krec - krec0, pool, pool2, pool3, pool4);
}

/* ------------------------------------------------------------ limit */
static void test_limit(void) {
  const char *t = "limit";
  if (!patched) { PASS(t, " (stock: no limits)"); return; }
  long old = sysctl_read("page_reuse_mm_max_pages"), global = sysctl_read("page_reuse_max_pages");
  if (old < 0) FAIL(t, "no vm.page_reuse_mm_max_pages");
  /* Defaults: the global bound a quarter of RAM, the per-mm one 131072
   * pages (512 MiB) or the global one if smaller (the memcg limit bounds a
   * pool too); nothing has set them before this test in guest_tests.sh. */
  long want = global < 131072 ? global : 131072;
  if (old != want) FAIL(t, "vm.page_reuse_mm_max_pages %ld, not min(131072, global bound %ld) by default", old, global);
  pid_t c = fork();
  if (c == 0) { /* a fresh mm: empty pool */
    if (sysctl_write("page_reuse_mm_max_pages", 16) != 0) _exit(2);
    char *p = map_anon(64 * PG, MAP_PAGE_REUSE);
    for (size_t i = 0; i < 64; i++) p[i * PG] = 1;
    munmap(p, 64 * PG);
    long kb = reuse_pool_kb();
    printf("  pool with a limit of 16 pages after freeing 64: %ld kB\n", kb);
    _exit(kb == 64 ? 0 : 1);
  }
  int st;
  waitpid(c, &st, 0);
  sysctl_write("page_reuse_mm_max_pages", old);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "per-process limit not kept (status %d)", WEXITSTATUS(st));
  PASS(t, " (vm.page_reuse_mm_max_pages=16 keeps 64 kB)");
}

/* ------------------------------------------------------------ huge */
#define HPG (2UL << 20)

/* len bytes (a multiple of 2 MiB), 2 MiB aligned, MADV_HUGEPAGE. */
static void *map_huge(size_t len, int extra) {
  char *p = map_anon(len + HPG, extra);
  if (!p) return NULL;
  char *a = (char *)(((uintptr_t)p + HPG - 1) & ~(HPG - 1));
  if (a > p) munmap(p, a - p);
  if (a + len < p + len + HPG) munmap(a + len, p + len + HPG - (a + len));
  madvise(a, len, MADV_HUGEPAGE);
  return a;
}

/* AnonHugePages (kB) of the vma starting at p, -1 if not found. */
static long anon_huge_kb(void *p) {
  char line[512];
  return smaps_line(p, "AnonHugePages:", line, sizeof line) == 1 ? strtol(line + 14, NULL, 10) : -1;
}

/* Classifies the 512 pages of 2 MiB page h after a refault: how many are
 * this process's own (fill(), tag), zero, other. */
static void classify_huge(const char *p, size_t h, uint32_t tag, size_t *own, size_t *zero, size_t *other) {
  for (size_t i = h * (HPG / PG); i < (h + 1) * (HPG / PG); i++) {
    int c = classify(p + i * PG, tag);
    *own += c == 1, *zero += c == 0, *other += c == 2;
  }
}

static void test_huge(void) {
  const char *t = "huge";
  const size_t n = 8, len = n * HPG;
  uint32_t tag = 0x4a9e0000u ^ (uint32_t)getpid();
  char mode[128] = "";
  int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY);
  if (fd >= 0) { ssize_t r = read(fd, mode, sizeof mode - 1); if (r > 0) mode[r] = 0; close(fd); }
  if (!strstr(mode, "[madvise]") && !strstr(mode, "[always]")) FAIL(t, "THP not enabled in the guest (%s)", mode);
  pin_cpu0();
  char *p = map_huge(len, MAP_PAGE_REUSE);
  if (!p) FAIL(t, "mmap: %s", strerror(errno));
  fill(p, len / PG, tag);
  long thp = anon_huge_kb(p);
  if (thp < (long)(len >> 10) / 2) FAIL(t, "only %ld kB of %zu kB backed by 2 MiB pages", thp, len >> 10);
  long hh0 = reuse_thp_hits(), hf0 = reuse_thp_fills();
  if (patched && (hh0 < 0 || hf0 < 0)) FAIL(t, "no page_reuse_thp_hit/fill in /proc/vmstat (nor PageReuseHugeHits/Fills in status)");
  if (!patched && hh0 >= 0) FAIL(t, "stock kernel has page_reuse_thp_hit");
  long pool_before = reuse_pool_kb(), fl0 = reuse_fills();

  /* MADV_DONTNEED of whole 2 MiB pages, then one write per 2 MiB page. */
  if (madvise(p, len, MADV_DONTNEED) != 0) FAIL(t, "MADV_DONTNEED: %s", strerror(errno));
  long hf1 = reuse_thp_fills(), hpool = status_value("PageReuseHugePool");
  /* Without the older series' line: the pool's growth less the 4 KiB pages
   * pooled with the THPs. */
  if (hpool < 0 && patched) hpool = reuse_pool_kb() - pool_before - 4 * (reuse_fills() - fl0);
  for (size_t h = 0; h < n; h++) p[h * HPG] = 0;
  long thp2 = anon_huge_kb(p), hh1 = reuse_thp_hits();
  size_t own = 0, zero = 0, other = 0;
  for (size_t h = 0; h < n; h++) classify_huge(p, h, tag, &own, &zero, &other);
  if (other) FAIL(t, "%zu pages show data that is neither zero nor this process's own", other);
  if (!patched) {
    if (own) FAIL(t, "stock kernel returned %zu uncleared pages", own);
    munmap(p, len);
    PASS(t, " (stock: %ld kB in 2 MiB pages, all %zu pages cleared after MADV_DONTNEED)", thp, zero);
    return;
  }
  if (hf1 - hf0 != thp / 2048) FAIL(t, "MADV_DONTNEED of %ld 2 MiB pages pooled %ld", thp / 2048, hf1 - hf0);
  if (hpool != thp) FAIL(t, "PageReuseHugePool %ld kB, expected %ld", hpool, thp);
  if (own != (size_t)(hh1 - hh0) * (HPG / PG))
    FAIL(t, "2 MiB hits went up by %ld but %zu 4 KiB pages hold old data", hh1 - hh0, own);
  if (hh1 - hh0 < (long)n * 9 / 10 * thp / (long)(len >> 10)) FAIL(t, "only %ld of %zu 2 MiB pages reused", hh1 - hh0, n);
  if (thp2 < thp) FAIL(t, "after reuse only %ld kB in 2 MiB pages (%ld before)", thp2, thp);
  size_t own1 = own;

  /* munmap, then a new mapping: reused; an unflagged THP mapping never
   * gets pool pages. */
  fill(p, len / PG, tag);
  munmap(p, len);
  long hpool2 = reuse_huge_pool_kb();
  if (hpool2 < thp) FAIL(t, "pool has %ld kB of 2 MiB pages after munmap of %ld", hpool2, thp);
  char *plain = map_huge(len, 0);
  long h2 = reuse_thp_hits();
  for (size_t h = 0; h < n; h++) plain[h * HPG] = 1;
  for (size_t k = 1; k < len; k++)
    if (plain[k] && k % HPG) FAIL(t, "a mapping without the flag got old data (offset %zu)", k);
  if (reuse_thp_hits() != h2) FAIL(t, "a mapping without the flag took pool pages");
  munmap(plain, len);
  char *q = map_huge(len, MAP_PAGE_REUSE);
  for (size_t h = 0; h < n; h++) q[h * HPG] = 0;
  own = zero = other = 0;
  for (size_t h = 0; h < n; h++) classify_huge(q, h, tag, &own, &zero, &other);
  if (other) FAIL(t, "foreign data after munmap/mmap");
  if (own < own1) FAIL(t, "only %zu 4 KiB pages reused after munmap (%zu after MADV_DONTNEED)", own, own1);
  size_t own2 = own;

  /* mremap shrink by whole 2 MiB pages pools the tail. */
  long f0 = reuse_thp_fills();
  char *r = mremap(q, len, len / 2, 0);
  if (r == MAP_FAILED) FAIL(t, "mremap: %s", strerror(errno));
  long f1 = reuse_thp_fills();
  if (f1 - f0 < (long)n / 2 * thp / (long)(len >> 10)) FAIL(t, "mremap shrink pooled %ld 2 MiB pages, expected %zu", f1 - f0, n / 2);
  munmap(r, len / 2);

  /* A forked child never inherits the 2 MiB pool and never sees its data:
   * secret-filled 2 MiB pages freed into the pool, the child scans fresh
   * memory (4 KiB and 2 MiB, flagged and not). */
  uint64_t secret = secret_value();
  uint64_t *s = map_huge(len, MAP_PAGE_REUSE);
  for (size_t k = 0; k < len / 8; k++) s[k] = secret;
  munmap(s, len);
  long spool = reuse_huge_pool_kb();
  if (spool < thp) FAIL(t, "secret: only %ld kB of 2 MiB pages in the pool", spool);
  pid_t c = fork();
  if (c == 0) {
    long cp = reuse_pool_kb();
    long hits = scan_fresh(secret, 2 * n * 2);
    _exit(hits != 0 || cp > 0 ? 1 : 0);
  }
  int st;
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "a forked child saw 2 MiB secret pages or inherited the pool");
  /* Another process, and the image after exec of a process whose pool
   * holds secret 2 MiB pages. */
  char hex[32];
  snprintf(hex, sizeof hex, "%llx", (unsigned long long)secret);
  c = fork();
  if (c == 0) {
    uint64_t *q2 = map_huge(len, MAP_PAGE_REUSE);
    for (size_t k = 0; k < len / 8; k++) q2[k] = secret;
    munmap(q2, len);
    if (reuse_huge_pool_kb() <= 0) _exit(4);
    execl(self, self, "scan", hex, "48", (char *)NULL);
    _exit(127);
  }
  waitpid(c, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "after exec 2 MiB secret pages or the pool were visible (status %d)", WEXITSTATUS(st));

  /* Drained under pressure: drop_caches, then a child that allocates all
   * available memory and half the pool. */
  fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0 || write(fd, "2\n", 2) != 2) FAIL(t, "cannot write drop_caches");
  close(fd);
  long dpool = reuse_huge_pool_kb();
  if (dpool != 0) FAIL(t, "drop_caches left %ld kB of 2 MiB pages in the pool", dpool);
  char *live = map_huge(len, MAP_PAGE_REUSE);
  fill(live, len / PG, tag ^ 1);
  s = map_huge(len, MAP_PAGE_REUSE);
  fill((char *)s, len / PG, tag);
  munmap(s, len);
  long ppool = reuse_pool_kb();
  c = fork();
  if (c == 0) pressure_child(ppool);
  waitpid(c, &st, 0);
  long ppool2 = reuse_pool_kb();
  for (size_t i = 0; i < len / PG; i++)
    if (classify(live + i * PG, tag ^ 1) != 1) FAIL(t, "live 2 MiB data lost under pressure (page %zu)", i);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL(t, "the pressure child failed (status %d: OOM?)", st);
  if (ppool2 >= ppool) FAIL(t, "pressure did not drain the pool (%ld -> %ld kB)", ppool, ppool2);
  munmap(live, len);
  PASS(t, " (%ld kB in 2 MiB pages; MADV_DONTNEED: %ld/%zu 2 MiB pages reused, own data back; munmap: %zu 4 KiB pages back;"
       " mremap shrink: %ld pooled; unflagged untouched; secret not seen by fork child or exec'd image;"
       " drop_caches -> %ld kB; pressure %ld -> %ld kB)", thp, hh1 - hh0, n, own2, f1 - f0, dpool, ppool, ppool2);
}

/* ------------------------------------------------------------ bench */
static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of n timings (sorts them). */
static double median(double *t, int n) {
  qsort(t, n, sizeof *t, cmp_d);
  return t[n / 2];
}

/* First-touch cost per 4 KiB page after MADV_DONTNEED, in a mapping with
 * the flag and one without, interleaved; medians over rounds. */
static int run_bench(int rounds, size_t pages) {
  pin_cpu0();
  char *a = map_anon(pages * PG, MAP_PAGE_REUSE), *b = map_anon(pages * PG, 0);
  double *ta = calloc(rounds, sizeof *ta), *tb = calloc(rounds, sizeof *tb);
  if (!a || !b) return 2;
  for (size_t i = 0; i < pages; i++) a[i * PG] = b[i * PG] = 1;
  for (int r = 0; r < rounds; r++) {
    for (int which = 0; which < 2; which++) {
      char *p = which ? b : a;
      madvise(p, pages * PG, MADV_DONTNEED);
      double t0 = now_ns();
      for (size_t i = 0; i < pages; i++) p[i * PG] = 1;
      (which ? tb : ta)[r] = (now_ns() - t0) / pages;
    }
  }
  double ma = median(ta, rounds), mb = median(tb, rounds);
  printf("BENCH fault-after-free ns/page: flagged %.0f plain %.0f ratio %.3f (median of %d rounds, %zu pages, hits %ld)\n",
         ma, mb, ma / mb, rounds, pages, reuse_hits());
  return 0;
}

/* The same for 2 MiB pages: first write to each 2 MiB page after
 * MADV_DONTNEED of the whole (THP) mapping, flagged vs unflagged, per 2 MiB
 * page; also reports how much of each mapping was in 2 MiB pages. */
static int run_bench_huge(int rounds, size_t n) {
  pin_cpu0();
  size_t len = n * HPG;
  char *a = map_huge(len, MAP_PAGE_REUSE), *b = map_huge(len, 0);
  double *ta = calloc(rounds, sizeof *ta), *tb = calloc(rounds, sizeof *tb);
  if (!a || !b) return 2;
  for (size_t i = 0; i < len; i += PG) a[i] = b[i] = 1;
  long h0 = reuse_thp_hits();
  long ha = 0, hb = 0;
  for (int r = 0; r < rounds; r++) {
    for (int which = 0; which < 2; which++) {
      char *p = which ? b : a;
      madvise(p, len, MADV_DONTNEED);
      double t0 = now_ns();
      for (size_t h = 0; h < n; h++) p[h * HPG] = 1;
      (which ? tb : ta)[r] = (now_ns() - t0) / n;
      if (r == 0) *(which ? &hb : &ha) = anon_huge_kb(p);
    }
  }
  double ma = median(ta, rounds), mb = median(tb, rounds);
  printf("BENCH huge fault-after-free ns per 2 MiB page: flagged %.0f plain %.0f ratio %.3f (median of %d rounds, %zu 2 MiB pages; "
         "in 2 MiB pages: flagged %ld kB, plain %ld kB; 2 MiB hits %ld)\n",
         ma, mb, ma / mb, rounds, n, ha, hb,
         reuse_thp_hits() - h0);
  return 0;
}

/* What clearing costs inside a fault, on any kernel (run it on real
 * hardware): per 4 KiB page, medians over rounds, interleaved:
 *   fault     first write after MADV_DONTNEED (allocate, clear, map)
 *   touch     write to a resident page (no fault)
 *   clear     memset of a resident 4 KiB page, cache-cold (what clear_page does)
 *   lazyfree  write after MADV_FREE, pages not reclaimed (stock stand-in: no fault)
 *   populate  MADV_POPULATE_WRITE after MADV_DONTNEED, per page (stock stand-in:
 *             one call, still clears)
 * and fault - clear, the expected cost of a fault served from the pool. */
static int run_costs(int rounds, size_t pages) {
  pin_cpu0();
  size_t len = pages * PG;
  char *p = map_anon(len, 0), *evict = map_anon(64 << 20, 0);
  if (!p || !evict) return 2;
  madvise(p, len, MADV_NOHUGEPAGE);
  enum { FAULT, TOUCH, CLEAR, LAZY, POPUL, N };
  static const char *names[N] = {"fault", "touch", "clear", "lazyfree", "populate"};
  double *t[N];
  for (int k = 0; k < N; k++) t[k] = calloc(rounds, sizeof(double));
  memset(evict, 1, 64 << 20);
  for (int r = 0; r < rounds; r++) {
    double t0;
    madvise(p, len, MADV_DONTNEED);
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    for (size_t i = 0; i < pages; i++) p[i * PG] = 1;
    t[FAULT][r] = (now_ns() - t0) / pages;
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    for (size_t i = 0; i < pages; i++) p[i * PG] = 2;
    t[TOUCH][r] = (now_ns() - t0) / pages;
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    for (size_t i = 0; i < pages; i++) memset(p + i * PG, 0, PG);
    t[CLEAR][r] = (now_ns() - t0) / pages;
    madvise(p, len, MADV_FREE);
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    for (size_t i = 0; i < pages; i++) p[i * PG] = 3;
    t[LAZY][r] = (now_ns() - t0) / pages;
    madvise(p, len, MADV_DONTNEED);
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    int ok = madvise(p, len, 23 /* MADV_POPULATE_WRITE */) == 0;
    for (size_t i = 0; i < pages; i++) p[i * PG] = 4;
    t[POPUL][r] = ok ? (now_ns() - t0) / pages : -1;
  }
  double med[N];
  for (int k = 0; k < N; k++) med[k] = median(t[k], rounds);
  printf("COSTS ns per 4 KiB page, median of %d rounds of %zu pages:", rounds, pages);
  for (int k = 0; k < N; k++) printf(" %s %.0f", names[k], med[k]);
  printf("\nCOSTS clearing share of a fault %.2f; expected fault from the pool (fault - clear) %.0f ns, "
         "ratio to a fault %.2f\n", med[CLEAR] / med[FAULT], med[FAULT] - med[CLEAR],
         (med[FAULT] - med[CLEAR]) / med[FAULT]);
  return 0;
}

/* What clearing costs inside a 2 MiB (THP) fault, on any kernel: per 2 MiB
 * page, medians, interleaved: fault (first write after MADV_DONTNEED:
 * allocate, clear 2 MiB, map), clear (memset of a resident 2 MiB page,
 * cache-cold), touch (one write per resident 2 MiB page). */
static int run_costs_huge(int rounds, size_t n) {
  pin_cpu0();
  size_t len = n * HPG;
  char *p = map_huge(len, 0), *evict = map_anon(64 << 20, 0);
  if (!p || !evict) return 2;
  double *tf = calloc(rounds, sizeof(double)), *tc = calloc(rounds, sizeof(double)), *tt = calloc(rounds, sizeof(double));
  memset(evict, 1, 64 << 20);
  long kb = 0;
  for (int r = 0; r < rounds; r++) {
    double t0;
    madvise(p, len, MADV_DONTNEED);
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    for (size_t h = 0; h < n; h++) p[h * HPG] = 1;
    tf[r] = (now_ns() - t0) / n;
    if (r == 0) kb = anon_huge_kb(p);
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    for (size_t h = 0; h < n; h++) p[h * HPG] = 2;
    tt[r] = (now_ns() - t0) / n;
    memset(evict, r, 64 << 20);
    t0 = now_ns();
    for (size_t h = 0; h < n; h++) memset(p + h * HPG, 0, HPG);
    tc[r] = (now_ns() - t0) / n;
  }
  double f = median(tf, rounds), c = median(tc, rounds), touch = median(tt, rounds);
  printf("COSTS ns per 2 MiB page, median of %d rounds of %zu (%ld kB in 2 MiB pages): fault %.0f touch %.0f clear %.0f\n"
         "COSTS clearing share of a 2 MiB fault %.2f; expected fault from the pool (fault - clear) %.0f ns, ratio to a fault %.2f\n",
         rounds, n, kb, f, touch, c, c / f, f - c, (f - c) / f);
  return 0;
}

/* What eco's system calls cost per large block, without the faults: a
 * fresh 2 MiB-aligned mapping (mmap, two trimming munmaps, MADV_HUGEPAGE)
 * and its munmap, vs MADV_DONTNEED of a kept mapping of the same size
 * (pages not touched in either case). ns per block, medians. */
static int run_syscost(int rounds, size_t mib) {
  pin_cpu0();
  size_t len = mib << 20;
  const int per = 50;
  double *tm = calloc(rounds, sizeof(double)), *td = calloc(rounds, sizeof(double));
  char *kept = map_huge(len, MAP_PAGE_REUSE);
  if (!kept) return 2;
  for (int r = 0; r < rounds; r++) {
    double t0 = now_ns();
    for (int i = 0; i < per; i++) {
      char *p = map_huge(len, MAP_PAGE_REUSE);
      if (!p) return 2;
      munmap(p, len);
    }
    tm[r] = (now_ns() - t0) / per;
    t0 = now_ns();
    for (int i = 0; i < per; i++) madvise(kept, len, MADV_DONTNEED);
    td[r] = (now_ns() - t0) / per;
  }
  double mm = median(tm, rounds), md = median(td, rounds);
  printf("SYSCOST ns per %zu MiB block, median of %d rounds of %d: map+trim+advise+munmap %.0f, MADV_DONTNEED of a kept mapping %.0f\n",
         mib, rounds, per, mm, md);
  return 0;
}

/* A counter of /proc/vmstat, -1 when absent. */
static long vmstat_value(const char *key) { return proc_value("/proc/vmstat", key, ' '); }

/* Runs a program and prints its peak RSS (wait4's ru_maxrss) and CPU time
 * (user + sys); on a patched kernel also its page-reuse counters (the
 * /proc/vmstat events over the run; on the series before issue 27's second
 * round, the last values seen in its /proc/PID/status, polled every 20 ms)
 * and the THP faults of the run (/proc/vmstat thp_fault_alloc, which counted
 * pool hits too on that older series). */
static int run_rss(char **argv) {
  long thp0 = vmstat_value("thp_fault_alloc");
  int events = vmstat_value("page_reuse_hit") >= 0;
  long e0[4] = {reuse_hits(), reuse_fills(), reuse_thp_hits(), reuse_thp_fills()};
  pid_t c = fork();
  if (c == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int st;
  struct rusage ru;
  char path[64], line[256];
  long last[4] = {-1, -1, -1, -1};
  static const char *keys[4] = {"PageReuseHits:", "PageReuseFills:", "PageReuseHugeHits:", "PageReuseHugeFills:"};
  snprintf(path, sizeof path, "/proc/%d/status", (int)c);
  for (;;) {
    pid_t w = wait4(c, &st, WNOHANG, &ru);
    if (w < 0) return 2;
    if (w == c) break;
    FILE *f = events ? NULL : fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
      for (int k = 0; k < 4; k++)
        if (!strncmp(line, keys[k], strlen(keys[k]))) last[k] = strtol(line + strlen(keys[k]), NULL, 10);
    if (f) fclose(f);
    usleep(20000);
  }
  if (events) {
    long e1[4] = {reuse_hits(), reuse_fills(), reuse_thp_hits(), reuse_thp_fills()};
    for (int k = 0; k < 4; k++) last[k] = e1[k] - e0[k];
  }
  printf("MAXRSS %ld kB CPU %.3f s\n", ru.ru_maxrss,
         ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
  if (last[0] >= 0)
    printf("REUSE hits %ld fills %ld huge_hits %ld huge_fills %ld thp_faults %ld\n", last[0], last[1], last[2], last[3],
           vmstat_value("thp_fault_alloc") - thp0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 3 && !strcmp(argv[1], "rss")) return run_rss(argv + 2);
  self = argv[0];
  if (argc >= 4 && !strcmp(argv[1], "scan")) return run_scan(argv[2], argv[3]);
  if (argc >= 4 && !strcmp(argv[1], "bench")) return run_bench(atoi(argv[2]), strtoul(argv[3], NULL, 10));
  if (argc >= 4 && !strcmp(argv[1], "bench-huge")) return run_bench_huge(atoi(argv[2]), strtoul(argv[3], NULL, 10));
  if (argc >= 4 && !strcmp(argv[1], "syscost")) return run_syscost(atoi(argv[2]), strtoul(argv[3], NULL, 10));
  if (argc >= 4 && !strcmp(argv[1], "costs-huge")) return run_costs_huge(atoi(argv[2]), strtoul(argv[3], NULL, 10));
  if (argc >= 4 && !strcmp(argv[1], "costs")) return run_costs(atoi(argv[2]), strtoul(argv[3], NULL, 10));
  if (argc < 2 || (strcmp(argv[1], "patched") && strcmp(argv[1], "stock"))) {
    fprintf(stderr, "usage: %s patched|stock [flags|reuse|secret|pressure|limit|huge]...\n", argv[0]);
    return 2;
  }
  patched = !strcmp(argv[1], "patched");
  static const struct { const char *name; void (*fn)(void); } tests[] = {
      {"flags", test_flags}, {"reuse", test_reuse}, {"secret", test_secret},
      {"limit", test_limit}, {"pressure", test_pressure}, {"huge", test_huge},
  };
  for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
    int want = argc == 2;
    for (int k = 2; k < argc; k++) want |= !strcmp(argv[k], tests[i].name);
    if (want) tests[i].fn();
  }
  printf("page_reuse_test: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
