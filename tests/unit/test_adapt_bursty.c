/* Guard for issue 28 (the auto profile must not cost more than uma on bursty
 * cross-thread small objects): two threads allocate blocks of 8 B - 16 KiB
 * in rounds, hand each batch to the other, which frees it; 2 ms pauses
 * between rounds and an idle spell of 700 ms (longer than any large-segment
 * window) after every 15th round, 6 bursts in all (about 4.5 s). Before the
 * fix the controller released whole 4 MiB chunks at the first tick after
 * each idle spell and mapped them again a moment later (regrets, page
 * faults). When every burst took less than MAX_BURST_S, the test fails if
 * the auto profile makes more than MAX_REGRETS regretted releases (the
 * report's "regrets", both kinds) or decays more than MAX_DECAYED bytes
 * over the run; with longer bursts (a loaded debug build), if it regrets
 * more than one release per burst. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "locus.h"

#define MAX_REGRETS 1                   /* one regret may teach the window */
#define MAX_DECAYED ((long)4 << 20)     /* one chunk */
#define MAX_BURST_S 0.1             /* the decay bound holds for bursts shorter than this */
#define BURSTS 6
#define ROUNDS 15
#define PER 1000
#define PAUSE_MS 2
#define IDLE_MS 700

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts)) {
  }
}

/* An integer field of the sources in the JSON report, summed over them. */
static long sources_sum(const char *key) {
  static char buf[65536];
  locus_stats_json(buf, sizeof buf);
  char *s = strstr(buf, "\"sources\":[");
  CHECK(s, "sources in the report");
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  long sum = 0;
  int seen = 0;
  for (char *k = strstr(s, pat); k; k = strstr(k + 1, pat), seen++) sum += strtol(k + strlen(pat), NULL, 10);
  CHECK(seen, "field %s in the report", key);
  return sum;
}

static void *batch[2][2][PER];          /* [thread][round parity][block] */
static pthread_barrier_t bar;
static double longest_burst;           /* s, thread 0's view */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t r = 0x9e3779b97f4a7c15u * (uint64_t)(id + 1);
  double t0 = now_s();
  for (int k = 0; k < BURSTS * ROUNDS; k++) {
    void **out = batch[id][k & 1], **in = batch[1 - id][k & 1];
    for (int i = 0; i < PER; i++) {
      r = r * 6364136223846793005u + 1442695040888963407u;
      size_t n = 8 + (r >> 33) % (16384 - 8 + 1);
      uint64_t *p = malloc(n);
      CHECK(p, "malloc(%zu)", n);
      p[0] = n;                          /* checked by the thread that frees it */
      out[i] = p;
    }
    pthread_barrier_wait(&bar);
    for (int i = 0; i < PER; i++) {
      uint64_t *p = in[i];
      CHECK(p[0] >= 8 && p[0] <= 16384, "block %p intact (head %lu)", (void *)p, (unsigned long)p[0]);
      free(p);
    }
    if ((k + 1) % ROUNDS == 0) {
      double t = now_s();
      if (id == 0 && t - t0 > longest_burst) longest_burst = t - t0;
      sleep_ms(IDLE_MS);
      t0 = now_s();
    } else {
      sleep_ms(PAUSE_MS);
    }
  }
  return NULL;
}

int main(void) {
  CHECK(locus_set_profile("auto") == 0, "set auto");
  locus_release();
  long r0 = sources_sum("regrets"), d0 = sources_sum("decayed");
  locus_stats_t s0, s1;
  locus_stats_get(&s0);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0, "thread");
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  locus_stats_get(&s1);
  long regrets = sources_sum("regrets") - r0, decayed = sources_sum("decayed") - d0;
  printf("bursty: %ld regrets, %ld KiB decayed, %lu mmap, %lu munmap, longest burst %.0f ms\n", regrets,
         decayed >> 10, (unsigned long)(s1.mmap_calls - s0.mmap_calls),
         (unsigned long)(s1.munmap_calls - s0.munmap_calls), longest_burst * 1000);
  /* A burst longer than the shortest chunk window can leave a chunk unused
   * for longer than the window within it (the debug build under load:
   * bursts of seconds): a release the rule makes, and its re-map a regret
   * the rule counts, not one the pattern should cause. Then at most one
   * regret per burst. */
  if (longest_burst < MAX_BURST_S) {
    CHECK(regrets <= MAX_REGRETS, "at most %d regretted releases on the bursty pattern (%ld)", MAX_REGRETS, regrets);
    CHECK(decayed <= MAX_DECAYED, "at most %ld KiB decayed between bursts (%ld KiB)", MAX_DECAYED >> 10, decayed >> 10);
  } else {
    CHECK(regrets <= BURSTS, "at most one regretted release per burst with bursts of %.0f ms (%ld)",
          longest_burst * 1000, regrets);
    printf("bursts of %.0f ms: the decay bound is not checked\n", longest_burst * 1000);
  }
  CHECK(locus_heap_check() == 0, "heap check");
  return TEST_DONE();
}
