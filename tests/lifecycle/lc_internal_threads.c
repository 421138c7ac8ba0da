/* locus's own threads (the LOCUS_KSM=auto sampler, the next-touch
 * userfaultfd server) and the end of the process. POSIX ends a process
 * with its last thread, as if by exit(0): when main ends with pthread_exit
 * and the program's other threads are gone, locus's threads must end the
 * process, run its atexit handlers like any last thread would (a stack of
 * normal size, the program's signal mask), even when /proc can no longer be
 * opened, and a fork child must count them right; a descriptor locus keeps
 * is never mistaken for the program's (closed and reused: a pid file, a
 * pipe the fork child needs, a pipe at the userfaultfd's number); a pending
 * next-touch range stays readable from the exit handlers; a PID namespace
 * whose /proc is the host's does not end a working program. Each case runs in a child
 * process (this program re-executed) with a 10 s limit; a hang is a failure.
 *
 *   lc_internal_threads              all the cases
 *   lc_internal_threads CASE         one case, in this process
 */
#include "lc_common.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

static void *big(char fill) {
  char *volatile p = malloc(8 * MiB);  /* a large block: watched under LOCUS_KSM=auto */
  if (p) memset(p, fill, 8 * MiB);
  return p;
}

/* An atexit handler that recurses 5000 deep (~100 bytes a frame, as a chain
 * of C++ destructors would) and reports whether SIGTERM is blocked. */
struct node { struct node *next; char pad[24]; };
static struct node *head;
static size_t destroy(struct node *n) {
  if (!n) return 0;
  volatile char frame[64];
  frame[0] = n->pad[0];
  size_t k = destroy(n->next) + 1 + (size_t)frame[0];
  free(n);
  return k;
}
static void deep_handler(void) {
  size_t k = destroy(head);
  sigset_t m;
  pthread_sigmask(SIG_SETMASK, NULL, &m);
  lc_say("atexit: %zu nodes freed, SIGTERM %s\n", k, sigismember(&m, SIGTERM) ? "blocked" : "deliverable");
  if (k != 5000 || sigismember(&m, SIGTERM)) _exit(3);
}
static int case_exit_stack(void) {
  for (int i = 0; i < 5000; i++) {
    struct node *x = malloc(sizeof *x);
    x->next = head, x->pad[0] = 0, head = x;
  }
  atexit(deep_handler);
  big(1);
  pthread_exit(NULL);
}

/* The program can open no more descriptors when main leaves. (A thread
 * that leaves by pthread_exit first: glibc loads libgcc_s for it, which
 * needs a descriptor.) */
static void *leave(void *arg) { pthread_exit(arg); }
static int case_nofile(void) {
  pthread_t t;
  pthread_create(&t, NULL, leave, NULL);
  pthread_join(t, NULL);
  big(1);
  usleep(200000);                      /* the sampler runs */
  struct rlimit r = {64, 64};
  LC_CHECK(setrlimit(RLIMIT_NOFILE, &r) == 0, "setrlimit");
  while (dup(0) >= 0) {}
  LC_CHECK(errno == EMFILE, "descriptors exhausted (errno %d)", errno);
  pthread_exit(NULL);
}

/* A next-touch range (the userfaultfd engine starts a server thread). */
static int case_next_touch(void) {
  char *p = big(1);
  int rc = locus_next_touch(p, 8 * MiB);
  lc_say("locus_next_touch: %d\n", rc);
  pthread_exit(NULL);
}

/* Thread B forks while main allocates the process's first large block (which
 * starts the sampler thread); the child's only thread then leaves. */
