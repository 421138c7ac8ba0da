#!/bin/sh
# The copy threshold of liblocus-overlap.so (LOCUS_OVERLAP_COPY_MAX,
# docs/overlap.md): copy_cost.c under mpirun -np 2, each setting RUNS times
# (blocking: COPY_MAX=0; copying: COPY_MAX=64M), the lowest over the runs of the
# median time rank 0 spends in one MPI_Send (other jobs only add time). The threshold: below 64 KiB the blocking send
# is eager (a few microseconds: copying neither wins nor loses much); from
# 64 KiB on, the first size where copying costs more than 1.2 times the
# blocking send (20 %: the noise of a loaded machine) ends the range where it
# pays: the threshold is the size before. Run it per transport (shared
# memory; --mca btl tcp,self) and keep the smallest.
#   copy_threshold.sh LIBOVERLAP [RUNS] [MPIRUN ARGS...]
set -eu
lib=$1; runs=${2:-3}; shift; [ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mpicc -O2 "$here/copy_cost.c" -o "$tmp/copy_cost"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=false
for cm in 0 64M; do
  i=0
  while [ $i -lt "$runs" ]; do
    LOCUS_OVERLAP_COPY_MAX=$cm mpirun --oversubscribe -np 2 "$@" -x LOCUS_OVERLAP_COPY_MAX -x LD_PRELOAD="$lib" \
      "$tmp/copy_cost" 200 >"$tmp/$cm.$i"
    i=$((i + 1))
  done
done
python3 - "$tmp" "$runs" <<'PY'
import sys, statistics, os
d, runs = sys.argv[1], int(sys.argv[2])
def med(cm):
    rows = {}
    for i in range(runs):
        for line in open(os.path.join(d, "%s.%d" % (cm, i))):
            n, ins, tot = line.split()
            rows.setdefault(int(n), []).append(float(ins))
    return {n: min(v) for n, v in rows.items()}
b, c = med("0"), med("64M")
print("%10s %14s %14s %7s" % ("bytes", "blocking_us", "copying_us", "ratio"))
thr, stop = 0, False
for n in sorted(b):
    r = c[n] / b[n] if b[n] else float("inf")
    print("%10d %14.2f %14.2f %7.3f" % (n, b[n], c[n], r))
    if n >= 65536 and not stop:
        if r <= 1.2: thr = n
        else: stop = True
print("threshold", thr)
PY
