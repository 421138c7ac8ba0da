/* The limit of a heap over locus's memory is checked per growth against the
 * sum of the sub-heaps' counters, with no reservation: threads growing at
 * once each pass the check. Also: what the heap holds after a few threads
 * allocate small blocks up to ENOMEM (each sub-heap takes whole 4 MiB chunks).
 * Usage: limit_threads [threads] [limitMiB] */
#include "common.h"

static locus_heap_t *u;
static size_t limit;
static pthread_barrier_t bar;
static size_t got[64];

static void *worker(void *arg) {
  long id = (long)arg;
  pthread_barrier_wait(&bar);
  size_t n = 0;
  /* large blocks: each one is a growth checked against the limit */
  for (;;) {
    void *p = locus_heap_malloc(u, 3 * MiB);
    if (!p) break;
    memset(p, 1, 4096);
    n += 3 * MiB;
  }
  got[id] = n;
  return NULL;
}

int main(int argc, char **argv) {
  int t = argc > 1 ? atoi(argv[1]) : 8;
  limit = (argc > 2 ? atoi(argv[2]) : 16) * MiB;
  int worst_over = 0;
  for (int round = 0; round < 50; round++) {
    u = mkheap_cfg(NULL, 0, limit, 0, "limited");
    pthread_barrier_init(&bar, NULL, t);
    pthread_t th[64];
    for (long i = 0; i < t; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
    locus_stats_t st;
    locus_heap_stats(u, &st);
    size_t user = 0;
    for (int i = 0; i < t; i++) user += got[i];
    if (st.bytes_in_use > limit || st.peak_footprint > limit) {
      NOTE("round %d: limit %zu MiB, heap holds %.1f MiB (peak %.1f MiB), blocks %zu MiB", round, limit / MiB,
           st.bytes_in_use / (double)MiB, st.peak_footprint / (double)MiB, user / MiB);
      worst_over++;
    }
    locus_heap_destroy(u);
    pthread_barrier_destroy(&bar);
  }
  if (worst_over) FAIL("limit exceeded in %d of 50 rounds", worst_over);
  OK("limit held in 50 rounds of %d threads", t);
  return 0;
}
