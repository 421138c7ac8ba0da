/* Thread churn: thousands of short threads that allocate and exit, blocks
 * freed (and realloc'ed) by other threads after their owner has exited, and
 * a bound on resident memory after 10,000 allocating threads.
 *
 *   lc_thread_churn [CHURN_THREADS] [RSS_THREADS] [RSS_BOUND_MIB]
 *   defaults:        4000            10000         192
 */
#include "lc_common.h"
#include <pthread.h>

#define MAILBOX 512

/* Blocks handed over between threads: a thread takes the block in a slot
 * (allocated by some earlier, usually dead, thread), checks and frees it (or
 * reallocs it), and leaves one of its own. */
typedef struct { void *p; size_t n; uint64_t tag; } slot_t;
static slot_t mailbox[MAILBOX];
static pthread_mutex_t mailbox_mu = PTHREAD_MUTEX_INITIALIZER;
static long corrupt, foreign_frees, foreign_reallocs, alloc_fail;
static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;

static void count(long *c) { pthread_mutex_lock(&count_mu); (*c)++; pthread_mutex_unlock(&count_mu); }

static void swap_mailbox(uint64_t *rng, void *p, size_t n, uint64_t tag) {
  unsigned i = (unsigned)(lc_rand(rng) % MAILBOX);
  pthread_mutex_lock(&mailbox_mu);
  slot_t old = mailbox[i];
  mailbox[i] = (slot_t){p, n, tag};
  pthread_mutex_unlock(&mailbox_mu);
  if (!old.p) return;
  if (!lc_stamp_ok(old.p, old.n, old.tag)) count(&corrupt);
  if (lc_rand(rng) % 4 == 0) {  /* grow a dead thread's block, then free it */
    size_t nn = old.n * 2 + 100;
    void *q = realloc(old.p, nn);
    if (!q) { count(&alloc_fail); free(old.p); return; }
    if (!(((unsigned char *)q)[0] == (unsigned char)old.tag)) count(&corrupt);
    lc_stamp(q, nn, old.tag);
    if (!lc_stamp_ok(q, nn, old.tag)) count(&corrupt);
    free(q);
    count(&foreign_reallocs);
  } else {
    free(old.p);
  }
  count(&foreign_frees);
}

static size_t pick_size(uint64_t *rng) {
  uint64_t r = lc_rand(rng);
  switch (r % 16) {
    case 0: return 300 * 1024 + r % 4096;     /* medium/large */
    case 1: return 16 * 1024 + r % 50000;
    case 2: case 3: return 1024 + r % 8192;
    default: return 8 + r % 512;              /* small */
  }
}

static void *churn_thread(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  void *keep[64];
  size_t keepn[64];
  int nk = 0;
  for (int i = 0; i < 200; i++) {
    size_t n = pick_size(&rng);
    void *p = (lc_rand(&rng) % 8) ? malloc(n) : calloc(1, n);
    if (!p) { count(&alloc_fail); continue; }
    lc_stamp(p, n, rng);
    if (!lc_stamp_ok(p, n, rng)) count(&corrupt);
    if (nk < 64 && lc_rand(&rng) % 3 == 0) { keep[nk] = p; keepn[nk] = n; lc_stamp(p, n, 77); nk++; }
    else free(p);
  }
  if (lc_rand(&rng) % 50 == 0) {  /* an occasional block of 2 MiB and more */
    size_t n = (2u << 20) + lc_rand(&rng) % (1u << 20);
    void *p = malloc(n);
    if (p) { memset(p, 1, n); lc_stamp(p, n, 0x5a5a); swap_mailbox(&rng, p, n, 0x5a5a); }
    else count(&alloc_fail);
  }
  for (int i = 0; i < nk; i++) {
    if (!lc_stamp_ok(keep[i], keepn[i], 77)) count(&corrupt);
    if (i < 4) { lc_stamp(keep[i], keepn[i], rng + i); swap_mailbox(&rng, keep[i], keepn[i], rng + i); }
    else free(keep[i]);
  }
  return NULL;
}

/* RSS phase: each thread allocates ~200 KiB, touches it, frees nearly all of
 * it and hands two small blocks over to later threads. */
static void *rss_thread(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg * 0x2545f4914f6cdd1dull + 7;
  void *small[64];
  for (int i = 0; i < 64; i++) {
    small[i] = malloc(16 + (size_t)i * 8);
    if (!small[i]) { count(&alloc_fail); continue; }
    memset(small[i], i, 16 + (size_t)i * 8);
  }
  void *mid = malloc(128 * 1024);
  if (mid) memset(mid, 3, 128 * 1024); else count(&alloc_fail);
  void *mid2 = malloc(40 * 1024);
  if (mid2) memset(mid2, 4, 40 * 1024); else count(&alloc_fail);
  free(mid);
  free(mid2);
  for (int i = 2; i < 64; i++) free(small[i]);
  for (int i = 0; i < 2; i++)
    if (small[i]) { lc_stamp(small[i], 16 + (size_t)i * 8, rng + i); swap_mailbox(&rng, small[i], 16 + (size_t)i * 8, rng + i); }
  return NULL;
}

