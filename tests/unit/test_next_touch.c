/* The next-touch protocol under attack (issue 26): threads on the *same*
 * pending group at once, ranges re-marked, freed, resized and resolved while
 * others touch them, a program's SIGSEGV handler installed after marking
 * (and its mask, SA_RESETHAND, SA_SIGINFO, SIG_IGN and SIG_DFL honoured), a
 * 16 KiB alternate signal stack, and system calls into pending ranges.
 *
 * The engine is forced on (next_touch_force) so the protocol runs on a
 * machine with one node or a kernel without NUMA; the pages then stay where
 * they are. Migration itself is proven in the NUMA guests (tests/numa).
 *
 *   test_next_touch [scale]   scale multiplies the rounds (LOCUS_LONG_TESTS
 *                             registers 10); the default runs in seconds. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"
#include "numa/next_touch.h"
#include "os/os.h"

#define PAGE 4096
static int scale = 1;
static bool uffd;                      /* the userfaultfd engine runs (LOCUS_NEXT_TOUCH, privileges) */

/* The kernel's disposition of SIGSEGV is locus's handler (not what the
 * interposed sigaction reports to the program). */
static void check_armed(const char *when) {
  if (uffd) return;                    /* no SIGSEGV handler needed */
  CHECK(os_fault_handler_armed(), "locus's SIGSEGV handler not installed %s", when);
}

static double now_s(void);

/* Marks, waiting while the last range there has a group being moved; a
 * range left pending for 60 s is a hang: fail (errno stays EBUSY). */
static int mark(void *p, size_t len) {
  double t0 = now_s();
  for (;;) {
    int r = locus_next_touch(p, len);
    if (r == 0 || errno != EBUSY || now_s() - t0 > 60) return r;
    sched_yield();
  }
}

/* ---- two threads, one shared page of a one-page range ------------------- */
typedef struct {
  unsigned char *page;
  int rounds, id;
  pthread_barrier_t *bar;
} shared_t;

