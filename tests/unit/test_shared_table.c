/* Node-wide shared tables (locus_shared_table, docs/sharing.md): bad inputs,
 * one process and its threads, then processes: 4 at once (one init, one
 * content), writes fault, an initialiser killed inside init, a stale file
 * left by a user that died, fork, and the file gone after the last user. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "locus.h"
#include "unit/check.h"

extern const char *shared_table_dir;   /* api/shared.c (internal) */

static char prefix[32];                /* names of this run: t<pid>- */
static atomic_int *inits;              /* init calls, all processes (shared anonymous page) */

static const char *nm(const char *base) {
  static char buf[8][80];
  static int i;
  char *b = buf[i++ % 8];
  snprintf(b, 80, "%s%s", prefix, base);
  return b;
}

/* Files of this user whose name part is `name` ("-name" at the end). */
static int files_of(const char *name) {
  DIR *d = opendir("/dev/shm");
  char head[64];
  snprintf(head, sizeof head, "locus-table-%u-", (unsigned)geteuid());
  size_t nl = strlen(name);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (!strncmp(e->d_name, head, strlen(head)) && l > nl && e->d_name[l - nl - 1] == '-' &&
        !strcmp(e->d_name + l - nl, name))
      n++;
  }
  if (d) closedir(d);
  return n;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) && errno == EINTR) {
  }
}

/* init: the bytes i*7+seed, after a pause (others pile up meanwhile). */
typedef struct {
  int seed, pause_ms;
  int notify_fd;                       /* >= 0: write a byte there first */
  int hang;                            /* then sleep forever (to be killed) */
} init_arg_t;

static void fill_init(void *table, size_t size, void *argp) {
  init_arg_t *a = argp;
  atomic_fetch_add(inits, 1);
  if (a && a->notify_fd >= 0) CHECK(write(a->notify_fd, "i", 1) == 1, "notify");
  if (a && a->hang)
    for (;;) pause();
  if (a && a->pause_ms) sleep_ms(a->pause_ms);
  unsigned char *t = table;
  int seed = a ? a->seed : 0;
  for (size_t i = 0; i < size; i++) t[i] = (unsigned char)(i * 7 + seed);
}

static int content_ok(const unsigned char *t, size_t size, int seed) {
  for (size_t i = 0; i < size; i++)
    if (t[i] != (unsigned char)(i * 7 + seed)) return 0;
  return 1;
}

static int wait_child(pid_t pid) {     /* exit status, or 128 + signal */
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_bad_inputs(void) {
  char longname[LOCUS_SHARED_TABLE_NAME_MAX + 2];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  const char *bad[] = {NULL, "", "a/b", "/abs", longname};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    errno = 0;
    CHECK(locus_shared_table(bad[i], 4096, NULL, NULL) == NULL && errno == EINVAL, "bad name %zu: errno %d", i, errno);
  }
  longname[LOCUS_SHARED_TABLE_NAME_MAX] = 0;   /* exactly the maximum: fine */
  memcpy(longname, prefix, strlen(prefix));
  void *t = locus_shared_table(longname, 100, NULL, NULL);
  CHECK(t != NULL, "name of %d bytes: errno %d", LOCUS_SHARED_TABLE_NAME_MAX, errno);
  CHECK(locus_shared_table_release(t) == 0, "release");
  errno = 0;
  CHECK(locus_shared_table(nm("zero"), 0, NULL, NULL) == NULL && errno == EINVAL, "size 0: errno %d", errno);
  errno = 0;
  CHECK(locus_shared_table_release(NULL) == -1 && errno == EINVAL, "release(NULL)");
  int x;
  errno = 0;
  CHECK(locus_shared_table_release(&x) == -1 && errno == EINVAL, "release(not a table)");
  const char *saved = shared_table_dir;
  shared_table_dir = "/nonexistent-locus-shm";
  errno = 0;
  CHECK(locus_shared_table(nm("nodir"), 4096, NULL, NULL) == NULL && errno == ENOSYS, "no /dev/shm: errno %d", errno);
  shared_table_dir = saved;
  /* Odd bytes are written %XX: two names never meet in one file. */
  void *a = locus_shared_table(nm("sp ace%20"), 64, NULL, NULL), *b = locus_shared_table(nm("sp%20ace%20"), 128, NULL, NULL);
  CHECK(a && b && a != b, "escaped names: %p %p errno %d", a, b, errno);
  CHECK(files_of(nm("sp%20ace%2520")) == 1, "escaped file name");
  CHECK(!locus_shared_table_release(a) && !locus_shared_table_release(b), "release");
}

