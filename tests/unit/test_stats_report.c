/* The statistics report lists at most 16 heaps and says so when it leaves
 * some out: with 17 heaps (main and 16 threads, each holding a block) the
 * 17th was left out without the note (it came from the 18th on). */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "locus.h"

static pthread_barrier_t bar;
static void *volatile sink[64];

static void *worker(void *a) {
  sink[(long)a] = malloc(100);
  pthread_barrier_wait(&bar);   /* every heap exists */
  pthread_barrier_wait(&bar);   /* the report is written */
  return NULL;
}

/* Report lines of heaps and whether the note is there, for total heaps. */
static void report_with(int threads) {
  char path[] = "/tmp/locus-stats-report.XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  CHECK(locus_option_set("stats_file", path) == 0, "set stats_file");
  pthread_t t[64];
  pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
  for (long i = 0; i < threads; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
  pthread_barrier_wait(&bar);
  locus_stats_t st;
  locus_stats_get(&st);
  locus_stats_print();
  pthread_barrier_wait(&bar);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  FILE *f = fopen(path, "r");
  CHECK(f, "open %s", path);
  char line[1024];
  int shown = 0, note = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "  heap ", 7) && strstr(line, " tid ")) shown++;
    if (strstr(line, "(more heaps not shown)")) note++;
  }
  fclose(f);
  unlink(path);
  unsigned long total = (unsigned long)(st.heaps_live + st.heaps_orphaned);
  CHECK(shown == (int)(total < 16 ? total : 16), "%d heaps shown of %lu", shown, total);
  CHECK(note == (total > 16), "%lu heaps, %d shown: note %d times", total, shown, note);
}

int main(void) {
  sink[63] = malloc(100);
  locus_stats_t st;
  locus_stats_get(&st);
  CHECK(st.heaps_live + st.heaps_orphaned == 1, "one heap at start: %lu", (unsigned long)st.heaps_live);
  report_with(16);   /* 17 heaps: one left out, with the note */
  return TEST_DONE();
}
