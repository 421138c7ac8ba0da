#!/usr/bin/env bash
# Checks that tools/bench.py fails a run whose checksum differs from the other
# allocators' (a workload that did different work under one allocator must
# not be compared, let alone win).  Uses a stand-in for bench_ab_random: a
# script whose checksum depends on whether LD_PRELOAD is set (glibc: not set;
# locus: set).  Usage: harness_checksum_test.sh <repo> <liblocus.so>
set -euo pipefail
repo=$1 lib=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-ab-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
fake() { # $1: checksum printed under a preload
  cat >"$tmp/bin/bench_ab_random" <<SH
#!/bin/sh
c=00000000000000aa
[ -n "\${LD_PRELOAD:-}" ] && c=$1
echo "RESULT name=ab_random_1t metric=throughput value=1e6 unit=ops/s better=higher check=ok checksum=\$c"
SH
  chmod +x "$tmp/bin/bench_ab_random"
}
run() {
  python3 "$repo/tools/bench.py" --quick --repeat 1 --no-plots --only ab_random_1t \
    --allocators glibc,locus-uma --locus-lib "$lib" --bin-dir "$tmp/bin" --out "$tmp/out" >"$tmp/log" 2>&1
}
fake 00000000000000aa
if ! run; then cat "$tmp/log"; echo "FAIL: equal checksums were rejected"; exit 1; fi
fake 00000000000000bb
if run; then cat "$tmp/log"; echo "FAIL: differing checksums were accepted"; exit 1; fi
grep -q "checksum 00000000000000bb differs" "$tmp/log" || { cat "$tmp/log"; echo "FAIL: no checksum message"; exit 1; }
echo "ok: equal checksums pass, differing ones fail the run"
