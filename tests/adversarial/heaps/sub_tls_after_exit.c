/* A thread's one-entry sub-heap cache (last_u/last_sub) survives the
 * thread's heap_abandon. A TLS destructor that runs after locus's (a key
 * created later) and calls locus_heap_malloc keeps using the sub-heap of the
 * main heap it just parked as an orphan; another thread adopts that main heap
 * and gets the same sub-heap: two threads on one sub-heap, no lock.
 * Usage: sub_tls_after_exit [seconds]   (ok: / FAIL: / crash) */
#include "common.h"

#define N 256
static locus_heap_t *u;
static pthread_key_t key;
static volatile int a_in_dtor, stop;
static volatile long a_ops, b_ops;
static volatile int bad;

static void churn(unsigned tag, uint64_t seed, volatile long *ops) {
  void *blk[N] = {0};
  uint64_t s = seed;
  while (!stop && !bad) {
    unsigned i = rnd(&s) % N;
    if (blk[i]) {
      uint64_t *q = blk[i];
      if (q[0] != ((uint64_t)tag << 32 | i) || q[1] != (uintptr_t)q) {
        fprintf(stderr, "FAIL: thread %c: block %p stamp %#lx/%#lx, expected %#lx (another thread got it too)\n",
                tag, (void *)q, (unsigned long)q[0], (unsigned long)q[1], (unsigned long)((uint64_t)tag << 32 | i));
        bad = 1;
        return;
      }
      free(q);
      blk[i] = NULL;
    } else {
      uint64_t *q = locus_heap_malloc(u, 16 + (rnd(&s) % 200));
      if (!q) { fprintf(stderr, "FAIL: heap malloc %s\n", strerror(errno)); bad = 1; return; }
      q[0] = (uint64_t)tag << 32 | i;
      q[1] = (uintptr_t)q;
      blk[i] = q;
    }
    ++*ops;
  }
  for (unsigned i = 0; i < N; i++) free(blk[i]);
}

static void dtor(void *v) {
  (void)v;
  a_in_dtor = 1;                       /* locus's heap_abandon already ran (key 0 goes first) */
  churn('A', 12345, &a_ops);
}

static void *thread_a(void *arg) {
  (void)arg;
  pthread_setspecific(key, (void *)1);
  void *p = locus_heap_malloc(u, 32);  /* last_u = u, last_sub = this thread's sub-heap */
  free(p);
  return NULL;
}

static void *thread_b(void *arg) {
  (void)arg;
  free(malloc(16));                    /* adopts the orphan main heap A just parked (same node) */
  churn('B', 999, &b_ops);
  return NULL;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 2;
  free(malloc(1));
  pthread_key_create(&key, dtor);
  locus_heap_config_t c = LOCUS_HEAP_CONFIG_INIT;
  c.name = "shared-sub";
  u = locus_heap_create(&c);
  if (!u) FAIL("create");
  pthread_t a, b;
  pthread_create(&a, NULL, thread_a, NULL);
  while (!a_in_dtor) usleep(100);
  pthread_create(&b, NULL, thread_b, NULL);
  double t0 = now_s();
  while (now_s() - t0 < secs && !bad) usleep(10000);
  stop = 1;
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  if (bad) return 1;
  OK("no block handed out twice (A %ld ops in its destructor, B %ld ops)", a_ops, b_ops);
  return 0;
}
