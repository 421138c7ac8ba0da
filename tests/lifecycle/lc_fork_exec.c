/* exec after fork, with the allocator preloaded (the test runs with
 * LD_PRELOAD=liblocus.so, so every exec'd image loads it again) while other
 * threads of the parent are allocating: fork + execv(/bin/true), fork +
 * execv(self --child), posix_spawn (vfork-style), system(). Every child must
 * exit 0; the exec'd copy of this program checks its allocations.
 *
 *   lc_fork_exec [ROUNDS]     default 40
 *   lc_fork_exec --child N    (internal)
 */
#include "lc_common.h"
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/wait.h>

extern char **environ;
static atomic_int stop;
static atomic_long errors;

static void *hammer(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg * 31 + 1;
  void *slot[32] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    int i = (int)(lc_rand(&rng) % 32);
    free(slot[i]);
    size_t n = (lc_rand(&rng) % 16 == 0) ? 200000 + lc_rand(&rng) % 2000000 : 1 + lc_rand(&rng) % 3000;
    slot[i] = malloc(n);
    if (!slot[i]) atomic_fetch_add(&errors, 1);
    else memset(slot[i], 1, n < 256 ? n : 256);
  }
  for (int i = 0; i < 32; i++) free(slot[i]);
  return NULL;
}

/* The exec'd child: allocate, check, free; a thread too. */
static void *child_thread(void *arg) {
  long bad = 0;
  for (int i = 0; i < 3000; i++) {
    size_t n = 1 + (size_t)(i * 7919) % 70000;
    unsigned char *p = malloc(n);
    if (!p) return (void *)1;
    p[0] = (unsigned char)i; p[n - 1] = (unsigned char)(i >> 3);
    bad += p[0] != (unsigned char)i || p[n - 1] != (unsigned char)(i >> 3);
    free(p);
  }
  return (void *)(intptr_t)(bad != 0);
}

static int child(int n) {
  alarm(30);
  void *blocks[1000];
  for (int i = 0; i < 1000; i++) {
    size_t sz = 8 + (size_t)((i * 131 + n) % 20000);
    blocks[i] = calloc(1, sz);
    if (!blocks[i]) return 20;
    unsigned char *c = blocks[i];
    for (size_t k = 0; k < sz; k += 512) if (c[k]) return 21;   /* calloc must zero */
    lc_stamp(blocks[i], sz, (uint64_t)i);
  }
  for (int i = 0; i < 1000; i++) {
    size_t sz = 8 + (size_t)((i * 131 + n) % 20000);
    if (!lc_stamp_ok(blocks[i], sz, (uint64_t)i)) return 22;
    free(blocks[i]);
  }
  pthread_t t;
  void *res = (void *)1;
  if (pthread_create(&t, NULL, child_thread, NULL)) return 23;
  pthread_join(t, &res);
  return res ? 24 : 0;
}

static int reap(pid_t pid, const char *what, int round) {
  int st;
  if (waitpid(pid, &st, 0) != pid) { lc_say("FAIL: waitpid (%s)\n", what); return 1; }
  if (WIFSIGNALED(st)) {
    lc_say("FAIL: round %d: %s killed by signal %d%s\n", round, what, WTERMSIG(st),
           WTERMSIG(st) == SIGALRM ? " (deadlock)" : "");
    return 1;
  }
  if (WEXITSTATUS(st)) { lc_say("FAIL: round %d: %s exited %d\n", round, what, WEXITSTATUS(st)); return 1; }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--child") == 0) return child(atoi(argv[2]));
  int rounds = argc > 1 ? atoi(argv[1]) : 40;
  alarm(240);  /* default action: the test dies with SIGALRM if it hangs */
  const char *pre = getenv("LD_PRELOAD");
  lc_say("LD_PRELOAD=%s\n", pre ? pre : "(unset)");

  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  LC_CHECK(sl > 0, "readlink /proc/self/exe");
  self[sl] = 0;

  pthread_t th[2];
  for (int i = 0; i < 2; i++) LC_CHECK(pthread_create(&th[i], NULL, hammer, (void *)(uintptr_t)(i + 1)) == 0, "pthread_create");

  int failures = 0;
  for (int r = 0; r < rounds && failures < 5; r++) {
    char num[32];
    snprintf(num, sizeof num, "%d", r);
    /* fork, allocate in the child, exec. */
    pid_t pid = fork();
    LC_CHECK(pid >= 0, "fork");
    if (pid == 0) {
      alarm(30);
      char *p = malloc(100 + (size_t)r);
      if (!p) _exit(30);
      free(p);
      if (r % 2) execl("/bin/true", "true", (char *)NULL);
      else execl(self, self, "--child", num, (char *)NULL);
      _exit(31);
    }
    failures += reap(pid, r % 2 ? "fork+exec /bin/true" : "fork+exec self --child", r);
    /* posix_spawn: glibc uses clone(CLONE_VM|CLONE_VFORK). */
    char *args[] = {self, "--child", num, NULL};
    int rc = posix_spawn(&pid, self, NULL, NULL, args, environ);
    if (rc) { lc_say("FAIL: posix_spawn: %s\n", strerror(rc)); failures++; }
    else failures += reap(pid, "posix_spawn self --child", r);
    if (r % 8 == 0) {
      /* system(): /bin/sh (preloaded) forks and execs in turn. */
      int s = system("x=$(echo a b c | tr ' ' '\\n' | sort -r | head -n 1); test \"$x\" = c");
      if (s != 0) { lc_say("FAIL: round %d: system() returned %d\n", r, s); failures++; }
    }
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  lc_say("rounds %d, failures %d, parent allocation errors %ld\n", rounds, failures, atomic_load(&errors));
  LC_CHECK(failures == 0, "%d children failed", failures);
  LC_CHECK(atomic_load(&errors) == 0, "allocation failures in the parent");
  lc_say("lc_fork_exec: ok\n");
  return 0;
}
