/* Deferred thread cancellation never acts inside the library. POSIX lets no
 * function but its listed ones be a cancellation point, so malloc and free
 * are not; and a cancel acted on inside them would unwind with a lock held
 * (the auto profile reads the pressure files from the slow paths, under the
 * heap's lock: the cancelled thread's own exit then waited for that lock
 * forever, and so would every fork()).
 *
 * 1. A thread that only mallocs and frees (chunks taken and given back) has
 *    a cancel pending for 1.2 s (the pressure files are sampled 4 times a
 *    second): it must return normally, not as PTHREAD_CANCELED.
 * 2. locus_stats_print blocked in its write (stderr a full pipe) gets a
 *    cancel: once the pipe is drained it must finish, and fork() and
 *    locus_stats_print work after.
 * Both need the auto profile (the default). A watchdog turns a hang into a
 * failure. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"

static atomic_int stop, printed;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_cancel: FAIL: hung (a lock left held by a thread cancelled inside locus)\n";
  (void)!write(1, m, sizeof m - 1);
  _exit(1);
}

enum { NBLOCKS = 20000 };
static void *churn(void *arg) {
  void **p = arg;
  while (!atomic_load(&stop)) {
    for (int i = 0; i < NBLOCKS; i++) p[i] = malloc(512);   /* about 10 MiB: chunks taken */
    for (int i = 0; i < NBLOCKS; i++) free(p[i]);           /* and given back */
  }
  return NULL;
}

static void test_malloc_not_a_cancellation_point(void) {
  static void *blocks[NBLOCKS];
  pthread_t t;
  CHECK(pthread_create(&t, NULL, churn, blocks) == 0, "pthread_create(&t, NULL, churn, blocks) == 0");
  sleep_ms(50);
  CHECK(pthread_cancel(t) == 0, "pthread_cancel(t) == 0");
  sleep_ms(1200);
  atomic_store(&stop, 1);
  void *ret = NULL;
  CHECK(pthread_join(t, &ret) == 0, "pthread_join(t, &ret) == 0");
  CHECK(ret != PTHREAD_CANCELED, "a thread that only mallocs and frees was cancelled inside them");
  void *q = malloc(100);
  CHECK(q != NULL, "q != NULL");
  free(q);
}

static void *printer(void *arg) {
  (void)arg;
  locus_stats_print();
  atomic_store(&printed, 1);
  pthread_testcancel();
  return NULL;
}

static void test_stats_print_cancelled(void) {
  int pfd[2];
  CHECK(pipe(pfd) == 0, "pipe(pfd) == 0");
  int saved = dup(2);
  CHECK(saved >= 0, "saved >= 0");
  /* Fill the pipe, then make it stderr: the report's write blocks. */
  CHECK(fcntl(pfd[1], F_SETFL, O_NONBLOCK) == 0, "fcntl(pfd[1], F_SETFL, O_NONBLOCK) == 0");
  char junk[4096] = {0};
  while (write(pfd[1], junk, sizeof junk) > 0) {
  }
  CHECK(fcntl(pfd[1], F_SETFL, 0) == 0, "fcntl(pfd[1], F_SETFL, 0) == 0");
  CHECK(dup2(pfd[1], 2) == 2, "dup2(pfd[1], 2) == 2");
  pthread_t t;
  CHECK(pthread_create(&t, NULL, printer, NULL) == 0, "pthread_create(&t, NULL, printer, NULL) == 0");
  sleep_ms(200);                       /* the printer is in its write (or before it) */
  CHECK(pthread_cancel(t) == 0, "pthread_cancel(t) == 0");
  sleep_ms(50);
  CHECK(fcntl(pfd[0], F_SETFL, O_NONBLOCK) == 0, "fcntl(pfd[0], F_SETFL, O_NONBLOCK) == 0");
  while (!atomic_load(&printed)) {     /* drain until the report is through */
    while (read(pfd[0], junk, sizeof junk) > 0) {
    }
    sleep_ms(5);
  }
  void *ret = NULL;
  CHECK(pthread_join(t, &ret) == 0, "pthread_join(t, &ret) == 0");
  CHECK(ret == PTHREAD_CANCELED, "the printer was not cancelled at its pthread_testcancel");
  while (read(pfd[0], junk, sizeof junk) > 0) {
  }
  CHECK(dup2(saved, 2) == 2, "dup2(saved, 2) == 2");
  close(saved);
  close(pfd[0]);
  close(pfd[1]);
  pid_t pid = fork();                  /* its prepare handler takes the report's lock */
  CHECK(pid >= 0, "pid >= 0");
  if (pid == 0) {
    void *q = malloc(64);
    free(q);
    _exit(q ? 0 : 2);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status %d)", st);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(60);
  test_malloc_not_a_cancellation_point();
  test_stats_print_cancelled();
  return TEST_DONE();
}
