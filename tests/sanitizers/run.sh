#!/bin/sh
# Sanitizer runs of locus, each in its own build dir under BINARY_DIR:
#   asan  clang, -DLOCUS_NO_OVERRIDE=ON, locus_static; the test code (stress,
#         san_checks) built with -fsanitize=address,undefined and locus itself
#         with -fsanitize=undefined; the tests call the locus_* names.
#   tsan  clang, -DLOCUS_NO_OVERRIDE=ON -DLOCUS_TSAN=ON: locus sources, the
#         stress test and the adversarial suite instrumented with ThreadSanitizer.
# Passes when every program exits 0 and no sanitizer report appears; each
# program has SAN_STEP_TIMEOUT seconds (default 400): past it the step fails as a
# hang, with the seconds each step took printed beside it.
#   run.sh SOURCE_DIR BINARY_DIR [asan] [tsan]      (default: both)
# Environment: SAN_STRESS_OPS (ops per thread, default 60000 asan / 30000 tsan),
# SAN_ADV_SECONDS (each adversarial case's budget in seconds, default 1).
# Exit 77 (ctest: skipped) when clang or a sanitizer runtime is missing.
# Suppressions, if any, are in tests/sanitizers/*.supp; docs/testing-sanitizers.md
# says why each one exists.
set -u
src=$1 bin=$2
shift 2
which_runs=${*:-asan tsan}
here=$src/tests/sanitizers

clang=$(command -v clang || command -v clang-14 || true)
if [ -z "$clang" ]; then echo "sanitizers: SKIPPED: clang not found (scripts/setup.sh test)"; exit 77; fi
clangxx=$(command -v "${clang}++" || command -v clang++ || command -v c++ || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'int main(void) { return 0; }\n' >"$tmp/t.c"
for s in address,undefined thread; do
  if ! "$clang" -fsanitize=$s "$tmp/t.c" -o "$tmp/t" >"$tmp/log" 2>&1; then
    echo "sanitizers: SKIPPED: $clang cannot link -fsanitize=$s (libclang-rt-14-dev missing?)"
    cat "$tmp/log"
    exit 77
  fi
done

gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
status=0

build() { # dir, extra cmake args...
  dir=$1; shift
  t0=$(date +%s)
  [ -f "$dir/Makefile" ] && gen=""   # keep the generator of an existing dir
  # shellcheck disable=SC2086
  if ! CC=$clang CXX=$clangxx cmake -S "$src" -B "$dir" $gen -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       -DLOCUS_BUILD_BENCH=OFF -DLOCUS_NO_OVERRIDE=ON "$@" >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log"; echo "sanitizers: configure of $dir FAILED"; return 1
  fi
  if ! cmake --build "$dir" --target stress san_checks adversarial -j 2 >"$dir.build.log" 2>&1; then
    tail -50 "$dir.build.log"; echo "sanitizers: build of $dir FAILED"; return 1
  fi
  echo "sanitizers: built $dir in $(( $(date +%s) - t0 )) s"
}

# Runs a program; fails on a non-zero exit or on any sanitizer report in its output.
check() { # name, command...
  name=$1; shift
  log=$tmp/$name.log
  echo "sanitizers: $name: $*"
  t0=$(date +%s)
  timeout -k 10 "${SAN_STEP_TIMEOUT:-400}" "$@" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  grep -E '^stress: (allocator|replay)|san_checks:|^adversarial: [a-z_]+ +[0-9]+ rounds' "$log" | head -6
  if grep -qE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer|ThreadSanitizer: reported' "$log"; then
    echo "sanitizers: $name: sanitizer REPORT:"
    grep -A40 -E 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer' "$log" | head -120
    status=1
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "sanitizers: $name: TIMED OUT after $secs s (SAN_STEP_TIMEOUT=${SAN_STEP_TIMEOUT:-400}): a hang, or a machine far slower than 2 cores"
    tail -30 "$log"
    status=1
  elif [ $rc -ne 0 ]; then
    echo "sanitizers: $name: FAILED (exit $rc, $secs s)"
    tail -30 "$log"
    status=1
  else
    echo "sanitizers: $name: clean ($secs s)"
  fi
}

for run in $which_runs; do
  case $run in
  asan)
    d=$bin/asan
    if build "$d" -DLOCUS_TEST_SANITIZE=address,undefined \
         "-DCMAKE_C_FLAGS=-fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"; then
      export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1"
      export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
      check asan_san_checks "$d/tests/sanitizers/san_checks"
      check asan_stress "$d/tests/stress/stress" --threads 4 --ops "${SAN_STRESS_OPS:-60000}" --waves 2
      check asan_adversarial "$d/tests/adversarial/adversarial" --seconds "${SAN_ADV_SECONDS:-1}"
      check asan_stress_many "$d/tests/stress/stress" --threads 12 --ops "${SAN_STRESS_OPS:-60000}" --waves 2 --max-size 65536 --live 64 --slots 16
    else
      status=1
    fi
    ;;
  tsan)
    d=$bin/tsan
    if build "$d" -DLOCUS_TSAN=ON; then
      supp=""
      [ -f "$here/tsan.supp" ] && supp=":suppressions=$here/tsan.supp"
      export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4$supp"
      check tsan_stress "$d/tests/stress/stress" --threads 4 --ops "${SAN_STRESS_OPS:-30000}" --waves 2
      check tsan_stress_many "$d/tests/stress/stress" --threads 8 --ops "${SAN_STRESS_OPS:-30000}" --waves 2 --max-size 65536 --live 64 --slots 8
      check tsan_san_checks "$d/tests/sanitizers/san_checks"
      # The adversarial suite: every case for its time budget, the thread
      # cache on, then off (every free of another thread's block remote).
      check tsan_adversarial "$d/tests/adversarial/adversarial" --seconds "${SAN_ADV_SECONDS:-1}"
      check tsan_adversarial_nocache env LOCUS_THREAD_CACHE=0 "$d/tests/adversarial/adversarial" --seconds "${SAN_ADV_SECONDS:-1}"
      if command -v taskset >/dev/null 2>&1; then   # one CPU: preemption anywhere in the protocols
        check tsan_adversarial_cpu0 taskset -c 0 env LOCUS_THREAD_CACHE=0 "$d/tests/adversarial/adversarial" \
          --seconds "${SAN_ADV_SECONDS:-1}"
      fi
    else
      status=1
    fi
    ;;
  *) echo "usage: run.sh SOURCE_DIR BINARY_DIR [asan] [tsan]"; exit 2 ;;
  esac
done
[ $status -eq 0 ] && echo "sanitizers: PASSED" || echo "sanitizers: FAILED"
exit $status
