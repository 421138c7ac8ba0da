/* LOCUS_KSM=auto (source/ksm.c, docs/sharing.md): the classification of a
 * block from its samples (ksm_judge), then the sampler on real blocks with
 * a synthetic clock: a constant block and a zero-filled one are advised, a
 * churned one is not; an advised block written again loses the advice and
 * needs twice as long to get it back; a freed advised block's segment does
 * not carry the advice to the next block; realloc keeps the watch; a bad
 * value warns and falls back to off. KSM itself need not run: this checks
 * the advice (VmFlags "mg" in /proc/self/smaps), not what ksmd does. The
 * program re-executes itself with LOCUS_KSM=auto. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "locus.h"
#include "config/options.h"
#include "os/os.h"
#include "registry/registry.h"
#include "source/ksm.h"
#include "unit/check.h"
#include "smaps.h"

#define MiB ((size_t)1 << 20)
#define SEC 1000000000ull


/* One tick of the sampler a period later; the churned block is rewritten before each. */
static char *churned;
static size_t churned_size;
static uint64_t now;
static void tick(void) {
  static int round;
  memset(churned, ++round, churned_size);
  ksm_tick(now += KSM_AUTO_PERIOD_NS + KSM_AUTO_TICK_NS);
}

static unsigned flags_of(const void *p) { return registry_lookup(p)->flags; }
static bool advised(const void *p) { return flags_of(p) & REGION_KSM_AUTO; }

static void judge_sequences(void) {
  /* stable: the first sample, then KSM_AUTO_STABLE unchanged ones */
  ksm_track_t t = {.need = KSM_AUTO_STABLE};
  CHECK(ksm_judge(&t, true, false, false) == KSM_VERDICT_WAIT, "first sample");
  for (int i = 1; i < KSM_AUTO_STABLE; i++) CHECK(ksm_judge(&t, false, false, false) == KSM_VERDICT_WAIT, "unchanged %d", i);
  CHECK(ksm_judge(&t, false, false, false) == KSM_VERDICT_ADVISE, "stable after %d unchanged", KSM_AUTO_STABLE);
  CHECK(ksm_judge(&t, false, false, true) == KSM_VERDICT_WAIT, "advised and unchanged");
  CHECK(ksm_judge(&t, true, false, true) == KSM_VERDICT_WITHDRAW, "changed after the advice");
  CHECK(t.need == 2 * KSM_AUTO_STABLE, "back-off doubles: %u", t.need);
  for (int i = 1; i < 2 * KSM_AUTO_STABLE; i++) CHECK(ksm_judge(&t, false, false, false) == KSM_VERDICT_WAIT, "backed off %d", i);
  CHECK(ksm_judge(&t, false, false, false) == KSM_VERDICT_ADVISE, "advised again after %d", 2 * KSM_AUTO_STABLE);
  for (int i = 0; i < 10; i++) ksm_judge(&t, true, false, true);
  CHECK(t.need == KSM_AUTO_STABLE_MAX, "back-off ceiling: %u", t.need);
  /* zero: the first sample and one more, all zero */
  t = (ksm_track_t){.need = KSM_AUTO_STABLE};
  CHECK(ksm_judge(&t, true, true, false) == KSM_VERDICT_WAIT, "first zero sample");
  CHECK(ksm_judge(&t, false, true, false) == KSM_VERDICT_ADVISE, "zero twice");
  /* churned: never advised however long it runs */
  t = (ksm_track_t){.need = KSM_AUTO_STABLE};
  for (int i = 0; i < 100; i++) CHECK(ksm_judge(&t, true, i % 3 == 0, false) == KSM_VERDICT_WAIT, "churned %d", i);
  /* a block that changes every other sample never reaches the count */
  t = (ksm_track_t){.need = KSM_AUTO_STABLE};
  for (int i = 0; i < 100; i++) CHECK(ksm_judge(&t, i % 2, false, false) == KSM_VERDICT_WAIT, "half churned %d", i);
  /* zero then written: the count starts again */
  t = (ksm_track_t){.need = KSM_AUTO_STABLE};
  ksm_judge(&t, true, true, false);
  CHECK(ksm_judge(&t, true, false, false) == KSM_VERDICT_WAIT, "written after zero");
  CHECK(ksm_judge(&t, false, false, false) == KSM_VERDICT_WAIT, "one unchanged after the write");
}

