/* locus's own threads (the LOCUS_KSM=auto sampler, the next-touch
 * userfaultfd server) and the end of the process. POSIX ends a process
 * with its last thread, as if by exit(0): when main ends with pthread_exit
 * and the program's other threads are gone, locus's threads must end the
 * process, run its atexit handlers like any last thread would (a stack of
 * normal size, the program's signal mask), even when /proc can no longer be
 * opened, and a fork child must count them right. Each case runs in a child
 * process (this program re-executed) with a 10 s limit; a hang is a failure.
 *
 *   lc_internal_threads              all the cases
 *   lc_internal_threads CASE         one case, in this process
 */
#include "lc_common.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
    return 2;
  }
  static const struct { const char *name, *ksm; } cases[] = {
      {"exit_stack", "auto"}, {"nofile", "auto"}, {"next_touch", "off"}, {"next_touch", "auto"}, {"fork_race", "auto"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int st = run_case("/proc/self/exe", cases[i].name, cases[i].ksm);
    LC_CHECK(st == 0, "%s (LOCUS_KSM=%s): %s %d", cases[i].name, cases[i].ksm,
             st < 0 ? "still alive after 10 s" : "status", st);
    lc_say("lc_internal_threads: %s (LOCUS_KSM=%s) ended with status 0\n", cases[i].name, cases[i].ksm);
  }
  lc_say("lc_internal_threads: ok\n");
  return 0;
}
