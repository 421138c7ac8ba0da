#!/usr/bin/env python3
"""Benchmark harness for locus: runs workloads under allocators, side by side.

The workloads are the bench_* programs built from bench/ (plain programs; the
allocator is switched with LD_PRELOAD only).  Three modes (MODES): the default
run, a representative set sized to finish in about ten minutes on 2 cores;
--full, every workload under every allocator; --quick, a smoke test.  Every
(workload, allocator) pair is run --repeat times, interleaved (A B C A B C ...),
and the child's rusage
(wall, user, sys, peak RSS, minor faults) is recorded together with the
workload's own RESULT line.  Writes results.json, results.md and PNG plots to
results/scratch/<timestamp>/ (git-ignored; or --out).  A run worth keeping is
published by copying it to results/<date>-<what>/ and committing it: see
"Publishing a run" in docs/benchmarks.md.

Samples too short to time or far from their siblings are flagged and left
out of every median (flag_samples); geometric means are over the rows every
allocator completed (common_geomeans), which keeps an interrupted run's tables
valid.

Exit status: 0 if every run that was attempted validated its output, 1 if any
run failed (non-zero exit, crash, timeout, check=fail, or a preload that did
not take), 2 for usage errors, 130 when interrupted (Ctrl-C).
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

class Workload:
    """One workload: a bench_* program and its arguments.

    id       what tables and plots show
    program  bench/<program>.c, built as bench_<program>
    args     its arguments in every mode
    family   the plot's panel and the tables' group
    default  extra arguments for the default run, sized so that a run lasts
             about a second here and its timed part at least MIN_TIMED_S (the
             workload repeats its loop inside the run); None: --full only
    memory   its metric is memory (MiB), not time: marked in tables and plots
    """

    def __init__(self, id, program, args=(), family="other", default=None, memory=False):
        self.id, self.program, self.args = id, program, list(args)
        self.family, self.default, self.memory = family, default, memory

    def argv(self, mode):
        """The arguments for mode: quick (--quick sizes), default, full."""
        if mode == "quick":
            return self.args + ["--quick"]
        if mode == "default" and self.default is not None:
            return self.args + list(self.default)
        return list(self.args)


LARGE, SMALL, THREADS, MEMORY, SYSTEM = ("large blocks", "small blocks", "between threads", "memory",
                                         "kernel and caches")
HEAPS = "heaps"
W = Workload
# Adding a workload is one entry here (and its program in bench/CMakeLists.txt).
WORKLOADS = [
    W("page_fault", "page_fault", family=SYSTEM),
    W("alloc_cost", "alloc_cost", family=SYSTEM),
    W("local_batch_32", "local_batch", ["--size", "32"], family=SMALL),
    W("local_batch_128k", "local_batch", ["--size", "128K"], family=LARGE),
    W("prodcons_32", "prodcons", ["--size", "32"], family=THREADS, default=["--count", "10000000"]),
    W("prodcons_2m", "prodcons", ["--size", "2M"], family=LARGE, default=["--count", "20000"]),
    W("exchange_64", "random_exchange", ["--max-size", "64"], family=THREADS, default=["--ops", "5000000"]),
    W("exchange_2m", "random_exchange", ["--max-size", "2M"], family=THREADS),
    W("timestep", "timestep", family=LARGE, default=["--steps", "30"]),
    W("hera", "hera", family=LARGE, default=["--iters", "600"]),
    W("realloc_grow", "realloc_grow", family=LARGE, default=["--reps", "20", "--min-ms", "300"]),
    W("calloc_recycled", "calloc_recycled", family=LARGE),
    W("numa_first_touch", "numa_first_touch", family=SYSTEM),
    W("cache_align", "cache_align", family=SYSTEM),
    W("small_random", "small_random", family=SMALL, default=["--iters", "8000000"]),
    W("small_ring", "small_ring", family=THREADS),
    # Allocator-bound small-object workloads (issue 10): one word written and
    # checked at each end of a block, checksums compared across allocators.
    W("ab_random_1t", "ab_random", ["--threads", "1"], family=SMALL, default=["--iters", "20000000"]),
    W("ab_random_2t", "ab_random", ["--threads", "2"], family=SMALL),
    W("ab_batch_1t", "ab_batch", ["--threads", "1"], family=SMALL),
    W("ab_batch_2t", "ab_batch", ["--threads", "2"], family=SMALL, default=["--rounds", "25000"]),
    W("ab_bulk1m_1t", "ab_batch", ["--batch", "1000000", "--min", "16", "--max", "256", "--threads", "1"],
      family=SMALL),
    W("ab_prodcons", "ab_prodcons", family=THREADS),
    W("ab_exchange_1t", "ab_exchange", ["--threads", "1"], family=THREADS),
    W("ab_exchange_2t", "ab_exchange", ["--threads", "2"], family=THREADS, default=["--ops", "12000000"]),
    W("ab_larson", "ab_larson", family=THREADS, default=["--ops", "12000000"]),
    W("ab_churn", "ab_churn", family=SMALL),
    W("ab_cxx", "ab_cxx", family=SMALL, default=["--ops", "6000000"]),
    W("ab_omp", "ab_omp", family=MEMORY, default=["--scale", "4"], memory=True),
    W("phased", "phased", family=MEMORY, memory=True),
    W("ab_bursty", "ab_bursty", family=THREADS),
    W("ab_phases", "ab_phases", family=MEMORY),
    W("stencil", "stencil", family=SYSTEM),
    # Many blocks dropped at once (issue 30, user heaps; bench/heap_common.h).
    # The same program once per way of dropping: `free` of every block and the
    # allocator-independent baselines (obstack over malloc, a bump pointer
    # over the segment) under every allocator; `heap`, `heap-destroy` and
    # `heap-segment` take the heap API of the allocator in the process (locus:
    # locus_heap_*, mimalloc: mi_heap_*; found with dlsym) and fall back to
    # `free` under a peer without one (the RESULT line's variant= says which
    # ran). Checksums depend on the seed alone: equal across all of them.
    # Full runs and --only heap_ only.
    W("heap_timestep_free", "heap_timestep", ["--variant", "free"], family=HEAPS),
    W("heap_timestep_obstack", "heap_timestep", ["--variant", "obstack"], family=HEAPS),
    W("heap_timestep_reset", "heap_timestep", ["--variant", "heap"], family=HEAPS),
    W("heap_timestep_destroy", "heap_timestep", ["--variant", "heap-destroy"], family=HEAPS),
    W("heap_parse_free", "heap_parse", ["--variant", "free"], family=HEAPS),
    W("heap_parse_obstack", "heap_parse", ["--variant", "obstack"], family=HEAPS),
    W("heap_parse_destroy", "heap_parse", ["--variant", "heap"], family=HEAPS),
    W("heap_segment_free", "heap_segment", ["--variant", "free"], family=HEAPS),
    W("heap_segment_bump", "heap_segment", ["--variant", "bump"], family=HEAPS),
    W("heap_segment_heap", "heap_segment", ["--variant", "heap-segment"], family=HEAPS),
]
FAMILIES = [LARGE, SMALL, THREADS, MEMORY, SYSTEM, HEAPS]

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

# The modes: which workloads, allocators and repetitions, unless the command
# line says otherwise. The default run keeps to about ten minutes on a
# 2-core machine: the workloads with `default` sizes, the four peers, and
# locus's default profile and uma (eco, whose large blocks are mapped anew
# each time, takes 100 times glibc's time on prodcons_2m: --full has it).
MODES = {
    "quick": {"workloads": "all", "allocators": None, "repeat": 1, "timeout": 120.0},
    "default": {"workloads": "default", "allocators": ["glibc", "jemalloc", "tcmalloc", "mimalloc", "locus-auto",
                                                       "locus-uma"], "repeat": 3, "timeout": 300.0},
    "full": {"workloads": "all", "allocators": None, "repeat": 5, "timeout": 1800.0},
}
# Seconds per run assumed for the announced estimate when no earlier run of
# the same mode says better (results/**/results.json).
EST_FALLBACK = {"quick": 1.0, "default": 1.5, "full": 6.0}

# A timed sample shorter than this is too short to time (start-up, the
# scheduler's quantum and the clock weigh in it): flagged, not averaged.
MIN_TIMED_S = 0.1
# A sample this many times above or below the median of the runs of its
# workload and allocator (at least 3 runs) is flagged as implausible. Not
# less: on this shared machine single runs of a workload spread 3-6x under
# load, and the median of three already ignores one of them.
OUTLIER_FACTOR = 10.0


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
    # Ctrl-C stays pending from the spawn until the wait below is in place:
    # a SIGINT in between would leave a run behind that ignores it.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsigmask=mask)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
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
    waited = None
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)   # a pending Ctrl-C is raised here
        while waited is None:
            try:
                waited = os.wait4(pid, 0)
            except InterruptedError:
                continue
    except KeyboardInterrupt:     # Ctrl-C: the run in flight is dropped, its process too
        timer.cancel()
        if waited is None:
            kill()
            os.waitpid(pid, 0)
        if pidfd is not None:
            os.close(pidfd)
        raise
    _, status, ru = waited
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


def timed_s(rec):
    """How long the sample's timed part lasted: the workload's time_s, its
    value when the metric is a time in seconds, else the process's wall time."""
    x = rec.get("extra", {}).get("time_s")
    if isinstance(x, (int, float)):
        return x
    if rec.get("unit") == "s" and isinstance(rec.get("value"), (int, float)):
        return rec["value"]
    return rec.get("wall_s")


