/* A deliberately unsafe "overlap" library for ctest bench_overlap_smoke:
 * MPI_Send and MPI_Recv start the non-blocking call and return at once,
 * with no protection of the buffers; the requests are completed only at
 * the next collective or at MPI_Finalize.  A program that reads its receive
 * buffer after MPI_Recv returned sees stale data: bench/overlap_mpi.c must
 * reject it (check=fail, exit status 1), as every overlap library that
 * lets the program see a buffer before its transfer ended must be.
 * LD_PRELOAD'ed into the ranks. */
#include <mpi.h>

#define MAXREQ 64
static MPI_Request reqs[MAXREQ];
static int nreq;

static void complete_all(void) {
    if (nreq) PMPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
    nreq = 0;
}

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    if (nreq == MAXREQ) complete_all();
    return PMPI_Isend(buf, count, dt, dest, tag, comm, &reqs[nreq++]);
}

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Status *st) {
    if (nreq == MAXREQ) complete_all();
    (void)st; /* left unset: the benchmark passes MPI_STATUS_IGNORE */
    return PMPI_Irecv(buf, count, dt, src, tag, comm, &reqs[nreq++]);
}

int MPI_Barrier(MPI_Comm comm) { complete_all(); return PMPI_Barrier(comm); }
int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c) { complete_all(); return PMPI_Bcast(b, n, t, root, c); }
int MPI_Gather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c) {
    complete_all();
    return PMPI_Gather(s, sn, st, r, rn, rt, root, c);
}
int MPI_Reduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c) {
    complete_all();
    return PMPI_Reduce(s, r, n, t, op, root, c);
}
int MPI_Finalize(void) { complete_all(); return PMPI_Finalize(); }
