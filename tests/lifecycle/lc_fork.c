/* fork while other threads are inside malloc/free: hammer threads allocate,
 * free, realloc and exchange blocks non-stop while the main thread forks
 * repeatedly. Each child must be able to allocate and free (including blocks
 * inherited from the parent and from threads that do not exist in the child),
 * start a thread of its own, and exit 0; a child stuck on an allocator lock
 * is killed by its alarm and reported. The parent and its threads go on.
 *
 *   lc_fork [FORKS] [HAMMER_THREADS]    defaults: 200 3
 */
#include "lc_common.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define SLOTS 64
static atomic_int stop;
static atomic_long hammer_ops, hammer_bad;
static _Atomic(void *) exchange_box[8];   /* blocks passed between hammer threads */
static size_t exchange_size = 777;

typedef struct { void *p; size_t n; uint64_t tag; } blk_t;

/* Blocks of the parent's main thread and of the hammer threads, visible to
 * every child after fork (the hammer arrays are read without locking by the
 * child: in the child the hammer threads no longer exist). */
static blk_t parent_blocks[256];
static blk_t hammer_blocks[16][SLOTS];

static size_t pick(uint64_t *r) {
  uint64_t x = lc_rand(r);
  switch (x % 32) {
    case 0: return (1u << 20) + x % (3u << 20);   /* 1..4 MiB */
    case 1: case 2: return 64 * 1024 + x % (256 * 1024);
    case 3: case 4: case 5: return 2048 + x % 30000;
    default: return 1 + x % 1024;
  }
}

static void *hammer(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t rng = 0x1234567 + (uint64_t)id * 977;
  blk_t *mine = hammer_blocks[id];
  long ops = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    int i = (int)(lc_rand(&rng) % SLOTS);
    blk_t *b = &mine[i];
    if (b->p) {
      if (!lc_stamp_ok(b->p, b->n, b->tag)) atomic_fetch_add(&hammer_bad, 1);
      uint64_t r = lc_rand(&rng) % 4;
      if (r == 0) {
        size_t nn = pick(&rng);
        void *old = b->p;
        b->p = NULL;  /* hidden from a child forked during the realloc */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        void *q = realloc(old, nn);
        if (!q) { atomic_fetch_add(&hammer_bad, 1); free(old); continue; }
        b->n = nn; b->tag = lc_rand(&rng);
        lc_stamp(q, nn, b->tag);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        b->p = q;
      } else {
        void *p = b->p;
        b->p = NULL;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        free(p);
      }
    } else {
      size_t n = pick(&rng);
      void *p = (lc_rand(&rng) % 5 == 0) ? calloc(1, n) : malloc(n);
      if (!p) { atomic_fetch_add(&hammer_bad, 1); continue; }
      b->tag = lc_rand(&rng);
      lc_stamp(p, n, b->tag);
      b->n = n;
      __atomic_signal_fence(__ATOMIC_SEQ_CST);
      b->p = p;
    }
    /* Cross-thread traffic: leave a block, free whatever was there. */
    if (lc_rand(&rng) % 8 == 0) {
      void *p = malloc(exchange_size);
      if (p) {
        memset(p, 0xab, exchange_size);
        void *old = atomic_exchange(&exchange_box[lc_rand(&rng) % 8], p);
        if (old) {
          if (((unsigned char *)old)[exchange_size - 1] != 0xab) atomic_fetch_add(&hammer_bad, 1);
          free(old);
        }
      }
    }
    ops++;
    if ((ops & 1023) == 0) atomic_fetch_add(&hammer_ops, 1024);
  }
  return NULL;
}

static void *child_thread(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg | 1;
  for (int i = 0; i < 2000; i++) {
    size_t n = pick(&rng);
    char *p = malloc(n);
    if (!p) return (void *)1;
    memset(p, 7, n < 4096 ? n : 4096);
    free(p);
  }
  return NULL;
}

