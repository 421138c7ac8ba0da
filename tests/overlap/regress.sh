#!/bin/sh
# Runs one case of ov_regress (regression cases of liblocus-overlap.so) with
# the library preloaded:  regress.sh OV_REGRESS LIB CASE NP [tcp]
# NP 0: the program alone, no mpirun (a process that is not a rank).
# Passes when the case prints "ov_regress: CASE ok", every rank reported
# overlap statistics (overlap was on) and no page was unguarded for the
# runtime. Skips (77) without ov_regress (no MPI) or mpirun.
bin=${1:-}; lib=${2:-}; case=${3:-}; np=${4:-2}; btl=${5:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "skip: ov_regress not built (no MPI)"; exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-ovregress.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
if [ "$np" = 0 ]; then
  LD_PRELOAD="$lib" timeout 60 "$bin" "$case" >"$tmp/out" 2>"$tmp/err"
  rc=$?
else
  command -v mpirun >/dev/null 2>&1 || { echo "skip: mpirun not installed"; exit 77; }
  root=
  if [ "$(id -u)" = 0 ]; then
    root=--allow-run-as-root
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  export TMPDIR=$tmp OMPI_MCA_plm_rsh_agent=false OV_EXPECT_OVERLAP=1 LOCUS_OVERLAP_STATS=1
  set -- timeout 120 mpirun $root --oversubscribe -np "$np"
  [ "$btl" = tcp ] && set -- "$@" --mca btl tcp,self
  "$@" -x OV_EXPECT_OVERLAP -x LOCUS_OVERLAP_STATS -x LD_PRELOAD="$lib" "$bin" "$case" >"$tmp/out" 2>"$tmp/err"
  rc=$?
fi
cat "$tmp/out"; cat "$tmp/err" >&2
[ $rc = 0 ] || { echo "FAIL: exit status $rc"; exit 1; }
grep -q "^ov_regress: $case ok" "$tmp/out" || { echo "FAIL: the case did not finish"; exit 1; }
if [ "$np" != 0 ]; then
  n=$(grep -c "locus-overlap: rank .* guarded" "$tmp/err")
  [ "$n" = "$np" ] || { echo "FAIL: $n of $np ranks reported overlap statistics (overlap not on?)"; exit 1; }
  if grep -q "pages unguarded" "$tmp/err"; then echo "FAIL: pages unguarded for the runtime"; exit 1; fi
fi
echo "PASS ($case)"
