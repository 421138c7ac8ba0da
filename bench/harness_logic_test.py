#!/usr/bin/env python3
"""The benchmark harness's own logic (tools/bench.py), without long runs.

Stand-in bench_* programs (shell scripts printing a RESULT line in a few
milliseconds) replace the workloads, so that what is checked is the harness:

  1. the workload table: the default run's workloads all have a family and
     sizes, every family is a panel; modes give the right arguments;
  2. flagging: a timed part under MIN_TIMED_S and a value far from its
     siblings are flagged and left out of the medians; memory rows are not
     flagged for being short;
  3. geometric means over the rows every allocator completed only;
  4. a run announces its total (runs, estimate) before the first run, and
     --quick says it is a smoke test, in its log and its results.md;
  5. Ctrl-C (SIGINT to the process group, as a terminal sends it) ends with
     "interrupted after N of M runs", status 130, and valid partial tables;
     a run in flight that ignores SIGINT is killed, not waited for;
  6. the plot: one panel per family, the legend outside the panels, memory
     rows marked (skipped without matplotlib).

Usage: harness_logic_test.py REPO LIBLOCUS   (exit 0 pass, 1 fail)
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

repo, lib = sys.argv[1], os.path.abspath(sys.argv[2])
spec = importlib.util.spec_from_file_location("bench", os.path.join(repo, "tools", "bench.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


# 1. the table
default = [w for w in bench.WORKLOADS if w.default is not None]
check(len(default) >= 8, "the default run has %d workloads (a representative set)" % len(default))
check(all(w.family in bench.FAMILIES for w in bench.WORKLOADS), "every workload's family is a panel")
check(len({w.family for w in default}) >= 3, "the default run spans %d families" % len({w.family for w in default}))
check(len({w.id for w in bench.WORKLOADS}) == len(bench.WORKLOADS), "workload ids are unique")
ts = next(w for w in bench.WORKLOADS if w.id == "timestep")
check(ts.argv("quick") == ["--quick"] and ts.argv("full") == [] and ts.argv("default") == ts.default,
      "timestep's arguments per mode: %s / %s / %s" % (ts.argv("quick"), ts.argv("default"), ts.argv("full")))
check([w.id for w in bench.select_workloads("default", None)] == [w.id for w in default],
      "the default mode selects the workloads with default sizes")
check(len(bench.select_workloads("full", None)) == len(bench.WORKLOADS), "--full selects every workload")

# 2. flagging
def rec(w, a, value, t, rep=0, unit="ops/s"):
    return {"workload": w, "allocator": a, "value": value, "unit": unit, "ok": True, "rep": rep,
            "wall_s": t + 0.01, "user_s": t, "sys_s": 0.0, "maxrss_kib": 1024, "minflt": 10,
            "extra": {"time_s": t}, "better": "higher", "metric": "throughput"}

wl = [bench.Workload("fast", "x", family=bench.SMALL), bench.Workload("mem", "y", family=bench.MEMORY, memory=True)]
runs = [rec("fast", "glibc", 1e7, 0.5, r) for r in range(3)] + \
       [rec("fast", "locus-auto", 2e7, 0.5, 0), rec("fast", "locus-auto", 2.1e7, 0.5, 1),
        rec("fast", "locus-auto", 9e9, 0.5, 2),              # implausible against its siblings
        rec("fast", "jemalloc", 1.5e7, 0.01, 0)]             # too short to time
runs += [dict(rec("mem", a, 100.0, 0.01, 0, unit="MiB"), better="lower") for a in ("glibc", "locus-auto")]
n = bench.flag_samples(runs, wl)
flags = {(r["workload"], r["allocator"], r["rep"]): r.get("flag", "") for r in runs}
check(n == 2, "two samples flagged (got %d)" % n)
check("implausible" in flags[("fast", "locus-auto", 2)], "9e9 among 2e7s flagged implausible")
check("too short" in flags[("fast", "jemalloc", 0)], "a 10 ms timed part flagged too short")
check(not flags[("mem", "glibc", 0)], "a memory row is not flagged for its duration")
summ = bench.summarise(runs, wl, [{"name": a} for a in ("glibc", "jemalloc", "locus-auto")])
la = summ["fast"]["allocators"]["locus-auto"]
check(abs(la["value"] - 2.05e7) < 1, "the median leaves the flagged sample out (%.4g)" % la["value"])
check(la["flagged"] == 1 and la["ok"] == 2 and la["failed"] == 0, "counts: 2 ok, 1 flagged, 0 failed")
check("value" not in summ["fast"]["allocators"]["jemalloc"], "an allocator with only flagged samples has no value")

# 3. geometric means over common rows
summ = {"a": {"allocators": {"x": {"vs_glibc": 2.0}, "y": {"vs_glibc": 8.0}}},
        "b": {"allocators": {"x": {"vs_glibc": 8.0}, "y": {"vs_glibc": 2.0}}},
        "c": {"allocators": {"x": {"vs_glibc": 100.0}}}}          # y did not run c
means, rows = bench.common_geomeans(summ, ["x", "y"], "vs_glibc")
check(rows == ["a", "b"] and abs(means["x"] - 4.0) < 1e-9 and abs(means["y"] - 4.0) < 1e-9,
      "geometric means over the rows both columns have: %s %s" % (rows, means))

# 4.-5. whole runs on stand-in programs
tmp = tempfile.mkdtemp(prefix="locus-harness-")
bindir = os.path.join(tmp, "bin")
os.mkdir(bindir)
FAKE = """#!/bin/sh
# stand-in: a RESULT line; slower (SLEEP) when asked, a short time under jemalloc;
# with FAKE_PIDFILE, a run that ignores Ctrl-C and would last 30 s
if [ -n "${FAKE_PIDFILE:-}" ]; then echo $$ >"$FAKE_PIDFILE"; trap '' INT; exec sleep 30; fi
sleep ${FAKE_SLEEP:-0}
t=0.5
case "${LD_PRELOAD:-}" in *jemalloc*) t=0.001 ;; esac
echo "RESULT name=%s metric=%s value=%s unit=%s better=%s check=ok time_s=$t"
"""
for w in bench.WORKLOADS:
    path = os.path.join(bindir, "bench_" + w.program)
    if os.path.exists(path):
        continue
    mem = w.memory
    with open(path, "w") as f:
        f.write(FAKE % (w.id, "peak_rss" if mem else "time", "100" if mem else "1.5", "MiB" if mem else "s",
                        "lower"))
    os.chmod(path, 0o755)


def harness(args, **kw):
    cmd = [sys.executable, os.path.join(repo, "tools", "bench.py"), "--locus-lib", lib, "--bin-dir", bindir,
           "--allow-stale", "--no-plots"] + args
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw)


out = os.path.join(tmp, "default")
p = harness(["--out", out, "--allocators", "glibc,locus-auto", "--repeat", "2"])
_, err = p.communicate(timeout=120)
lines = err.splitlines()
ann = [i for i, l in enumerate(lines) if "= %d runs, estimated" % (2 * 2 * len(default)) in l]
first = [i for i, l in enumerate(lines) if l.startswith("[1/")]
check(p.returncode == 0, "default run on stand-ins: status %d" % p.returncode)
check(bool(ann) and bool(first) and ann[0] < first[0], "the total is announced before the first run")
md = open(os.path.join(out, "results.md")).read()
check(md.startswith("# locus benchmark results") and "geometric mean (%d of %d rows)" % (len(default), len(default)) in md,
      "results.md: results, geometric means over all %d rows" % len(default))
check("SMOKE" not in md, "the default run is not called a smoke test")

out = os.path.join(tmp, "quick")
p = harness(["--quick", "--out", out, "--only", "timestep", "--allocators", "glibc"])
_, err = p.communicate(timeout=60)
md = open(os.path.join(out, "results.md")).read()
check("SMOKE TEST" in err and md.startswith("# locus benchmark SMOKE TEST"), "--quick is labelled a smoke test")

out = os.path.join(tmp, "jemalloc")
if bench.find_lib(dict(bench.PEERS)["jemalloc"]):
    p = harness(["--out", out, "--only", "timestep,hera", "--allocators", "glibc,jemalloc", "--repeat", "1"])
    _, err = p.communicate(timeout=60)
    md = open(os.path.join(out, "results.md")).read()
    check("too short to time" in md and " ⚑" in md and "2 sample(s) flagged" in err,
          "samples with a 1 ms timed part flagged, marked, listed, counted")
else:
    print("skip: no jemalloc for the flagged-sample run")

out = os.path.join(tmp, "interrupted")
env = dict(os.environ, FAKE_SLEEP="0.2")
p = harness(["--out", out, "--allocators", "glibc,locus-auto", "--repeat", "3"], env=env, start_new_session=True)
time.sleep(3.0)
os.killpg(p.pid, signal.SIGINT)      # what a terminal's Ctrl-C does: the whole group
_, err = p.communicate(timeout=60)
total = 3 * 2 * len(default)
msg = [l for l in err.splitlines() if "interrupted after" in l]
check(p.returncode == 130, "Ctrl-C: status %d" % p.returncode)
check(bool(msg) and (" of %d runs" % total) in msg[0], "Ctrl-C: '%s'" % (msg[0] if msg else err[-300:]))
try:
    d = json.load(open(os.path.join(out, "results.json")))
    md = open(os.path.join(out, "results.md")).read()
    done = d["meta"]["runs_done"]
    check(0 < done < total and d["meta"]["interrupted"] == "interrupted after %d of %d runs" % (done, total),
          "results.json: %d of %d runs, marked interrupted" % (done, total))
    complete = len({r["workload"] for r in d["runs"] if sum(1 for x in d["runs"] if x["workload"] == r["workload"]
                                                            and x["allocator"] != r["allocator"]) > 0})
    check("**Partial: interrupted after %d of %d runs.**" % (done, total) in md, "results.md says it is partial")
    check("geometric mean (%d of" % complete in md, "geometric means over the %d rows both allocators ran" % complete)
except (OSError, ValueError) as e:
    check(False, "partial results readable: %s" % e)

# A run in flight that ignores Ctrl-C is killed: the harness neither waits
# for it nor leaves it behind.
out = os.path.join(tmp, "stubborn")
pidfile = os.path.join(tmp, "stubborn.pid")
env = dict(os.environ, FAKE_PIDFILE=pidfile)
p = harness(["--out", out, "--only", "timestep", "--allocators", "glibc"], env=env, start_new_session=True)
for _ in range(100):
    if os.path.exists(pidfile) and open(pidfile).read().strip():
        break
    time.sleep(0.1)
t0 = time.time()
os.killpg(p.pid, signal.SIGINT)
_, err = p.communicate(timeout=60)
child = int(open(pidfile).read())
try:
    os.kill(child, 0)
    gone = False
except ProcessLookupError:
    gone = True
check(p.returncode == 130 and time.time() - t0 < 20 and gone,
      "a run ignoring Ctrl-C is killed (status %d after %.1f s, child gone: %s)" % (p.returncode, time.time() - t0, gone))

# 6. the plot
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
    print("skip: no matplotlib for the plot checks")
if plt:
    d = json.load(open(os.path.join(tmp, "default", "results.json")))
    fig = bench.ratios_figure(plt, d["summary"], ["glibc", "locus-auto"])
    drawn = [ax for ax in fig.axes if ax.axison]
    fams = {ws["family"] for ws in d["summary"].values()}
    check(len(drawn) == len(fams), "one panel per family (%d panels, %d families)" % (len(drawn), len(fams)))
    check({ax.get_title() for ax in drawn} == fams, "panels titled by family")
    fig.canvas.draw()
    leg = fig.legends[0].get_window_extent()
    right = max(ax.get_window_extent().x1 for ax in drawn)
    check(leg.x0 >= right, "the legend is outside the panels (legend x0 %.0f, panels end %.0f)" % (leg.x0, right))
    labels = [t.get_text() for ax in drawn for t in ax.get_xticklabels()]
    check(any("(memory)" in t for t in labels), "memory rows marked in the tick labels")
    check(any("memory" in t.get_text() for t in fig.legends[0].get_texts()), "the legend explains the marking")
    plt.close(fig)

subprocess.run(["rm", "-rf", tmp])
if failures:
    print("harness_logic: %d check(s) failed" % len(failures))
    sys.exit(1)
print("harness_logic: ok")
