/* Memory pressure under setrlimit(RLIMIT_AS) (no privileges, no cgroups):
 * allocations of every size fail with NULL and errno ENOMEM, never a crash;
 * a failed realloc leaves the block intact; and once memory is freed the
 * same allocations succeed again. Also: a thread whose first allocation
 * happens while memory is exhausted, and sizes that can never fit.
 *
 *   lc_pressure [HEADROOM_MIB]    default 96
 */
#include "lc_common.h"
#include <malloc.h>
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#include <pthread.h>
#include <sys/resource.h>

static long headroom_mib;

/* Fill: allocate blocks of size n, chained through their first word, until
 * NULL (or until twice the headroom, which must not fit). */
typedef struct chain { struct chain *next; } chain_t;
static long fill(size_t n, chain_t **head, int *err, int use_calloc) {
  long count = 0;
  size_t cap = (size_t)(2 * headroom_mib + 64) << 20;
  *err = 0;
  for (;;) {
    if ((size_t)count * n > cap) break;
    errno = 0;
    chain_t *c = use_calloc ? calloc(1, n) : malloc(n);
    if (!c) { *err = errno; break; }
    c->next = *head;
    *head = c;
    count++;
  }
  return count;
}
static void drain(chain_t **head) {
  while (*head) { chain_t *n = (*head)->next; free(*head); *head = n; }
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int phase;           /* 1: allocate under exhaustion, 2: allocate after release */
static int thread_result[3];

static void *late_thread(void *arg) {
  (void)arg;
  for (int want = 1; want <= 2; want++) {
    pthread_mutex_lock(&mu);
    while (phase != want) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    errno = 0;
    void *p = malloc(200);
    /* 1 = success, 2 = NULL with ENOMEM, 3 = NULL with another errno */
    thread_result[want] = p ? 1 : (errno == ENOMEM ? 2 : 3);
    free(p);
    pthread_mutex_lock(&mu);
    phase = want * 10;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}
static void step(int to, int wait_for) {
  pthread_mutex_lock(&mu);
  phase = to;
  pthread_cond_broadcast(&cv);
  while (phase != wait_for) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv) {
  headroom_mib = argc > 1 ? atol(argv[1]) : 96;
  /* Impossible sizes first (no limit needed). */
  errno = 0;
  LC_CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM, "malloc(SIZE_MAX): errno %d", errno);
  errno = 0;
  LC_CHECK(malloc((size_t)PTRDIFF_MAX + 1) == NULL && errno == ENOMEM, "malloc(PTRDIFF_MAX+1)");
  errno = 0;
  LC_CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "calloc overflow: errno %d", errno);
  void *keep = malloc(1000);
  LC_CHECK(keep, "malloc");
  memset(keep, 0x5c, 1000);
  errno = 0;
  LC_CHECK(realloc(keep, SIZE_MAX - 4096) == NULL && errno == ENOMEM, "realloc(huge)");
  LC_CHECK(((unsigned char *)keep)[999] == 0x5c, "realloc failure damaged the block");

  pthread_t th;
  LC_CHECK(pthread_create(&th, NULL, late_thread, NULL) == 0, "pthread_create");
  /* Warm up: the first blocks of every kind, so that locus is initialised
   * before the limit is measured. */
  for (size_t n = 8; n < (64u << 20); n *= 2) { void *p = malloc(n); LC_CHECK(p, "warm-up malloc(%zu)", n); free(p); }

  long vm = lc_status_kb("VmSize");
  LC_CHECK(vm > 0, "VmSize");
  struct rlimit rl = {(rlim_t)(vm + headroom_mib * 1024) * 1024, RLIM_INFINITY};
  LC_CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
  lc_say("RLIMIT_AS = VmSize %ld KiB + %ld MiB\n", vm, headroom_mib);

  static const size_t sizes[] = {8, 16, 24, 48, 100, 256, 1000, 4096, 10000, 30000,
                                 65536, 100000, 262144, 1u << 20, 3u << 20, 8u << 20,
                                 33u << 20};
  int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
  for (int k = 0; k < nsizes; k++) {
    size_t n = sizes[k];
    int use_calloc = k % 3 == 1;
    chain_t *head = NULL;
    int err;
    long c1 = fill(n, &head, &err, use_calloc);
    LC_CHECK(err == ENOMEM, "size %zu: no ENOMEM after %ld blocks (%ld MiB), errno %d", n, c1,
             (long)((c1 * (long)n) >> 20), err);
    LC_CHECK(c1 > 0, "size %zu: not one block fits in %ld MiB of headroom", n, headroom_mib);
    /* Other entry points fail cleanly too, while memory is exhausted. */
    errno = 0;
    void *big = malloc((size_t)headroom_mib << 21);
    LC_CHECK(!big && errno == ENOMEM, "size %zu: malloc beyond the limit: %p errno %d", n, big, errno);
    void *pm = (void *)1;
    int rc = posix_memalign(&pm, 4096, (size_t)headroom_mib << 21);
    LC_CHECK(rc == ENOMEM, "posix_memalign beyond the limit returned %d", rc);
    errno = 0;
    LC_CHECK(aligned_alloc(65536, (size_t)headroom_mib << 21) == NULL && errno == ENOMEM, "aligned_alloc beyond the limit");
    errno = 0;
    void *r = realloc(keep, (size_t)headroom_mib << 21);
    LC_CHECK(!r && errno == ENOMEM, "realloc beyond the limit: %p errno %d", r, errno);
    LC_CHECK(((unsigned char *)keep)[0] == 0x5c && ((unsigned char *)keep)[999] == 0x5c, "failed realloc damaged the block");
    if (k == nsizes / 2) {
      /* A thread's very first allocation, with memory exhausted. */
      step(1, 10);
      LC_CHECK(thread_result[1] != 3, "first malloc of a new thread under exhaustion: NULL with errno != ENOMEM");
    }
    drain(&head);
    long c2 = fill(n, &head, &err, !use_calloc);
    drain(&head);
    lc_say("size %9zu: %7ld blocks until ENOMEM, %7ld after freeing them\n", n, c1, c2);
    LC_CHECK(c2 >= c1 / 2 && c2 > 0, "size %zu: after freeing %ld blocks only %ld fit again: memory not given back", n, c1, c2);
  }
  step(2, 20);
  lc_say("late thread: first malloc under exhaustion -> %s, later -> %s\n",
         thread_result[1] == 1 ? "ok" : "ENOMEM", thread_result[2] == 1 ? "ok" : "NULL");
  LC_CHECK(thread_result[2] == 1, "a thread cannot allocate after memory was freed");
  pthread_join(th, NULL);
  /* Mixed sizes to exhaustion, then the same sequence again. */
  long mixed[2] = {0, 0};
  for (int pass = 0; pass < 2; pass++) {
    chain_t *head = NULL;
    uint64_t rng = 3;
    for (;;) {
      size_t n = 8 + lc_rand(&rng) % ((lc_rand(&rng) % 8) ? 4000 : 2000000);
      errno = 0;
      chain_t *c = malloc(n);
      if (!c) { LC_CHECK(errno == ENOMEM, "mixed: errno %d", errno); break; }
      c->next = head; head = c; mixed[pass]++;
    }
    drain(&head);
  }
  lc_say("mixed sizes: %ld blocks until ENOMEM, %ld after freeing them\n", mixed[0], mixed[1]);
  LC_CHECK(mixed[1] >= mixed[0] / 2, "mixed sizes: only %ld of %ld blocks fit again after freeing", mixed[1], mixed[0]);
  void *p = malloc(4u << 20);
  LC_CHECK(p, "4 MiB do not fit after freeing everything");
  memset(p, 1, 4u << 20);
  free(p);
  free(keep);
  lc_say("lc_pressure: ok\n");
  return 0;
}
