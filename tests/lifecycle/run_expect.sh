#!/usr/bin/env bash
# run_expect.sh MARKER CMD...: run CMD; pass only if it exits 0 AND its
# stderr/stdout contains MARKER (output printed for ctest's log).
marker=$1; shift
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then echo "FAIL: exit status $rc" >&2; exit 1; fi
printf '%s\n' "$out" | grep -qF -- "$marker" || { echo "FAIL: marker '$marker' not printed" >&2; exit 1; }
exit 0