/* The child of the bad-value check: LOCUS_KSM=bogus. */
static int bad_value_child(void) {
  void *p = malloc(8 * MiB);
  free(p);
  return atomic_load(&locus_opt.ksm) == KSM_OPT_OFF ? 0 : 3;
}

/* The child of the thread check (LOCUS_KSM=auto, real clock): a constant
 * block is advised by the sampler's thread while the program sleeps and
 * never calls the allocator. Exit 0 advised, 77 not checkable, 4 not
 * advised in 10 s. */
static int thread_child(void) {
  size_t sz = 4 * MiB;
  char *t = malloc(sz);
  for (size_t i = 0; i < sz; i++) t[i] = (char)(i * 13 + i / 4096);
  char *u = malloc(2 * MiB);
  int no_ksm = locus_merge(u, 2 * MiB) < 0;   /* ENOSYS without KSM */
  free(u);
  if (mergeable(t) < 0 || no_ksm) return 77;
  for (int i = 0; i < 100 && !advised(t); i++) usleep(100000);
  return advised(t) && mergeable(t + sz / 2) == 1 ? 0 : 4;
}

/* The sampler thread ends the process when only locus's threads are left:
 * a fork child (whose parent's sampler is gone) starting its own sampler
 * must not be ended by it, and a main thread gone through pthread_exit must
 * not keep the process alive. */
static void *late_worker(void *arg) {
  (void)arg;
  usleep(300000);
  return NULL;                         /* the last program thread: the process ends now, status 0 */
}
static int lifetime_child(void) {
  volatile char *p = malloc(8 * MiB);
  memset((char *)p, 1, 8 * MiB);        /* watched: the sampler thread starts */
  usleep(250000);
  pid_t c = fork();
  if (c == 0) {
    volatile char *q = malloc(8 * MiB);
    memset((char *)q, 2, 8 * MiB);      /* the child's own sampler starts */
    usleep(500000);                    /* several of its ticks */
    _exit(7);
  }
  int st;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 7) return 5;
  pthread_t t;
  pthread_create(&t, NULL, late_worker, NULL);
  pthread_exit(NULL);                  /* main ends first; the worker ends the process */
}

