#!/usr/bin/env python3
"""Benchmark harness for locus: runs every workload under every allocator.

The workloads are the bench_* programs built from bench/ (plain programs; the
allocator is switched with LD_PRELOAD only).  Every (workload, allocator) pair
is run --repeat times, interleaved (A B C A B C ...), and the child's rusage
(wall, user, sys, peak RSS, minor faults) is recorded together with the
workload's own RESULT line.  Writes results.json, results.md and PNG plots to
results/scratch/<timestamp>/ (git-ignored; or --out).  A run worth keeping is
published by copying it to results/<date>-<what>/ and committing it: see
"Publishing a run" in docs/benchmarks.md.

Exit status: 0 if every run that was attempted validated its output, 1 if any
run failed (non-zero exit, crash, timeout, check=fail, or a preload that did
not take), 2 for usage errors.
"""

import argparse
import datetime
import glob
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# (id, program, extra arguments).  The id is what tables and plots show.
WORKLOADS = [
    ("page_fault", "page_fault", []),
    ("alloc_cost", "alloc_cost", []),
    ("local_batch_32", "local_batch", ["--size", "32"]),
    ("local_batch_128k", "local_batch", ["--size", "128K"]),
    ("prodcons_32", "prodcons", ["--size", "32"]),
    ("prodcons_2m", "prodcons", ["--size", "2M"]),
    ("exchange_64", "random_exchange", ["--max-size", "64"]),
    ("exchange_2m", "random_exchange", ["--max-size", "2M"]),
    ("timestep", "timestep", []),
    ("hera", "hera", []),
    ("realloc_grow", "realloc_grow", []),
    ("numa_first_touch", "numa_first_touch", []),
    ("cache_align", "cache_align", []),
    ("small_random", "small_random", []),
    ("small_ring", "small_ring", []),
    # Allocator-bound small-object workloads (issue 10): one word written and
    # checked at each end of a block, checksums compared across allocators.
    ("ab_random_1t", "ab_random", ["--threads", "1"]),
    ("ab_random_2t", "ab_random", ["--threads", "2"]),
    ("ab_batch_1t", "ab_batch", ["--threads", "1"]),
    ("ab_batch_2t", "ab_batch", ["--threads", "2"]),
    ("ab_bulk1m_1t", "ab_batch", ["--batch", "1000000", "--min", "16", "--max", "256", "--threads", "1"]),
    ("ab_prodcons", "ab_prodcons", []),
    ("ab_exchange_1t", "ab_exchange", ["--threads", "1"]),
    ("ab_exchange_2t", "ab_exchange", ["--threads", "2"]),
    ("ab_larson", "ab_larson", []),
    ("ab_churn", "ab_churn", []),
    ("ab_cxx", "ab_cxx", []),
    ("ab_omp", "ab_omp", []),
    ("phased", "phased", []),
    # The adaptive controller's cases (issue 28): cross-thread small-object
    # bursts with pauses and idle spells; a working set that changes size.
    ("ab_bursty", "ab_bursty", []),
    ("ab_phases", "ab_phases", []),
    ("stencil", "stencil", []),
]

# Programs that need more than a C compiler (g++, OpenMP): when they were not
# built, their workloads are skipped with a note instead of failing the run.
OPTIONAL_PROGRAMS = {"ab_cxx": "needs g++", "ab_omp": "needs OpenMP (-fopenmp)"}

# Peers: name -> candidate shared objects (the first that exists is used).
PEERS = [
    ("glibc", None),
    ("jemalloc", ["libjemalloc.so.2", "libjemalloc.so"]),
    ("tcmalloc", ["libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so.4"]),
    ("mimalloc", ["libmimalloc.so.2.0", "libmimalloc.so.2", "libmimalloc.so"]),
]

LOCUS_PROFILES = [
    ("locus-uma", {"LOCUS_PROFILE": "uma"}),
    ("locus-eco", {"LOCUS_PROFILE": "eco"}),
    ("locus-eco-lazy", {"LOCUS_PROFILE": "eco", "LOCUS_LAZY_RELEASE": "1"}),
    ("locus-numa", {"LOCUS_PROFILE": "numa"}),
    ("locus-auto", {"LOCUS_PROFILE": "auto"}),
]