static atomic_int go;
static long delay;
static void *forker(void *arg) {
  (void)arg;
  while (!atomic_load(&go)) {}
  for (volatile long i = 0; i < delay; i++) {}
  pid_t c = fork();
  if (c == 0) {
    big(2);
    pthread_exit(NULL);
  }
  for (int t = 0; t < 500; t++) {      /* 5 s */
    int st;
    if (waitpid(c, &st, WNOHANG) == c) return (void *)(long)(WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
    usleep(10000);
  }
  kill(c, SIGKILL);
  waitpid(c, NULL, 0);
  return (void *)99L;
}
static int case_fork_race(void) {
  for (int i = 0; i < 30; i++) {
    pid_t pid = fork();
    if (pid == 0) {                    /* a fresh process: no sampler yet */
      delay = (i * 7919) % 20000;
      pthread_t b;
      pthread_create(&b, NULL, forker, NULL);
      atomic_store(&go, 1);
      big(1);
      void *rc;
      pthread_join(b, &rc);
      _exit((int)(long)rc);
    }
    int st;
    waitpid(pid, &st, 0);
    LC_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork race %d: the fork child %s (status %d)", i,
             WIFEXITED(st) && WEXITSTATUS(st) == 99 ? "never ended" : "failed", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  return 0;
}

/* Every descriptor from 3 up closed (close_range), as daemons do. */
static void close_from_3(void) {
  for (int fd = 3; fd < 1024; fd++) close(fd);
}

/* The program closes locus's kept /proc descriptor, and its pid file takes
 * the number, holding this process's pid as text. */
static int case_pidfile(void) {
  big(1);
  usleep(200000);
  close_from_3();
  char path[64];
  snprintf(path, sizeof path, "/tmp/lc_internal_threads.%d.pid", getpid());
  FILE *f = fopen(path, "w+");
  LC_CHECK(f, "pid file");
  fprintf(f, "%d\n", getpid());
  fflush(f);
  unlink(path);
  pthread_exit(NULL);
}

/* The same number reused by a pipe the fork child needs. */
static int case_fork_fd(void) {
  big(1);
  usleep(200000);
  close_from_3();
  int p[2];
  LC_CHECK(pipe(p) == 0, "pipe");
  pid_t c = fork();
  if (c == 0) {
    char b[4];
    _exit(write(p[1], "ping", 4) == 4 && read(p[0], b, 4) == 4 ? 0 : 1);
  }
  int st;
  waitpid(c, &st, 0);
  LC_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the fork child lost the program's pipe (status %d)", st);
  return 0;
}

/* A pending next-touch range read by an atexit handler: with userfaultfd,
 * the server that ends the process runs the handler and could not serve its
 * fault; it puts the ranges back first. */
static char *nt_buf;
static void nt_handler(void) {
  long sum = 0;
  for (size_t i = 0; i < 8 * MiB; i += 4096) sum += nt_buf[i];
  if (sum != 2048) _exit(4);
}
static int case_next_touch_atexit(void) {
  nt_buf = big(1);
  LC_CHECK(locus_next_touch(nt_buf, 8 * MiB) == 0, "locus_next_touch");
  atexit(nt_handler);
  pthread_exit(NULL);
}

/* The program closes every descriptor while a range is pending, then its
 * pipe takes the userfaultfd's number: the server must not read the pipe. */
static int uffd_number(void) {
  char p[64], t[128];
  for (int fd = 3; fd < 1024; fd++) {
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, t, sizeof t - 1);
    if (n > 0 && (t[n] = 0, strstr(t, "userfaultfd"))) return fd;
  }
  return -1;
}
static int case_uffd_reuse(void) {
  char *p = big(1);
  LC_CHECK(locus_next_touch(p, 8 * MiB) == 0, "locus_next_touch");
  int u = uffd_number();
  if (u < 0) {
    lc_say("no userfaultfd engine here: skipped\n");
    return 0;
  }
  close_from_3();
  while (open("/dev/null", O_RDONLY) < u - 1) {}   /* fill 3 .. u-1 */
  int fd[2];
  LC_CHECK(pipe(fd) == 0 && fd[0] == u, "the pipe's read end at the old number %d (got %d)", u, fd[0]);
  fcntl(fd[0], F_SETFL, O_NONBLOCK);
  for (int i = 0; i < 3; i++) {
    char b[256] = {0}, r[512];
    LC_CHECK(write(fd[1], b, sizeof b) == (ssize_t)sizeof b, "write");
    sleep(1);                          /* the server polls once a second */
    LC_CHECK(read(fd[0], r, sizeof r) == (ssize_t)sizeof b, "round %d: the pipe's bytes were taken (errno %d)", i, errno);
  }
  return 0;
}

/* The userfaultfd server ends the process (it is locus's first thread,
 * started inside a hold of every signal): the exit handlers run with the
 * program's signals deliverable, may mark a range for next touch and read
 * it (the server could not serve that fault: nothing is marked), and one
 * that leaves by pthread_exit after starting a worker does not keep the
 * process alive. */
static void mask_handler(void) {
  sigset_t m;
  pthread_sigmask(SIG_SETMASK, NULL, &m);
  if (sigismember(&m, SIGTERM) || sigismember(&m, SIGSEGV)) _exit(5);
  char *q = big(3);
  if (locus_next_touch(q, 8 * MiB)) _exit(6);
  long sum = 0;
  for (size_t i = 0; i < 8 * MiB; i += 4096) sum += q[i];
  if (sum != 3 * 2048) _exit(7);
}
static int case_uffd_exit_handler(void) {
  char *p = big(1);
  LC_CHECK(locus_next_touch(p, 8 * MiB) == 0, "locus_next_touch");
  atexit(mask_handler);
  pthread_exit(NULL);
}
static void *short_worker(void *arg) {
  usleep(100000);
  return arg;
}
static void leaving_handler(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, short_worker, NULL) == 0) pthread_exit(NULL);
}
static int case_exit_handler_leaves(void) {
  char *p = big(1);                    /* the sampler (LOCUS_KSM=auto) */
  LC_CHECK(locus_next_touch(p, 8 * MiB) == 0, "locus_next_touch");   /* and the userfaultfd server */
  atexit(leaving_handler);
  pthread_exit(NULL);
}

