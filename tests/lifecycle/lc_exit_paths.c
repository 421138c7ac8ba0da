/* Allocation at the edges of a process's life: in a constructor, in atexit
 * handlers (one of which starts a thread), in __attribute__((destructor))
 * code, in pthread thread-specific-data destructors (which re-arm their key,
 * so they run several rounds), and exit() while detached threads are still
 * inside malloc/free. The last destructor prints the marker the test looks
 * for; the process must also exit 0.
 */
#include "lc_common.h"
#include <pthread.h>
#include <stdatomic.h>

#define NTHREADS 64
static atomic_long tsd_calls, tsd_bad;
static pthread_key_t key_rearm, key_big;
static void *ctor_block, *kept_by_atexit[200];
static size_t kept_size[200];
static atomic_int ctor_ok;
static int checks_failed;

__attribute__((constructor)) static void early(void) {
  ctor_block = malloc(12345);
  if (ctor_block) { memset(ctor_block, 0x42, 12345); ctor_ok = 1; }
}

/* TSD: re-arm with a fresh block for a few rounds (glibc runs up to
 * PTHREAD_DESTRUCTOR_ITERATIONS rounds while values are non-NULL). */
static void rearm_dtor(void *v) {
  size_t *p = v;
  atomic_fetch_add(&tsd_calls, 1);
  if (p[0] != p[1] * 3 + 7) atomic_fetch_add(&tsd_bad, 1);
  size_t round = p[1];
  free(p);
  if (round < 3) {
    size_t *q = malloc(64 + round * 5000);
    if (!q) { atomic_fetch_add(&tsd_bad, 1); return; }
    q[1] = round + 1;
    q[0] = q[1] * 3 + 7;
    pthread_setspecific(key_rearm, q);
  }
}
static void big_dtor(void *v) {
  atomic_fetch_add(&tsd_calls, 1);
  unsigned char *p = v;
  if (p[0] != 9 || p[(3u << 20) - 1] != 9) atomic_fetch_add(&tsd_bad, 1);
  free(p);
  /* allocate and free in a destructor, a large block too */
  void *a = malloc(100), *b = malloc(5u << 20);
  if (!a || !b) atomic_fetch_add(&tsd_bad, 1);
  if (b) memset(b, 1, 4096);
  free(b);
  free(a);
}

static void *tsd_thread(void *arg) {
  size_t *p = malloc(32);
  p[1] = 0;
  p[0] = 7;
  pthread_setspecific(key_rearm, p);
  unsigned char *big = malloc(3u << 20);
  big[0] = big[(3u << 20) - 1] = 9;
  pthread_setspecific(key_big, big);
  return arg;
}

/* Detached threads that are inside malloc/free when exit() runs. */
static void *busy_thread(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg;
  void *slot[16] = {0};
  for (;;) {
    int i = (int)(lc_rand(&rng) % 16);
    free(slot[i]);
    slot[i] = malloc(1 + lc_rand(&rng) % 100000);
  }
  return NULL;
}

static void *atexit_thread(void *arg) {
  void *v[100];
  for (int i = 0; i < 100; i++) { v[i] = malloc(1000 + (size_t)i * 100); if (!v[i]) return (void *)1; }
  for (int i = 0; i < 100; i++) free(v[i]);
  return arg;
}

/* Registered first, runs last among the atexit handlers: frees what the
 * other handler kept. */
static void atexit_last(void) {
  for (int i = 0; i < 200; i++) {
    if (!lc_stamp_ok(kept_by_atexit[i], kept_size[i], (uint64_t)i * 3)) { lc_say("FAIL: atexit block %d corrupted\n", i); checks_failed++; }
    free(kept_by_atexit[i]);
  }
  lc_say("atexit (second handler): freed 200 blocks\n");
}

static void atexit_first(void) {
  for (int i = 0; i < 400; i++) {
    size_t n = (i % 50 == 0) ? (size_t)(1 + i / 50) << 20 : 1 + (size_t)i * 37;
    void *p = (i % 3) ? malloc(n) : calloc(1, n);
    if (!p) { lc_say("FAIL: allocation in atexit handler\n"); checks_failed++; continue; }
    if (i % 2) { free(p); continue; }
    p = realloc(p, n + 1000);
    if (!p) { lc_say("FAIL: realloc in atexit handler\n"); checks_failed++; continue; }
    kept_by_atexit[i / 2] = p;
    kept_size[i / 2] = n + 1000;
    lc_stamp(p, n + 1000, (uint64_t)(i / 2) * 3);
  }
  pthread_t t;
  void *res = (void *)1;
  if (pthread_create(&t, NULL, atexit_thread, NULL) == 0) pthread_join(t, &res);
  if (res) { lc_say("FAIL: thread started by an atexit handler\n"); checks_failed++; }
  lc_say("atexit (first handler): allocated, kept 200 blocks, ran a thread\n");
}

__attribute__((destructor)) static void late(void) {
  unsigned char *c = ctor_block;
  int ok = ctor_ok && c[0] == 0x42 && c[12344] == 0x42;
  free(ctor_block);
  void *v[64];
  for (int i = 0; i < 64; i++) {
    v[i] = malloc((size_t)1 << (i % 24));
    if (!v[i]) ok = 0; else memset(v[i], i, 1);
  }
  for (int i = 0; i < 64; i++) {
    void *q = realloc(v[i], ((size_t)1 << (i % 24)) + 77);
    if (!q) { ok = 0; free(v[i]); } else free(q);
  }
  if (!ok || checks_failed) { lc_say("FAIL: destructor checks (ok=%d, earlier failures %d)\n", ok, checks_failed); _exit(1); }
  lc_say("lc_exit_paths: all exit-time checks passed\n");
}

int main(void) {
  LC_CHECK(atexit(atexit_last) == 0, "atexit");
  LC_CHECK(atexit(atexit_first) == 0, "atexit");
  LC_CHECK(pthread_key_create(&key_rearm, rearm_dtor) == 0, "key");
  LC_CHECK(pthread_key_create(&key_big, big_dtor) == 0, "key");

  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) LC_CHECK(pthread_create(&t[i], NULL, tsd_thread, NULL) == 0, "pthread_create");
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  /* per thread: 4 rounds of rearm_dtor + 1 big_dtor */
  lc_say("tsd destructors: %ld calls, %ld errors (expected %d calls)\n",
         atomic_load(&tsd_calls), atomic_load(&tsd_bad), NTHREADS * 5);
  LC_CHECK(atomic_load(&tsd_bad) == 0, "TSD destructor saw corrupted data or failed to allocate");
  LC_CHECK(atomic_load(&tsd_calls) == NTHREADS * 5, "TSD destructors ran %ld times", atomic_load(&tsd_calls));

  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  for (int i = 0; i < 2; i++) {
    pthread_t b;
    LC_CHECK(pthread_create(&b, &at, busy_thread, (void *)(uintptr_t)(i + 11)) == 0, "pthread_create");
  }
  usleep(20 * 1000);
  return 0;  /* exit(): atexit handlers, destructors, while busy threads run */
}
