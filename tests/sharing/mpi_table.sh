#!/bin/sh
# Runs mpi_table (one shared table per node, its Pss summed over the ranks)
# on 4 ranks. Skips (exit 77) when the program was not built (no mpicc /
# libopenmpi-dev at configure time), mpirun is missing or /dev/shm is not
# writable.
#   mpi_table.sh PATH-TO-sharing_mpi_table_prog (empty: not built)
bin=${1:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "skip: sharing_mpi_table not built (mpicc / libopenmpi-dev missing: scripts/setup.sh test)"; exit 77
fi
command -v mpirun >/dev/null 2>&1 || { echo "skip: mpirun not installed (scripts/setup.sh test)"; exit 77; }
[ -w /dev/shm ] || { echo "skip: no writable /dev/shm"; exit 77; }
root=
if [ "$(id -u)" = 0 ]; then              # Open MPI refuses root unless told
  root=--allow-run-as-root
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-sharing-mpi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp OMPI_MCA_plm_rsh_agent=false   # one machine: no ssh; session files in $tmp
timeout 60 mpirun $root --oversubscribe -np 4 "$bin"
