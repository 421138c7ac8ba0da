#!/usr/bin/env bash
# Real client: an Open MPI job (mpi_client.c, built by the tests' CMake when
# mpicc is found) on 2 ranks: ranks allocate, exchange and free buffers of
# 8 B .. 8 MiB (blocking, non-blocking, collectives, MPI_Alloc_mem) and check
# every byte. Run with and without LD_PRELOAD exported to the ranks; rank 0's
# summary must be identical and report 0 errors.
#   mpi.sh PATH-TO-locus_client_mpi [ROUNDS]
. "$(dirname "$0")/common.sh"
bin=${1:-}
[ -n "$bin" ] && [ -x "$bin" ] || skip "MPI client not built (mpicc / libopenmpi-dev missing)"
need mpirun
rounds=${2:-3}
cd "$WORK"
# We may be root (containers): Open MPI refuses unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent=false TMPDIR=$WORK
mpi() { mpirun -np 2 --oversubscribe --allow-run-as-root "$@"; }
# mpirun itself is not preloaded; the ranks get LD_PRELOAD through -x.
run_one ref mpi mpi "$bin" "$rounds" || die "MPI job without preload failed"
run_one ref2 mpi mpi -x LD_PRELOAD="$LOCUS_LIB" "$bin" "$rounds" || die "MPI job with the preload failed"
mv "$WORK/mpi.ref2.out" "$WORK/mpi.lib.out"
grep -qx 'errors 0' "$WORK/mpi.lib.out" || die "data errors in the preloaded MPI job"
same "$WORK/mpi.ref.out" "$WORK/mpi.lib.out" "rank 0 summary"
say "PASS"
