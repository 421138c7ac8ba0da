/* A thread-specific-data destructor that allocates in the last destructor
 * round, after locus's own exit hook ran (glibc calls destructors at most
 * PTHREAD_DESTRUCTOR_ITERATIONS times, key by key in creation order; locus's
 * key is made first, so its hook runs first in every round): the thread gets
 * a heap again that no hook gives up. locus marks such a heap late and parks
 * it once the thread is gone; a heap whose thread never ran the hook (its
 * first allocation in that last round) is found by a sweep of the live heaps
 * every so many heaps made. Before, each such thread kept its heap and
 * chunks for ever (200 threads: 201 live heaps, 804 MiB in use). Phases:
 *   1. threads that allocated before their destructors (the hook ran);
 *   2. threads whose first allocation is in the last round (no hook);
 *   3. a last-round destructor that captures a user heap and exits with the
 *      capture on: after the join, the heap can be destroyed;
 * Each phase checks that live heaps stay few after locus_release() and that
 * the blocks the destructors handed over are intact.
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
static int alloc_first = 1;            /* phase 1: the worker allocates before its destructors */
static locus_heap_t *captured;         /* phase 3: the last round captures this heap */

/* Re-arms itself until the last round, then allocates: small blocks (a heap
 * and its chunk) and one kept, handed to main through `handed`. */
static void late(void *arg) {
  uintptr_t round = (uintptr_t)arg;
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(key, (void *)(round + 1));
    return;
  }
  if (captured) locus_heap_capture(captured);   /* never ended: the thread's exit must end it */
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
  if (alloc_first) {
    void *p = malloc(1000);            /* the thread's heap, given up by locus's hook in round 1 */
    free(p);
  }
  pthread_setspecific(key, (void *)1);
  return NULL;
}

static void run_threads(int n, const char *phase) {
  nhanded = 0;
  for (int i = 0; i < n; i++) {       /* one at a time: each exits before the next needs a heap */
    pthread_t t;
    LC_CHECK(pthread_create(&t, NULL, worker, NULL) == 0, "pthread_create");
    LC_CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  }
  LC_CHECK(nhanded == n, "%s: every last-round destructor allocated: %d of %d", phase, nhanded, n);
  for (int i = 0; i < nhanded; i++) {
    unsigned char *b = handed[i];
    LC_CHECK(b[0] == 0x5a && b[199] == 0x5a, "%s: block %d intact", phase, i);
    free(b);
  }
  if (!lc_have_locus()) return;
  locus_release();
  locus_stats_t st;
  locus_stats_get(&st);
  lc_say("lc_late_destructor: %s: %d threads, %llu heaps live, %llu orphaned, %llu bytes in use\n", phase, n,
         (unsigned long long)st.heaps_live, (unsigned long long)st.heaps_orphaned,
         (unsigned long long)st.bytes_in_use);
  LC_CHECK(st.heaps_live <= 3, "%s: heaps parked once their threads are gone: %llu live after %d threads", phase,
           (unsigned long long)st.heaps_live, n);
  /* Late heaps are parked at the next thread's heap; unhooked ones at a
   * sweep of the live heaps when a heap must be made (every one while the
   * sweeps find some), and only once the kernel has released the thread
   * (pthread_join returns a little before: tgkill still finds it). */
  unsigned long long made = st.heaps_live + st.heaps_orphaned, bound = alloc_first ? 6u : 12u;
  LC_CHECK(made <= bound, "%s: heaps reused: %llu made for %d threads (bound %llu)", phase, made, n, bound);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200;
  free(malloc(1));                     /* locus initialised: its key is made before ours */
  LC_CHECK(pthread_key_create(&key, late) == 0, "pthread_key_create");
  run_threads(n, "allocated before");
  alloc_first = 0;
  run_threads(n, "first allocation in the last round");
  if (lc_have_locus()) {
    locus_heap_config_t cfg = LOCUS_HEAP_CONFIG_INIT;
    captured = locus_heap_create(&cfg);
    LC_CHECK(captured, "locus_heap_create");
    for (alloc_first = 1; alloc_first >= 0; alloc_first--) {   /* late, then unhooked */
      pthread_t t;
      LC_CHECK(pthread_create(&t, NULL, worker, NULL) == 0 && pthread_join(t, NULL) == 0, "capture thread");
      locus_heap_destroy(captured);    /* aborted: "is captured by 1 thread(s)" */
      captured = locus_heap_create(&cfg);
      LC_CHECK(captured, "locus_heap_create");
    }
    locus_heap_destroy(captured);
    captured = NULL;
    lc_say("lc_late_destructor: a heap captured by a late thread destroyed after its join\n");
  }
  lc_say("lc_late_destructor: ok\n");
  return 0;
}