PEER_NAMES = [p[0] for p in PEERS]


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def find_lib(candidates):
    dirs = [LIBDIR, "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    for c in candidates:
        for d in dirs:
            p = os.path.join(d, c)
            if os.path.exists(p):
                return p
    for c in candidates:
        hits = sorted(glob.glob("/usr/lib/*/" + c + "*"))
        if hits:
            return hits[0]
    return None


def discover_allocators(locus_lib):
    """Returns (allocators, notes).  An allocator is a dict with name, kind
    ('peer' or 'locus'), preload (path or None) and env (dict)."""
    allocs, notes = [], []
    for name, cands in PEERS:
        if cands is None:
            allocs.append({"name": name, "kind": "peer", "preload": None, "env": {}})
            continue
        lib = find_lib(cands)
        if lib:
            allocs.append({"name": name, "kind": "peer", "preload": lib, "env": {}})
        else:
            notes.append("%s skipped: none of %s found (scripts/setup.sh bench installs it)"
                         % (name, ", ".join(cands)))
    if locus_lib and os.path.exists(locus_lib):
        for name, env in LOCUS_PROFILES:
            allocs.append({"name": name, "kind": "locus", "preload": os.path.abspath(locus_lib),
                           "env": dict(env)})
    else:
        notes.append("locus profiles skipped: %s not found (build it, or pass --locus-lib)" % locus_lib)
    return allocs, notes


def default_build_dir():
    """LOCUS_BENCH_BUILD_DIR (what scripts/bench.sh builds into), else build/."""
    return os.path.abspath(os.environ.get("LOCUS_BENCH_BUILD_DIR") or os.path.join(REPO, "build"))


def stale_source(lib):
    """The newest library source modified after `lib` was built, or None.  A
    run of tools/bench.py alone once measured a library built before the
    change it was meant to measure (the default build/ was hours old)."""
    try:
        built = os.path.getmtime(os.path.realpath(lib))
    except OSError:
        return None
    newest, newest_t = None, built
    for top in ("src", "include"):
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                path = os.path.join(root, f)
                t = os.path.getmtime(path)
                if t > newest_t:
                    newest, newest_t = path, t
    return newest


def find_bin_dir(arg):
    if arg:
        return os.path.abspath(arg)
    if os.environ.get("LOCUS_BENCH_BUILD_DIR"):
        return os.path.join(default_build_dir(), "bench")
    for d in ("build/bench", "build-bench/bench", "build"):
        p = os.path.join(REPO, d)
        if os.path.exists(os.path.join(p, "bench_page_fault")):
            return p
    return os.path.join(REPO, "build", "bench")


# --------------------------------------------------------------------------
# Running one child.

def parse_kv(line):
    out = {}
    for tok in line.split()[1:]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def num(v):
    try:
        f = float(v)
        return f if math.isfinite(f) else v
    except (TypeError, ValueError):
        return v


def child_env(alloc):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOCUS_") and k not in ("LD_PRELOAD", "MALLOC_CONF")}
    if alloc["preload"]:
        env["LD_PRELOAD"] = alloc["preload"]
    env.update(alloc["env"])
    return env


def run_one(argv, env, timeout, scratch):
    """Spawns argv, waits with os.wait4 and returns a dict of measurements."""
    out_path = os.path.join(scratch, "stdout")
    err_path = os.path.join(scratch, "stderr")
    fo = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    fe = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    fi = os.open(os.devnull, os.O_RDONLY)
    actions = [(os.POSIX_SPAWN_DUP2, fi, 0), (os.POSIX_SPAWN_DUP2, fo, 1), (os.POSIX_SPAWN_DUP2, fe, 2)]
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    finally:
        for fd in (fo, fe, fi):
            os.close(fd)
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    timed_out = []
    lock = threading.Lock()
    reaped = []

    def kill():
        with lock:
            if reaped:
                return
            timed_out.append(True)
            try:
                if pidfd is not None:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    while True:
        try:
            _, status, ru = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    wall = time.perf_counter() - t0
    with lock:
        reaped.append(True)
    timer.cancel()
    if pidfd is not None:
        os.close(pidfd)
    with open(out_path, errors="replace") as f:
        stdout = f.read()
    with open(err_path, errors="replace") as f:
        stderr = f.read()
    rec = {"wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
           "maxrss_kib": ru.ru_maxrss, "minflt": ru.ru_minflt, "majflt": ru.ru_majflt,
           "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw}
    if os.WIFSIGNALED(status):
        rec["rc"] = -os.WTERMSIG(status)
    else:
        rec["rc"] = os.WEXITSTATUS(status)
    rec["timed_out"] = bool(timed_out)
    return rec, stdout, stderr


def evaluate(rec, stdout, stderr):
    """Fills in ok / reason / metric fields from the child's output."""
    results = [parse_kv(l) for l in stdout.splitlines() if l.startswith("RESULT ")]
    data = [{k: num(v) for k, v in parse_kv(l).items()} for l in stdout.splitlines() if l.startswith("DATA ")]
    rec["data"] = data
    reason = None
    if "cannot be preloaded" in stderr:
        reason = "LD_PRELOAD did not take (ld.so: cannot be preloaded)"
    elif rec["timed_out"]:
        reason = "timed out"
    elif rec["rc"] < 0:
        reason = "killed by signal %d (%s)" % (-rec["rc"], signal.Signals(-rec["rc"]).name
                                               if -rec["rc"] in signal.Signals._value2member_map_ else "?")
    elif rec["rc"] != 0:
        reason = "exit status %d" % rec["rc"]
    elif len(results) != 1:
        reason = "expected one RESULT line, got %d" % len(results)
    elif results[0].get("check") != "ok":
        reason = "check=%s" % results[0].get("check")
    elif not isinstance(num(results[0].get("value")), float):
        reason = "RESULT without a numeric value"
    if results and results[0].get("check") == "fail":
        reason = "validation failed (%s)" % results[0].get("reason", "?")
    rec["ok"] = reason is None
    rec["reason"] = reason
    if results:
        r = results[0]
        rec["metric"] = r.get("metric")
        rec["value"] = num(r.get("value"))
        rec["unit"] = r.get("unit")
        rec["better"] = r.get("better", "lower")
        rec["extra"] = {k: num(v) for k, v in r.items()
                        if k not in ("name", "metric", "value", "unit", "better", "check", "checksum")}
        if "checksum" in r:
            rec["checksum"] = r["checksum"]  # compared as text across allocators
    if not rec["ok"]:
        tail = (stderr.strip().splitlines() or [""])[-15:]
        rec["stderr_tail"] = "\n".join(tail)
    return rec


def cross_check(runs):
    """A workload that prints checksum=... does the same work under every
    allocator (tags and sizes come from the seed alone), so every successful
    run of one workload must print the same checksum.  Runs whose checksum
    differs from the most common one are marked failed (all of them on a
    tie).  Returns the number of runs so marked."""
    bad = 0
    by_w = {}
    for r in runs:
        if r["ok"] and "checksum" in r:
            by_w.setdefault(r["workload"], []).append(r)
    for wid, rs in by_w.items():
        counts = {}
        for r in rs:
            counts[r["checksum"]] = counts.get(r["checksum"], 0) + 1
        if len(counts) < 2:
            continue
        top = sorted(counts.values(), reverse=True)
        ref = max(counts, key=counts.get) if top[0] > top[1] else None
        for r in rs:
            if r["checksum"] != ref:
                r["ok"] = False
                r["reason"] = ("checksum %s differs from the other allocators' (%s)"
                               % (r["checksum"], ", ".join(sorted(counts))))
                bad += 1
    return bad


# --------------------------------------------------------------------------
# Progress.

class Progress:
    def __init__(self, total):
        self.total = total
        self.done = 0
        self.t0 = time.time()
        self.tty = sys.stderr.isatty()
        self.per_w = {}

    def eta(self, remaining):
        everything = [d for ds in self.per_w.values() for d in ds]
        if not everything:
            return None
        mean_all = sum(everything) / len(everything)
        s = 0.0
        for w in remaining:
            ds = self.per_w.get(w)
            s += sum(ds) / len(ds) if ds else mean_all
        return s

    def update(self, wname, dur, label, remaining, ok):
        self.done += 1
        self.per_w.setdefault(wname, []).append(dur)
        eta = self.eta(remaining)
        etas = fmt_dur(eta) if eta is not None else "?"
        el = fmt_dur(time.time() - self.t0)
        if self.tty:
            width = 30
            fill = int(width * self.done / max(1, self.total))
            line = "\r[%s%s] %d/%d elapsed %s ETA %s  %-40s" % (
                "#" * fill, "." * (width - fill), self.done, self.total, el, etas, label[:40])
            sys.stderr.write(line)
            if not ok:
                sys.stderr.write("\n")
            sys.stderr.flush()
        else:
            log("[%d/%d] %s %s (%.2fs) elapsed %s ETA %s" % (
                self.done, self.total, label, "ok" if ok else "FAILED", dur, el, etas))

    def finish(self):
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def fmt_dur(s):
    s = int(round(s))
    if s >= 3600:
        return "%dh%02dm" % (s // 3600, s % 3600 // 60)
    if s >= 60:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%ds" % s


# --------------------------------------------------------------------------
# Statistics.

def median(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def cost(value, ref, better):
    """Relative cost of value against ref: < 1 means better than ref."""
    if value is None or ref is None or value <= 0 or ref <= 0:
        return None
    return value / ref if better == "lower" else ref / value


def summarise(runs, workloads, allocs):
    summ = {}
    for wid, _, _ in workloads:
        per = {}
        for a in allocs:
            rs = [r for r in runs if r["workload"] == wid and r["allocator"] == a["name"]]
            if not rs:
                continue
            ok = [r for r in rs if r["ok"]]
            s = {"runs": len(rs), "ok": len(ok), "failed": len(rs) - len(ok)}
            if ok:
                s["metric"] = ok[0].get("metric")
                s["unit"] = ok[0].get("unit")
                s["better"] = ok[0].get("better", "lower")
                s["value"] = median([r["value"] for r in ok])
                vals = [r["value"] for r in ok]
                s["value_min"], s["value_max"] = min(vals), max(vals)
                for k in ("wall_s", "user_s", "sys_s", "maxrss_kib", "minflt"):
                    s[k] = median([r[k] for r in ok])
                # Extra fields some workloads report: throughput per CPU
                # second (stable on shared cores), resident set at the end.
                for k in ("cpu_ops_per_s", "peak_rss_kib", "final_rss_kib", "final_rss_mib", "rss_after_free_mib",
                          "in_use_after_free_mib"):
                    xs = [r.get("extra", {}).get(k) for r in ok]
                    xs = [x for x in xs if isinstance(x, (int, float))]
                    if xs:
                        s[k] = median(xs)
                        s[k + "_min"], s[k + "_max"] = min(xs), max(xs)
            per[a["name"]] = s
        if not per:
            continue
        better = next((s["better"] for s in per.values() if "better" in s), "lower")
        ref = per.get("glibc", {}).get("value")
        peers = [(n, s["value"]) for n, s in per.items() if n in PEER_NAMES and s.get("value")]
        best = None
        if peers:
            best = (min if better == "lower" else max)(peers, key=lambda t: t[1])
        # The same ratio taken within each repetition (the allocators of one
        # repetition run back to back), then the median: a host that slows
        # down for a while moves a repetition's runs together.
        by_rep = {}
        for r in runs:
            if r["workload"] == wid and r["ok"] and isinstance(r.get("value"), (int, float)):
                by_rep.setdefault(r.get("rep"), {})[r["allocator"]] = r["value"]
        for n, s in per.items():
            if s.get("value") is None:
                continue
            s["vs_glibc"] = cost(s["value"], ref, better)
            s["vs_best_peer"] = cost(s["value"], best[1], better) if best else None
            if best:
                xs = [cost(m[n], m[best[0]], better) for m in by_rep.values() if n in m and best[0] in m]
                s["vs_best_peer_paired"] = median(xs)   # skips what cost() left as None
            if per.get("glibc", {}).get("wall_s"):
                s["wall_vs_glibc"] = s["wall_s"] / per["glibc"]["wall_s"]
        summ[wid] = {"best_peer": best[0] if best else None, "allocators": per}
    return summ


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# --------------------------------------------------------------------------
# Reports.

def host_info():
    info = {"hostname": platform.node(), "kernel": platform.release(), "python": platform.python_version(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    info["cpu"] = l.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    for key, path in (("thp_enabled", "/sys/kernel/mm/transparent_hugepage/enabled"),
                      ("thp_defrag", "/sys/kernel/mm/transparent_hugepage/defrag")):
        try:
            with open(path) as f:
                info[key] = f.read().strip()
        except OSError:
            pass
    info["numa_nodes"] = len(glob.glob("/sys/devices/system/node/node[0-9]*")) or 1
    try:
        info["git_commit"] = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    return info


def f3(x):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return "%.3g" % x
    return "%.3f" % x if ax < 10 else "%.1f" % x


def write_markdown(path, meta, summ, allocs, runs, notes):
    names = [a["name"] for a in allocs]
    L = []
    L.append("# locus benchmark results\n")
    L.append("- date: %s" % meta["date"])
    L.append("- mode: %s, repeat %d, interleaved runs" % (meta["mode"], meta["repeat"]))
    h = meta["host"]
    L.append("- host: %s, %s CPUs, %s GiB, %s NUMA node(s), kernel %s, THP %s" % (
        h.get("cpu", "?"), h.get("cpus"), h.get("mem_gib"), h.get("numa_nodes"), h.get("kernel"),
        h.get("thp_enabled", "?")))
    L.append("- commit: %s" % (h.get("git_commit") or "none"))
    L.append("- allocators: " + ", ".join("%s (%s)" % (a["name"], os.path.basename(a["preload"]) if a["preload"]
                                                        else "no preload") for a in allocs))
    for n in notes:
        L.append("- note: " + n)
    L.append("")
    L.append("Cost ratios: the workload's own metric of an allocator divided by the reference's "
             "(inverted for throughputs), medians over the repetitions. **Below 1 is better than the "
             "reference**, above 1 worse. The best peer is the best of glibc, jemalloc, tcmalloc and "
             "mimalloc on that workload.\n")
    for title, key in (("Cost relative to glibc", "vs_glibc"), ("Cost relative to the best peer", "vs_best_peer"),
                       ("Cost relative to the best peer, paired", "vs_best_peer_paired")):
        L.append("## %s (lower is better)\n" % title)
        if key == "vs_best_peer_paired":
            L.append("The ratio to the best peer (the same peer as above) within each repetition, whose "
                     "runs follow each other, then the median over the repetitions: steadier than the "
                     "ratio of the medians when the host's speed drifts between repetitions.\n")
        L.append("| workload | " + " | ".join(names) + " |")
        L.append("|---" * (len(names) + 1) + "|")
        cols = {n: [] for n in names}
        for wid, ws in summ.items():
            row = []
            for n in names:
                s = ws["allocators"].get(n)
                if s is None:
                    row.append("—")
                elif s.get("failed"):
                    row.append("**FAIL**")
                else:
                    v = s.get(key)
                    cols[n].append(v)
                    cell = f3(v)
                    if key == "vs_glibc" and n == ws.get("best_peer"):
                        cell += " ★"
                    row.append(cell)
            L.append("| %s | %s |" % (wid, " | ".join(row)))
        L.append("| *geometric mean* | %s |" % " | ".join(f3(geomean(cols[n])) for n in names))
        L.append("")
    L.append("★ marks the best peer of the workload.\n")
    L.append("## Workload metrics (medians)\n")
    L.append("| workload | metric | unit | better | " + " | ".join(names) + " |")
    L.append("|---" * (len(names) + 4) + "|")
    for wid, ws in summ.items():
        any_s = next((s for s in ws["allocators"].values() if "metric" in s), {})
        row = [f3(ws["allocators"].get(n, {}).get("value")) for n in names]
        L.append("| %s | %s | %s | %s | %s |" % (wid, any_s.get("metric", "?"), any_s.get("unit", "?"),
                                                  any_s.get("better", "?"), " | ".join(row)))
    L.append("")
    cpu_w = [w for w, ws in summ.items() if any("cpu_ops_per_s" in s for s in ws["allocators"].values())]
    if cpu_w:
        L.append("## Throughput per CPU second (medians [min–max])\n")
        L.append("Operations divided by the CPU time of the whole process over the timed region "
                 "(`cpu_ops_per_s`, higher is better). On shared cores a descheduled thread stretches "
                 "the wall time but not the CPU time, so this is the steadier figure; read it next to "
                 "the wall-clock metric, which also shows threads that sleep on a lock.\n")
        L.append("| workload | " + " | ".join(names) + " |")
        L.append("|---" * (len(names) + 1) + "|")
        for wid in cpu_w:
            row = []
            for n in names:
                s = summ[wid]["allocators"].get(n, {})
                row.append("%s [%s–%s]" % (f3(s["cpu_ops_per_s"]), f3(s["cpu_ops_per_s_min"]),
                                           f3(s["cpu_ops_per_s_max"])) if "cpu_ops_per_s" in s else "—")
            L.append("| %s | %s |" % (wid, " | ".join(row)))
        L.append("")
        L.append("CPU-time cost relative to the best peer on the same figure (best peer's `cpu_ops_per_s` "
                 "divided by the allocator's; **below 1 is better**):\n")
        L.append("| workload | " + " | ".join(names) + " |")
        L.append("|---" * (len(names) + 1) + "|")
        for wid in cpu_w:
            al = summ[wid]["allocators"]
            peers = [al[n]["cpu_ops_per_s"] for n in al if n in PEER_NAMES and al[n].get("cpu_ops_per_s")]
            best = max(peers) if peers else None
            row = []
            for n in names:
                v = al.get(n, {}).get("cpu_ops_per_s")
                row.append(f3(best / v) if best and v else "—")
            L.append("| %s | %s |" % (wid, " | ".join(row)))
        L.append("")
    L.append("## Memory (medians, MiB)\n")
    L.append("Peak resident set of the workload's address space (`peak_rss_kib`, its VmHWM), then, "
             "where the workload reports it, its resident set at the end after every block was freed "
             "(`final_rss`), as *peak / final*. ¹: the workload does not report its peak; the child's "
             "`ru_maxrss` is shown instead, which includes the harness's own resident set at the time "
             "of the spawn (the kernel keeps the high-water mark of the address space replaced by exec), "
             "so values below ~20 MiB mean nothing.\n")
    L.append("| workload | " + " | ".join(names) + " |")
    L.append("|---" * (len(names) + 1) + "|")
    for wid, ws in summ.items():
        row = []
        for n in names:
            s = ws["allocators"].get(n, {})
            if s.get("peak_rss_kib") is not None:
                cell = f3(s["peak_rss_kib"] / 1024.0)
            elif s.get("maxrss_kib") is not None:
                cell = f3(s["maxrss_kib"] / 1024.0) + "¹"
            else:
                row.append("—")
                continue
            if s.get("final_rss_mib") is not None:
                cell += " / " + f3(s["final_rss_mib"])
            elif s.get("final_rss_kib") is not None:
                cell += " / " + f3(s["final_rss_kib"] / 1024.0)
            row.append(cell)
        L.append("| %s | %s |" % (wid, " | ".join(row)))
    L.append("")
    if any("rss_after_free_mib" in s for ws in summ.values() for s in ws["allocators"].values()):
        L.append("After the parallel frees of `ab_omp` (before the serial phase): resident set, and the "
                 "bytes the allocator itself counts in use (`na`: it does not say), MiB.\n")
        L.append("| workload | " + " | ".join(names) + " |")
        L.append("|---" * (len(names) + 1) + "|")
        for wid, ws in summ.items():
            if not any("rss_after_free_mib" in s for s in ws["allocators"].values()):
                continue
            row = []
            for n in names:
                s = ws["allocators"].get(n, {})
                if "rss_after_free_mib" not in s:
                    row.append("—")
                    continue
                row.append("RSS %s, in use %s" % (f3(s["rss_after_free_mib"]),
                                                  f3(s.get("in_use_after_free_mib", "na"))))
            L.append("| %s | %s |" % (wid, " | ".join(row)))
        L.append("")
    L.append("## Details per workload\n")
    L.append("Medians over the successful runs; wall/user/sys and peak RSS come from the child's rusage "
             "(the whole process, start-up included), minor faults likewise.\n")
    for wid, ws in summ.items():
        L.append("### %s\n" % wid)
        L.append("| allocator | metric (min–max) | ×glibc | ×best peer | wall s | user s | sys s | peak RSS MiB "
                 "| minor faults | runs ok |")
        L.append("|---" * 10 + "|")
        for n in names:
            s = ws["allocators"].get(n)
            if s is None:
                continue
            if "value" not in s:
                L.append("| %s | **failed** | | | | | | | | %d/%d |" % (n, s["ok"], s["runs"]))
                continue
            rng = "%s (%s–%s)" % (f3(s["value"]), f3(s["value_min"]), f3(s["value_max"]))
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %d | %d/%d |" % (
                n, rng, f3(s.get("vs_glibc")), f3(s.get("vs_best_peer")), f3(s["wall_s"]), f3(s["user_s"]),
                f3(s["sys_s"]), f3(s["maxrss_kib"] / 1024.0), int(s["minflt"]), s["ok"], s["runs"]))
        L.append("")
    fails = [r for r in runs if not r["ok"]]
    L.append("## Failures\n")
    if not fails:
        L.append("None: every run validated its output.\n")
    for r in fails:
        L.append("- %s under %s (rep %d): %s  \n  command: `%s`" % (r["workload"], r["allocator"], r["rep"],
                                                                    r["reason"], r["command"]))
        if r.get("stderr_tail"):
            L.append("\n```\n%s\n```" % r["stderr_tail"])
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def make_plots(outdir, summ, allocs, runs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError, or a broken installation
        return ["plots skipped: matplotlib not importable (%s)" % e]
    made = []
    names = [a["name"] for a in allocs]
    # 1. ratios per workload
    wids = [w for w in summ]
    if wids:
        fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(wids)), 5))
        width = 0.8 / max(1, len(names))
        for i, n in enumerate(names):
            ys = [summ[w]["allocators"].get(n, {}).get("vs_glibc") or 0 for w in wids]
            ax.bar([j + i * width for j in range(len(wids))], ys, width, label=n)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(wids))])
        ax.set_xticklabels(wids, rotation=35, ha="right")
        ax.set_ylabel("cost relative to glibc (lower is better)")
        ax.set_yscale("log")
        ax.legend(fontsize=8, ncol=2)
        ax.set_title("locus benchmarks: median cost ratio to glibc")
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "ratios.png"), dpi=110)
        plt.close(fig)
        made.append("ratios.png")
    # 2. fault-cost histograms (allocator independent: first allocator that has them)
    pf = None
    for n in names:
        pf = next((r for r in runs if r["workload"] == "page_fault" and r["allocator"] == n and r["ok"]), None)
        if pf:
            break
    if pf:
        series = [d for d in pf["data"] if "hist_first" in d]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, page in zip(axes, ("4k", "thp")):
            for d in series:
                if d.get("page") != page:
                    continue
                for key, style in (("hist_first", "-"), ("hist_second", ":")):
                    pts = sorted((int(b), int(c)) for b, c in (x.split(":") for x in str(d[key]).split(",") if x))
                    if not pts:
                        continue
                    xs = [2 ** b for b, _ in pts]
                    tot = sum(c for _, c in pts)
                    ys = [c / tot for _, c in pts]
                    ax.plot(xs, ys, style, marker=".", label="%s %s" % (d["series"], "1st" if key == "hist_first"
                                                                          else "2nd"))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("cycles per %s page write (log2 buckets)" % ("4 KiB" if page == "4k" else "2 MiB"))
            ax.set_ylabel("fraction of pages")
            ax.set_title("page faults, %s pages (under %s)" % (page, pf["allocator"]))
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "page_fault_hist.png"), dpi=110)
        plt.close(fig)
        made.append("page_fault_hist.png")
    # 3. cost breakdown curves
    ac = [r for r in runs if r["workload"] == "alloc_cost" and r["ok"]]
    if ac:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for n in names:
            pts = {}
            for r in ac:
                if r["allocator"] != n:
                    continue
                for d in r["data"]:
                    if "size" in d:
                        pts.setdefault(int(d["size"]), []).append(d)
            if not pts:
                continue
            sizes = sorted(pts)
            for ax, key in zip(axes, ("alloc_ns_per_byte", "touch1_ns_per_byte")):
                ax.plot(sizes, [median([d[key] for d in pts[s]]) for s in sizes], marker="o", ms=3, label=n)
        for ax, t in zip(axes, ("malloc + free, ns per byte", "first touch (memset), ns per byte")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("block size (bytes)")
            ax.set_title(t)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "alloc_cost.png"), dpi=110)
        plt.close(fig)
        made.append("alloc_cost.png")
    return made


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a few seconds per pair); smoke test")
    ap.add_argument("--repeat", type=int, default=None, help="runs per pair (default 5, quick 1)")
    ap.add_argument("--only", default=None, help="comma-separated workload ids or prefixes")
    ap.add_argument("--allocators", default=None, help="comma-separated allocator names")
    ap.add_argument("--out", default=None, help="output directory (default results/scratch/<timestamp>, git-ignored)")
    ap.add_argument("--locus-lib", default=os.path.join(default_build_dir(), "liblocus.so"),
                    help="default: liblocus.so of $LOCUS_BENCH_BUILD_DIR, else of build/")
    ap.add_argument("--allow-stale", action="store_true",
                    help="run even when a source file is newer than the locus library")
    ap.add_argument("--bin-dir", default=None, help="directory holding the bench_* programs")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run (default 120 quick, 1800 full)")
    ap.add_argument("--threads", type=int, default=None, help="passed to the workloads as --threads")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--list", action="store_true", help="list workloads and allocators, then exit")
    args = ap.parse_args()
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 5)
    timeout = args.timeout or (120.0 if args.quick else 1800.0)
    if repeat < 1:
        ap.error("--repeat must be >= 1")

    allocs, notes = discover_allocators(args.locus_lib)
    if args.allocators:
        want = [x.strip() for x in args.allocators.split(",") if x.strip()]
        known = [a["name"] for a in allocs]
        for w in want:
            if w not in known:
                notes.append("allocator %s not available, skipped" % w)
        allocs = [a for a in allocs if a["name"] in want]
    workloads = WORKLOADS
    if args.only:
        keys = [x.strip() for x in args.only.split(",") if x.strip()]
        workloads = [w for w in WORKLOADS if any(w[0] == k or w[0].startswith(k) or w[1] == k for k in keys)]
        if not workloads:
            ap.error("--only matched no workload; known: " + ", ".join(w[0] for w in WORKLOADS))
    bindir = find_bin_dir(args.bin_dir)
    if args.list:
        print("workloads:", ", ".join(w[0] for w in workloads))
        print("allocators:", ", ".join(a["name"] for a in allocs))
        for n in notes:
            print("note:", n)
        return 0
    if not allocs:
        log("bench: no allocator to run")
        return 2
    newer = stale_source(args.locus_lib) if any(a["kind"] == "locus" for a in allocs) else None
    if newer:
        msg = ("%s is older than %s: the locus columns would measure an earlier build "
               "(rebuild it, or run scripts/bench.sh, which builds first)" % (args.locus_lib, os.path.relpath(newer, REPO)))
        if not args.allow_stale:
            log("bench: " + msg + "; --allow-stale to run anyway")
            return 2
        notes.append("stale library: " + msg)
    absent = [w for w in workloads if not os.access(os.path.join(bindir, "bench_" + w[1]), os.X_OK)]
    for w in absent:
        if w[1] in OPTIONAL_PROGRAMS:
            notes.append("%s skipped: bench_%s was not built (%s)" % (w[0], w[1], OPTIONAL_PROGRAMS[w[1]]))
    workloads = [w for w in workloads if w not in absent or w[1] not in OPTIONAL_PROGRAMS]
    if not workloads:
        log("bench: no workload left to run; " + "; ".join(notes))
        return 2
    missing = [w[1] for w in workloads if not os.access(os.path.join(bindir, "bench_" + w[1]), os.X_OK)]
    if missing:
        log("bench: missing programs in %s: %s (build with: cmake -S . -B build -G Ninja && ninja -C build)"
            % (bindir, ", ".join("bench_" + m for m in sorted(set(missing)))))
        return 2

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    # Unpublished runs go to a git-ignored place; publishing is a deliberate copy.
    outdir = os.path.abspath(args.out or os.path.join(REPO, "results", "scratch", stamp))
    os.makedirs(outdir, exist_ok=True)
    for n in notes:
        log("bench: note: " + n)
    log("bench: %s mode, %d workload(s) x %d allocator(s) x %d repeat(s) -> %s" % (
        "quick" if args.quick else "full", len(workloads), len(allocs), repeat, outdir))

    # The allocators' order rotates from one repetition to the next: a run
    # inherits the machine's state (free huge pages, page cache) from the run
    # before it, and no allocator should always come first.
    plan = [(rep, w, a) for rep in range(repeat) for w in workloads
            for a in allocs[rep % len(allocs):] + allocs[:rep % len(allocs)]]
    prog = Progress(len(plan))
    runs = []
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="locus-bench-") as scratch:
        try:
            for i, (rep, w, a) in enumerate(plan):
                wid, prog_name, extra = w
                argv = [os.path.join(bindir, "bench_" + prog_name)] + extra + (["--quick"] if args.quick else [])
                if args.threads:
                    argv += ["--threads", str(args.threads)]
                env = child_env(a)
                rec, out, err = run_one(argv, env, timeout, scratch)
                rec.update({"workload": wid, "allocator": a["name"], "rep": rep,
                            "command": " ".join(["%s=%s" % (k, shlex.quote(v)) for k, v in
                                                 ([("LD_PRELOAD", a["preload"])] if a["preload"] else [])
                                                 + sorted(a["env"].items())] + [shlex.quote(x) for x in argv])})
                evaluate(rec, out, err)
                runs.append(rec)
                prog.update(wid, rec["wall_s"], "%s/%s" % (wid, a["name"]), [p[1][0] for p in plan[i + 1:]],
                            rec["ok"])
                if not rec["ok"]:
                    log("bench: FAILED %s under %s: %s\n  command: %s%s" % (
                        wid, a["name"], rec["reason"], rec["command"],
                        ("\n  " + rec["stderr_tail"].replace("\n", "\n  ")) if rec.get("stderr_tail") else ""))
        except KeyboardInterrupt:
            interrupted = True
            notes.append("interrupted after %d of %d runs" % (len(runs), len(plan)))
    prog.finish()

    if cross_check(runs):
        for r in runs:
            if not r["ok"] and r["reason"].startswith("checksum"):
                log("bench: FAILED %s under %s: %s\n  command: %s" % (r["workload"], r["allocator"], r["reason"],
                                                                     r["command"]))
    summ = summarise(runs, workloads, allocs)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "mode": "quick" if args.quick else "full",
            "repeat": repeat, "host": host_info(), "bin_dir": bindir, "locus_lib": args.locus_lib,
            "argv": sys.argv[1:], "format": 1}
    if not args.no_plots:
        made = make_plots(outdir, summ, allocs, runs)
        notes.extend(m for m in made if m.startswith("plots skipped"))
        meta["plots"] = [m for m in made if m.endswith(".png")]
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": meta, "notes": notes, "allocators": allocs,
                   "workloads": [{"id": w[0], "program": "bench_" + w[1], "args": w[2]} for w in workloads],
                   "summary": summ, "runs": runs}, f, indent=1)
    write_markdown(os.path.join(outdir, "results.md"), meta, summ, allocs, runs, notes)

    fails = [r for r in runs if not r["ok"]]
    log("bench: %d run(s), %d failed; results in %s" % (len(runs), len(fails), outdir))
    if not args.out:
        log("bench: this directory is git-ignored; to publish the run: cp -r %s results/%s-<what>/ "
            "and commit it (docs/benchmarks.md, \"Publishing a run\")"
            % (os.path.relpath(outdir, os.getcwd()), stamp.split("-")[0]))
    for r in fails:
        log("bench:   FAIL %s / %s: %s" % (r["workload"], r["allocator"], r["reason"]))
    if interrupted:
        return 130
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
