/* One copy per node (docs/sharing.md, "Shared tables"): every rank maps the
 * same 64 MiB table with locus_shared_table and reads all of it; the sum
 * over the ranks of the mapping's Pss (/proc/self/smaps: each page counted
 * 1/n in each of the n processes that map it) is about one table, where
 * private copies (a malloc'ed table filled in each rank, measured too) sum
 * to one table per rank. Prints the figures; fails when the shared sum
 * exceeds 1.25 tables, when the ranks do not see one content, when more
 * than one rank ran init, or when the file outlives the last release. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locus.h"

#define TABLE (64ul << 20)

static int inits;                      /* init calls in this rank */

static void fill(void *table, size_t size, void *arg) {
  (void)arg;
  inits++;
  uint64_t *w = table;
  for (size_t i = 0; i < size / 8; i++) w[i] = i * 0x9e3779b97f4a7c15ull;
}

static uint64_t checksum(const void *table, size_t size) {
  const uint64_t *w = table;
  uint64_t s = 0;
  for (size_t i = 0; i < size / 8; i++) s = s * 31 + w[i];
  return s;
}

/* Pss and Rss (KiB) of the mapping holding p. */
static void smaps_of(const void *p, long *pss, long *rss) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  int in = 0;
  *pss = *rss = -1;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char *dash = strchr(line, '-'), *sp = strchr(line, ' ');
    if (dash && sp && dash < sp && sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in) {
      sscanf(line, "Pss: %ld kB", pss);
      sscanf(line, "Rss: %ld kB", rss);
    }
  }
  if (f) fclose(f);
}

static int files_named(const char *name) {
  DIR *d = opendir("/dev/shm");
  size_t nl = strlen(name);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (!strncmp(e->d_name, "locus-table-", 12) && l > nl && !strcmp(e->d_name + l - nl, name)) n++;
  }
  if (d) closedir(d);
  return n;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  char name[64];
  int pid = getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  snprintf(name, sizeof name, "mpi-pss-%d", pid);   /* one per run */
  int fail = 0;

  void *t = locus_shared_table(name, TABLE, fill, NULL);
  if (!t) {
    fprintf(stderr, "rank %d: locus_shared_table: %s\n", rank, strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  uint64_t sum = checksum(t, TABLE), lo, hi;     /* reads every page: all mapped */
  MPI_Allreduce(&sum, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&sum, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  int total_inits;
  MPI_Allreduce(&inits, &total_inits, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);                     /* every rank maps it now */
  long pss, rss, sum_pss, sum_rss;
  smaps_of(t, &pss, &rss);
  MPI_Reduce(&pss, &sum_pss, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&rss, &sum_rss, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

  /* The private copies it replaces, for comparison. */
  void *priv = malloc(TABLE);
  fill(priv, TABLE, NULL);
  long ppss, prss, sum_ppss;
  smaps_of((char *)priv + TABLE / 2, &ppss, &prss);
  MPI_Reduce(&ppss, &sum_ppss, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  free(priv);

  if (rank == 0) {
    double mib = (double)TABLE / (1 << 20);
    printf("mpi_table: %d ranks, table %.0f MiB, init ran %d time(s), contents %s\n", nranks, mib, total_inits,
           lo == hi ? "identical" : "DIFFER");
    printf("mpi_table: shared table: sum of Rss %.1f MiB, sum of Pss %.1f MiB = %.3f table(s) (bound 1.25)\n",
           sum_rss / 1024.0, sum_pss / 1024.0, sum_pss * 1024.0 / TABLE);
    printf("mpi_table: private copies (malloc, filled): sum of Pss %.1f MiB = %.3f table(s)\n", sum_ppss / 1024.0,
           sum_ppss * 1024.0 / TABLE);
    if (lo != hi || total_inits != 1) fail = 1;
    if (pss < 0 || sum_pss * 1024.0 > 1.25 * TABLE || sum_pss * 1024.0 < 0.75 * TABLE) fail = 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (locus_shared_table_release(t) != 0) fail = 1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    int left = files_named(name);
    printf("mpi_table: files left after every rank released: %d\n", left);
    if (left) fail = 1;
    printf("mpi_table: %s\n", fail ? "FAILED" : "ok");
  }
  MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return fail;
}