static int child_main(int round) {
  alarm(20);  /* a deadlocked child dies of SIGALRM, which the parent reports */
  uint64_t rng = 99 + (uint64_t)round;
  int bad = 0;
  /* Allocate and free every size class range. */
  void *v[512];
  for (int i = 0; i < 512; i++) {
    size_t n = pick(&rng);
    v[i] = malloc(n);
    if (!v[i]) return 10;
    lc_stamp(v[i], n, (uint64_t)i);
    if (!lc_stamp_ok(v[i], n, (uint64_t)i)) bad++;
  }
  for (int i = 0; i < 512; i += 2) free(v[i]);
  for (int i = 1; i < 512; i += 2) { void *q = realloc(v[i], 100 + (size_t)i * 3); if (!q) return 11; free(q); }
  /* Blocks of the parent's main thread: check, realloc some, free all. */
  for (int i = 0; i < 256; i++) {
    blk_t *b = &parent_blocks[i];
    if (!lc_stamp_ok(b->p, b->n, b->tag)) bad++;
    if (i % 3 == 0) { void *q = realloc(b->p, b->n + 5000); if (!q) return 12; free(q); }
    else free(b->p);
  }
  /* Blocks owned by hammer threads, which do not exist in the child. A slot
   * whose stamp is off was caught in the middle of an update: left alone. */
  int freed = 0;
  for (int t = 0; t < 16; t++)
    for (int i = 0; i < SLOTS; i++) {
      blk_t b = hammer_blocks[t][i];
      if (b.p && (i % 2) && lc_stamp_ok(b.p, b.n, b.tag)) { free(b.p); freed++; }
    }
  /* A thread of the child's own. */
  pthread_t th;
  void *res = (void *)1;
  if (pthread_create(&th, NULL, child_thread, (void *)(uintptr_t)round) != 0) return 13;
  pthread_join(th, &res);
  if (res) return 14;
  (void)freed;
  return bad ? 15 : 0;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "FAIL: parent stuck (watchdog); hammer threads or fork deadlocked\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  _exit(3);
}

int main(int argc, char **argv) {
  int forks = argc > 1 ? atoi(argv[1]) : 200;
  int nh = argc > 2 ? atoi(argv[2]) : 3;
  if (nh > 16) nh = 16;
  signal(SIGALRM, on_alarm);
  alarm(240);

  uint64_t rng = 5;
  for (int i = 0; i < 256; i++) {
    parent_blocks[i].n = pick(&rng);
    parent_blocks[i].p = malloc(parent_blocks[i].n);
    LC_CHECK(parent_blocks[i].p, "malloc");
    parent_blocks[i].tag = lc_rand(&rng);
    lc_stamp(parent_blocks[i].p, parent_blocks[i].n, parent_blocks[i].tag);
  }
  pthread_t th[16];
  for (int i = 0; i < nh; i++) LC_CHECK(pthread_create(&th[i], NULL, hammer, (void *)(intptr_t)i) == 0, "pthread_create");

  int failures = 0;
  for (int r = 0; r < forks; r++) {
    /* Let the hammers get going again between forks. */
    long before = atomic_load(&hammer_ops);
    while (atomic_load(&hammer_ops) == before && r % 10 == 0) usleep(1000);
    pid_t pid = fork();
    LC_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) _exit(child_main(r));
    int st;
    LC_CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    if (WIFSIGNALED(st)) {
      lc_say("FAIL: child %d killed by signal %d%s\n", r, WTERMSIG(st),
             WTERMSIG(st) == SIGALRM ? " (deadlocked in the allocator after fork)" : "");
      failures++;
    } else if (WEXITSTATUS(st) != 0) {
      lc_say("FAIL: child %d exited %d\n", r, WEXITSTATUS(st));
      failures++;
    }
    /* The parent's main thread keeps allocating too. */
    void *p = malloc(1000 + (size_t)r * 100);
    LC_CHECK(p, "parent malloc after fork");
    free(p);
    if (failures >= 5) break;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < nh; i++) pthread_join(th[i], NULL);
  for (int t = 0; t < nh; t++)
    for (int i = 0; i < SLOTS; i++)
      if (hammer_blocks[t][i].p) {
        if (!lc_stamp_ok(hammer_blocks[t][i].p, hammer_blocks[t][i].n, hammer_blocks[t][i].tag)) atomic_fetch_add(&hammer_bad, 1);
        free(hammer_blocks[t][i].p);
      }
  for (int i = 0; i < 8; i++) free(atomic_exchange(&exchange_box[i], NULL));
  for (int i = 0; i < 256; i++) {
    LC_CHECK(lc_stamp_ok(parent_blocks[i].p, parent_blocks[i].n, parent_blocks[i].tag), "parent block %d corrupted", i);
    free(parent_blocks[i].p);
  }
  lc_say("forks %d, child failures %d, hammer ops ~%ld, hammer errors %ld\n", forks, failures,
         atomic_load(&hammer_ops), atomic_load(&hammer_bad));
  LC_CHECK(failures == 0, "%d children failed", failures);
  LC_CHECK(atomic_load(&hammer_bad) == 0, "%ld corrupted blocks or failed allocations in the parent", atomic_load(&hammer_bad));
  lc_say("lc_fork: ok\n");
  return 0;
}
