/* Measures the copy threshold of liblocus-overlap.so (docs/overlap.md): for
 * a send from memory locus cannot guard (a global array here), the time the
 * program spends in MPI_Send when the library copies the data and sends the
 * copy in the background (LOCUS_OVERLAP_COPY_MAX large) against the time of
 * the blocking send (LOCUS_OVERLAP_COPY_MAX=0), rank 1 receiving all along.
 * Rank 0 prints one line per size: "size median_us_in_send mean_us_per_send"
 * (the median resists the other jobs of a loaded machine). Run it twice,
 * once per setting (bench/overlap/copy_threshold.sh). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char buf[8 << 20];
static double times[100000];

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  memset(buf, 1, sizeof buf);
  for (size_t n = 1024; n <= (4u << 20); n *= 2) {
    int r = (int)(reps * 65536 / (n > 65536 ? n : 65536));
    if (r < 20) r = 20;
    MPI_Barrier(MPI_COMM_WORLD);
    if (r > 100000) r = 100000;
    double t0 = MPI_Wtime();
    for (int k = 0; k < r; k++) {
      if (rank == 0) {
        double a = MPI_Wtime();
        MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        times[k] = MPI_Wtime() - a;
        for (volatile int spin = 0; spin < 20000; spin++) {   /* some computation between sends */
        }
      } else {
        MPI_Status st;
        MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &st);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double total = MPI_Wtime() - t0;
    if (rank == 0) {
      qsort(times, (size_t)r, sizeof *times, cmp);
      printf("%zu %.2f %.2f\n", n, times[r / 2] * 1e6, total / r * 1e6);
    }
  }
  MPI_Finalize();
  return 0;
}
