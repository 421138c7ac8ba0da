#!/usr/bin/env python3
"""NUMA benchmarks of locus and the peer allocators in a QEMU guest with several nodes.

Boots one guest with tests/numa/guest/run.sh (TCG, one CPU per node) and runs
in it, for every allocator (glibc, jemalloc, tcmalloc, mimalloc, locus with
LOCUS_PROFILE=uma and =numa), interleaved (rep 1: every workload under every
allocator in turn, then rep 2, ...):

  numa_timestep     bench/numa_timestep.c: one thread bound to each node,
                    time-step temporaries; share of the touched pages on the
                    thread's node, time per step
  numa_first_touch  bench/numa_first_touch.c: arrays malloc'ed by the main
                    thread (bound to node 0), initialised serially or by the
                    threads bound to the nodes; where the pages landed
  numa_first_touch_unbound  the same with a main thread that may run on
                    every node (--main-unbound)
  placement         tests/numa/placement.c built as a program: per case, the
                    share of the pages on the node the case promises

The guest's automatic NUMA balancing is switched off (--numa-balancing): it
would move pages after the allocator placed them.  The bench programs start
on node 0's CPUs (taskset).  The guest's console is read as the runs finish (progress on stderr), parsed,
and written to results/scratch/numa-<timestamp>/ (git-ignored; or --out):
results.md, results.json, guest-console.log and local_share.png (matplotlib).
Timings under TCG are not hardware timings: only placement is reported as
measured, time only as a ratio to glibc within the same guest run.

Exit status: 0 if every run validated its output, 1 if any failed (or the
guest died), 2 for usage errors, 77 when no guest can be booted (no QEMU,
busybox, cpio or kernel).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the host harness: shared helpers)
from bench import fmt_dur, log, median, num  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBDIR = "/usr/lib/x86_64-linux-gnu"
RUN_SH = os.path.join(REPO, "tests", "numa", "guest", "run.sh")
GUEST_LOCUS = "/liblocus.so"

# name, library (host path, put at the same path in the guest; None: no
# preload; "locus": liblocus), environment, expected provider of malloc.
ALLOCATORS = [
    ("glibc", None, {}, "libc.so.6"),
    ("jemalloc", LIBDIR + "/libjemalloc.so.2", {}, "libjemalloc.so.2"),
    ("tcmalloc", LIBDIR + "/libtcmalloc_minimal.so.4", {}, "libtcmalloc_minimal.so.4"),
    ("mimalloc", LIBDIR + "/libmimalloc.so.2", {}, "libmimalloc.so.2"),
    ("locus-uma", "locus", {"LOCUS_PROFILE": "uma"}, "liblocus.so"),
    ("locus-numa", "locus", {"LOCUS_PROFILE": "numa"}, "liblocus.so"),
]

# What each placement case promises (tests/numa/placement.c), for the tables.
PLACEMENT_CASES = [
    ("bound_thread", "bound thread: its blocks on its node"),
    ("reuse_after_free_elsewhere", "reuse after a free on another node"),
    ("after_remote_free", "after a remote free (other node frees, owner reallocates)"),
    ("thread_exit_adoption", "thread exit: a new thread of another node comes"),
    ("calloc_after_free_elsewhere", "`calloc` after a free on another node"),
    ("on_node", "`locus_malloc_on_node` (first touched by another node)"),
    ("on_node_realloc", "`realloc` of those blocks"),
    ("interleaved", "`locus_malloc_interleaved` (even share per node)"),
    ("next_touch", "`locus_next_touch` (pages on the toucher's node)"),
    ("rebind", "`locus_rebind` after `sched_setaffinity` to another node"),
]
COMMON_CASES = PLACEMENT_CASES[:5]   # the cases every allocator runs


def parse_kv(line):
    """KEY=VALUE tokens of a bench line, numbers as floats (bench.parse_kv keeps text)."""
    return {k: num(v) for k, v in bench.parse_kv(line).items()}


def minimum(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return min(xs) if xs else None


# --------------------------------------------------------------------------
# The plan and the guest's script.

def workloads(args):
    """(id, guest program, arguments, kind, per-run timeout in the guest, started on node 0).

    The bench programs start on node 0's CPUs (taskset), as under numactl
    --cpunodebind=0 or a launcher that binds the main thread: otherwise the
    allocator's start-up (before main binds itself) runs on a CPU chosen by
    the scheduler and the memory it touches lands on either node from run to
    run.  The placement program runs as the test suite runs it."""
    n = str(args.nodes)
    if args.quick:
        ts = ["--quick"]
        ft = ["--threads", n, "--mib", "4", "--reps", "1", "--fresh"]
    else:
        ts = ["--steps", str(args.steps)]
        ft = ["--threads", n, "--mib", str(args.first_touch_mib), "--reps", "2", "--fresh"]
    return [
        ("numa_timestep", "/bench_numa_timestep", ts, "result", 900, True),
        ("numa_first_touch", "/bench_numa_first_touch", ft, "result", 900, True),
        ("numa_first_touch_unbound", "/bench_numa_first_touch", ft + ["--main-unbound"], "result", 900, True),
        ("placement", "/numa_placement", [], "placement", 1200, False),
    ]


def guest_command(alloc, prog, argv):
    env = []
    if alloc["lib"]:
        env.append("LD_PRELOAD=" + alloc["guest_lib"])
    env += ["%s=%s" % kv for kv in sorted(alloc["env"].items())]
    return env, [prog] + argv


def make_plan(args, allocs, wls):
    plan = []
    for rep in range(args.repeat):
        for w in wls:
            if w[0] == "placement" and rep >= args.placement_repeat:
                continue
            for a in allocs:
                plan.append({"id": len(plan), "rep": rep, "workload": w[0], "allocator": a["name"],
                             "kind": w[3], "prog": w[1], "argv": list(w[2]), "timeout": w[4],
                             "node0": w[5]})
    return plan


def guest_script(plan, allocs, args):
    by = {a["name"]: a for a in allocs}
    L = ["#!/bin/sh",
         "# Generated by tools/bench_numa.py: the runs, in order; one BEGIN/END pair each.",
         "cpus0=$(cat /sys/devices/system/node/node0/cpulist)",
         "run() {",
         "  id=$1; lim=$2; where=$3; shift 3",
         "  echo \"NBENCH-BEGIN $id\"",
         "  [ \"$where\" = node0 ] && set -- taskset -c \"$cpus0\" \"$@\"",
         "  s0=$(cut -d' ' -f1 /proc/uptime)",
         "  timeout \"$lim\" \"$@\" >/tmp/nb.out 2>/tmp/nb.err </dev/null",
         "  st=$?",
         "  s1=$(cut -d' ' -f1 /proc/uptime)",
         "  cat /tmp/nb.out",
         "  [ -s /tmp/nb.out ] && [ -n \"$(tail -c 1 /tmp/nb.out)\" ] && echo",
         "  sed 's/^/NBENCH-STDERR /' /tmp/nb.err",
         "  [ -s /tmp/nb.err ] && [ -n \"$(tail -c 1 /tmp/nb.err)\" ] && echo",
         "  echo \"NBENCH-END $id status=$st guest_s=$(awk -v a=$s0 -v b=$s1 'BEGIN { printf \"%.2f\", b - a }')\"",
         "}",
         "echo \"NBENCH-PLAN runs=%d\"" % len(plan)]
    # The kernel's automatic NUMA balancing migrates pages towards the threads
    # that access them, some time after the allocator placed them: off by
    # default, so that the runs show the allocator's placement.
    if args.numa_balancing != "keep":
        L.append("echo %d >/proc/sys/kernel/numa_balancing" % (1 if args.numa_balancing == "on" else 0))
    if args.thp != "keep":
        L.append("echo %s >/sys/kernel/mm/transparent_hugepage/enabled" % args.thp)
    L += ["echo \"NBENCH-NUMA-BALANCING $(cat /proc/sys/kernel/numa_balancing 2>/dev/null || echo absent)\"",
          "echo \"NBENCH-THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo absent)\""]
    for r in plan:
        env, cmd = guest_command(by[r["allocator"]], r["prog"], r["argv"])
        r["command"] = ("taskset -c <node 0's CPUs> " if r["node0"] else "") + " ".join(env + cmd)
        L.append("run %d %d %s env %s" % (r["id"], r["timeout"], "node0" if r["node0"] else "any",
                                          " ".join(shlex.quote(x) for x in env + cmd)))
    L.append("echo NBENCH-DONE")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------
# Evaluating one run's output.

PLACEMENT_RE = re.compile(r"^PLACEMENT\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)%")


def evaluate(r, alloc):
    out, err = r["stdout"], r["stderr"]
    reason = None
    st = r.get("status")
    if st is None:
        reason = "no end marker (the guest stopped during this run)"
    elif "cannot be preloaded" in "\n".join(err):
        reason = "LD_PRELOAD did not take (ld.so: cannot be preloaded)"
    elif st in (124, 143, 137):
        reason = "timed out in the guest (status %d)" % st
    elif st != 0:
        reason = "exit status %d" % st
    if r["kind"] == "result":
        results = [parse_kv(l) for l in out if l.startswith("RESULT ")]
        r["data"] = [parse_kv(l) for l in out if l.startswith("DATA ")]
        if results:
            res = results[-1]
            r["result"] = res
            r["value"] = res.get("value")
            if reason is None and len(results) != 1:
                reason = "expected one RESULT line, got %d" % len(results)
            if res.get("check") == "fail":
                reason = "validation failed (%s)" % res.get("reason", "?")
            elif reason is None and res.get("check") != "ok":
                reason = "check=%s" % res.get("check")
            elif reason is None and not isinstance(res.get("value"), float):
                reason = "RESULT without a numeric value"
            elif reason is None and res.get("malloc_from") != alloc["provider"]:
                reason = "malloc comes from %s, not %s: the preload did not take" % (
                    res.get("malloc_from"), alloc["provider"])
        elif reason is None:
            reason = "no RESULT line"
    else:
        cases = {}
        for l in out:
            m = PLACEMENT_RE.match(l)
            if m:
                cases[m.group(1)] = {"on": int(m.group(2)), "all": int(m.group(3)), "pct": float(m.group(4))}
            elif l.startswith("NEXT_TOUCH_COST"):
                toks = l.split()[1:]
                r["next_touch_cost"] = {toks[i]: num(toks[i + 1]) for i in range(0, len(toks) - 1, 2)}
            elif l.startswith("INTERLEAVE pages per node:"):
                r["interleave_pages"] = [int(x) for x in l.split(":", 1)[1].split()]
        r["cases"] = cases
        head = next((l for l in out if l.startswith("placement: ") and "allocator" in l), "")
        is_locus = head.endswith("allocator locus")
        if reason is None:
            if not head:
                reason = "no 'placement: N nodes' line"
            elif is_locus != (alloc["lib"] == "locus"):
                reason = "the program saw %s: the preload did not take" % head.split("allocator ", 1)[-1]
            elif not any(l == "placement: done" for l in out):
                reason = "did not end with 'placement: done'"
            elif any(c[0] not in cases for c in COMMON_CASES):
                reason = "cases missing from the output"
    r["ok"] = reason is None
    r["reason"] = reason
    return r


# --------------------------------------------------------------------------
# Running the guest.

class Progress:
    def __init__(self, plan, nodes):
        self.plan = plan
        self.t0 = time.time()
        self.per_w = {}
        self.done = 0
        # until a workload has run once: rough guesses (2-core host, TCG)
        self.prior = {"placement": 11.0 * nodes, "numa_timestep": 1.0 * nodes}

    def eta(self, remaining):
        allds = [d for ds in self.per_w.values() for d in ds]
        if not allds:
            return None
        mean_all = sum(allds) / len(allds)
        return sum((sum(self.per_w[w]) / len(self.per_w[w])) if self.per_w.get(w) else self.prior.get(w, mean_all)
                   for w in remaining)

    def update(self, r, dur):
        self.done += 1
        self.per_w.setdefault(r["workload"], []).append(dur)
        rem = [p["workload"] for p in self.plan[r["id"] + 1:]]
        eta = self.eta(rem)
        extra = ""
        if r.get("ok"):
            res = r.get("result", {})
            if r["workload"] == "numa_timestep":
                extra = " local %s%% (worst step %s%%)" % (res.get("local_pct"), res.get("local_min_step_pct"))
            elif r["workload"].startswith("numa_first_touch"):
                extra = " local serial/parallel init %s%%/%s%%" % (res.get("local_serial_pct"),
                                                                 res.get("local_parallel_pct"))
            elif r["workload"] == "placement":
                extra = " " + " ".join("%.0f" % c["pct"] for c in r["cases"].values()) + " (%)"
        log("bench-numa: [%d/%d] rep %d %s / %s: %s (%.1f s)%s  elapsed %s ETA %s" % (
            self.done, len(self.plan), r["rep"] + 1, r["workload"], r["allocator"],
            "ok" if r["ok"] else "FAILED: " + r["reason"], dur, extra,
            fmt_dur(time.time() - self.t0), fmt_dur(eta) if eta is not None else "?"))


def run_guest(args, allocs, plan, files, script_path, console_path):
    cmd = ["bash", RUN_SH, "--nodes", str(args.nodes), "--cpus", str(args.nodes),
           "--mem-per-node", args.mem_per_node, "--timeout", str(args.timeout)]
    for f in files:
        cmd += ["--file", f]
    cmd += ["--file", script_path + ":/nbench.sh", "--", "sh", "/nbench.sh"]
    log("bench-numa: booting a %d-node guest (TCG): %s" % (args.nodes, " ".join(shlex.quote(c) for c in cmd)))
    by = {a["name"]: a for a in allocs}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            bufsize=1)
    errlines = []

    def pump_err():
        for l in proc.stderr:
            l = l.rstrip("\n")
            errlines.append(l)
            log("  " + l)

    th = threading.Thread(target=pump_err, daemon=True)
    th.start()
    guest = {"init": None, "nodes": [], "thp": None, "numa_balancing": None, "done": False}
    prog = Progress(plan, args.nodes)
    cur, t_begin = None, None
    with open(console_path, "w") as con:
        for line in proc.stdout:
            line = line.rstrip("\n")
            con.write(line + "\n")
            con.flush()
            if line.startswith("GUEST-INIT"):
                guest["init"] = line
                log("bench-numa: guest up: " + line)
                continue
            if line.startswith("GUEST-NODE"):
                guest["nodes"].append(line)
                continue
            if line.startswith("NBENCH-THP"):
                guest["thp"] = line.split(" ", 1)[1]
                continue
            if line.startswith("NBENCH-NUMA-BALANCING"):
                guest["numa_balancing"] = line.split(" ", 1)[1]
                continue
            if line.startswith("NBENCH-DONE"):
                guest["done"] = True
                continue
            if line.startswith("NBENCH-BEGIN"):
                cur = plan[int(line.split()[1])]
                cur.update({"stdout": [], "stderr": [], "status": None})
                t_begin = time.time()
                continue
            if line.startswith("NBENCH-END") and cur is not None:
                kv = parse_kv(line)
                cur["status"] = int(kv.get("status", -1))
                cur["guest_s"] = kv.get("guest_s")
                cur["host_s"] = round(time.time() - t_begin, 2)
                evaluate(cur, by[cur["allocator"]])
                prog.update(cur, cur["host_s"])
                cur = None
                continue
            if cur is not None:
                if line.startswith("NBENCH-STDERR "):
                    cur["stderr"].append(line[len("NBENCH-STDERR "):])
                else:
                    cur["stdout"].append(line)
    rc = proc.wait()
    th.join(timeout=5)
    if cur is not None:            # the guest died in the middle of a run
        evaluate(cur, by[cur["allocator"]])
    return rc, guest, errlines


# --------------------------------------------------------------------------
# Summaries and reports.

def summarise(plan, allocs):
    names = [a["name"] for a in allocs]
    ok = [r for r in plan if r.get("ok")]
    summ = {"placement": {}, "numa_timestep": {}, "numa_first_touch": {}, "numa_first_touch_unbound": {}}
    # placement: case -> allocator -> median %
    for case, _ in PLACEMENT_CASES:
        row = {}
        for n in names:
            vals = [r["cases"][case]["pct"] for r in ok if r["workload"] == "placement" and r["allocator"] == n
                    and case in r["cases"]]
            if vals:
                row[n] = {"pct": median(vals), "min": min(vals), "max": max(vals), "runs": len(vals),
                          "pages": next(r["cases"][case]["all"] for r in ok if r["workload"] == "placement"
                                        and r["allocator"] == n and case in r["cases"])}
        if row:
            summ["placement"][case] = row
    # ratios to glibc within each repetition, then the median over repetitions
    def ratios(wid, key):
        out = {}
        for n in names:
            rs = []
            for r in ok:
                if r["workload"] != wid or r["allocator"] != n:
                    continue
                g = next((x for x in ok if x["workload"] == wid and x["allocator"] == "glibc"
                          and x["rep"] == r["rep"]), None)
                if g and isinstance(g["result"].get(key), float) and g["result"][key] > 0 \
                        and isinstance(r["result"].get(key), float):
                    rs.append(r["result"][key] / g["result"][key])
            out[n] = median(rs)
        return out

    ts_ratio = ratios("numa_timestep", "value")
    for n in names:
        rs = [r for r in ok if r["workload"] == "numa_timestep" and r["allocator"] == n]
        if not rs:
            continue
        g = lambda k: [r["result"].get(k) for r in rs]
        summ["numa_timestep"][n] = {
            "runs": len(rs), "local_pct": median(g("local_pct")),
            "local_pct_min": minimum(g("local_pct")),
            "local_min_step_pct": minimum(g("local_min_step_pct")),
            "local_large_pct": median(g("local_large_pct")), "local_small_pct": median(g("local_small_pct")),
            "ms_per_step": median(g("value")), "time_vs_glibc": ts_ratio.get(n)}
    for wid in ("numa_first_touch", "numa_first_touch_unbound"):
        ft_ratio = ratios(wid, "value")
        ftp_ratio = ratios(wid, "parallel_init_s")
        for n in names:
            rs = [r for r in ok if r["workload"] == wid and r["allocator"] == n]
            if not rs:
                continue
            g = lambda k: [r["result"].get(k) for r in rs]
            summ[wid][n] = {
                "runs": len(rs), "local_serial_pct": median(g("local_serial_pct")),
                "local_parallel_pct": median(g("local_parallel_pct")),
                "serial_s": median(g("value")), "parallel_s": median(g("parallel_init_s")),
                "serial_vs_glibc": ft_ratio.get(n), "parallel_vs_glibc": ftp_ratio.get(n)}
    return summ


def pct(x):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    return "%.0f %%" % x if x == 100 or x == 0 else ("%.1f %%" % x if x < 99.95 else "99.9+ %")


def ratio(x):
    return "—" if x is None else "%.2f" % x


def host_info():
    info = {"hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    info["cpu"] = l.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        info["git_commit"] = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["git_dirty"] = bool(dirty)
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    try:
        q = os.environ.get("LOCUS_QEMU", "qemu-system-x86_64")
        info["qemu"] = subprocess.run([q, "--version"], capture_output=True, text=True,
                                      timeout=10).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        info["qemu"] = None
    return info


def write_markdown(path, meta, summ, allocs, plan, notes):
    names = [a["name"] for a in allocs]
    L = ["# locus NUMA benchmarks in a QEMU guest\n"]
    L.append("- date: %s; duration %s" % (meta["date"], fmt_dur(meta["duration_s"])))
    L.append("- command: `%s`" % meta["command"])
    L.append("- guest: %d nodes, one CPU each, %s per node; %s; THP %s; automatic NUMA balancing %s" % (
        meta["nodes"], meta["mem_per_node"], meta.get("guest_init") or "?", meta.get("guest_thp") or "?",
        {"0": "off", "1": "on"}.get(meta.get("guest_numa_balancing"), meta.get("guest_numa_balancing") or "?")))
    h = meta["host"]
    L.append("- host: %s, %s CPUs, kernel %s; %s (TCG)" % (h.get("cpu", "?"), h.get("cpus"), h.get("kernel"),
                                                           h.get("qemu") or "QEMU ?"))
    L.append("- commit: %s%s" % (h.get("git_commit") or "none", " (with uncommitted changes)" if h.get("git_dirty")
                                 else ""))
    L.append("- repeat: %d (placement: %d), interleaved: each repetition runs every workload under every "
             "allocator in turn, in one guest" % (meta["repeat"], meta["placement_repeat"]))
    L.append("- allocators: " + ", ".join("%s (%s)" % (a["name"], ("LD_PRELOAD=" + a["guest_lib"] +
                                                                  "".join(" %s=%s" % kv for kv in a["env"].items()))
                                                       if a["lib"] else "no preload") for a in allocs))
    for n in notes:
        L.append("- note: " + n)
    L.append("")
    L.append("Timings in a TCG guest are not hardware timings (every instruction is emulated and a remote "
             "access costs what a local one does): placement is what these runs measure; times are "
             "only shown as ratios to glibc within this run.\n")

    L.append("## Placement accuracy (tests/numa/placement.c)\n")
    if not summ["placement"]:
        L.append("Not run.\n")
    else:
        L.append("Share of the pages of each case's blocks that lie on the node the case promises; median over "
                 "the runs (— : the case needs locus's API and runs only under locus).\n")
        L.append("| case (what is promised) | " + " | ".join(names) + " |")
        L.append("|---" * (len(names) + 1) + "|")
        for case, desc in PLACEMENT_CASES:
            row = summ["placement"].get(case)
            if row:
                L.append("| %s | %s |" % (desc, " | ".join(pct(row.get(n, {}).get("pct")) for n in names)))
        L.append("")

    L.append("## Time step (bench/numa_timestep.c)\n")
    if not summ["numa_timestep"]:
        L.append("Not run.\n")
    else:
        L.append("One thread bound to each node; per step each allocates, touches (one write per page), checks "
                 "and frees 3 arrays of 2–4 MiB and 2000 objects of 16–512 B. Local: share of the touched pages on "
                 "the thread's own node (median over the runs); worst step: the lowest share of any step of any "
                 "run; time per step (allocate + touch + checksum + free) as a ratio to glibc in the same "
                 "repetition, median.\n")
        L.append("| allocator | local pages | worst step | arrays | small objects | time per step ×glibc |")
        L.append("|---|---|---|---|---|---|")
        for n in names:
            s = summ["numa_timestep"].get(n)
            if s:
                L.append("| %s | %s | %s | %s | %s | %s |" % (
                    n, pct(s["local_pct"]), pct(s["local_min_step_pct"]), pct(s["local_large_pct"]),
                    pct(s["local_small_pct"]), ratio(s["time_vs_glibc"])))
        L.append("")

    L.append("## First touch (bench/numa_first_touch.c)\n")
    ft, fu = summ["numa_first_touch"], summ["numa_first_touch_unbound"]
    if not ft and not fu:
        L.append("Not run.\n")
    else:
        L.append("4 arrays malloc'ed by the main thread and initialised by it (serial) or by the threads bound "
                 "to the nodes, each its own part (parallel); each run gets fresh memory (`--fresh`). Share of "
                 "each thread's part on the thread's own node (medians): the main thread bound to node 0 (as "
                 "with `OMP_PROC_BIND`), or allowed on every node (`--main-unbound`). Times of the compute "
                 "phase as ratios to glibc (main thread bound).\n")
        L.append("| allocator | local after serial init | local after parallel init | parallel init, main "
                 "unbound | compute after serial init ×glibc | after parallel init ×glibc |")
        L.append("|---|---|---|---|---|---|")
        for n in names:
            a, b = ft.get(n, {}), fu.get(n, {})
            if a or b:
                L.append("| %s | %s | %s | %s | %s | %s |" % (
                    n, pct(a.get("local_serial_pct")), pct(a.get("local_parallel_pct")),
                    pct(b.get("local_parallel_pct")), ratio(a.get("serial_vs_glibc")),
                    ratio(a.get("parallel_vs_glibc"))))
        L.append("")

    L.append("## Runs\n")
    L.append("| workload | allocator | runs ok | guest seconds (median) |")
    L.append("|---|---|---|---|")
    for wid in ("numa_timestep", "numa_first_touch", "numa_first_touch_unbound", "placement"):
        for n in names:
            rs = [r for r in plan if r["workload"] == wid and r["allocator"] == n]
            if rs:
                L.append("| %s | %s | %d/%d | %s |" % (wid, n, sum(1 for r in rs if r.get("ok")), len(rs),
                                                       "%.1f" % median([r.get("guest_s") for r in rs])
                                                       if median([r.get("guest_s") for r in rs]) else "—"))
    L.append("")
    fails = [r for r in plan if "ok" in r and not r["ok"]]
    notrun = [r for r in plan if "ok" not in r]
    L.append("## Failures\n")
    if not fails and not notrun:
        L.append("None: every run validated its output.\n")
    for r in fails:
        L.append("- %s under %s (rep %d): %s  \n  command in the guest: `%s`" % (
            r["workload"], r["allocator"], r["rep"] + 1, r["reason"], r["command"]))
        tail = (r.get("stderr") or [])[-10:]
        if tail:
            L.append("\n```\n%s\n```" % "\n".join(tail))
    if notrun:
        L.append("- %d run(s) never started (the guest stopped first)" % len(notrun))
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def make_plot(outdir, summ, allocs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError or a broken installation
        return "plot skipped: matplotlib not importable (%s)" % e
    names = [a["name"] for a in allocs]
    series = [
        ("time step: local pages", lambda n: summ["numa_timestep"].get(n, {}).get("local_pct")),
        ("time step: worst step", lambda n: summ["numa_timestep"].get(n, {}).get("local_min_step_pct")),
        ("first touch: parallel init (main bound)",
         lambda n: summ["numa_first_touch"].get(n, {}).get("local_parallel_pct")),
        ("first touch: parallel init (main unbound)",
         lambda n: summ["numa_first_touch_unbound"].get(n, {}).get("local_parallel_pct")),
        ("placement: mean of the 5 common cases",
         lambda n: (statistics.mean(summ["placement"][c][n]["pct"] for c, _ in COMMON_CASES)
                    if all(n in summ["placement"].get(c, {}) for c, _ in COMMON_CASES) else None)),
    ]
    series = [s for s in series if any(isinstance(s[1](n), float) for n in names)]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(names)), 5.5))
    width = 0.8 / len(series)
    for i, (label, f) in enumerate(series):
        ys = [f(n) if isinstance(f(n), float) else 0 for n in names]
        ax.bar([j + i * width for j in range(len(names))], ys, width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))])
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of pages on the thread's / promised node")
    ax.set_title("NUMA placement in a QEMU guest (higher is better)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "local_share.png"), dpi=110)
    plt.close(fig)
    return "local_share.png"


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=2, help="NUMA nodes of the guest, one CPU each (default 2)")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    ap.add_argument("--placement-repeat", type=int, default=None,
                    help="repetitions of the placement program (default: --repeat)")
    ap.add_argument("--only", default=None,
                    help="workloads: numa_timestep,numa_first_touch,numa_first_touch_unbound,placement")
    ap.add_argument("--allocators", default=None, help="subset of " + ",".join(a[0] for a in ALLOCATORS))
    ap.add_argument("--quick", action="store_true", help="smoke test: small sizes, no placement unless --only")
    ap.add_argument("--steps", type=int, default=30, help="numa_timestep steps (default 30)")
    ap.add_argument("--first-touch-mib", type=int, default=16, help="numa_first_touch MiB per array (default 16)")
    ap.add_argument("--numa-balancing", choices=("off", "on", "keep"), default="off",
                    help="the guest kernel's automatic NUMA balancing (default off: the allocator's placement)")
    ap.add_argument("--thp", choices=("always", "madvise", "never", "keep"), default="keep",
                    help="transparent huge pages in the guest (default: the kernel's setting)")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--locus-lib", default=None, help="default BUILD/liblocus.so")
    ap.add_argument("--bin-dir", default=None, help="bench_numa_* programs (default BUILD/bench)")
    ap.add_argument("--placement-bin", default=None, help="default BUILD/tests/numa/numa_placement")
    ap.add_argument("--mem-per-node", default=None, help="guest memory per node (default 2G with placement, else 512M)")
    ap.add_argument("--timeout", type=int, default=None, help="seconds for the whole guest (default 3600 per 2 nodes)")
    ap.add_argument("--out", default=None, help="output directory (default results/scratch/numa-<timestamp>)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--list", action="store_true", help="print the plan, then exit")
    args = ap.parse_args()
    if not 2 <= args.nodes <= 8:
        ap.error("--nodes must be 2..8")
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if args.placement_repeat is None:
        args.placement_repeat = args.repeat
    build = os.path.abspath(args.build_dir)
    locus_lib = os.path.abspath(args.locus_lib or os.path.join(build, "liblocus.so"))
    bindir = os.path.abspath(args.bin_dir or os.path.join(build, "bench"))
    placement_bin = os.path.abspath(args.placement_bin or os.path.join(build, "tests", "numa", "numa_placement"))

    notes = []
    wls = workloads(args)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        wls = [w for w in wls if w[0] in keys]
        if not wls:
            ap.error("--only matched nothing; known: " + ", ".join(w[0] for w in workloads(args)))
    elif args.quick:
        wls = [w for w in wls if w[0] != "placement"]
    allocs = []
    for name, lib, env, provider in ALLOCATORS:
        if lib == "locus":
            if not os.path.exists(locus_lib):
                notes.append("%s skipped: %s not found (build it, or pass --locus-lib)" % (name, locus_lib))
                continue
            guest_lib = GUEST_LOCUS
        elif lib:
            if not os.path.exists(lib):
                notes.append("%s skipped: %s not found (scripts/setup.sh bench installs it)" % (name, lib))
                continue
            guest_lib = lib
        else:
            guest_lib = None
        allocs.append({"name": name, "lib": lib, "guest_lib": guest_lib, "env": env, "provider": provider})
    if args.allocators:
        want = [x.strip() for x in args.allocators.split(",") if x.strip()]
        for w in want:
            if w not in [a["name"] for a in allocs]:
                notes.append("allocator %s not available, skipped" % w)
        allocs = [a for a in allocs if a["name"] in want]
    if not allocs:
        log("bench-numa: no allocator to run")
        return 2
    progs = {"/bench_numa_timestep": os.path.join(bindir, "bench_numa_timestep"),
             "/bench_numa_first_touch": os.path.join(bindir, "bench_numa_first_touch"),
             "/numa_placement": placement_bin}
    missing = [progs[w[1]] for w in wls if not os.access(progs[w[1]], os.X_OK)]
    if missing:
        log("bench-numa: missing programs: %s (scripts/bench-numa.sh builds them)" % ", ".join(missing))
        return 2
    if args.mem_per_node is None:
        args.mem_per_node = "2G" if any(w[0] == "placement" for w in wls) else "512M"
    if args.timeout is None:
        args.timeout = 1800 * args.nodes if not args.quick else 900

    plan = make_plan(args, allocs, wls)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = os.path.abspath(args.out or os.path.join(REPO, "results", "scratch", "numa-" + stamp))
    script = guest_script(plan, allocs, args)
    if args.list:
        sys.stdout.write(script)
        for n in notes:
            print("note:", n)
        return 0
    os.makedirs(outdir, exist_ok=True)
    for n in notes:
        log("bench-numa: note: " + n)
    log("bench-numa: %d node(s), %d workload(s) x %d allocator(s), repeat %d (placement %d): %d runs -> %s" % (
        args.nodes, len(wls), len(allocs), args.repeat, min(args.placement_repeat, args.repeat), len(plan), outdir))

    files = ["%s:%s" % (h, g) for g, h in progs.items() if any(w[1] == g for w in wls)]
    if any(a["lib"] == "locus" for a in allocs):
        files.append(locus_lib + ":" + GUEST_LOCUS)
    files += ["%s:%s" % (a["lib"], a["lib"]) for a in allocs if a["lib"] and a["lib"] != "locus"]
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="locus-bench-numa-") as tmp:
        sp = os.path.join(tmp, "nbench.sh")
        with open(sp, "w") as f:
            f.write(script)
        try:
            rc, guest, errlines = run_guest(args, allocs, plan, files, sp, os.path.join(outdir, "guest-console.log"))
        except KeyboardInterrupt:
            log("bench-numa: interrupted")
            return 130
    duration = time.time() - t0
    if rc == 77:
        log("bench-numa: SKIP: no guest can be booted (run.sh said why above; Debian: "
            "apt-get install qemu-system-x86 busybox-static cpio)")
        return 77
    if not guest["done"]:
        notes.append("the guest did not finish the plan (run.sh exit status %d%s)" % (
            rc, ", timeout: raise --timeout" if rc == 124 else ""))

    summ = summarise(plan, allocs)
    m = re.search(r"kernel=(\S+)", guest["init"] or "")
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "duration_s": round(duration, 1),
            "command": " ".join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
            "nodes": args.nodes, "mem_per_node": args.mem_per_node, "repeat": args.repeat,
            "placement_repeat": min(args.placement_repeat, args.repeat), "quick": args.quick,
            "guest_init": ("kernel " + m.group(1)) if m else None, "guest_nodes": guest["nodes"],
            "guest_thp": guest["thp"], "guest_numa_balancing": guest["numa_balancing"], "runsh_status": rc, "runsh_stderr": errlines[-20:],
            "host": host_info(), "locus_lib": locus_lib, "format": 1}
    if not args.no_plots:
        p = make_plot(outdir, summ, allocs)
        if p and p.startswith("plot skipped"):
            notes.append(p)
        elif p:
            meta["plots"] = [p]
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": meta, "notes": notes, "allocators": allocs,
                   "workloads": [{"id": w[0], "program": w[1], "args": w[2], "started_on_node0": w[5]}
                                 for w in wls],
                   "summary": summ, "runs": plan}, f, indent=1)
    write_markdown(os.path.join(outdir, "results.md"), meta, summ, allocs, plan, notes)

    fails = [r for r in plan if "ok" in r and not r["ok"]]
    done = sum(1 for r in plan if "ok" in r)
    log("bench-numa: %d of %d run(s) done, %d failed, in %s; results in %s" % (
        done, len(plan), len(fails), fmt_dur(duration), outdir))
    log("bench-numa: tables in %s" % os.path.join(outdir, "results.md"))
    for r in fails:
        log("bench-numa:   FAIL %s / %s (rep %d): %s" % (r["workload"], r["allocator"], r["rep"] + 1, r["reason"]))
    return 1 if fails or not guest["done"] or done < len(plan) else 0


if __name__ == "__main__":
    sys.exit(main())
