#!/bin/sh
# Runs ov_check (the overlap correctness suite) under mpirun.
#   run.sh OV_CHECK NP MODE [LIB]
# MODE: overlap   LD_PRELOAD=LIB (liblocus-overlap.so) exported to the ranks;
#                 every case must pass and the guarded MPI_Ssend must return
#                 before its receive is posted;
#       plain     no preload: the cases hold for plain MPI (the reference);
#       multiple  LIB preloaded, the program asks for MPI_THREAD_MULTIPLE:
#                 overlap disabled with one warning per rank, cases pass,
#                 nothing overlapped;
#       tcp       as overlap, over TCP only (--mca btl tcp,self);
#       off       LIB preloaded with LOCUS_OVERLAP=0: nothing overlapped, no
#                 message;
#       nothread  LIB preloaded, the runtime made to provide less than
#                 MPI_THREAD_MULTIPLE (OVERLAP_TEST_PROVIDED=2): one warning per
#                 rank, cases pass, nothing overlapped;
#       locus-run as overlap, through `LIB run --overlap -- mpirun ...` (LIB is
#                 then the locus command).
# Skips (77) when ov_check was not built (no MPI at configure time) or
# mpirun is missing.
bin=${1:-}; np=${2:-2}; mode=${3:-overlap}; lib=${4:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "skip: ov_check not built (mpicc / libopenmpi-dev missing: scripts/setup.sh test)"; exit 77
fi
command -v mpirun >/dev/null 2>&1 || { echo "skip: mpirun not installed"; exit 77; }
root=
if [ "$(id -u)" = 0 ]; then              # Open MPI refuses root unless told
  root=--allow-run-as-root
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-overlap.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp OMPI_MCA_plm_rsh_agent=false
set -- timeout 300 mpirun $root --oversubscribe -np "$np"
case $mode in
  plain)    OV_EXPECT_OVERLAP=0 "$@" -x OV_EXPECT_OVERLAP "$bin" >"$tmp/out" 2>"$tmp/err" ;;
  overlap)  OV_EXPECT_OVERLAP=1 LOCUS_OVERLAP_STATS=1 "$@" -x OV_EXPECT_OVERLAP -x LOCUS_OVERLAP_STATS \
              -x LD_PRELOAD="$lib" "$bin" >"$tmp/out" 2>"$tmp/err" ;;
  tcp)      OV_EXPECT_OVERLAP=1 OV_TCP=1 LOCUS_OVERLAP_STATS=1 "$@" --mca btl tcp,self -x OV_EXPECT_OVERLAP -x OV_TCP \
              -x LOCUS_OVERLAP_STATS -x LD_PRELOAD="$lib" "$bin" >"$tmp/out" 2>"$tmp/err" ;;
  locus-run) OV_EXPECT_OVERLAP=1 LOCUS_OVERLAP_STATS=1 timeout 300 "$lib" run --overlap -- mpirun $root \
              --oversubscribe -np "$np" "$bin" >"$tmp/out" 2>"$tmp/err" ;;
  off)      OV_EXPECT_OVERLAP=0 LOCUS_OVERLAP=0 LOCUS_OVERLAP_STATS=1 "$@" -x OV_EXPECT_OVERLAP -x LOCUS_OVERLAP \
              -x LOCUS_OVERLAP_STATS -x LD_PRELOAD="$lib" "$bin" >"$tmp/out" 2>"$tmp/err" ;;
  nothread) OV_EXPECT_OVERLAP=0 OVERLAP_TEST_PROVIDED=2 "$@" -x OV_EXPECT_OVERLAP -x OVERLAP_TEST_PROVIDED \
              -x LD_PRELOAD="$lib" "$bin" >"$tmp/out" 2>"$tmp/err" ;;
  multiple) OV_EXPECT_OVERLAP=0 OV_THREAD_LEVEL=3 "$@" -x OV_EXPECT_OVERLAP -x OV_THREAD_LEVEL \
              -x LD_PRELOAD="$lib" "$bin" >"$tmp/out" 2>"$tmp/err" ;;
  *) echo "run.sh: unknown mode $mode"; exit 2 ;;
esac
rc=$?
cat "$tmp/out"; cat "$tmp/err" >&2
[ $rc = 0 ] || { echo "FAIL: mpirun exited $rc"; exit 1; }
grep -q "^ov_check: all ok ($np ranks)" "$tmp/out" || { echo "FAIL: ov_check did not finish"; exit 1; }
case $mode in
  overlap|tcp|locus-run)
    n=$(grep -c "locus-overlap: rank .* guarded" "$tmp/err")
    [ "$n" = "$np" ] || { echo "FAIL: $n of $np ranks reported overlap statistics (overlap not on?)"; exit 1; }
    if grep "locus-overlap:" "$tmp/err" | grep -v " guarded, "; then echo "FAIL: unexpected warnings"; exit 1; fi ;;
  multiple)
    n=$(grep -c "asks for MPI_THREAD_MULTIPLE: overlap disabled" "$tmp/err")
    [ "$n" = "$np" ] || { echo "FAIL: expected one warning per rank, got $n"; exit 1; } ;;
  off)
    if grep "locus-overlap:" "$tmp/err"; then echo "FAIL: messages with LOCUS_OVERLAP=0"; exit 1; fi ;;
  nothread)
    n=$(grep -c "does not provide MPI_THREAD_MULTIPLE: overlap disabled" "$tmp/err")
    [ "$n" = "$np" ] || { echo "FAIL: expected one warning per rank, got $n"; exit 1; } ;;
esac
echo "PASS ($mode, $np ranks)"