static void test_one_process(void) {
  const char *n = nm("basic");
  size_t size = 3 * 4096 + 5;
  init_arg_t arg = {.seed = 3, .notify_fd = -1};
  atomic_store(inits, 0);
  unsigned char *t = locus_shared_table(n, size, fill_init, &arg);
  CHECK(t && ((uintptr_t)t & 4095) == 0, "table %p errno %d", (void *)t, errno);
  CHECK(atomic_load(inits) == 1 && content_ok(t, size, 3), "initialised once");
  CHECK(files_of(n) == 1, "file present");
  unsigned char *t2 = locus_shared_table(n, size, fill_init, &arg);
  CHECK(t2 == t && atomic_load(inits) == 1, "second call: same mapping, no init");
  errno = 0;
  CHECK(locus_shared_table(n, size + 1, fill_init, &arg) == NULL && errno == EEXIST, "other size: errno %d", errno);
  /* Read-only for the initialiser too, and it cannot be made writable. */
  CHECK(mprotect(t, 4096, PROT_READ | PROT_WRITE) == -1 && errno == EACCES, "mprotect writable: errno %d", errno);
  CHECK(locus_shared_table_release(t) == 0 && files_of(n) == 1 && t[5] == (unsigned char)(5 * 7 + 3),
        "first release keeps the view");
  CHECK(locus_shared_table_release(t) == 0, "second release");
  CHECK(files_of(n) == 0, "file gone after the last release");
  errno = 0;
  CHECK(locus_shared_table_release(t) == -1 && errno == EINVAL, "third release: EINVAL");
  /* A table asked again after its removal is initialised again. */
  t = locus_shared_table(n, size, fill_init, &arg);
  CHECK(t && atomic_load(inits) == 2 && content_ok(t, size, 3), "again");
  CHECK(locus_shared_table_release(t) == 0 && files_of(n) == 0, "gone again");
}

static void self_init(void *table, size_t size, void *arg) {
  errno = 0;
  *(int *)table = locus_shared_table((const char *)arg, size, NULL, NULL) == NULL && errno == EDEADLK;
}

static void test_deadlock(void) {
  const char *n = nm("self");
  int *t = locus_shared_table(n, 64, self_init, (void *)n);
  CHECK(t && *t == 1, "init asking for its own table: EDEADLK");
  CHECK(locus_shared_table_release(t) == 0, "release");
}

/* Threads of one process: one init, one mapping. */
static const char *thread_name;
static void *thread_get(void *arg) {
  init_arg_t a = {.seed = 9, .pause_ms = 150, .notify_fd = -1};
  return locus_shared_table(thread_name, 1 << 20, fill_init, &a);
}

static void test_threads(void) {
  thread_name = nm("threads");
  atomic_store(inits, 0);
  pthread_t th[4];
  void *r[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_get, NULL);
  for (int i = 0; i < 4; i++) pthread_join(th[i], &r[i]);
  for (int i = 0; i < 4; i++) CHECK(r[i] && r[i] == r[0], "thread %d: %p vs %p", i, r[i], r[0]);
  CHECK(atomic_load(inits) == 1 && content_ok(r[0], 1 << 20, 9), "one init for 4 threads");
  for (int i = 0; i < 4; i++) CHECK(locus_shared_table_release(r[i]) == 0, "release %d", i);
  CHECK(files_of(thread_name) == 0, "gone");
}

