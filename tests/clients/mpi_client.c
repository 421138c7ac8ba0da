/* MPI client for the locus tests: ranks allocate, exchange and free buffers of
 * many sizes (8 B .. 8 MiB) with blocking, non-blocking and collective calls,
 * check every byte received, and rank 0 prints a deterministic summary.
 * Run with 2 (or more) ranks, with and without LD_PRELOAD of the allocator;
 * the outputs must be identical and say "errors 0".
 *
 *   mpirun -np 2 locus_client_mpi [ROUNDS]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int rank, size_t size, int round, size_t i) {
  return (unsigned char)((i * 131u) ^ (size * 7u) ^ (unsigned)(rank * 29 + round * 17));
}

static void fill(unsigned char *b, int rank, size_t size, int round) {
  for (size_t i = 0; i < size; i++) b[i] = pattern(rank, size, round, i);
}

static long check(const unsigned char *b, int rank, size_t size, int round) {
  long bad = 0;
  for (size_t i = 0; i < size; i++) bad += b[i] != pattern(rank, size, round, i);
  return bad;
}

static uint64_t fold(uint64_t h, const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n; i += 61) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nproc;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nproc);
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  int right = (rank + 1) % nproc, left = (rank + nproc - 1) % nproc;
  long errors = 0, nalloc = 0;
  uint64_t hash = 1469598103934665603ull;

  /* Sizes: every power of two from 8 B to 8 MiB and odd sizes around them. */
  size_t sizes[80];
  int ns = 0;
  for (size_t s = 8; s <= (8u << 20); s *= 2) {
    sizes[ns++] = s;
    sizes[ns++] = s + 3;
    if (s > 8) sizes[ns++] = s - 5;
  }

  for (int round = 0; round < rounds; round++) {
    /* 1. Blocking ring exchange, one fresh buffer pair per size. */
    for (int k = 0; k < ns; k++) {
      size_t sz = sizes[k];
      unsigned char *out = malloc(sz), *in = malloc(sz);
      if (!out || !in) { errors++; free(out); free(in); continue; }
      nalloc += 2;
      fill(out, rank, sz, round);
      MPI_Sendrecv(out, (int)sz, MPI_BYTE, right, k, in, (int)sz, MPI_BYTE, left, k,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      errors += check(in, left, sz, round);
      hash = fold(hash, in, sz);
      free(out);
      free(in);
    }

    /* 2. Non-blocking: every size in flight at once, buffers freed in a
     *    different order than allocated; receive buffers grown by realloc. */
    unsigned char **outs = calloc((size_t)ns, sizeof *outs);
    unsigned char **ins = calloc((size_t)ns, sizeof *ins);
    MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * (size_t)ns);
    for (int k = 0; k < ns; k++) {
      outs[k] = malloc(sizes[k]);
      ins[k] = malloc(sizes[k] / 2 + 1);
      unsigned char *grown = realloc(ins[k], sizes[k]);
      if (!outs[k] || !grown) { errors++; MPI_Abort(MPI_COMM_WORLD, 2); }
      ins[k] = grown;
      nalloc += 2;
      fill(outs[k], rank, sizes[k], round + 100);
      MPI_Irecv(ins[k], (int)sizes[k], MPI_BYTE, left, 1000 + k, MPI_COMM_WORLD, &req[2 * k]);
      MPI_Isend(outs[k], (int)sizes[k], MPI_BYTE, right, 1000 + k, MPI_COMM_WORLD, &req[2 * k + 1]);
    }
    MPI_Waitall(2 * ns, req, MPI_STATUSES_IGNORE);
    for (int k = ns - 1; k >= 0; k -= 2) { errors += check(ins[k], left, sizes[k], round + 100); free(ins[k]); ins[k] = NULL; }
    for (int k = 0; k < ns; k++) {
      if (ins[k]) { errors += check(ins[k], left, sizes[k], round + 100); hash = fold(hash, ins[k], sizes[k]); free(ins[k]); }
      free(outs[k]);
    }
    free(outs); free(ins); free(req);

    /* 3. Collectives on calloc'd and MPI_Alloc_mem'd buffers. */
    size_t csz = (size_t)1 << (12 + round % 8);  /* 4 KiB .. 512 KiB per rank */
    unsigned char *mine = calloc(csz, 1), *all;
    for (size_t i = 0; i < csz; i++) errors += mine[i] != 0;
    fill(mine, rank, csz, round + 200);
    if (MPI_Alloc_mem((MPI_Aint)(csz * (size_t)nproc), MPI_INFO_NULL, &all) != MPI_SUCCESS) errors++;
    MPI_Allgather(mine, (int)csz, MPI_BYTE, all, (int)csz, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; r < nproc; r++) errors += check(all + (size_t)r * csz, r, csz, round + 200);
    MPI_Free_mem(all);
    free(mine);

    double *vec = malloc(sizeof(double) * 100000), *sum = malloc(sizeof(double) * 100000);
    for (int i = 0; i < 100000; i++) vec[i] = (double)(i % 1000) * (rank + 1);
    MPI_Allreduce(vec, sum, 100000, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double expect_factor = (double)nproc * (nproc + 1) / 2.0;
    for (int i = 0; i < 100000; i++) errors += sum[i] != (double)(i % 1000) * expect_factor;
    free(vec); free(sum);

    /* 4. Many small blocks kept alive across a barrier, then freed. */
    enum { NSMALL = 20000 };
    char **small = malloc(sizeof(char *) * NSMALL);
    for (int i = 0; i < NSMALL; i++) {
      small[i] = malloc(8 + (size_t)(i % 256));
      memset(small[i], i & 0x7f, 8 + (size_t)(i % 256));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < NSMALL; i++) {
      errors += small[i][7 + i % 256] != (char)(i & 0x7f);
      free(small[i]);
    }
    free(small);
    nalloc += NSMALL;
  }

  long total_errors = 0, total_alloc = 0;
  uint64_t hashes[64] = {0};
  MPI_Reduce(&errors, &total_errors, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&nalloc, &total_alloc, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Gather(&hash, 1, MPI_UINT64_T, hashes, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("ranks %d rounds %d sizes %d allocations %ld\n", nproc, rounds, ns, total_alloc);
    for (int r = 0; r < nproc && r < 64; r++) printf("rank %d hash %016llx\n", r, (unsigned long long)hashes[r]);
    printf("errors %ld\n", total_errors);
  }
  MPI_Finalize();
  return total_errors ? 1 : 0;
}