static void *shared_page(void *arg) {
  shared_t *s = arg;
  unsigned char *half = s->page + s->id * (PAGE / 2);
  for (int r = 0; r < s->rounds; r++) {
    if (s->id == 0) CHECK(mark(s->page, PAGE) == 0, "mark round %d: %s", r, strerror(errno));
    pthread_barrier_wait(s->bar);      /* both touch the pending page at once */
    memset(half, (unsigned char)(r + s->id), PAGE / 2);
    for (int i = 0; i < PAGE / 2; i++)
      CHECK(half[i] == (unsigned char)(r + s->id), "round %d thread %d byte %d: %d", r, s->id, i, half[i]);
    pthread_barrier_wait(s->bar);
    if (s->id == 0)                    /* the other half too: every byte as written */
      for (int i = 0; i < PAGE; i++)
        CHECK(s->page[i] == (unsigned char)(r + i / (PAGE / 2)), "round %d byte %d: %d", r, i, s->page[i]);
  }
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_shared_page(void) {
  int rounds = 20000 * scale;
  unsigned char *block = malloc(2 << 20);
  CHECK(block, "malloc");
  unsigned char *page = block + (1 << 20);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  shared_t s[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    s[i] = (shared_t){page, rounds, i, &bar};
    pthread_create(&t[i], NULL, shared_page, &s[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  check_armed("after the shared page");
  free(block);
  printf("shared page: %d rounds, two threads, every byte as written\n", rounds);
}

/* ---- two threads sweeping one 16 MiB range ------------------------------ */
#define SWEEP (16u << 20)
typedef struct {
  unsigned char *p;
  int rounds, id;
  pthread_barrier_t *bar;
} sweep_t;

static void *sweep(void *arg) {
  sweep_t *s = arg;
  size_t pages = SWEEP / PAGE;
  for (int r = 0; r < s->rounds; r++) {
    if (s->id == 0) CHECK(mark(s->p, SWEEP) == 0, "mark sweep %d: %s", r, strerror(errno));
    pthread_barrier_wait(s->bar);
    /* Thread 0 forwards, thread 1 backwards: they meet on every group;
     * each writes its half of every page. */
    for (size_t k = 0; k < pages; k++) {
      size_t pg = s->id ? pages - 1 - k : k;
      memset(s->p + pg * PAGE + s->id * (PAGE / 2), (unsigned char)(r * 2 + s->id), PAGE / 2);
    }
    pthread_barrier_wait(s->bar);
    for (size_t i = (size_t)s->id * (PAGE / 2); i < SWEEP; i += PAGE)
      for (size_t j = 0; j < PAGE / 2; j += 97)
        CHECK(s->p[i + j] == (unsigned char)(r * 2 + s->id), "sweep %d offset %zu: %d", r, i + j, s->p[i + j]);
  }
  return NULL;
}

static void test_sweep(void) {
  int rounds = 100 * scale;
  unsigned char *p = malloc(SWEEP + PAGE);
  CHECK(p, "malloc");
  unsigned char *a = (unsigned char *)(((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1));
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  sweep_t s[2];
  pthread_t t[2];
  size_t faults0 = next_touch_faults();
  for (int i = 0; i < 2; i++) {
    s[i] = (sweep_t){a, rounds, i, &bar};
    pthread_create(&t[i], NULL, sweep, &s[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  size_t faults = next_touch_faults() - faults0;
  CHECK(faults >= (size_t)rounds && faults <= (size_t)rounds * 32, "%zu faults for %d sweeps of 32 groups", faults,
        rounds);
  check_armed("after the sweeps");
  free(p);
  printf("sweep: %d rounds of 16 MiB, two threads, %zu group faults\n", rounds, faults);
}

/* ---- free, realloc, re-mark and resolve racing with touches ------------- */
static atomic_int race_stop;
typedef struct { unsigned char *p; size_t len; int id; long writes; } toucher_t;

static void *race_toucher(void *arg) {
  toucher_t *t = arg;
  unsigned v = 0;
  while (!atomic_load(&race_stop)) {
    v++;
    for (size_t i = (size_t)t->id * 64; i < t->len; i += PAGE) {
      t->p[i] = (unsigned char)v;      /* the same pages as the other toucher, other bytes */
      CHECK(t->p[i] == (unsigned char)v, "toucher %d offset %zu", t->id, i);
    }
    t->p[t->len - 1 - t->id] = (unsigned char)v;   /* the last page of the range */
    t->writes++;
  }
  return NULL;
}

static void *race_churn(void *arg) {
  int iters = *(int *)arg;
  size_t len = 3 << 20;
  for (int k = 0; k < iters; k++) {
    unsigned char *y = malloc(len);
    CHECK(y, "malloc");
    memset(y, 0x33, len);
    CHECK(mark(y + PAGE, len / 2) == 0, "mark y: %s", strerror(errno));
    y[len / 4] = 0x44;                 /* one group handled */
    if (k & 1) {
      unsigned char *z = realloc(y, len * 2);   /* cancels the rest */
      CHECK(z && z[0] == 0x33 && z[len / 4] == 0x44 && z[len / 2] == 0x33, "realloc of a pending block");
      y = z;
    }
    free(y);                           /* cancels what is left */
  }
  return NULL;
}

static void test_races(void) {
  size_t len = 4 << 20;
  unsigned char *x = malloc(len);
  CHECK(x, "malloc");
  memset(x, 0, len);
  pthread_t t[3], c;
  toucher_t tt[3];
  atomic_store(&race_stop, 0);
  for (int i = 0; i < 3; i++) {
    tt[i] = (toucher_t){x, len, i, 0};
    pthread_create(&t[i], NULL, race_toucher, &tt[i]);
  }
  int iters = 150 * scale;
  pthread_create(&c, NULL, race_churn, &iters);
  int marked = 0, resolved = 0, busy = 0;
  for (int k = 0; marked < 150 * scale; k++) {
    if (locus_next_touch(x, len) == 0) marked++;
    else {
      CHECK(errno == EBUSY, "re-mark: %s", strerror(errno));
      busy++;
      sched_yield();                   /* the touchers have groups left */
    }
    if (k % 3 == 0) {
      CHECK(locus_next_touch_resolve(x + len / 2, len / 4) == 0, "resolve");
      resolved++;
    }
  }
  pthread_join(c, NULL);
  atomic_store(&race_stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  CHECK(marked > 0, "no re-mark succeeded");
  check_armed("after the races");
  free(x);
  printf("races: %d re-marks (%d busy), %d resolves, %d churn rounds, writes %ld %ld %ld\n", marked, busy, resolved, iters,
         tt[0].writes, tt[1].writes, tt[2].writes);
}

/* ---- a table full of ranges; finished slots are reused ------------------ */
static void test_table(void) {
  enum { N = 300 };
  static unsigned char *b[N];
  int ok = 0, again = 0;
  for (int i = 0; i < N; i++) {
    b[i] = malloc(2 << 20);
    CHECK(b[i], "malloc");
    b[i][0] = 1;
    if (locus_next_touch(b[i], PAGE) == 0) ok++;
    else {
      CHECK(errno == EAGAIN, "mark %d: %s", i, strerror(errno));
      again++;
    }
  }
  CHECK(ok == 256 && again == N - 256, "256 ranges pending at most: %d marked, %d refused", ok, again);
  for (int i = 0; i < 256; i++) b[i][0] = b[i][PAGE - 1] = 2;   /* touched: each range finished */
  for (int i = 256; i < N; i++)
    CHECK(locus_next_touch(b[i], PAGE) == 0, "finished ranges give their slots: %s", strerror(errno));
  for (int i = 0; i < N; i++) {
    b[i][5] = 3;
    free(b[i]);
  }
}

/* ---- the program's own SIGSEGV handler ----------------------------------- */
static unsigned char *own_page;
static volatile sig_atomic_t own_faults, own_plain, own_mask_ok;

static void own_siginfo(int sig, siginfo_t *si, void *uc) {
  sigset_t m;
  pthread_sigmask(SIG_BLOCK, NULL, &m);
  own_mask_ok = sigismember(&m, SIGUSR1) && sigismember(&m, SIGSEGV);
  if ((unsigned char *)si->si_addr >= own_page && (unsigned char *)si->si_addr < own_page + PAGE) {
    own_faults++;
    mprotect(own_page, PAGE, PROT_READ | PROT_WRITE);
    return;
  }
  _exit(98);                           /* a fault it does not know */
}

static void own_plain_handler(int sig) {
  own_plain++;
  mprotect(own_page, PAGE, PROT_READ | PROT_WRITE);
}

static void *touch_all(void *arg) {
  toucher_t *t = arg;
  for (size_t i = (size_t)t->id; i < t->len; i += 512) t->p[i] = (unsigned char)(t->id + 1);
  return NULL;
}

static void two_touchers(unsigned char *p, size_t len) {
  pthread_t t[2];
  toucher_t tt[2];
  for (int i = 0; i < 2; i++) {
    tt[i] = (toucher_t){p, len, i, 0};
    pthread_create(&t[i], NULL, touch_all, &tt[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (size_t i = 0; i < len; i += 512) CHECK(p[i] == 1 && p[i + 1] == 2, "offset %zu after touches", i);
}

static void test_program_handler(void) {
  own_page = mmap(NULL, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  size_t len = 8 << 20;
  unsigned char *p = malloc(len);
  memset(p, 0, len);
  CHECK(mark(p, len) == 0, "mark");
  /* Installed after marking: it must get its own faults only. */
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = own_siginfo;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR1);
  CHECK(sigaction(SIGSEGV, &sa, NULL) == 0, "sigaction");
  check_armed("after the program's sigaction");
  CHECK(sigaction(SIGSEGV, NULL, &old) == 0 && old.sa_sigaction == own_siginfo && (old.sa_flags & SA_SIGINFO),
        "the program sees its own handler");
  two_touchers(p, len);
  CHECK(own_faults == 0, "next-touch faults reached the program's handler (%d)", (int)own_faults);
  *(volatile unsigned char *)&own_page[0] = 1;
  CHECK(own_faults == 1 && own_mask_ok, "own fault chained (%d), with its sa_mask (%d)", (int)own_faults,
        (int)own_mask_ok);

  /* signal(): the plain form, called with the signal number only. */
  mprotect(own_page, PAGE, PROT_NONE);
  CHECK((void *)signal(SIGSEGV, own_plain_handler) == (void *)own_siginfo, "signal returns the previous handler");
  CHECK(mark(p, len) == 0, "mark again");
  two_touchers(p, len);
  *(volatile unsigned char *)&own_page[1] = 1;
  CHECK(own_plain == 1 && own_faults == 1, "plain handler chained (%d)", (int)own_plain);
  check_armed("after signal()");

  if (uffd) {                          /* no handler of locus's to replace */
    free(p);
    goto children;
  }
  /* A handler set behind locus's back (glibc's own sigaction): found at the
   * next mark, re-armed, chained to. */
  extern int __sigaction(int, const struct sigaction *, struct sigaction *);
  __sigaction(SIGSEGV, &sa, NULL);
  CHECK(!os_fault_handler_armed(), "replaced");
  fprintf(stderr, "(a warning about the replaced handler is expected here)\n");
  CHECK(mark(p, len) == 0, "mark after the replacement");
  check_armed("re-armed at the next mark");
  two_touchers(p, len);
  mprotect(own_page, PAGE, PROT_NONE);
  *(volatile unsigned char *)&own_page[2] = 1;
  CHECK(own_faults == 2, "chained to the handler set behind locus's back (%d)", (int)own_faults);
  free(p);

children:
  /* SA_RESETHAND, SIG_IGN, SIG_DFL, in children: the default action kills. */
  struct { int flags; sighandler_t h; int expect_exit; } cases[] = {
      {SA_RESETHAND, own_plain_handler, 0}, {0, SIG_IGN, 0}, {0, SIG_DFL, 0}, {SA_SIGINFO, SIG_DFL, 0}};
  for (int c = 0; c < 4; c++) {
    pid_t pid = fork();
    if (pid == 0) {
      struct sigaction s2;
      memset(&s2, 0, sizeof s2);
      s2.sa_handler = cases[c].h;
      s2.sa_flags = cases[c].flags;
      sigaction(SIGSEGV, &s2, NULL);
      unsigned char *q = malloc(2 << 20);
      if (mark(q, 2 << 20) != 0) _exit(2);
      q[100] = 1;                      /* ours: handled whatever the program's disposition */
      mprotect(own_page, PAGE, PROT_NONE);
      own_plain = 0;
      *(volatile unsigned char *)&own_page[3] = 1;                 /* first foreign fault */
      if (cases[c].h != own_plain_handler || own_plain != 1) _exit(3);
      struct sigaction now;
      sigaction(SIGSEGV, NULL, &now);
      if (now.sa_handler != SIG_DFL) _exit(4);   /* reset on delivery */
      q[PAGE * 40] = 2;                /* ours again: still handled after the reset */
      mprotect(own_page, PAGE, PROT_NONE);
      *(volatile unsigned char *)&own_page[4] = 1;                 /* second foreign fault: default action */
      _exit(5);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "case %d: killed by SIGSEGV (status %#x)", c, st);
  }
  /* Back to a handler of our own for what follows. */
  mprotect(own_page, PAGE, PROT_READ | PROT_WRITE);
  signal(SIGSEGV, SIG_DFL);
}

/* ---- a 16 KiB alternate signal stack with a guard page below ------------- */
static void *altstack_toucher(void *arg) {
  toucher_t *t = arg;
  unsigned char *m = mmap(NULL, 16384 + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  mprotect(m, PAGE, PROT_NONE);        /* overflowing the stack faults here, in the handler: fatal */
  stack_t ss = {.ss_sp = m + PAGE, .ss_size = 16384, .ss_flags = 0};
  CHECK(sigaltstack(&ss, NULL) == 0, "sigaltstack");
  touch_all(t);
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  munmap(m, 16384 + PAGE);
  return NULL;
}

static void test_altstack(void) {
  size_t len = 16 << 20;
  unsigned char *p = malloc(len);
  memset(p, 0, len);
  for (int r = 0; r < 5 * scale; r++) {
    CHECK(mark(p, len) == 0, "mark");
    pthread_t t[2];
    toucher_t tt[2];
    for (int i = 0; i < 2; i++) {
      tt[i] = (toucher_t){p, len, i, 0};
      pthread_create(&t[i], NULL, altstack_toucher, &tt[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (size_t i = 0; i < len; i += 512) CHECK(p[i] == 1 && p[i + 1] == 2, "offset %zu", i);
  }
  free(p);
}

/* ---- system calls into a pending range ----------------------------------- */
static void test_syscalls(void) {
  size_t len = 4 << 20;
  unsigned char *p = malloc(len);
  memset(p, 5, len);
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  int zero = open("/dev/zero", O_RDONLY);
  CHECK(zero >= 0, "/dev/zero");
  CHECK(mark(p, len) == 0, "mark");
  CHECK(write(fds[1], "abcdefgh", 8) == 8, "write");
  errno = 0;
  if (uffd) {
    /* userfaultfd: the kernel's access waits for the group to come back. */
    CHECK(read(fds[0], p + PAGE * 3, 8) == 8 && !memcmp(p + PAGE * 3, "abcdefgh", 8), "read from a pipe: %s",
          strerror(errno));
    CHECK(p[PAGE * 3 + 8] == 5 && p[0] == 5, "the rest of the group and another group kept");
    CHECK(write(fds[1], p + len - 100, 50) == 50, "write from a pending range");
    CHECK(read(fds[0], p + PAGE * 5, 50) == 50 && p[PAGE * 5] == 5, "read back");
    CHECK(read(zero, p + len / 2, len / 2) == (ssize_t)len / 2 && p[len / 2] == 0 && p[len - 1] == 0,
          "read from /dev/zero into a pending range");
    CHECK(write(fds[1], "abcdefgh", 8) == 8, "write");
  } else {
    /* Protection: the kernel does not take the fault, EFAULT. */
    CHECK(read(fds[0], p + PAGE * 7, 8) == -1 && errno == EFAULT, "read into a pending range: EFAULT (%s)",
          strerror(errno));
  }
  /* Resolved first: works, and the pages are accessible. */
  CHECK(locus_next_touch_resolve(p + PAGE * 7, 8) == 0, "resolve");
  CHECK(read(fds[0], p + PAGE * 7, 8) == 8 && !memcmp(p + PAGE * 7, "abcdefgh", 8), "read from a pipe");
  CHECK(locus_next_touch_resolve(p, len) == 0, "resolve all");
  CHECK(read(zero, p, len) == (ssize_t)len && p[0] == 0 && p[len - 1] == 0, "read from /dev/zero");
  CHECK(write(fds[1], p + PAGE * 9, 4) == 4, "write from a resolved range");
  /* Resolving memory with nothing pending, or not locus's: nothing to do. */
  int local = 0;
  CHECK(locus_next_touch_resolve(&local, sizeof local) == 0, "resolve of the stack");
  CHECK(locus_next_touch_resolve(NULL, 0) == 0, "resolve of nothing");
  errno = 0;
  CHECK(locus_next_touch_resolve(NULL, 5) == -1 && errno == EINVAL, "resolve NULL");
  CHECK(locus_next_touch_resolve((void *)-4096, 8192) == -1 && errno == EINVAL, "resolve wrapping");
  close(fds[0]);
  close(fds[1]);
  close(zero);
  free(p);
}

/* ---- a handler late for an older range while a new one is marked ---------
 * Thread T faults on a page of range R1; its handler stops (test hook)
 * before reading the table. Meanwhile R1 is resolved and the same pages
 * are marked again (R2); that mark stops (test hook) between publishing R2
 * and protecting it, and lets T's handler run then. The handler must not
 * finish a group of R2 before the protection: the group would be done yet
 * inaccessible, and the next access to it taken for a foreign fault (the
 * process killed). In a child, whose death the parent sees. */
static _Thread_local bool late_me;
static atomic_int late_stage;          /* 1: T's handler waits, 2: go on, 3: T's access done */

static void late_fault_hook(void *addr) {
  (void)addr;
  if (!late_me || atomic_load(&late_stage) != 0) return;
  atomic_store(&late_stage, 1);
  while (atomic_load(&late_stage) != 2) sched_yield();
}

static void late_mark_hook(void) {
  atomic_store(&late_stage, 2);
  double t0 = now_s();                 /* T's handler runs now, before the protection */
  while (atomic_load(&late_stage) != 3 && now_s() - t0 < 10) sched_yield();
}

static void *late_toucher(void *arg) {
  late_me = true;
  ((volatile unsigned char *)arg)[0] = 42;
  atomic_store(&late_stage, 3);
  return NULL;
}

static void test_late_handler(void) {
  if (uffd) return;                    /* the protection engine's window */
  /* Its child starts a thread: under qemu-user 7.2 (LOCUS_TEST_EMULATOR) a thread
   * created in a child forked from a multi-threaded process crashes the emulator. */
  if (getenv("LOCUS_TEST_EMULATOR")) {
    printf("late_handler: not run under an emulator (LOCUS_TEST_EMULATOR is set)\n");
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    size_t len = 2 << 20;
    unsigned char *b = malloc(len);
    memset(b, 1, len);
    if (mark(b, len) != 0) _exit(2);
    next_touch_test_hooks(late_fault_hook, NULL);
    pthread_t t;
    unsigned char *page = b + (1 << 20);
    pthread_create(&t, NULL, late_toucher, page);
    while (atomic_load(&late_stage) != 1) sched_yield();
    if (locus_next_touch_resolve(b, len) != 0) _exit(3);   /* R1 finished while T's handler waits */
    next_touch_test_hooks(late_fault_hook, late_mark_hook);
    if (locus_next_touch(b, len) != 0) _exit(4);            /* R2 */
    next_touch_test_hooks(NULL, NULL);
    pthread_join(t, NULL);
    for (size_t i = 0; i < len; i += PAGE) b[i] = 7;        /* every group of R2, T's page included */
    if (page[0] != 7 || b[len - 1] != 1) _exit(5);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a handler late for an older range during a new mark: status %#x", st);
}

/* ---- fork with a range pending: the child's copy works the same --------- */
static void test_fork(void) {
  size_t len = 4 << 20;
  unsigned char *p = malloc(len);
  memset(p, 6, len);
  CHECK(mark(p, len) == 0, "mark");
  pid_t pid = fork();
  if (pid == 0) {
    for (size_t i = 0; i < len; i += PAGE)
      if (p[i] != 6) _exit(2);
    p[0] = 7;
    free(p);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child touching a pending range (status %#x)", st);
  CHECK(p[0] == 6 && p[len - 1] == 6, "parent's copy");
  /* Marked again while its pages are still shared with the child's copy
   * (copy-on-write, not written since): userfaultfd cannot move them back,
   * the engine copies them. Every byte must survive. */
  CHECK(locus_next_touch_resolve(p, len) == 0, "resolve what the parent did not touch");
  pid = fork();
  if (pid == 0) {
    sleep(1);
    _exit(0);
  }
  CHECK(locus_next_touch(p, len) == 0, "mark after fork: %s", strerror(errno));
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  CHECK(write(fds[1], "xy", 2) == 2, "write");
  if (uffd) CHECK(read(fds[0], p + PAGE * 9, 2) == 2, "read into a range shared with a child: %s", strerror(errno));
  else CHECK(locus_next_touch_resolve(p + PAGE * 9, 2) == 0 && read(fds[0], p + PAGE * 9, 2) == 2, "read");
  for (size_t i = 0; i < len; i += 64)
    CHECK(p[i] == (i >= PAGE * 9 && i < PAGE * 9 + 2 ? "xy"[i - PAGE * 9] : 6), "byte %zu after fork: %d", i, p[i]);
  close(fds[0]);
  close(fds[1]);
  waitpid(pid, &st, 0);
  free(p);
}

/* ---- a signal handler touching a pending range ----------------------------
 * A program's handler (SIGUSR1 here) that runs while its thread owns groups
 * and touches them: under userfaultfd a mark interrupted between moving the
 * pages aside and releasing its claims waited for itself forever; under
 * protection a handler interrupting locus's SIGSEGV handler faulted with
 * SIGSEGV blocked, and the kernel killed the process. Both windows hold
 * every signal now; the signal is delivered after them. In a child, with
 * an alarm that kills it if it hangs. */
static unsigned char *sig_target;
static volatile sig_atomic_t sig_touched;
static void sig_touch_handler(int sig) {
  (void)sig;
  sig_target[0] = 3;                   /* a pending group */
  sig_touched = 1;
}
static void sig_raise_hook(void) { pthread_kill(pthread_self(), SIGUSR1); }
static void sig_raise_fault_hook(void *addr) {
  (void)addr;
  if (!sig_touched) pthread_kill(pthread_self(), SIGUSR1);
}

static void test_signal_owner(void) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);                         /* a hang: killed by SIGALRM */
    size_t len = 2 << 20;
    unsigned char *a = malloc(len), *b = malloc(len);
    memset(a, 1, len);
    memset(b, 1, len);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sig_touch_handler;
    sigaction(SIGUSR1, &sa, NULL);
    if (uffd) {                        /* the mark's window: the handler touches the range marked */
      sig_target = b + (1 << 20);
      next_touch_test_hooks(NULL, sig_raise_hook);
      if (mark(b, len) != 0) _exit(2);
      next_touch_test_hooks(NULL, NULL);
    } else {                           /* locus's handler: the program's touches another range */
      if (mark(a, len) != 0 || mark(b, len) != 0) _exit(2);
      sig_target = b + (1 << 20);
      next_touch_test_hooks(sig_raise_fault_hook, NULL);
      a[PAGE * 3] = 5;
      next_touch_test_hooks(NULL, NULL);
    }
    if (!sig_touched || sig_target[0] != 3 || b[0] != 1 || a[PAGE * 3] != (uffd ? 1 : 5)) _exit(3);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a signal handler touching a pending range while its thread owns groups: "
        "status %#x", st);
}

/* ---- marked again right after the thread touched every page --------------
 * Every group was touched, so the range is not pending any more: the next
 * mark must succeed at once, not fail with EBUSY while the last group's
 * owner (under userfaultfd, the locus thread, which wakes the toucher before
 * it marks the group done) finishes. */
static void test_remark(void) {
  size_t len = 4 << 20;
  unsigned char *b = malloc(len);
  CHECK(b, "malloc");
  memset(b, 1, len);
  int busy = 0;
  for (int k = 0; k < 100 * scale; k++) {
    if (locus_next_touch(b, len) != 0) {
      CHECK(errno == EBUSY, "mark: %s", strerror(errno));
      busy++;
      CHECK(mark(b, len) == 0, "mark");
    }
    for (size_t i = 0; i < len; i += PAGE) b[i] = 2;
  }
  CHECK(busy == 0, "%d of %d marks refused with EBUSY right after every page was touched", busy, 100 * scale);
  free(b);
}

/* ---- a range over the kernel mappings an earlier mark left ----------------
 * A part of a block marked and touched under userfaultfd ends up a mapping
 * of its own (the pages put back get a new anon_vma, which the kernel does
 * not merge with its neighbours). A later mark over the part's border must
 * still use userfaultfd: a system call into it works. Before, the mark's
 * mremap failed (EFAULT over two mappings) and the range fell back to
 * protection silently: read() failed with EFAULT. */
static void test_split(void) {
  if (!uffd) return;
  size_t len = 4 << 20;
  unsigned char *b = malloc(len);
  CHECK(b, "malloc");
  memset(b, 4, len);
  unsigned char *p = (unsigned char *)(((uintptr_t)b + PAGE - 1) & ~(uintptr_t)(PAGE - 1));
  for (int k = 0; k < 8; k++) {        /* eight parts, each its own mapping afterwards */
    CHECK(mark(p + (size_t)(16 * k + 3) * PAGE, 5 * PAGE) == 0, "mark part %d", k);
    for (int i = 0; i < 5; i++) p[(16 * k + 3 + i) * PAGE] = 4;
  }
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  for (int r = 0; r < 4; r++) {
    CHECK(mark(p + PAGE * r, 140 * PAGE) == 0, "mark over the parts: %s", strerror(errno));
    CHECK(write(fds[1], "ab", 2) == 2, "write");
    ssize_t n = read(fds[0], p + 50 * PAGE + 7, 2);
    CHECK(n == 2, "read into a range over several mappings: %zd (%s)", n, n < 0 ? strerror(errno) : "");
    for (size_t i = 0; i < 145 * PAGE; i += 64)
      CHECK(p[i] == 4, "byte %zu: %d", i, p[i]);
    CHECK(p[50 * PAGE + 7] == 'a' && p[50 * PAGE + 8] == 'b', "read's bytes");
    p[50 * PAGE + 7] = p[50 * PAGE + 8] = 4;
  }
  close(fds[0]);
  close(fds[1]);
  free(b);
}

int main(int argc, char **argv) {
  if (argc > 1) scale = atoi(argv[1]) > 0 ? atoi(argv[1]) : 1;
  next_touch_force(true);
  setvbuf(stdout, NULL, _IONBF, 0);
  /* The engine, decided at the first mark; NT_EXPECT_ENGINE makes it a check. */
  unsigned char *probe = malloc(2 << 20);
  CHECK(probe && mark(probe, 2 << 20) == 0, "first mark: %s", strerror(errno));
  free(probe);
  uffd = !strcmp(next_touch_engine(), "uffd");
  const char *expect = getenv("NT_EXPECT_ENGINE");
  printf("engine: %s\n", next_touch_engine());
  CHECK(!expect || !strcmp(expect, next_touch_engine()), "engine %s, expected %s", next_touch_engine(), expect);
  struct { const char *name; void (*fn)(void); } parts[] = {
      {"syscalls", test_syscalls}, {"shared_page", test_shared_page}, {"sweep", test_sweep},
      {"races", test_races},       {"table", test_table},             {"altstack", test_altstack},
      {"fork", test_fork},         {"late_handler", test_late_handler},
      {"program_handler", test_program_handler}, {"signal_owner", test_signal_owner},
      {"remark", test_remark},             {"split", test_split}};
  const char *only = getenv("NT_ONLY");  /* a comma-separated list of parts, for debugging */
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    if (only && !strstr(only, parts[i].name)) continue;
    double t0 = now_s();
    parts[i].fn();
    printf("  %s: %.2f s\n", parts[i].name, now_s() - t0);
  }
  return TEST_DONE();
}