def flag_samples(runs, workloads, min_timed=MIN_TIMED_S, factor=OUTLIER_FACTOR):
    """Marks the successful runs whose value cannot be trusted (rec["flag"],
    a reason): a timed part shorter than min_timed (not for memory metrics),
    or a value more than factor times above or below the median of the
    unflagged runs of its workload and allocator, itself included (at least
    three runs). Flagged runs stay in the JSON and are listed, but no
    median, ratio or mean uses them. Returns the number flagged."""
    memory = {w.id for w in workloads if w.memory}
    n = 0
    for r in runs:
        if not r.get("ok") or r.get("flag") or r["workload"] in memory:
            continue
        t = timed_s(r)
        if isinstance(t, (int, float)) and t < min_timed:
            r["flag"] = "too short to time (%.3f s timed, under %.2f s)" % (t, min_timed)
            n += 1
    groups = {}
    for r in runs:
        if r.get("ok") and not r.get("flag") and isinstance(r.get("value"), (int, float)) and r["value"] > 0:
            groups.setdefault((r["workload"], r["allocator"]), []).append(r)
    for rs in groups.values():
        if len(rs) < 3:
            continue
        m = median([x["value"] for x in rs])
        for r in rs:
            if m and (r["value"] > factor * m or r["value"] * factor < m):
                r["flag"] = "implausible: %.3g is %.2gx the median %.3g of the %d runs" % (
                    r["value"], r["value"] / m, m, len(rs))
                n += 1
    return n


