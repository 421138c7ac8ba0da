# Shared helpers of the real-client tests (sourced, not run).
#
# Every client test runs one job twice, once on the C library's allocator and
# once with LD_PRELOAD=$LOCUS_LIB, and compares what the two runs produced,
# byte for byte. Exit codes: 0 pass, 1 fail, 77 skip (a tool is missing).
#
# Environment:
#   LOCUS_LIB        the allocator to preload (ctest passes $<TARGET_FILE:locus>;
#                    by hand any malloc .so works, e.g. libmimalloc.so.2)
#   LOCUS_KEEP_TMP=1 keep the work directory (its path is printed)

set -u
set -o pipefail

SKIP=77
CLIENT_NAME=${CLIENT_NAME:-$(basename "$0" .sh)}

say()  { printf '[%s] %s\n' "$CLIENT_NAME" "$*"; }
die()  { say "FAIL: $*" >&2; exit 1; }
skip() { say "SKIP: $*"; exit $SKIP; }

# need CMD...: skip the test unless every command exists.
need() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || skip "'$c' not installed (scripts/setup.sh test)"
  done
}

[ -n "${LOCUS_LIB:-}" ] || die "LOCUS_LIB is not set (path of the allocator to preload)"
[ -f "$LOCUS_LIB" ] || die "LOCUS_LIB=$LOCUS_LIB does not exist"
case "$LOCUS_LIB" in /*) ;; *) LOCUS_LIB=$PWD/$LOCUS_LIB ;; esac
unset LD_PRELOAD

WORK=$(mktemp -d "${TMPDIR:-/tmp}/locus-client-$CLIENT_NAME.XXXXXX") || die "mktemp"
CLEANUP_HOOKS=()
cleanup() {
  local h
  for h in "${CLEANUP_HOOKS[@]+"${CLEANUP_HOOKS[@]}"}"; do eval "$h" || true; done
  if [ "${LOCUS_KEEP_TMP:-0}" = 1 ]; then say "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
on_exit() { CLEANUP_HOOKS+=("$1"); }

# The preload must really take: ld.so only warns when it cannot load the
# object and then runs the program on glibc, which would make every
# comparison below pass vacuously.
check_preload() {
  local maps err
  err=$WORK/.preload-check.err
  maps=$(LD_PRELOAD=$LOCUS_LIB /bin/cat /proc/self/maps 2>"$err") || die "cat under preload failed: $(cat "$err")"
  grep -q "ld.so" "$err" && die "ld.so refused the preload: $(cat "$err")"
  local real
  real=$(readlink -f "$LOCUS_LIB")
  # A pattern match, not printf | grep -q: under pipefail grep leaving at
  # its first match can kill printf (SIGPIPE) once the maps pass 4 KiB.
  [[ $maps == *"$real"* ]] || die "$LOCUS_LIB is not mapped in a preloaded process"
  rm -f "$err"
}
check_preload

# run_pair TAG CMD...: run CMD in $WORK/TAG.ref (no preload) and $WORK/TAG.lib
# (preloaded), each from its own copy of the current directory contents
# prepared by the caller; stdout to TAG.{ref,lib}.out, stderr to .err.
# Fails if either run exits non-zero. Does not compare (see same).
run_one() {
  local mode=$1 tag=$2; shift 2
  local out=$WORK/$tag.$mode.out err=$WORK/$tag.$mode.err rc=0
  if [ "$mode" = lib ]; then
    (export LD_PRELOAD="$LOCUS_LIB"; "$@") >"$out" 2>"$err" || rc=$?
  else
    ("$@") >"$out" 2>"$err" || rc=$?
  fi
  if [ $rc -ne 0 ]; then
    say "command (mode $mode) exited $rc: $*" >&2
    say "--- stderr tail ($err)" >&2; tail -n 30 "$err" >&2
    say "--- stdout tail ($out)" >&2; tail -n 10 "$out" >&2
    return $rc
  fi
  return 0
}

# same A B WHAT: compare two files byte for byte; on difference show a diff.
same() {
  if ! cmp -s "$1" "$2"; then
    say "$3 differ between glibc and preloaded runs:" >&2
    diff -u "$1" "$2" | head -n 40 >&2
    die "$3 differ ($(basename "$1") vs $(basename "$2"))"
  fi
  say "$3 identical ($(wc -c <"$1") bytes)"
}

# run_and_compare TAG CMD...: both runs of CMD (from the same directory),
# stdout compared byte for byte.
run_and_compare() {
  local tag=$1; shift
  run_one ref "$tag" "$@" || die "reference run (glibc) failed: $*"
  run_one lib "$tag" "$@" || die "preloaded run failed: $*"
  same "$WORK/$tag.ref.out" "$WORK/$tag.lib.out" "stdout of '$tag'"
}

say "allocator: $LOCUS_LIB"
say "work dir:  $WORK"