static int run_child(const char *self, const char *mode, const char *ksm, char *err, size_t errlen) {
  int fd[2];
  CHECK(pipe(fd) == 0, "pipe");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    setenv("LOCUS_KSM", ksm, 1);
    unsetenv("LOCUS_SHOWN_BY");
    execl(self, self, mode, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t n = 0;
  ssize_t k;
  memset(err, 0, errlen);
  while (n < errlen - 1 && (k = read(fd[0], err + n, errlen - 1 - n)) > 0) n += (size_t)k;
  close(fd[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void bad_value(const char *self) {
  char err[4096];
  int st = run_child(self, "--bad-child", "bogus", err, sizeof err);
  CHECK(st == 0, "LOCUS_KSM=bogus falls back to off (status %d)", st);
  CHECK(strstr(err, "LOCUS_KSM") != NULL, "LOCUS_KSM=bogus warns: [%s]", err);
}

static size_t resident_pages(const void *p, size_t len) {
  unsigned char v[64 * MiB / 4096];
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
  size_t n = (len + 4095) / 4096;
  if (n > sizeof v || mincore((void *)a, n * 4096, v)) return 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += v[i] & 1;
  return k;
}

/* The table's slots and index under churn: more blocks than slots, freed
 * and made again in random order; every watched block is found again at its
 * free (the debug build asserts it in ksm_unwatch) and the count of watched
 * blocks follows exactly. Blocks of 1 MiB and more: each a region. */
static void table_churn(void) {
  enum { N = KSM_AUTO_SLOTS + 88 };
  static char *b[N];
  ksm_auto_stats_t s;
  ksm_auto_stats(&s);
  size_t base = s.watched, full0 = s.full, watched = 0;
  for (int i = 0; i < N; i++) {
    b[i] = malloc(2 * MiB);
    CHECK(b[i], "malloc %d", i);
    if (flags_of(b[i]) & REGION_KSM_WATCH) watched++;
  }
  ksm_auto_stats(&s);
  CHECK(watched == KSM_AUTO_SLOTS - base && s.watched == KSM_AUTO_SLOTS, "a full table: %zu watched of %d (%zu before)",
        s.watched, N, base);
  CHECK(s.full - full0 == (size_t)N - watched, "the rest counted as not watched: %zu", s.full - full0);
  unsigned seed = 12345;
  for (int round = 0; round < 20000; round++) {
    int i = (int)((seed = seed * 1103515245u + 12345u) >> 8) % N;
    if (flags_of(b[i]) & REGION_KSM_WATCH) watched--;
    free(b[i]);
    b[i] = malloc(2 * MiB + (size_t)(seed >> 20) % 3 * MiB);
    CHECK(b[i], "malloc in round %d", round);
    if (flags_of(b[i]) & REGION_KSM_WATCH) watched++;
    if (round % 997 == 0) {
      ksm_auto_stats(&s);
      CHECK(s.watched == base + watched, "round %d: %zu watched, %zu expected", round, s.watched, base + watched);
    }
  }
  for (int i = 0; i < N; i++) free(b[i]);
  ksm_auto_stats(&s);
  CHECK(s.watched == base, "every churned block left the table: %zu watched, %zu before", s.watched, base);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--bad-child")) return bad_value_child();
  if (argc > 1 && !strcmp(argv[1], "--thread-child")) return thread_child();
  if (argc > 1 && !strcmp(argv[1], "--lifetime-child")) return lifetime_child();
  if (getenv("LOCUS_TEST_EMULATOR")) {   /* qemu-user passes no merge advice to the kernel: the rule only */
    judge_sequences();
    printf("under an emulator: the sampler on real blocks skipped\n");
    return TEST_DONE();
  }
  const char *e = getenv("LOCUS_KSM");
  if (!e || strcmp(e, "auto")) {
    setenv("LOCUS_KSM", "auto", 1);
    execv("/proc/self/exe", argv);
    CHECK(0, "re-exec: %s", strerror(errno));
  }
  judge_sequences();
  bad_value("/proc/self/exe");
  ksm_thread_off = true;               /* the ticks below only: a clock of their own */
  CHECK(ksm_auto(), "LOCUS_KSM=auto read");
  size_t sz = 8 * MiB;
  char *table = malloc(sz), *zero = malloc(sz), *churn = malloc(sz);
  CHECK(table && zero && churn, "malloc");
  CHECK(flags_of(table) & REGION_KSM_WATCH, "a large block is watched");
  char *small = malloc(1000);
  CHECK(!(flags_of(small) & REGION_KSM_WATCH), "a heap chunk is not");
  for (size_t i = 0; i < sz; i++) table[i] = (char)(i * 7 + i / 4096);
  memset(zero, 0, sz);
  /* A block the program made unreadable, and one it never touched: the
   * sampler must neither fault on the first nor fault the second in. */
  char *hidden = malloc(sz), *untouched = malloc(64 * MiB);
  CHECK(hidden && untouched, "malloc");
  memset(hidden, 3, sz);
  char *hp = (char *)(((uintptr_t)hidden + 4095) & ~(uintptr_t)4095);
  size_t hlen = (sz - 4096) & ~(size_t)4095;
  CHECK(mprotect(hp, hlen, PROT_NONE) == 0, "mprotect");
  size_t res0 = resident_pages(untouched, 64 * MiB);
  if (mergeable(table) < 0) {
    printf("no VmFlags in smaps: the advice checks skipped\n");
    return TEST_DONE();
  }
  CHECK(!mergeable(table) && !advised(table), "not advised before any sample");
  now = os_clock_coarse_ns() + 100 * SEC;   /* ahead of the real ticks: only these run */
  churned = churn;
  churned_size = sz;
  ksm_auto_stats_t s0;
  ksm_auto_stats(&s0);
  for (int i = 0; i < KSM_AUTO_STABLE + 2; i++) tick();
  ksm_auto_stats_t s1;
  ksm_auto_stats(&s1);
  CHECK(!advised(hidden), "an unreadable block is never advised (and the sampler survived reading it)");
  CHECK(resident_pages(untouched, 64 * MiB) <= res0, "an untouched block is not faulted in: %zu pages resident, %zu before",
        resident_pages(untouched, 64 * MiB), res0);
  CHECK(mprotect(hp, hlen, PROT_READ | PROT_WRITE) == 0, "mprotect back");
  free(hidden);
  free(untouched);
  ksm_auto_stats(&s1);
  if (!advised(table) && !s1.advices) {
    errno = 0;
    int r = locus_merge(table, sz);
    CHECK(r != 0 && errno == ENOSYS, "nothing advised, yet the kernel takes the advice");
    printf("no KSM in this kernel: the advice checks skipped\n");
    return TEST_DONE();
  }
  CHECK(advised(table) && mergeable(table + sz / 2) == 1, "constant block advised");
  CHECK(advised(zero) && mergeable(zero + sz / 2) == 1, "zero-filled block advised");
  CHECK(!advised(churn) && mergeable(churn + sz / 2) == 0, "churned block not advised");
  CHECK(s1.pages_hashed - s0.pages_hashed <= (size_t)(KSM_AUTO_STABLE + 2) * KSM_AUTO_BUDGET,
        "budget: %zu pages hashed in %d ticks", s1.pages_hashed - s0.pages_hashed, KSM_AUTO_STABLE + 2);
  CHECK(s1.advised == 2 && s1.advised_bytes >= 2 * sz && s1.zero_advices >= 1, "figures: %zu advised, %zu zero",
        s1.advised, s1.zero_advices);
  /* written after the advice: withdrawn at the next sample */
  for (size_t i = 0; i < sz; i += 4096) table[i] ^= 1;
  tick();
  CHECK(!advised(table) && mergeable(table + sz / 2) == 0, "advice withdrawn after a write");
  /* back-off: KSM_AUTO_STABLE unchanged samples are no longer enough */
  for (int i = 0; i < KSM_AUTO_STABLE; i++) tick();
  CHECK(!advised(table), "backed off: not advised after %d unchanged samples", KSM_AUTO_STABLE);
  for (int i = 0; i < KSM_AUTO_STABLE; i++) tick();
  CHECK(advised(table) && mergeable(table + sz / 2) == 1, "advised again after %d", 2 * KSM_AUTO_STABLE);
  /* freed: the advice does not go to the next block of that size */
  free(zero);
  char *next = malloc(sz);
  CHECK(!advised(next) && mergeable(next + sz / 2) == 0, "a block after a freed advised one is not advised");
  CHECK(flags_of(next) & REGION_KSM_WATCH, "... and is watched from scratch");
  ksm_auto_stats_t s2;
  ksm_auto_stats(&s2);
  CHECK(!advised(churn), "churned block still not advised");
  CHECK(s2.advised == 1, "one advised block left: %zu (watched %zu, advices %zu, withdrawals %zu)", s2.advised, s2.watched, s2.advices, s2.withdrawals);
  /* realloc (mremap): still watched, the advice kept with the mapping */
  char *grown = realloc(table, 3 * sz);
  CHECK(grown && (flags_of(grown) & REGION_KSM_WATCH) && advised(grown) && mergeable(grown) == 1,
        "grown advised block: watched and advised");
  CHECK(grown[sz - 1] == (char)((sz - 1) * 7 + (sz - 1) / 4096), "contents kept");
  /* explicit next-touch takes it out of the watch */
  if (locus_next_touch(grown, 3 * sz) == 0) {
    CHECK(!(flags_of(grown) & REGION_KSM_WATCH), "next-touch: out of the watch");
    locus_next_touch_resolve(grown, 3 * sz);
  }
  free(grown);
  free(churn);
  free(next);
  free(small);
  ksm_auto_stats_t s3;
  ksm_auto_stats(&s3);
  CHECK(s3.watched == 0 && s3.advised == 0 && s3.advised_bytes == 0, "nothing watched after the frees: %zu, %zu",
        s3.watched, s3.advised);
  table_churn();
  /* the sampler's thread, in a process of its own (real clock) */
  char err[4096];
  int lt = run_child("/proc/self/exe", "--lifetime-child", "auto", err, sizeof err);
  CHECK(lt == 0, "a fork child with its own sampler lives on, and a pthread_exit-ed main's process ends with its "
        "last thread (status %d: 5 the fork child was ended early; a hang, the sampler kept it alive)", lt);
  int st = run_child("/proc/self/exe", "--thread-child", "auto", err, sizeof err);
  CHECK(st == 0 || st == 77, "a sleeping program's constant block advised by the sampler's thread (status %d) %s", st, err);
  char json[16384];
  locus_stats_json(json, sizeof json);
  CHECK(strstr(json, "\"option\":\"auto\"") && strstr(json, "\"auto\":{\"watched\":0"), "auto in the JSON report");
  return TEST_DONE();
}