def summarise(runs, workloads, allocs):
    summ = {}
    for wl in workloads:
        wid = wl.id
        per = {}
        for a in allocs:
            rs = [r for r in runs if r["workload"] == wid and r["allocator"] == a["name"]]
            if not rs:
                continue
            ok = [r for r in rs if r["ok"] and not r.get("flag")]
            flagged = [r for r in rs if r["ok"] and r.get("flag")]
            s = {"runs": len(rs), "ok": len(ok), "failed": len(rs) - len(ok) - len(flagged),
                 "flagged": len(flagged)}
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
            if r["workload"] == wid and r["ok"] and not r.get("flag") and isinstance(r.get("value"), (int, float)):
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
        summ[wid] = {"best_peer": best[0] if best else None, "allocators": per, "family": wl.family,
                     "memory": wl.memory}
    return summ


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def common_geomeans(summ, names, key):
    """Geometric means of key per allocator over the rows every allocator has
    a value for (an interrupted or failed run leaves some rows incomplete:
    means over different rows would not compare). Returns ({name: mean},
    the rows used)."""
    rows = [w for w, ws in summ.items()
            if all((ws["allocators"].get(n) or {}).get(key) and not ws["allocators"][n].get("failed")
                   for n in names)]
    return {n: geomean([summ[w]["allocators"][n][key] for w in rows]) for n in names}, rows


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


SMOKE_NOTE = ("SMOKE TEST (--quick): every workload once at small sizes, to check that each runs and "
              "validates its output under each allocator. Its figures do not compare allocators (runs of "
              "milliseconds, start-up and a few steps dominate them): run scripts/bench.sh without --quick "
              "for results.")


def family_of(wid, ws):
    """A summary row's family; runs published before families were recorded
    take it from WORKLOADS."""
    if "family" in ws:
        return ws["family"]
    return next((w.family for w in WORKLOADS if w.id == wid), "other")