static void run_waves(void *(*fn)(void *), long total, int wave, long seed0) {
  pthread_t t[64];
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, 256 * 1024);
  for (long done = 0; done < total; done += wave) {
    int n = (int)(total - done < wave ? total - done : wave);
    for (int i = 0; i < n; i++) {
      int rc = pthread_create(&t[i], &at, fn, (void *)(uintptr_t)(seed0 + done + i + 1));
      LC_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
    }
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  }
  pthread_attr_destroy(&at);
}

/* A few threads are never joined: detached, they exit on their own. */
static void run_detached(int n) {
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  for (int i = 0; i < n; i++) {
    pthread_t t;
    int rc = pthread_create(&t, &at, churn_thread, (void *)(uintptr_t)(900000 + i));
    LC_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  pthread_attr_destroy(&at);
}

static void empty_mailbox(void) {
  for (int i = 0; i < MAILBOX; i++) {
    if (mailbox[i].p) {
      if (!lc_stamp_ok(mailbox[i].p, mailbox[i].n, mailbox[i].tag)) corrupt++;
      free(mailbox[i].p);
      mailbox[i].p = NULL;
    }
  }
}

int main(int argc, char **argv) {
  long churn = argc > 1 ? atol(argv[1]) : 4000;
  long rss_threads = argc > 2 ? atol(argv[2]) : 10000;
  long bound_mib = argc > 3 ? atol(argv[3]) : 192;

  /* 1. Churn: waves of 8 concurrent threads, plus detached ones. */
  run_detached(16);
  run_waves(churn_thread, churn, 8, 0);
  usleep(100 * 1000);  /* let the detached threads finish (not asserted) */
  lc_say("churn: %ld threads, %ld foreign frees (%ld via realloc), %ld corrupt, %ld failed allocations\n",
         churn, foreign_frees, foreign_reallocs, corrupt, alloc_fail);
  LC_CHECK(corrupt == 0, "%ld blocks corrupted", corrupt);
  LC_CHECK(alloc_fail == 0, "%ld allocations failed", alloc_fail);
  LC_CHECK(foreign_frees > churn / 2, "only %ld foreign frees: the test did not test", foreign_frees);
  pthread_mutex_lock(&mailbox_mu);
  empty_mailbox();
  pthread_mutex_unlock(&mailbox_mu);

  /* 2. Resident memory across 10,000 allocating threads. */
  run_waves(rss_thread, 200, 16, 1000000);  /* warm up: first macro-blocks, stacks */
  long rss0 = lc_status_kb("VmRSS");
  run_waves(rss_thread, rss_threads, 16, 2000000);
  long rss1 = lc_status_kb("VmRSS");
  pthread_mutex_lock(&mailbox_mu);
  empty_mailbox();
  pthread_mutex_unlock(&mailbox_mu);
  if (locus_collect) locus_collect();
  long rss2 = lc_status_kb("VmRSS");
  size_t released = locus_release ? locus_release() : 0;
  long rss3 = lc_status_kb("VmRSS");
  lc_say("rss: %ld KiB before, %ld KiB after %ld threads (+%ld KiB), %ld KiB after freeing the handed-over blocks, "
         "%ld KiB after locus_release (%zu bytes released); bound +%ld MiB\n",
         rss0, rss1, rss_threads, rss1 - rss0, rss2, rss3, released, bound_mib);
  if (locus_stats_get) {
    locus_stats_t st;
    memset(&st, 0, sizeof st);
    locus_stats_get(&st);
    lc_say("locus: heaps_live %llu heaps_orphaned %llu bytes_in_use %llu bytes_cached %llu\n",
           (unsigned long long)st.heaps_live, (unsigned long long)st.heaps_orphaned,
           (unsigned long long)st.bytes_in_use, (unsigned long long)st.bytes_cached);
    /* Every thread has exited and (nearly) all of their blocks are freed:
     * the heaps must not pile up, one per dead thread. */
    LC_CHECK(st.heaps_live + st.heaps_orphaned < 1000,
             "%llu live + %llu orphaned heaps after %ld exited threads: heaps leak",
             (unsigned long long)st.heaps_live, (unsigned long long)st.heaps_orphaned, churn + rss_threads);
  }
  LC_CHECK(corrupt == 0, "%ld blocks corrupted", corrupt);
  LC_CHECK(alloc_fail == 0, "%ld allocations failed", alloc_fail);
  LC_CHECK(rss0 > 0 && rss1 > 0, "cannot read VmRSS");
  LC_CHECK(rss1 - rss0 < bound_mib * 1024,
           "resident memory grew by %ld KiB over %ld threads (bound %ld MiB): per-thread memory is not reclaimed",
           rss1 - rss0, rss_threads, bound_mib);
  lc_say("lc_thread_churn: ok\n");
  return 0;
}