/* 4 processes at once: one init, same content; a write faults. */
static void test_processes(void) {
  const char *n = nm("procs");
  size_t size = 4 << 20;
  atomic_store(inits, 0);
  int go[2], got[2], hold[2];
  CHECK(pipe(go) == 0 && pipe(got) == 0 && pipe(hold) == 0, "pipe");
  pid_t pid[4];
  for (int i = 0; i < 4; i++) {
    if ((pid[i] = fork()) == 0) {
      char c;
      close(go[1]);
      close(hold[1]);
      if (read(go[0], &c, 1) != 0) _exit(90);   /* EOF: all start together */
      init_arg_t a = {.seed = 42, .pause_ms = 200, .notify_fd = -1};
      unsigned char *t = locus_shared_table(n, size, fill_init, &a);
      if (!t) _exit(91);
      if (!content_ok(t, size, 42)) _exit(92);
      if (files_of(n) != 1) _exit(93);
      if (i == 3) {                    /* a write faults: in a child of this one */
        pid_t w = fork();
        if (w == 0) {
          signal(SIGSEGV, SIG_DFL);
          ((volatile unsigned char *)t)[12345] = 1;
          _exit(94);
        }
        int st;
        if (waitpid(w, &st, 0) != w || !WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV) _exit(94);
        if (t[12345] != (unsigned char)(12345 * 7 + 42)) _exit(95);
      }
      if (write(got[1], "g", 1) != 1 || read(hold[0], &c, 1) != 0) _exit(96);   /* all hold it at once */
      exit(0);                         /* the destructor leaves the table */
    }
  }
  close(go[0]);
  close(go[1]);
  close(hold[0]);
  char c;
  for (int i = 0; i < 4; i++) CHECK(read(got[0], &c, 1) == 1, "child got it");
  close(hold[1]);
  for (int i = 0; i < 4; i++) {
    int st = wait_child(pid[i]);
    CHECK(st == 0, "child %d: status %d", i, st);
  }
  CHECK(atomic_load(inits) == 1, "init ran %d times", atomic_load(inits));
  /* The writer died of SIGSEGV holding it (no destructor): its lock went
   * with it; the 4 others left at exit, the last unlinked it. */
  CHECK(files_of(n) == 0, "file gone after all exited");
}

/* An initialiser killed inside init: the next process initialises. */
static void test_killed_in_init(void) {
  const char *n = nm("killed");
  atomic_store(inits, 0);
  int note[2];
  CHECK(pipe(note) == 0, "pipe");
  pid_t a = fork();
  if (a == 0) {
    init_arg_t arg = {.seed = 1, .notify_fd = note[1], .hang = 1};
    locus_shared_table(n, 1 << 20, fill_init, &arg);
    _exit(95);
  }
  char c;
  CHECK(read(note[0], &c, 1) == 1, "first process inside init");
  pid_t b[2];
  int got[2], hold[2];
  CHECK(pipe(got) == 0 && pipe(hold) == 0, "pipe");
  for (int i = 0; i < 2; i++)
    if ((b[i] = fork()) == 0) {        /* they wait for the first */
      close(hold[1]);
      init_arg_t arg = {.seed = 2, .notify_fd = -1};
      unsigned char *t = locus_shared_table(n, 1 << 20, fill_init, &arg);
      if (write(got[1], "g", 1) != 1 || read(hold[0], &c, 1) != 0) _exit(90);   /* both hold it */
      exit(!t ? 91 : !content_ok(t, 1 << 20, 2) ? 92 : 0);   /* exit: leaves the table */
    }
  close(hold[0]);
  sleep_ms(100);
  CHECK(atomic_load(inits) == 1, "the others wait");
  kill(a, SIGKILL);
  CHECK(wait_child(a) == 128 + SIGKILL, "killed");
  for (int i = 0; i < 2; i++) CHECK(read(got[0], &c, 1) == 1, "waiter %d got it", i);
  close(hold[1]);
  for (int i = 0; i < 2; i++) CHECK(wait_child(b[i]) == 0, "waiter %d", i);
  CHECK(atomic_load(inits) == 2, "one new init (%d)", atomic_load(inits));
  CHECK(files_of(n) == 0, "file gone after all exited");
}