def is_memory(wid, ws):
    if "memory" in ws:
        return ws["memory"]
    return next((w.memory for w in WORKLOADS if w.id == wid), False)


def by_family(summ):
    """The workload ids of summ, grouped by family in FAMILIES order."""
    fam = {w: family_of(w, ws) for w, ws in summ.items()}
    order = FAMILIES + sorted(set(fam.values()) - set(FAMILIES))
    return [(f, [w for w in summ if fam[w] == f]) for f in order if f in fam.values()]


def row_label(wid, ws):
    return wid + (" (memory)" if is_memory(wid, ws) else "")


def ratio_table(summ, names, key="vs_glibc"):
    """The Markdown lines of a table of key (a cost ratio) per workload,
    grouped by family, and the geometric means over the rows every column
    has. The README's results table is this table of a published run
    (tests/structure/docs_examples.py checks it)."""
    L = ["| workload | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for fam, wids in by_family(summ):
        L.append("| ***%s*** |%s" % (fam, " |" * len(names)))
        for wid in wids:
            ws = summ[wid]
            row = []
            for n in names:
                s = ws["allocators"].get(n)
                if s is None:
                    row.append("—")
                elif s.get("failed"):
                    row.append("**FAIL**")
                else:
                    cell = f3(s.get(key))
                    if key == "vs_glibc" and n == ws.get("best_peer"):
                        cell += " ★"
                    if s.get("flagged"):
                        cell += " ⚑"
                    row.append(cell)
            L.append("| %s | %s |" % (row_label(wid, ws), " | ".join(row)))
    means, rows = common_geomeans(summ, names, key)
    L.append("| *geometric mean (%d of %d rows)* | %s |" % (len(rows), len(summ),
                                                          " | ".join(f3(means[n]) for n in names)))
    return L


def write_markdown(path, meta, summ, allocs, runs, notes):
    names = [a["name"] for a in allocs]
    L = []
    if meta["mode"] == "quick":
        L.append("# locus benchmark SMOKE TEST, not results\n")
        L.append("**%s**\n" % SMOKE_NOTE)
    else:
        L.append("# locus benchmark results\n")
    if meta.get("interrupted"):
        L.append("**Partial: %s.** The tables hold the runs done; geometric means are over the rows every "
                 "allocator completed.\n" % meta["interrupted"])
    L.append("- date: %s" % meta["date"])
    L.append("- mode: %s, repeat %d, interleaved runs, %d runs%s" % (
        meta["mode"], meta["repeat"], meta.get("runs_done", len(runs)),
        " in %s" % fmt_dur(meta["elapsed_s"]) if meta.get("elapsed_s") else ""))
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
        L.extend(ratio_table(summ, names, key))
        L.append("")
    L.append("★ marks the best peer of the workload; ⚑ a cell some of whose samples were flagged and left out "
             "(see \"Flagged samples\"); (memory) a row whose metric is memory, not time. Geometric means "
             "are over the rows where every allocator has a value.\n")
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
    flagged = [r for r in runs if r.get("ok") and r.get("flag")]
    L.append("## Flagged samples\n")
    L.append("Runs that validated but whose value is not used: a timed part under %.2f s, or a value "
             "more than %gx above or below the median of the runs of its workload and allocator.\n"
             % (MIN_TIMED_S, OUTLIER_FACTOR))
    if not flagged:
        L.append("None.\n")
    for r in flagged:
        L.append("- %s under %s (rep %d): %s" % (r["workload"], r["allocator"], r["rep"], r["flag"]))
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


def ratios_figure(plt, summ, names, smoke=False):
    """The cost ratio to glibc of each allocator on each workload: one panel
    per family (two columns), bars grouped by workload, log scale, a line at
    1, memory rows hatched and labelled, the legend outside on the right.
    None when there is nothing to draw."""
    fams = [(f, ws) for f, ws in by_family(summ) if ws]
    if not fams:
        return None
    ncols = 2 if len(fams) > 1 else 1
    nrows = (len(fams) + ncols - 1) // ncols
    widest = max(len(ws) for _, ws in fams)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(5.0, 1.1 * widest + 1.5) * ncols, 3.4 * nrows),
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"][1:]   # glibc's is the line at 1
    names = [n for n in names if n != "glibc"]
    width = 0.8 / max(1, len(names))
    for k, (fam, wids) in enumerate(fams):
        ax = axes[k // ncols][k % ncols]
        for i, n in enumerate(names):
            for j, w in enumerate(wids):
                v = (summ[w]["allocators"].get(n) or {}).get("vs_glibc")
                if not v:
                    continue
                # From the line at 1: up is worse than glibc, down better.
                ax.bar(j + (i - (len(names) - 1) / 2.0) * width, v - 1.0, width, bottom=1.0,
                       color=colors[i % len(colors)],
                       hatch="//" if is_memory(w, summ[w]) else None, edgecolor="white", linewidth=0.3,
                       )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, 0.8), max(hi, 1.25))
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda y, _: "%g" % float("%.2g" % y)))
        lo, hi = ax.get_ylim()
        every = hi / lo < 4          # a narrow range: label every minor tick
        ax.yaxis.set_minor_formatter(plt.FuncFormatter(
            lambda y, _, every=every: "%g" % float("%.1g" % y)
            if every or float("%.1g" % y) in (0.2, 0.3, 0.5, 2, 3, 5, 20, 50) else ""))
        ax.set_xticks(range(len(wids)))
        ax.set_xticklabels([w + ("\n(memory)" if is_memory(w, summ[w]) else "") for w in wids], fontsize=8,
                           rotation=20 if len(wids) > 5 else 0)
        ax.set_title(fam, fontsize=10)
        ax.set_ylabel("peak MiB / glibc's" if all(is_memory(w, summ[w]) for w in wids) else "cost / glibc's",
                      fontsize=8)
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.grid(axis="y", which="both", alpha=0.25)
    for k in range(len(fams), nrows * ncols):
        axes[k // ncols][k % ncols].axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[i % len(colors)]) for i in range(len(names))]
    labels = ["glibc (= 1)"] + names
    handles.insert(0, plt.Line2D([0], [0], color="k", lw=0.8))
    if any(is_memory(w, ws) for w, ws in summ.items()):
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="lightgrey", hatch="//", edgecolor="white"))
        labels.append("memory row (peak MiB)")
    fig.legend(handles, labels, loc="center left",
               bbox_to_anchor=(1.0, 0.5),
               fontsize=9, frameon=False)
    fig.suptitle(("SMOKE TEST (--quick), not results: " if smoke else "") +
                 "cost relative to glibc, median of the runs: bars from 1 (glibc), down is better; log scale", fontsize=11)
    fig.tight_layout()
    return fig