/* The program closes the userfaultfd while a range is pending: once the
 * server notices (within a second), the range's contents are copied back,
 * and resolve, fork and free go on. */
static int case_uffd_closed(void) {
  char *p = big(1);
  LC_CHECK(locus_next_touch(p, 8 * MiB) == 0, "locus_next_touch");
  if (uffd_number() < 0) {
    lc_say("no userfaultfd engine here: skipped\n");
    return 0;
  }
  close_from_3();
  usleep(1500000);
  long sum = 0;
  for (size_t i = 0; i < 8 * MiB; i += 4096) sum += p[i];
  LC_CHECK(sum == 2048, "the pending range's contents after the descriptor was closed: sum %ld, 2048 expected", sum);
  LC_CHECK(locus_next_touch_resolve(p, 8 * MiB) == 0, "resolve");
  pid_t c = fork();
  if (c == 0) _exit(0);
  int st;
  waitpid(c, &st, 0);
  free(p);
  return 0;
}

/* In a new PID namespace whose /proc is still the host's: /proc/PID names
 * another process there; the program must not be ended while it works. */
static void *busy(void *arg) {
  (void)arg;
  usleep(1500000);
  return NULL;
}
static int case_pidns(void) {
  if (unshare(CLONE_NEWPID)) {
    lc_say("no PID namespace here (errno %d): skipped\n", errno);
    return 0;
  }
  pid_t c = fork();
  if (c == 0) {                        /* pid 1 of the namespace */
    pid_t g = fork();
    if (g == 0) {                      /* pid 2: on the host, /proc/2 is kthreadd, one thread */
      big(1);
      pthread_t t;
      pthread_create(&t, NULL, busy, NULL);
      pthread_join(t, NULL);
      _exit(3);
    }
    int gs;
    waitpid(g, &gs, 0);
    _exit(WIFEXITED(gs) ? WEXITSTATUS(gs) : 100);
  }
  int st;
  waitpid(c, &st, 0);
  LC_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3, "ended while working (status %d, expected 3)",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}

static int run_case(const char *self, const char *name, const char *ksm) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("LOCUS_KSM", ksm, 1);
    execl(self, self, name, (char *)NULL);
    _exit(127);
  }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 10) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      return -1;
    }
    usleep(20000);
  }
}

int main(int argc, char **argv) {
  if (argc > 1) {
    if (!strcmp(argv[1], "exit_stack")) return case_exit_stack();
    if (!strcmp(argv[1], "nofile")) return case_nofile();
    if (!strcmp(argv[1], "next_touch")) return case_next_touch();
    if (!strcmp(argv[1], "fork_race")) return case_fork_race();
    if (!strcmp(argv[1], "pidfile")) return case_pidfile();
    if (!strcmp(argv[1], "fork_fd")) return case_fork_fd();
    if (!strcmp(argv[1], "next_touch_atexit")) return case_next_touch_atexit();
    if (!strcmp(argv[1], "uffd_reuse")) return case_uffd_reuse();
    if (!strcmp(argv[1], "pidns")) return case_pidns();
    if (!strcmp(argv[1], "uffd_exit_handler")) return case_uffd_exit_handler();
    if (!strcmp(argv[1], "exit_handler_leaves")) return case_exit_handler_leaves();
    if (!strcmp(argv[1], "uffd_closed")) return case_uffd_closed();
    return 2;
  }
  static const struct { const char *name, *ksm; } cases[] = {
      {"exit_stack", "auto"}, {"nofile", "auto"},         {"next_touch", "off"},        {"next_touch", "auto"},
      {"fork_race", "auto"},  {"pidfile", "auto"},        {"fork_fd", "auto"},          {"next_touch_atexit", "off"},
      {"uffd_reuse", "off"},  {"pidns", "auto"},          {"uffd_exit_handler", "off"}, {"exit_handler_leaves", "auto"},
      {"uffd_closed", "off"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int st = run_case("/proc/self/exe", cases[i].name, cases[i].ksm);
    LC_CHECK(st == 0, "%s (LOCUS_KSM=%s): %s %d", cases[i].name, cases[i].ksm,
             st < 0 ? "still alive after 10 s" : "status", st);
    lc_say("lc_internal_threads: %s (LOCUS_KSM=%s) ended with status 0\n", cases[i].name, cases[i].ksm);
  }
  lc_say("lc_internal_threads: ok\n");
  return 0;
}