/* A last user that dies without leaving (SIGKILL; _exit skips the
 * destructor too) leaves a stale file: the next user initialises it anew. */
static void test_stale(void) {
  const char *n = nm("stale");
  atomic_store(inits, 0);
  pid_t a = fork();
  if (a == 0) {
    init_arg_t arg = {.seed = 5, .notify_fd = -1};
    _exit(locus_shared_table(n, 8192, fill_init, &arg) ? 0 : 91);
  }
  CHECK(wait_child(a) == 0, "child");
  CHECK(files_of(n) == 1 && atomic_load(inits) == 1, "stale file left");
  init_arg_t arg = {.seed = 6, .notify_fd = -1};
  unsigned char *t = locus_shared_table(n, 8192, fill_init, &arg);
  CHECK(t && atomic_load(inits) == 2 && content_ok(t, 8192, 6), "stale table initialised again");
  CHECK(files_of(n) == 1, "one file");
  CHECK(locus_shared_table_release(t) == 0 && files_of(n) == 0, "gone");
  /* Size mismatch against another process's table. */
  int ready[2], done[2];
  CHECK(pipe(ready) == 0 && pipe(done) == 0, "pipe");
  if ((a = fork()) == 0) {
    void *p = locus_shared_table(n, 8192, NULL, NULL);
    char c;
    if (write(ready[1], "r", 1) != 1) _exit(96);
    if (read(done[0], &c, 1) != 1) _exit(97);
    exit(p ? 0 : 91);
  }
  char c;
  CHECK(read(ready[0], &c, 1) == 1, "child ready");
  errno = 0;
  CHECK(locus_shared_table(n, 4096, NULL, NULL) == NULL && errno == EEXIST, "other size: errno %d", errno);
  CHECK(write(done[1], "d", 1) == 1, "done");
  CHECK(wait_child(a) == 0 && files_of(n) == 0, "child and file");
}

/* fork: the child keeps the mapping and takes its own hold; whichever of
 * parent and child leaves last removes the file. */
static void test_fork(void) {
  const char *n = nm("fork");
  init_arg_t arg = {.seed = 7, .notify_fd = -1};
  unsigned char *t = locus_shared_table(n, 4096, fill_init, &arg);
  CHECK(t, "table");
  int go[2];
  CHECK(pipe(go) == 0, "pipe");
  pid_t a = fork();
  if (a == 0) {
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) != 0) _exit(90);
    if (!content_ok(t, 4096, 7) || files_of(n) != 1) _exit(91);   /* the parent released */
    exit(locus_shared_table_release(t) == 0 && files_of(n) == 0 ? 0 : 92);
  }
  close(go[0]);
  CHECK(locus_shared_table_release(t) == 0, "parent release");
  CHECK(files_of(n) == 1, "the child still holds it");
  close(go[1]);
  CHECK(wait_child(a) == 0, "child released last and removed it");
  CHECK(files_of(n) == 0, "gone");
}

int main(void) {
  if (access("/dev/shm", W_OK) != 0) {
    printf("skip: no writable /dev/shm\n");
    return 77;
  }
  snprintf(prefix, sizeof prefix, "t%d-", (int)getpid());
  inits = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(inits != MAP_FAILED, "shared counter");
  test_bad_inputs();
  test_one_process();
  test_deadlock();
  test_threads();
  test_processes();
  test_killed_in_init();
  test_stale();
  test_fork();
  return TEST_DONE();
}