def make_plots(outdir, summ, allocs, runs, meta_mode="default"):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError, or a broken installation
        return ["plots skipped: matplotlib not importable (%s)" % e]
    made = []
    names = [a["name"] for a in allocs]
    # 1. ratios per workload: a panel per family, the legend outside
    fig = ratios_figure(plt, summ, names, smoke=meta_mode == "quick")
    if fig is not None:
        fig.savefig(os.path.join(outdir, "ratios.png"), dpi=100, bbox_inches="tight")
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

def replot(rundir, out, columns=None):
    """ratios.png of a published run, drawn again (e.g. with other columns)."""
    with open(os.path.join(rundir, "results.json")) as f:
        d = json.load(f)
    names = [a["name"] for a in d["allocators"]]
    if columns:
        names = [n for n in columns.split(",") if n in names]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = ratios_figure(plt, d["summary"], names, smoke=d["meta"].get("mode") == "quick")
    fig.savefig(out, dpi=100, bbox_inches="tight")
    log("bench: %s drawn from %s" % (out, os.path.join(rundir, "results.json")))
    return 0


def estimate(workloads, allocs, mode, repeat):
    """(seconds, source) for the whole run: the median wall time of each
    (workload, allocator) in the newest earlier run of the same mode found
    under results/ (published or scratch), EST_FALLBACK for the others."""
    per, source = {}, None
    files = sorted(glob.glob(os.path.join(REPO, "results", "**", "results.json"), recursive=True),
                   key=os.path.getmtime, reverse=True)
    for f in files[:40]:
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (OSError, ValueError):
            continue
        if d.get("meta", {}).get("mode") != mode:
            continue
        for w, ws in d.get("summary", {}).items():
            for a, st in ws.get("allocators", {}).items():
                if isinstance(st.get("wall_s"), (int, float)):
                    per.setdefault((w, a), st["wall_s"])
        source = source or os.path.relpath(f, REPO)
    total, known = 0.0, 0
    for w in workloads:
        for a in allocs:
            t = per.get((w.id, a["name"]))
            known += t is not None
            total += (t if t is not None else EST_FALLBACK[mode]) + 0.05
    return total * repeat, (source if known else None)


