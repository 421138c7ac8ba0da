#!/usr/bin/env bash
# ctest bench_overlap_smoke: tools/overlap_bench.py --quick without the
# overlap library, then checks its outputs: every run validated (check=ok),
# every cell has both variants, the report says the overlap variant was not
# run.  Timings are not checked.  Then, when UNSAFE_LIB is given, the
# program under an unsafe overlap (bench/overlap_mpi_unsafe.c: receives
# return before the data arrived) must fail its check.  Exit 77 (skip) when
# a tool is missing.
#   overlap_mpi_test.sh REPO BENCH_OVERLAP_MPI OUTDIR [UNSAFE_LIB]
set -uo pipefail
repo=$1 bin=${2:-} out=$3 unsafe=${4:-}
[ -n "$bin" ] && [ -x "$bin" ] || { echo "SKIP: bench_overlap_mpi not built (no mpicc)"; exit 77; }
for t in mpirun unshare ip tc python3; do
  command -v "$t" >/dev/null || { echo "SKIP: $t not found"; exit 77; }
done
rm -rf "$out"
python3 "$repo/tools/overlap_bench.py" --quick --no-plot --bin "$bin" --out "$out"
rc=$?
[ $rc -eq 77 ] && { echo "SKIP: the harness could not set up the shaped link"; exit 77; }
[ $rc -eq 0 ] || { echo "FAIL: overlap_bench.py exited $rc"; exit 1; }
python3 - "$out/results.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
runs, cfg = d["runs"], d["meta"]["config"]
want = len(cfg["sizes"]) * len(cfg["computes_us"]) * 2
bad = [r for r in runs if not r["ok"] or r["result"].get("check") != "ok"]
assert not bad, "runs that did not validate: %s" % bad
assert len(runs) == want, "%d runs, expected %d" % (len(runs), want)
assert sorted({r["variant"] for r in runs}) == ["blocking", "nonblocking"], {r["variant"] for r in runs}
# C = 0 runs the program's nocompute variant for blocking
assert all(r["result"]["variant"] == "nocompute" for r in runs if r["variant"] == "blocking" and r["compute_us"] == 0)
assert all(r["result"]["aligned"] == "1" for r in runs), "buffers not page-aligned"
assert d["failures"] == [], d["failures"]
assert "NOT RUN" in (d["meta"]["overlap_note"] or "")
for c in d["cells"]:
    assert set(c["median_us"]) == {"blocking", "nonblocking"}, c
print("ok: %d runs validated" % len(runs))
PY
grep -q "^| 4 KiB | 0 |" "$out/results.md" || { echo "FAIL: results.md has no table"; exit 1; }
if [ -n "$unsafe" ]; then
  # 1 MiB: above the eager limit, so no receive can have completed inside
  # MPI_Irecv; the first read after MPI_Recv sees a zeroed buffer.
  res=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=false \
        timeout 120 unshare -n -- sh -c 'ip link set lo up && exec mpirun -np 2 --oversubscribe --allow-run-as-root \
          --bind-to none --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
          -x LD_PRELOAD="$0" "$1" --variant nocompute --size 1M --iters 4 --warmup 0' "$unsafe" "$bin" 2>/dev/null)
  rc=$?
  if [ $rc -ne 0 ] && grep -q "check=fail reason=data" <<<"$res"; then
    echo "ok: an unsafe overlap is rejected ($(grep -o 'check=fail reason=[a-z]*' <<<"$res" | head -1))"
  else
    echo "FAIL: under an unsafe overlap the program exited $rc with: $res"; exit 1
  fi
fi
echo "PASS"
