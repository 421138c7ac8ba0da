/* A thread-specific-data destructor that allocates in the last destructor
 * round, after locus's own exit hook ran (glibc calls destructors at most
 * PTHREAD_DESTRUCTOR_ITERATIONS times, key by key in creation order; locus's
 * key is made first, so its hook runs first in every round): the thread gets
 * a heap again that no hook gives up. locus marks such a heap late and parks
 * it once the thread is gone. Before, each such thread kept its heap and
 * chunks for ever (200 threads: 823 MiB in use). Checks: after N such
 * threads, heaps are reused (live heaps stay few: with the threads gone
 * and locus_release() called, at most the main thread's and a handful), the
 * bytes the library holds stay bounded, and the blocks the destructors made
 * and handed over are intact.
 *
 *   lc_late_destructor [THREADS]   default 200
 */
#include "lc_common.h"
#include <limits.h>
#include <pthread.h>

#ifndef PTHREAD_DESTRUCTOR_ITERATIONS
#define PTHREAD_DESTRUCTOR_ITERATIONS 4
#endif

static pthread_key_t key;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *handed[4096];
static int nhanded;

/* Re-arms itself until the last round, then allocates: small blocks (a heap
 * and its chunk) and one kept, handed to main through `handed`. */
static void late(void *arg) {
  uintptr_t round = (uintptr_t)arg;
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(key, (void *)(round + 1));
    return;
  }
  void *tmp[64];
  for (int i = 0; i < 64; i++) tmp[i] = malloc(100 + (size_t)i * 16);
  for (int i = 0; i < 64; i++) free(tmp[i]);
  unsigned char *keep = malloc(200);
  if (!keep) return;
  memset(keep, 0x5a, 200);
  pthread_mutex_lock(&mu);
  if (nhanded < 4096) handed[nhanded++] = keep;
  else free(keep);
  pthread_mutex_unlock(&mu);
}

static void *worker(void *arg) {
  (void)arg;
  void *p = malloc(1000);              /* the thread's heap, given up by locus's hook in round 1 */
  free(p);
  pthread_setspecific(key, (void *)1);
  return NULL;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200;
  free(malloc(1));                     /* locus initialised: its key is made before ours */
  LC_CHECK(pthread_key_create(&key, late) == 0, "pthread_key_create");
  for (int i = 0; i < n; i++) {       /* one at a time: each exits before the next needs a heap */
    pthread_t t;
    LC_CHECK(pthread_create(&t, NULL, worker, NULL) == 0, "pthread_create");
    LC_CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  }
  LC_CHECK(nhanded == n, "every last-round destructor allocated: %d of %d", nhanded, n);
  for (int i = 0; i < nhanded; i++) {
    unsigned char *b = handed[i];
    LC_CHECK(b[0] == 0x5a && b[199] == 0x5a, "block %d intact", i);
    free(b);
  }
  if (lc_have_locus()) {
    locus_release();
    locus_stats_t st;
    locus_stats_get(&st);
    lc_say("lc_late_destructor: %d threads, %llu heaps live, %llu orphaned, %llu bytes in use\n", n,
           (unsigned long long)st.heaps_live, (unsigned long long)st.heaps_orphaned,
           (unsigned long long)st.bytes_in_use);
    LC_CHECK(st.heaps_live <= 3, "late heaps parked once their threads are gone: %llu live after %d threads",
             (unsigned long long)st.heaps_live, n);
    LC_CHECK(st.heaps_live + st.heaps_orphaned <= 6, "heaps reused: %llu made for %d threads",
             (unsigned long long)(st.heaps_live + st.heaps_orphaned), n);
  }
  lc_say("lc_late_destructor: ok\n");
  return 0;
}