def select_workloads(mode, only):
    if only:
        keys = [x.strip() for x in only.split(",") if x.strip()]
        return [w for w in WORKLOADS if any(w.id == k or w.id.startswith(k) or w.program == k for k in keys)]
    if MODES[mode]["workloads"] == "default":
        return [w for w in WORKLOADS if w.default is not None]
    return list(WORKLOADS)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Modes: the default run (%d workloads, %s, %d repetitions: about ten minutes on a 2-core "
               "machine); --full, every workload under every allocator, %d repetitions (hours); --quick, a "
               "smoke test (every workload once at small sizes; its figures compare nothing)."
               % (len([w for w in WORKLOADS if w.default is not None]), ", ".join(MODES["default"]["allocators"]),
                  MODES["default"]["repeat"], MODES["full"]["repeat"]))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="smoke test: every workload once, small sizes")
    g.add_argument("--full", action="store_true", help="every workload under every allocator, full sizes")
    ap.add_argument("--repeat", type=int, default=None, help="runs per pair (default 3, --full 5, --quick 1)")
    ap.add_argument("--only", default=None, help="comma-separated workload ids or prefixes")
    ap.add_argument("--allocators", default=None, help="comma-separated allocator names")
    ap.add_argument("--out", default=None, help="output directory (default results/scratch/<timestamp>, git-ignored)")
    ap.add_argument("--locus-lib", default=os.path.join(default_build_dir(), "liblocus.so"),
                    help="default: liblocus.so of $LOCUS_BENCH_BUILD_DIR, else of build/")
    ap.add_argument("--allow-stale", action="store_true",
                    help="run even when a source file is newer than the locus library")
    ap.add_argument("--bin-dir", default=None, help="directory holding the bench_* programs")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per run (default 120 quick, 300 default, 1800 full)")
    ap.add_argument("--threads", type=int, default=None, help="passed to the workloads as --threads")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--list", action="store_true", help="list workloads and allocators, then exit")
    ap.add_argument("--replot", nargs=2, metavar=("RESULTS_DIR", "OUT_PNG"),
                    help="draw the ratio plot of an earlier run (its results.json) into OUT_PNG, then exit; "
                         "--allocators picks the columns")
    args = ap.parse_args(argv)
    if args.replot:
        return replot(args.replot[0], args.replot[1], args.allocators)
    mode = "quick" if args.quick else "full" if args.full else "default"
    repeat = args.repeat if args.repeat is not None else MODES[mode]["repeat"]
    timeout = args.timeout or MODES[mode]["timeout"]
    if repeat < 1:
        ap.error("--repeat must be >= 1")

    allocs, notes = discover_allocators(args.locus_lib)
    want = [x.strip() for x in args.allocators.split(",") if x.strip()] if args.allocators else \
        MODES[mode]["allocators"]
    if want:
        known = [a["name"] for a in allocs]
        for w in want:
            if w not in known:
                notes.append("allocator %s not available, skipped" % w)
        allocs = sorted((a for a in allocs if a["name"] in want), key=lambda a: want.index(a["name"]))
    workloads = select_workloads(mode, args.only)
    if not workloads:
        ap.error("--only matched no workload; known: " + ", ".join(w.id for w in WORKLOADS))
    bindir = find_bin_dir(args.bin_dir)
    if args.list:
        print("workloads:", ", ".join(w.id for w in workloads))
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
    absent = [w for w in workloads if not os.access(os.path.join(bindir, "bench_" + w.program), os.X_OK)]
    for w in absent:
        if w.program in OPTIONAL_PROGRAMS:
            notes.append("%s skipped: bench_%s was not built (%s)" % (w.id, w.program, OPTIONAL_PROGRAMS[w.program]))
    workloads = [w for w in workloads if w not in absent or w.program not in OPTIONAL_PROGRAMS]
    if not workloads:
        log("bench: no workload left to run; " + "; ".join(notes))
        return 2
    missing = [w.program for w in workloads if not os.access(os.path.join(bindir, "bench_" + w.program), os.X_OK)]
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
    if mode == "quick":
        log("bench: " + SMOKE_NOTE)
    total = len(workloads) * len(allocs) * repeat
    est, est_from = estimate(workloads, allocs, mode, repeat)
    log("bench: %s run: %d workload(s) x %d allocator(s) x %d repetition(s) = %d runs, estimated %s (%s); "
        "Ctrl-C stops it and keeps the runs done -> %s" % (
            mode, len(workloads), len(allocs), repeat, total, fmt_dur(est),
            "from " + est_from if est_from else "no earlier %s run to go by" % mode, outdir))

    # The allocators' order rotates from one repetition to the next: a run
    # inherits the machine's state (free huge pages, page cache) from the run
    # before it, and no allocator should always come first.
    plan = [(rep, w, a) for rep in range(repeat) for w in workloads
            for a in allocs[rep % len(allocs):] + allocs[:rep % len(allocs)]]
    prog = Progress(len(plan))
    runs = []
    interrupted = None
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="locus-bench-") as scratch:
        try:
            for i, (rep, w, a) in enumerate(plan):
                argv = [os.path.join(bindir, "bench_" + w.program)] + w.argv(mode)
                if args.threads:
                    argv += ["--threads", str(args.threads)]
                env = child_env(a)
                rec, out, err = run_one(argv, env, timeout, scratch)
                rec.update({"workload": w.id, "allocator": a["name"], "rep": rep,
                            "command": " ".join(["%s=%s" % (k, shlex.quote(v)) for k, v in
                                                 ([("LD_PRELOAD", a["preload"])] if a["preload"] else [])
                                                 + sorted(a["env"].items())] + [shlex.quote(x) for x in argv])})
                evaluate(rec, out, err)
                runs.append(rec)
                prog.update(w.id, rec["wall_s"], "%s/%s" % (w.id, a["name"]), [p[1].id for p in plan[i + 1:]],
                            rec["ok"])
                if not rec["ok"]:
                    log("bench: FAILED %s under %s: %s\n  command: %s%s" % (
                        w.id, a["name"], rec["reason"], rec["command"],
                        ("\n  " + rec["stderr_tail"].replace("\n", "\n  ")) if rec.get("stderr_tail") else ""))
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # the tables get written
            interrupted = "interrupted after %d of %d runs" % (len(runs), len(plan))
            notes.append(interrupted)
    prog.finish()
    if interrupted:
        log("bench: %s; writing the tables of the runs done" % interrupted)

    if cross_check(runs):
        for r in runs:
            if not r["ok"] and r["reason"].startswith("checksum"):
                log("bench: FAILED %s under %s: %s\n  command: %s" % (r["workload"], r["allocator"], r["reason"],
                                                                     r["command"]))
    nflag = flag_samples(runs, workloads)
    summ = summarise(runs, workloads, allocs)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "mode": mode,
            "repeat": repeat, "host": host_info(), "bin_dir": bindir, "locus_lib": args.locus_lib,
            "argv": sys.argv[1:] if argv is None else list(argv), "format": 2, "runs_planned": len(plan),
            "runs_done": len(runs), "elapsed_s": time.time() - t_start, "interrupted": interrupted,
            "min_timed_s": MIN_TIMED_S, "outlier_factor": OUTLIER_FACTOR}
    if not args.no_plots:
        made = make_plots(outdir, summ, allocs, runs, mode)
        notes.extend(m for m in made if m.startswith("plots skipped"))
        meta["plots"] = [m for m in made if m.endswith(".png")]
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": meta, "notes": notes, "allocators": allocs,
                   "workloads": [{"id": w.id, "program": "bench_" + w.program, "args": w.argv(mode),
                                  "family": w.family, "memory": w.memory} for w in workloads],
                   "summary": summ, "runs": runs}, f, indent=1)
    write_markdown(os.path.join(outdir, "results.md"), meta, summ, allocs, runs, notes)

    fails = [r for r in runs if not r["ok"]]
    log("bench: %s%d of %d run(s) done in %s, %d failed, %d sample(s) flagged and left out; results in %s" % (
        "SMOKE TEST: " if mode == "quick" else "", len(runs), len(plan), fmt_dur(time.time() - t_start),
        len(fails), nflag, outdir))
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
