/* Threads: cross-thread frees with content checks, heap orphaning and
 * adoption under thread churn (resident memory stays bounded), fork from a
 * multi-threaded process. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"

/* Set when the test runs under qemu-user (the aarch64 build of tests/cross,
 * whose emulator command sets LOCUS_TEST_EMULATOR): two checks that measure
 * the emulator rather than locus are left out there. */
static int emulated;

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t pick_size(uint64_t *s) {
  uint64_t r = rnd(s);
  switch (r % 16) {
  case 0: return 8193 + (r >> 8) % 300000;      /* medium */
  case 1: if ((r >> 8) % 64 == 0) return (1 << 20) + (r >> 16) % (3 << 20); /* large, rarely */
  /* fallthrough */
  default: return (r >> 8) % 1024;              /* small */
  }
}

/* ---- producer/consumer ring: blocks allocated by one thread, freed by another */
#define RING 1024
typedef struct { void *p; size_t n; } item_t;
typedef struct {
  item_t slot[RING];
  atomic_size_t head, tail;
} ring_t;

#define NPAIRS 2
#define PER_PRODUCER 200000
static ring_t rings[NPAIRS];

static void *producer(void *arg) {
  ring_t *r = arg;
  uint64_t s = (uintptr_t)arg | 1;
  for (int i = 0; i < PER_PRODUCER; i++) {
    size_t n = pick_size(&s);
    void *p = malloc(n);
    CHECK(p, "malloc(%zu) in producer", n);
    fill(p, n < 256 ? n : 256);
    size_t h = atomic_load(&r->head);
    while (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING) sched_yield();
    r->slot[h % RING] = (item_t){p, n};
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    /* and some local churn */
    void *q = malloc(n / 2 + 1);
    free(q);
  }
  return NULL;
}

static void *consumer(void *arg) {
  ring_t *r = arg;
  for (int i = 0; i < PER_PRODUCER; i++) {
    size_t t = atomic_load(&r->tail);
    while (atomic_load_explicit(&r->head, memory_order_acquire) == t) sched_yield();
    item_t it = r->slot[t % RING];
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    CHECK(verify(it.p, it.n < 256 ? it.n : 256), "block %p of %zu bytes corrupted before remote free", it.p, it.n);
    CHECK(malloc_usable_size(it.p) >= it.n, "usable size");
    free(it.p);
  }
  return NULL;
}

static void test_producer_consumer(void) {
  pthread_t t[2 * NPAIRS];
  for (int i = 0; i < NPAIRS; i++) {
    pthread_create(&t[2 * i], NULL, producer, &rings[i]);
    pthread_create(&t[2 * i + 1], NULL, consumer, &rings[i]);
  }
  for (int i = 0; i < 2 * NPAIRS; i++) pthread_join(t[i], NULL);
}

/* ---- churn: threads that allocate, leave blocks behind and exit */
#define CHURN 10000
#define LEFT 8
static void *left_behind[CHURN][LEFT];

static void *churner(void *arg) {
  size_t id = (size_t)arg;
  uint64_t s = id * 2654435761u + 1;
  void *local[32];
  for (int i = 0; i < 32; i++) {
    local[i] = malloc(pick_size(&s) % 4096 + 1);
    CHECK(local[i], "malloc in churner");
  }
  for (int i = 0; i < 32; i++) free(local[i]);
  for (int i = 0; i < LEFT; i++) {
    size_t n = i == 0 ? 20000 : 64 * (size_t)(i + 1);
    left_behind[id][i] = malloc(n);
    fill(left_behind[id][i], 64);
  }
  return NULL;
}

static void test_churn(void) {
  size_t before = rss_kib();
  for (size_t i = 0; i < CHURN; i++) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, churner, (void *)i) == 0, "pthread_create %zu", i);
    pthread_join(t, NULL);
    if (i >= 4) /* free blocks of a thread that exited a while ago: orphan heaps */
      for (int j = 0; j < LEFT; j++) {
        CHECK(verify(left_behind[i - 4][j], 64), "orphaned block content");
        free(left_behind[i - 4][j]);
      }
  }
  for (size_t i = CHURN - 4; i < CHURN; i++)
    for (int j = 0; j < LEFT; j++) free(left_behind[i][j]);
  size_t after = rss_kib();
  locus_stats_t st;
  locus_stats_get(&st);
  printf("churn: %d threads, RSS %zu KiB -> %zu KiB, heaps live %lu orphaned %lu\n", CHURN, before, after,
         (unsigned long)st.heaps_live, (unsigned long)st.heaps_orphaned);
  /* Heaps are adopted, not created per thread: a handful of heaps, bounded RSS. */
  CHECK(st.heaps_live + st.heaps_orphaned <= 8, "heaps were not reused: %lu",
        (unsigned long)(st.heaps_live + st.heaps_orphaned));
  /* Under qemu-user the process is the emulator, which keeps ~280 KiB per
   * exited guest thread whatever the allocator: no RSS bound there. */
  if (emulated)
    printf("churn: RSS bound not checked under an emulator (LOCUS_TEST_EMULATOR is set)\n");
  else
    CHECK(after < before + 64 * 1024, "RSS grew by %zu KiB over %d threads", after - before, CHURN);
}

/* ---- fork while other threads allocate */
static atomic_int stop;
static void *hammer(void *arg) {
  uint64_t s = (uintptr_t)arg;
  void *keep[64] = {0};
  while (!atomic_load(&stop)) {
    int k = rnd(&s) % 64;
    free(keep[k]);
    keep[k] = malloc(pick_size(&s));
  }
  for (int k = 0; k < 64; k++) free(keep[k]);
  return NULL;
}

static void test_fork(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, hammer, (void *)(uintptr_t)(i + 7));
  for (int round = 0; round < 50; round++) {
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
      uint64_t s = 99;
      void *keep[256] = {0};
      for (int i = 0; i < 20000; i++) {
        int k = rnd(&s) % 256;
        free(keep[k]);
        size_t n = pick_size(&s);
        keep[k] = malloc(n);
        if (!keep[k]) _exit(2);
        memset(keep[k], 1, n);
      }
      /* Threads work in the child too; not under qemu-user 7.2, where a
       * thread created in a child forked from a multi-threaded process
       * crashes the emulator (cpu_exec: assertion cpu == current_cpu). */
      if (!emulated) {
        pthread_t c;
        if (pthread_create(&c, NULL, churner, (void *)0) != 0) _exit(3);
        pthread_join(c, NULL);
      }
      _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %x", round, st);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}

int main(void) {
  emulated = getenv("LOCUS_TEST_EMULATOR") != NULL;
  if (emulated) printf("test_threads: under an emulator: no RSS bound, no thread in the forked children\n");
  test_producer_consumer();
  test_churn();
  test_fork();
  return TEST_DONE();
}
