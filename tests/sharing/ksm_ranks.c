/* A Hera-like workload for same-page merging (docs/sharing.md, "Measurements"):
 * N ranks (processes, each an exec of this program, so each has its own
 * address-space layout like an MPI rank), each of which
 *
 *   - loads the same table of constants (--table-mib, 32 MiB) into a block of
 *     malloc: every rank holds an identical copy, no two pages alike within it;
 *   - builds a mesh (--mesh-mib, 32 MiB, malloc) in runs of 64 pages: of every
 *     8 runs, 4 are void cells (zero), 2 a uniform material state (every page
 *     of the run alike; 16 states, the same in every rank), 2 the rank's own
 *     field values (unique);
 *   - keeps material records as small blocks (--small-mib, 4 MiB of 240-byte
 *     records, the same 64 records over and over, in every rank);
 *   - then runs --steps time steps: each unique cell gathers an entry of the
 *     table, the void and uniform cells and the records are read.
 *
 * The parent starts the ranks, waits until all have loaded their data, starts
 * the steps, and every --sample seconds (0.5) adds up, over the ranks,
 * ksm_merging_pages (/proc/PID/ksm_stat) and Rss, Pss (/proc/PID/smaps_rollup),
 * with KSM's system-wide pages_sharing and full_scans. After the steps it keeps
 * sampling until merging has not grown for --settle seconds (2) or --hold-max
 * seconds (60) have passed since the steps ended (--hold S: exactly S seconds,
 * for locus dedup to read the ranks), then lets the ranks check their data
 * (every page of the table, void and uniform cells and records; every 37th
 * unique cell against its value recomputed without the table) and exit.
 *
 * The pages of the large blocks that KSM can merge are predicted from the
 * layout (page-aligned runs; a block's start within its first page shifts a
 * few boundary pages): dup = N * (table + void + uniform pages), save =
 * (N-1) * table + (N * void - 1) + (N * uniform - 16).
 *
 * --expect-merge F: fail unless the merged pages reach F * dup (sum of
 * ksm_merging_pages) by the end of the hold; --expect-none: fail if any page
 * is merged. Exit 0 when the data checked out and the expectation held. The
 * LOCUS_KSM setting is the environment's (the ranks inherit it).
 *
 * --churn-mib M (0): each rank also holds a work array of M MiB that every
 * step rewrites whole, with contents that are the same in every rank (64
 * distinct pages per step): what KSM can merge between two steps, only for
 * the next step's writes to copy again. It is freed when the steps end (the
 * hold then holds the table and the mesh only). This is what LOCUS_KSM=auto
 * should leave alone and large/all advise (docs/sharing.md).
 *
 * --bind N0,N1,...: rank r runs on the CPUs of node Nr (sched_setaffinity
 * before it allocates); at the check each rank reports where the pages of
 * its table are (move_pages): on its node or another. With KSM's
 * merge_across_nodes 1 a merged page serves the ranks of every node.
 *
 * --expect-local: fail unless, in every run, KSM merged pages and every
 * rank's table pages are on the rank's node (with --bind and
 * merge_across_nodes 0). --expect-table F: fail unless, in every run, the
 * merged pages (sum of ksm_merging_pages) reach F x the ranks' table pages
 * (LOCUS_KSM=auto: the table is what stays unchanged during the steps);
 * without --hold, the hold then ends as soon as they do, or at --hold-max.
 *
 * The parent also reports ksmd's CPU time (its /proc/PID/stat) over the
 * steps and over the whole run, and each rank's LOCUS_KSM=auto figures
 * (locus_stats_json: pages hashed, blocks advised).
 *
 * Output: "sample t=... phase=... merging=... rss_mib=... pss_mib=..." lines
 * and one "RESULT ksm_ranks ..." line. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "locus.h"

#define PAGE 4096ul
#define RUN 64ul                  /* pages per run of the mesh */
#define STATES 16                 /* uniform material states */
#define REC 240                   /* bytes of a material record */
#define REC_KINDS 64
#define MAXR 64

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
  fprintf(stderr, "ksm_ranks: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* ---------------------------------------------------------------- contents */
static inline double tabval(size_t i) {         /* the table's constants */
  return (double)((i * 2654435761u) % 1000003u) * 1e-3 + 1.0 + (double)(i >> 19);
}
enum { VOID_RUN, UNIFORM_RUN, UNIQUE_RUN };
static inline int run_kind(size_t page) {
  size_t c = (page / RUN) % 8;
  return c < 4 ? VOID_RUN : c < 6 ? UNIFORM_RUN : UNIQUE_RUN;
}
static inline double uniform_val(size_t page) { return 1.0 + 0.5 * (double)((page / RUN / 8) % STATES); }
static inline double unique0(int rank, size_t cell) { return (double)rank * 1e7 + (double)cell + 0.25; }
static inline size_t gather(size_t cell, long step, size_t n) {
  return (cell * 40503u + (size_t)step * 7919u) % n;
}
/* The work array's word j of page p at step s (-1: at load). */
static inline double churn_val(size_t p, size_t j, long s) { return (double)(p % 64) * 1e3 + (double)j + (double)s * 1e6; }
static inline unsigned char rec_byte(size_t k, size_t j) { return (unsigned char)((k % REC_KINDS) * 3 + j); }

typedef struct {
  int rank, ok;
  double init_s, step_s, cpu_s;
  double checksum;
  long tab_local, tab_remote, tab_other;   /* pages of the table on the rank's node, another, unknown */
  long hashed, advices, withdrawals;      /* LOCUS_KSM=auto's figures */
  char why[80];
} report_t;

static int bind_of[MAXR];      /* --bind: rank r's node, -1 none */
static size_t churn_bytes;

/* Runs the calling process on the CPUs of node n (sysfs cpulist). */
static void bind_node(int n) {
  char path[96], buf[512];
  snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", n);
  FILE *f = fopen(path, "r");
  if (!f || !fgets(buf, sizeof buf, f)) die("node cpulist");
  fclose(f);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (char *s = buf; *s && *s != '\n';) {
    long a = strtol(s, &s, 10), b = a;
    if (*s == '-') b = strtol(s + 1, &s, 10);
    for (long c = a; c <= b; c++) CPU_SET(c, &set);
    if (*s == ',') s++;
  }
  if (sched_setaffinity(0, sizeof set, &set)) die("sched_setaffinity");
}

/* Where the pages of [p, p + len) are: on node `node`, another, unknown. */
static void where(const void *p, size_t len, int node, long *local, long *remote, long *other) {
  size_t n = len / PAGE;
  void **pages = malloc(n * sizeof *pages);
  int *st = malloc(n * sizeof *st);
  if (!pages || !st) die("malloc");
  uintptr_t a = ((uintptr_t)p + PAGE - 1) & ~(PAGE - 1);
  size_t k = 0;
  for (; k < n && a + PAGE <= (uintptr_t)p + len; k++, a += PAGE) pages[k] = (void *)a;
  if (syscall(SYS_move_pages, 0, (unsigned long)k, pages, NULL, st, 0)) {
    *other += (long)k;
  } else {
    for (size_t i = 0; i < k; i++) {
      if (st[i] < 0) (*other)++;
      else if (st[i] == node) (*local)++;
      else (*remote)++;
    }
  }
  free(pages);
  free(st);
}

/* A number after "key": in a JSON text, or -1. */
static long json_num(const char *j, const char *key) {
  const char *s = strstr(j, key);
  return s ? atol(s + strlen(key)) : -1;
}

/* ---------------------------------------------------------------- a rank */
static int rank_main(int rank, int rfd, int gfd, size_t tbytes, size_t mbytes, size_t sbytes, long steps) {
  report_t rep = {.rank = rank, .ok = 1};
  if (bind_of[rank] >= 0) bind_node(bind_of[rank]);
  double t0 = now();
  size_t nt = tbytes / 8, nm = mbytes / 8, pages = mbytes / PAGE, ns = sbytes / 256;
  double *table = malloc(tbytes), *mesh = malloc(mbytes);
  unsigned char **recs = malloc((ns ? ns : 1) * sizeof *recs);
  if (!table || !mesh || !recs) die("malloc");
  for (size_t i = 0; i < nt; i++) table[i] = tabval(i);
  for (size_t p = 0; p < pages; p++) {
    double *c = mesh + p * (PAGE / 8);
    int k = run_kind(p);
    for (size_t j = 0; j < PAGE / 8; j++)
      c[j] = k == VOID_RUN ? 0.0 : k == UNIFORM_RUN ? uniform_val(p) : unique0(rank, p * (PAGE / 8) + j);
  }
  for (size_t k = 0; k < ns; k++) {
    if (!(recs[k] = malloc(REC))) die("malloc");
    for (size_t j = 0; j < REC; j++) recs[k][j] = rec_byte(k, j);
  }
  size_t cpages = churn_bytes / PAGE;
  double *churn = cpages ? malloc(churn_bytes) : NULL;
  if (cpages && !churn) die("malloc");
  for (size_t p = 0; p < cpages; p++)
    for (size_t j = 0; j < PAGE / 8; j++) churn[p * (PAGE / 8) + j] = churn_val(p, j, -1);
  rep.init_s = now() - t0;
  char c = 'r';
  if (write(rfd, &c, 1) != 1 || read(gfd, &c, 1) != 1) die("pipe");

  double t1 = now(), acc = 0;
  for (long s = 0; s < steps; s++) {
    for (size_t p = 0; p < pages; p++) {
      double *m = mesh + p * (PAGE / 8);
      if (run_kind(p) == UNIQUE_RUN)
        for (size_t j = 0; j < PAGE / 8; j++) m[j] += table[gather(p * (PAGE / 8) + j, s, nt)] * 1e-3;
      else
        for (size_t j = 0; j < PAGE / 8; j += 8) acc += m[j];
    }
    for (size_t k = 0; k < ns; k++) acc += recs[k][k % REC];
    for (size_t p = 0; p < cpages; p++)
      for (size_t j = 0; j < PAGE / 8; j++) churn[p * (PAGE / 8) + j] = churn_val(p, j, s);
  }
  rep.step_s = now() - t1;
  for (size_t p = 0; p < cpages && rep.ok; p++)
    for (size_t j = 0; j < PAGE / 8; j += 61)
      if (churn[p * (PAGE / 8) + j] != churn_val(p, j, steps - 1))
        rep.ok = 0, snprintf(rep.why, sizeof rep.why, "work array page %zu", p);
  free(churn);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  rep.cpu_s = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  c = 'd';
  if (write(rfd, &c, 1) != 1 || read(gfd, &c, 1) != 1) die("pipe");

  /* Check everything against the formulas (not against the table). */
  for (size_t i = 0; i < nt && rep.ok; i++)
    if (table[i] != tabval(i)) rep.ok = 0, snprintf(rep.why, sizeof rep.why, "table[%zu]", i);
  double expect_acc = 0, sum = 0;
  for (size_t p = 0; p < pages && rep.ok; p++) {
    const double *m = mesh + p * (PAGE / 8);
    int k = run_kind(p);
    for (size_t j = 0; j < PAGE / 8 && rep.ok; j++) {
      size_t cell = p * (PAGE / 8) + j;
      if (k != UNIQUE_RUN) {
        double v = k == VOID_RUN ? 0.0 : uniform_val(p);
        if (m[j] != v) rep.ok = 0, snprintf(rep.why, sizeof rep.why, "mesh[%zu]", cell);
        if (j % 8 == 0) expect_acc += v * (double)steps;
      } else if (cell % 37 == 0) {
        double v = unique0(rank, cell);
        for (long s = 0; s < steps; s++) v += tabval(gather(cell, s, nt)) * 1e-3;
        if (m[j] != v) rep.ok = 0, snprintf(rep.why, sizeof rep.why, "mesh[%zu] after the steps", cell);
        sum += v;
      }
    }
  }
  for (size_t k = 0; k < ns && rep.ok; k++) {
    for (size_t j = 0; j < REC; j++)
      if (recs[k][j] != rec_byte(k, j)) {
        rep.ok = 0, snprintf(rep.why, sizeof rep.why, "record %zu", k);
        break;
      }
    expect_acc += rec_byte(k, k % REC) * (double)steps;
  }
  (void)nm;
  /* acc sums the void and uniform cells read at each step: checked loosely
   * (summation order differs), it keeps the reads from being optimised out. */
  if (rep.ok && (acc - expect_acc > 1e-6 * (expect_acc + 1) || expect_acc - acc > 1e-6 * (expect_acc + 1)))
    rep.ok = 0, snprintf(rep.why, sizeof rep.why, "reads: %g, expected %g", acc, expect_acc);
  rep.checksum = sum;
  int node = bind_of[rank];
  if (node < 0) {
    unsigned cpu, nd;
    node = syscall(SYS_getcpu, &cpu, &nd, NULL) ? -1 : (int)nd;
  }
  where(table, tbytes, node, &rep.tab_local, &rep.tab_remote, &rep.tab_other);
  static char json[65536];
  if (locus_stats_json(json, sizeof json) > 0) {
    rep.hashed = json_num(json, "\"pages_hashed\":");
    rep.advices = json_num(json, "\"advices\":");
    rep.withdrawals = json_num(json, "\"withdrawals\":");
  }
  if (write(rfd, &rep, sizeof rep) != (ssize_t)sizeof rep) die("write");
  for (size_t k = 0; k < ns; k++) free(recs[k]);
  free(recs);
  free(mesh);
  free(table);
  return rep.ok ? 0 : 1;
}

/* ---------------------------------------------------------------- the parent */
static long field_of(const char *path, const char *name) {
  char buf[4096];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  if (!name) return atol(buf);
  size_t l = strlen(name);
  for (char *s = buf; (s = strstr(s, name)); s += l)
    if ((s == buf || s[-1] == '\n') && (s[l] == ' ' || s[l] == ':' || s[l] == '\t')) return atol(s + l + 1);
  return -1;
}

/* ksmd's CPU time (user + system) in seconds, or -1 when there is no ksmd. */
static double ksmd_cpu(void) {
  static int pid = -1;
  char path[64], buf[512];
  if (pid < 0) {
    for (int p = 1; p < 4096 && pid < 0; p++) {
      snprintf(path, sizeof path, "/proc/%d/comm", p);
      FILE *f = fopen(path, "r");
      if (!f) continue;
      if (fgets(buf, sizeof buf, f) && !strcmp(buf, "ksmd\n")) pid = p;
      fclose(f);
    }
    if (pid < 0) return -1;
  }
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *s = strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  if (!s || sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

typedef struct { long merging, rss_kb, pss_kb, huge_kb, sharing, shared, unshared, volatile_, scans; } sample_t;

static sample_t sample(const pid_t *pid, int n) {
  sample_t s = {0};
  char path[64];
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "/proc/%d/ksm_stat", pid[i]);
    long m = field_of(path, "ksm_merging_pages");
    if (m < 0) {
      snprintf(path, sizeof path, "/proc/%d/ksm_merging_pages", pid[i]);
      m = field_of(path, NULL);
    }
    s.merging += m > 0 ? m : 0;
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", pid[i]);
    s.rss_kb += field_of(path, "Rss");
    s.pss_kb += field_of(path, "Pss");
    s.huge_kb += field_of(path, "AnonHugePages");
  }
  s.sharing = field_of("/sys/kernel/mm/ksm/pages_sharing", NULL);
  s.shared = field_of("/sys/kernel/mm/ksm/pages_shared", NULL);
  s.unshared = field_of("/sys/kernel/mm/ksm/pages_unshared", NULL);
  s.volatile_ = field_of("/sys/kernel/mm/ksm/pages_volatile", NULL);
  s.scans = field_of("/sys/kernel/mm/ksm/full_scans", NULL);
  return s;
}

static void print_sample(double t, const char *phase, sample_t s) {
  printf("sample t=%.1f phase=%s merging=%ld rss_mib=%.1f pss_mib=%.1f thp_mib=%.0f pages_sharing=%ld "
         "pages_shared=%ld pages_unshared=%ld pages_volatile=%ld full_scans=%ld\n", t, phase, s.merging,
         s.rss_kb / 1024.0, s.pss_kb / 1024.0, s.huge_kb / 1024.0, s.sharing, s.shared, s.unshared, s.volatile_,
         s.scans);
  fflush(stdout);
}

static void sleep_until(double t) {
  double d = t - now();
  if (d <= 0) return;
  struct timespec ts = {(time_t)d, (long)((d - (time_t)d) * 1e9)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

typedef struct {
  int ranks, quiet;
  size_t tbytes, mbytes, sbytes;
  long steps, dup, save, until;   /* until > 0: hold until merging reaches it (or hold_max) */
  double period, settle, hold_max, hold;
} cfg_t;

typedef struct {
  int ok;
  double load_s, steps_s, run_s, cpu_s, held_s, t90, checksum;
  long merging, merging_steps, pss_steps_kb;
  double ksmd_steps_s, ksmd_s;
  long tab_local, tab_remote, tab_other, hashed, advices, withdrawals;
  sample_t loaded, last;
} run_t;

/* One run of the ranks with LOCUS_KSM=mode. */
static run_t run_once(const cfg_t *g, const char *mode, int rep) {
  run_t R = {.ok = 1};
  int ranks = g->ranks;
  setenv("LOCUS_KSM", mode, 1);
  int rp[2], gp[MAXR][2];
  if (pipe(rp)) die("pipe");
  fcntl(rp[0], F_SETFD, FD_CLOEXEC);
  pid_t pid[MAXR];
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) die("readlink /proc/self/exe");
  self[sl] = 0;
  fflush(stdout);
  double t0 = now(), k0 = ksmd_cpu(), k_steps = -1;
  for (int r = 0; r < ranks; r++) {
    if (pipe(gp[r])) die("pipe");
    fcntl(gp[r][1], F_SETFD, FD_CLOEXEC);   /* a rank sees EOF when the parent dies */
    pid[r] = fork();
    if (pid[r] < 0) die("fork");
    if (!pid[r]) {
      char a[7][32];
      snprintf(a[0], 32, "%d", r), snprintf(a[1], 32, "%d", rp[1]), snprintf(a[2], 32, "%d", gp[r][0]);
      snprintf(a[3], 32, "%zu", g->tbytes), snprintf(a[4], 32, "%zu", g->mbytes);
      snprintf(a[5], 32, "%zu", g->sbytes), snprintf(a[6], 32, "%ld", g->steps);
      execl(self, "ksm_ranks", "--rank-child", a[0], a[1], a[2], a[3], a[4], a[5], a[6], (char *)NULL);
      _exit(127);
    }
    close(gp[r][0]);
  }
  close(rp[1]);
  char c;
  for (int r = 0; r < ranks; r++)
    if (read(rp[0], &c, 1) != 1) { fprintf(stderr, "ksm_ranks: a rank died while loading\n"); exit(1); }
  double t_ready = now();
  sample_t s = sample(pid, ranks);
  R.loaded = s;
  char phase[64];
  snprintf(phase, sizeof phase, "%s#%d:loaded", mode, rep);
  if (!g->quiet) print_sample(0, phase, s);
  for (int r = 0; r < ranks; r++)
    if (write(gp[r][1], "g", 1) != 1) die("write");
  /* Sample while the steps run (their end noted as it comes), then hold. */
  int done = 0, ns = 0;
  double t_done = 0, next = t_ready + g->period, last_growth = t_ready;
  static double ts[4096];
  static long ms[4096];
  long best = s.merging;
  for (;;) {
    double d = next - now();
    struct pollfd pf = {rp[0], POLLIN, 0};
    if (done < ranks && d > 0 && poll(&pf, 1, (int)(d * 1000) + 1) == 1) {
      if (read(rp[0], &c, 1) == 1 && ++done == ranks) {
        t_done = now();
        k_steps = ksmd_cpu();
        sample_t e = sample(pid, ranks);
        R.merging_steps = e.merging, R.pss_steps_kb = e.pss_kb;
      }
      continue;
    }
    if (d > 0) sleep_until(next);
    next += g->period;
    double t = now();
    s = sample(pid, ranks);
    if (ns < 4096) ts[ns] = t - t_ready, ms[ns++] = s.merging;
    if (s.merging > best) best = s.merging, last_growth = t;
    snprintf(phase, sizeof phase, "%s#%d:%s", mode, rep, done < ranks ? "steps" : "hold");
    if (!g->quiet) print_sample(t - t_ready, phase, s);
    if (done < ranks) continue;
    if (g->hold >= 0 ? t - t_done >= g->hold
        : g->until > 0 ? s.merging >= g->until || t - t_done >= g->hold_max
                       : t - last_growth >= g->settle || t - t_done >= g->hold_max)
      break;
  }
  R.held_s = now() - t_ready;
  double k1 = ksmd_cpu();
  R.ksmd_steps_s = k0 >= 0 && k_steps >= 0 ? k_steps - k0 : -1;
  R.ksmd_s = k0 >= 0 && k1 >= 0 ? k1 - k0 : -1;
  R.t90 = -1;
  for (int i = 0; i < ns && best > 0; i++)
    if (ms[i] >= 0.9 * best) { R.t90 = ts[i]; break; }
  for (int r = 0; r < ranks; r++)
    if (write(gp[r][1], "v", 1) != 1) die("write");
  report_t rep_[MAXR];
  for (int r = 0; r < ranks; r++) {
    report_t x;
    if (read(rp[0], &x, sizeof x) != (ssize_t)sizeof x) { fprintf(stderr, "ksm_ranks: a rank died\n"); R.ok = 0; break; }
    rep_[x.rank] = x;
  }
  close(rp[0]);
  for (int r = 0; r < ranks; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    close(gp[r][1]);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) R.ok = 0;
  }
  for (int r = 0; R.ok && r < ranks; r++) {
    if (!rep_[r].ok) {
      fprintf(stderr, "ksm_ranks: rank %d: wrong data: %s\n", r, rep_[r].why);
      R.ok = 0;
    }
    R.cpu_s += rep_[r].cpu_s, R.checksum += rep_[r].checksum;
    R.tab_local += rep_[r].tab_local, R.tab_remote += rep_[r].tab_remote, R.tab_other += rep_[r].tab_other;
    R.hashed += rep_[r].hashed, R.advices += rep_[r].advices, R.withdrawals += rep_[r].withdrawals;
    if (!g->quiet || bind_of[0] >= 0)
      printf("rank %d: node %d, table pages on it %ld, on another node %ld, unknown %ld; ksm auto: %ld pages hashed, "
             "%ld advices, %ld withdrawals\n", r, bind_of[r], rep_[r].tab_local, rep_[r].tab_remote, rep_[r].tab_other,
             rep_[r].hashed, rep_[r].advices, rep_[r].withdrawals);
    if (rep_[r].step_s > R.steps_s) R.steps_s = rep_[r].step_s;
  }
  R.load_s = t_ready - t0;
  R.run_s = t_done - t0;
  R.merging = best;
  R.last = s;
  printf("RESULT ksm_ranks ksm=%s rep=%d check=%s load_s=%.3f steps_s=%.3f run_s=%.3f rank_cpu_s=%.3f merging=%ld "
         "merged_frac=%.3f pages_sharing=%ld pages_shared=%ld rss_loaded_mib=%.1f pss_loaded_mib=%.1f rss_mib=%.1f "
         "pss_mib=%.1f held_s=%.1f t90_s=%.1f merging_steps_end=%ld pss_steps_end_mib=%.1f ksmd_cpu_steps_s=%.2f "
         "ksmd_cpu_s=%.2f table_local=%ld table_remote=%ld auto_hashed=%ld auto_advices=%ld auto_withdrawals=%ld "
         "checksum=%.6e\n",
         mode, rep, R.ok ? "ok" : "fail", R.load_s, R.steps_s, R.run_s, R.cpu_s, best, g->dup ? (double)best / g->dup : 0.0,
         s.sharing, s.shared, R.loaded.rss_kb / 1024.0, R.loaded.pss_kb / 1024.0, s.rss_kb / 1024.0, s.pss_kb / 1024.0,
         R.held_s, R.t90, R.merging_steps, R.pss_steps_kb / 1024.0, R.ksmd_steps_s, R.ksmd_s, R.tab_local,
         R.tab_remote, R.hashed, R.advices, R.withdrawals, R.checksum);
  fflush(stdout);
  return R;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int usage(void) {
  fprintf(stderr, "usage: ksm_ranks [--modes off,large,all] [--repeat R] [--ranks N] [--table-mib M] [--mesh-mib M] "
                  "[--small-mib M] [--steps S] [--sample SEC] [--settle SEC] [--hold-max SEC] [--hold SEC] "
                  "[--expect-merge F] [--expect-local] [--expect-table F] [--churn-mib M] [--bind N0,N1,...] [--quiet]\n");
  return 2;
}

#define MAXM 8
#define MAXREP 16

int main(int argc, char **argv) {
  cfg_t g = {.ranks = 4, .steps = 6, .period = 0.5, .settle = 2, .hold_max = 60, .hold = -1};
  double tmib = 32, mmib = 32, smib = 4, expect = -1, expect_table = -1;
  int expect_local = 0;
  int repeat = 1, nm = 0;
  char modes_buf[128] = "";
  const char *mode[MAXM];
  const char *env = getenv("LOCUS_KSM");
  for (int r = 0; r < MAXR; r++) bind_of[r] = -1;
  /* the parent passes these to the ranks in the environment */
  const char *cb = getenv("KSM_RANKS_CHURN"), *bd = getenv("KSM_RANKS_BIND");
  if (cb) churn_bytes = strtoull(cb, NULL, 10);
  for (int r = 0; bd && *bd && r < MAXR; r++) {
    char *e;
    bind_of[r] = (int)strtol(bd, &e, 10);
    bd = *e == ',' ? e + 1 : e;
  }
  snprintf(modes_buf, sizeof modes_buf, "%s", env && *env ? env : "off");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--rank-child") && i + 7 < argc)   /* internal: rank rfd gfd tbytes mbytes sbytes steps */
      return rank_main(atoi(argv[i + 1]), atoi(argv[i + 2]), atoi(argv[i + 3]), strtoull(argv[i + 4], 0, 10),
                       strtoull(argv[i + 5], 0, 10), strtoull(argv[i + 6], 0, 10), atol(argv[i + 7]));
    if (!strcmp(a, "--quiet")) { g.quiet = 1; continue; }
    if (!strcmp(a, "--expect-local")) { expect_local = 1; continue; }
    if (!v) return usage();
    if (!strcmp(a, "--ranks")) g.ranks = atoi(v);
    else if (!strcmp(a, "--modes")) snprintf(modes_buf, sizeof modes_buf, "%s", v);
    else if (!strcmp(a, "--repeat")) repeat = atoi(v);
    else if (!strcmp(a, "--table-mib")) tmib = atof(v);
    else if (!strcmp(a, "--mesh-mib")) mmib = atof(v);
    else if (!strcmp(a, "--small-mib")) smib = atof(v);
    else if (!strcmp(a, "--steps")) g.steps = atol(v);
    else if (!strcmp(a, "--sample")) g.period = atof(v);
    else if (!strcmp(a, "--settle")) g.settle = atof(v);
    else if (!strcmp(a, "--hold-max")) g.hold_max = atof(v);
    else if (!strcmp(a, "--hold")) g.hold = atof(v);
    else if (!strcmp(a, "--expect-merge")) expect = atof(v);
    else if (!strcmp(a, "--expect-table")) expect_table = atof(v);
    else if (!strcmp(a, "--churn-mib")) {
      char b[32];
      snprintf(b, sizeof b, "%zu", (size_t)(atof(v) * 1048576) / PAGE * PAGE);
      setenv("KSM_RANKS_CHURN", b, 1);
      churn_bytes = strtoull(b, NULL, 10);
    } else if (!strcmp(a, "--bind")) {
      setenv("KSM_RANKS_BIND", v, 1);
      const char *bd2 = v;
      for (int r = 0; *bd2 && r < MAXR; r++) {
        char *e;
        bind_of[r] = (int)strtol(bd2, &e, 10);
        bd2 = *e == ',' ? e + 1 : e;
      }
    }
    else return usage();
    i++;
  }
  for (char *sv = NULL, *t = strtok_r(modes_buf, ",", &sv); t && nm < MAXM; t = strtok_r(NULL, ",", &sv)) {
    if (strcmp(t, "off") && strcmp(t, "large") && strcmp(t, "all") && strcmp(t, "auto")) return usage();
    mode[nm++] = t;
  }
  g.tbytes = (size_t)(tmib * 1048576) / PAGE * PAGE;
  g.mbytes = (size_t)(mmib * 1048576) / (RUN * PAGE * 8) * (RUN * PAGE * 8);
  g.sbytes = (size_t)(smib * 1048576);
  if (g.ranks < 1 || g.ranks > MAXR || !g.tbytes || !g.mbytes || g.steps < 1 || g.period <= 0 || !nm || repeat < 1 ||
      repeat > MAXREP)
    return usage();
  int ranks = g.ranks;
  size_t tp = g.tbytes / PAGE, mp = g.mbytes / PAGE, zp = mp / 2, up = mp / 4;
  /* --expect-table without --hold: hold until it is met or --hold-max, not for
   * --settle: under LOCUS_KSM=auto merging stays flat until the sampler has seen
   * a block unchanged, and a loaded host makes that and ksmd slow. */
  if (expect_table > 0) g.until = (long)(expect_table * (double)ranks * (double)tp + 0.999);
  g.dup = ranks > 1 ? (long)ranks * (long)(tp + zp + up) : 0;
  g.save = ranks > 1 ? (long)(ranks - 1) * (long)tp + ((long)ranks * (long)zp - 1) + ((long)ranks * (long)up - STATES)
                     : 0;
  printf("ksm_ranks: %d ranks, table %zu pages, mesh %zu pages (%zu void, %zu uniform in %d states, %zu unique), "
         "%zu records of %d B, %ld steps; predicted in the large blocks: %ld duplicate pages, saving %ld pages "
         "(%.1f MiB)\n", ranks, tp, mp, zp, up, STATES, mp - zp - up, g.sbytes / 256, REC, g.steps, g.dup, g.save,
         g.save * 4096.0 / 1048576);

  static run_t res[MAXM][MAXREP];
  int ok = 1;
  for (int r = 0; r < repeat; r++)
    for (int m = 0; m < nm; m++) {
      res[m][r] = run_once(&g, mode[m], r + 1);
      ok &= res[m][r].ok;
    }
  /* Medians per mode; the first mode is the baseline of the time overhead
   * and of the saving (sum of Pss). */
  double base_run = 0, base_pss = 0;
  int expect_ok = 1;
  printf("summary (medians of %d run(s)): mode, run_s, overhead vs %s, steps_s, load_s, rank_cpu_s, merged pages, "
         "pages_sharing, sum Rss MiB, sum Pss MiB, saving vs %s MiB (%% of predicted), t90_s, "
         "merged at the steps' end, ksmd CPU s over the steps, ksmd CPU s in all, auto pages hashed\n", repeat, mode[0], mode[0]);
  for (int m = 0; m < nm; m++) {
    double v[13][MAXREP];
    for (int r = 0; r < repeat; r++) {
      run_t *x = &res[m][r];
      v[0][r] = x->run_s, v[1][r] = x->steps_s, v[2][r] = x->load_s, v[3][r] = x->cpu_s;
      v[4][r] = (double)x->merging, v[5][r] = (double)x->last.sharing, v[6][r] = x->last.rss_kb / 1024.0;
      v[7][r] = x->last.pss_kb / 1024.0, v[8][r] = x->t90;
      v[9][r] = (double)x->merging_steps, v[10][r] = x->ksmd_steps_s;
      v[11][r] = x->ksmd_s, v[12][r] = (double)x->hashed;
    }
    double run = median(v[0], repeat), st = median(v[1], repeat), ld = median(v[2], repeat), cpu = median(v[3], repeat);
    double mg = median(v[4], repeat), sh = median(v[5], repeat), rss = median(v[6], repeat), pss = median(v[7], repeat);
    double t90 = median(v[8], repeat);
    if (m == 0) base_run = run, base_pss = pss;
    double saving = base_pss - pss, pred = g.save * 4096.0 / 1048576;
    printf("summary %-5s %7.2f %+6.1f%% %7.2f %6.2f %7.2f %7.0f %7.0f %7.1f %7.1f %7.1f (%5.1f%%) %5.1f %7.0f %6.2f %6.2f "
           "%7.0f\n", mode[m], run, 100 * (run / base_run - 1), st, ld, cpu, mg, sh, rss, pss, saving,
           100 * saving / pred, t90, median(v[9], repeat), median(v[10], repeat), median(v[11], repeat),
           median(v[12], repeat));
    if (expect > 0) {
      /* The baseline merges nothing; every other mode saves at least
       * expect x the prediction (sum of Pss against the baseline's) with
       * KSM's own count (pages_sharing) at half of it or more: the kernel
       * may also drop zero pages when it splits a huge page. */
      for (int r = 0; r < repeat; r++) {
        run_t *x = &res[m][r];
        double sv = base_pss - x->last.pss_kb / 1024.0;
        int good = m == 0 ? x->merging == 0
                          : sv >= expect * pred && x->last.sharing >= 0.5 * g.save && x->merging > 0;
        printf("ksm_ranks: %s: LOCUS_KSM=%s run %d: %ld pages merged, pages_sharing %ld, saving %.1f MiB of the "
               "%.1f MiB predicted (%.1f %%); expected %s\n", good ? "ok" : "FAIL", mode[m], r + 1, x->merging,
               x->last.sharing, sv, pred, 100 * sv / pred,
               m == 0 ? "none merged (baseline)" : "a saving of at least the fraction asked and pages_sharing >= 50 % of the prediction");
        expect_ok &= good;
      }
    }
  }
  for (int m = 0; m < nm; m++)
    for (int r = 0; r < repeat; r++) {
      run_t *x = &res[m][r];
      if (expect_local) {
        int good = x->merging > 0 && x->tab_remote == 0 && x->tab_local > 0;
        printf("ksm_ranks: %s: LOCUS_KSM=%s run %d: %ld pages merged; table pages on the rank's node %ld, on another "
               "%ld; expected all on the rank's node\n", good ? "ok" : "FAIL", mode[m], r + 1, x->merging, x->tab_local,
               x->tab_remote);
        expect_ok &= good;
      }
      if (expect_table > 0) {
        double want = expect_table * (double)ranks * (double)tp;
        int good = x->merging >= want;
        printf("ksm_ranks: %s: LOCUS_KSM=%s run %d: %ld pages merged, expected at least %.0f (%.2f x the ranks' "
               "table pages)\n", good ? "ok" : "FAIL", mode[m], r + 1, x->merging, want, expect_table);
        expect_ok &= good;
      }
    }
  printf("ksm_ranks: %s\n", ok && expect_ok ? "PASS" : !ok ? "FAIL (data)" : "FAIL (merging)");
  return ok && expect_ok ? 0 : 1;
}
