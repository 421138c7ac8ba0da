#!/usr/bin/env bash
# Real client: CPython, with and without the allocator preloaded.
#   python.sh script [SCALE]      tests/clients/workload.py, stdout compared
#   python.sh regrtest MODULE...  CPython's own regression tests (Debian
#                                 libpython3.11-testsuite); the per-test
#                                 verdict lines and the summary are compared
# The interpreter is the system one (/usr/bin/python3.11 or LOCUS_PYTHON), not
# a pyenv/venv shim: the test suite must match the interpreter exactly.
CLIENT_NAME=python-${1:-}
. "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)

PY=${LOCUS_PYTHON:-/usr/bin/python3.11}
[ -x "$PY" ] || skip "$PY not installed (python3)"
export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
# PYTHONMALLOC=malloc: every object goes through malloc/free (not only the
# blocks above 512 bytes that pymalloc forwards), so the allocator under test
# sees the whole object churn.
export PYTHONMALLOC=malloc

mode=$1; shift
cd "$WORK"
case "$mode" in
  script)
    run_and_compare workload "$PY" "$HERE/workload.py" "${1:-2}"
    grep -q '^done$' "$WORK/workload.lib.out" || die "workload did not finish"
    ;;
  regrtest)
    "$PY" -c 'import test.support, test.libregrtest' 2>/dev/null ||
      skip "CPython test suite not installed (libpython3.11-testsuite)"
    [ $# -gt 0 ] || die "no test module given"
    for m in "$@"; do
      "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('test.$m') is None)" ||
        skip "test.$m not found in the installed test suite"
    done
    # Sequential, verbose, one fixed order; the temporary directories of the
    # two runs differ only in name. Timings are stripped before comparison.
    filter() {
      sed -E -n \
        -e 's/ in [0-9.]+s$//' \
        -e 's/ \([0-9.]+ ?m?s\)$//' \
        -e '/^(test_|  test_)[^ ]* \(.*\) \.\.\. /p' \
        -e '/^Ran [0-9]+ tests?/p' \
        -e '/^(OK|FAILED)( \(.*\))?$/p' \
        -e '/^Tests result: /p' \
        -e '/^[0-9]+ tests? (OK|failed|skipped)/p' "$1"
    }
    for mode2 in ref lib; do
      mkdir -p "$WORK/$mode2" && cd "$WORK/$mode2"
      # test_default_timeout: a barrier that 5 new threads must reach within
      # 0.3 s, a verdict a loaded host decides, not the allocator.
      run_one "$mode2" regrtest "$PY" -m test -v --timeout=600 -i test_default_timeout "$@" ||
        die "regression tests failed in mode $mode2 (see above)"
      filter "$WORK/regrtest.$mode2.out" >"$WORK/verdicts.$mode2"
      cd "$WORK"
    done
    grep -q '^Tests result: SUCCESS' "$WORK/verdicts.lib" || die "preloaded regrtest did not report SUCCESS"
    n=$(grep -c ' \.\.\. ' "$WORK/verdicts.lib" || true)
    [ "$n" -gt 0 ] || die "no test verdict found in the output"
    same "$WORK/verdicts.ref" "$WORK/verdicts.lib" "verdicts of $n test cases"
    ;;
  *) die "usage: python.sh script [SCALE] | regrtest MODULE..." ;;
esac
say "PASS"
