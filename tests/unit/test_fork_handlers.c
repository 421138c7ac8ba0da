/* Another library's fork handlers registered before locus's (its
 * constructor ran first) allocate: prepare handlers run in reverse order of
 * registration, so its prepare runs after locus's has taken every lock, and
 * its parent and child handlers run before locus's release them. The
 * forking thread must be able to allocate there (small, medium, large,
 * realloc), and the child and parent go on as usual. Here the handlers are
 * registered from a constructor of a higher priority than locus's (the
 * library is linked in: priorities order constructors across objects). A
 * second thread allocates meanwhile. A watchdog turns a hang into a failure. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static void *held;
static atomic_int handler_calls;

/* Every size path: small, medium, large (the source's lock), and a large
 * realloc (mremap: the registry's spare leaves). */
static void *alloc_all(void) {
  void *s = malloc(48), *m = malloc(50000), *l = malloc(3 << 20);
  if (!s || !m || !l) return NULL;
  memset(s, 1, 48);
  memset(m, 2, 50000);
  memset(l, 3, 4096);
  l = realloc(l, 12 << 20);
  free(s);
  free(m);
  atomic_fetch_add(&handler_calls, 1);
  return l;
}

static void on_prepare(void) { held = alloc_all(); }
static void on_parent(void) {
  free(held);
  free(alloc_all());
}
static void on_child(void) {
  free(held);
  free(alloc_all());
}

__attribute__((constructor(150))) static void register_early(void) {
  pthread_atfork(on_prepare, on_parent, on_child);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_fork_handlers: FAIL: hung (a fork handler's allocation waited for a lock)\n";
  (void)!write(1, m, sizeof m - 1);
  _exit(1);
}

static atomic_int stop;
static void *churn(void *arg) {
  (void)arg;
  unsigned s = 1;
  while (!atomic_load(&stop)) {
    s = s * 1103515245 + 12345;
    free(malloc((s >> 8) % 200000 + 1));
  }
  return NULL;
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(60);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, churn, NULL) == 0, "pthread_create");
  for (int i = 0; i < 20; i++) {
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
      alarm(10);
      void *p = alloc_all();
      free(p);
      _exit(p && atomic_load(&handler_calls) == 2 * i + 3 ? 0 : 2);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %d", i, st);
  }
  atomic_store(&stop, 1);
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  CHECK(atomic_load(&handler_calls) == 40, "handler allocations: %d", atomic_load(&handler_calls));
  return TEST_DONE();
}
