#!/usr/bin/env python3
"""The time step on a fresh and on a churned machine (issue 33): huge pages
under locus (LOCUS_THP=auto, the measured mode, against off) and the peers.

Before every run the harness puts the machine in one of two states itself:

  fresh    it touches and frees --warm-mib of memory in huge pages just
           before the run, as the previous job or benchmark run that used huge
           pages does: the kernel's free 2 MiB blocks were just freed and are
           still backed by the host.
  churned  it touches and frees --churn-mib in 4 KiB pages, in pieces (as
           a program under an allocator without huge pages), then waits --settle
           seconds: long enough for a VM's free page reporting (virtio-balloon,
           2 s after the free) to hand the free 2 MiB blocks back to the host,
           as after any program that faulted and freed memory a while before.
           On bare metal the two states differ only by the settle pause.

Rounds are interleaved: each round runs every state and, within a state,
every allocator (the order rotates from round to round); each run gets its
own state preparation. Reported: medians of wall, user and system time, the
kernel's THP counters (/proc/vmstat deltas: machine-wide, other processes'
faults count too) and the ratios of every locus
column to locus-off, to the best peer and to locus-base, also paired within
each round, for the workload's time and for CPU time (user + system).
With LOCUS_STATS=1 set for the locus runs, their huge-page decision line is
kept in results.json.

Usage: tools/bench_thp.py [--rounds 5] [--steps 200] [--states fresh,churned]
       [--allocators locus-auto,locus-off,glibc,jemalloc,tcmalloc,mimalloc]
       [--base-lib OTHER/liblocus.so] (adds locus-base: another build under
       LOCUS_THP=auto, e.g. main's, in the same interleaved run) [--out DIR]
"""

import argparse
import datetime
import json
import mmap
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (run_one, evaluate, child_env, find_lib, PEERS)

REPO = bench.REPO
PAGE = 4096
VMSTAT_KEYS = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "thp_split_pmd", "pgfault")


def vmstat():
    out = {}
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                k, v = line.split()
                if k in VMSTAT_KEYS:
                    out[k] = int(v)
    except OSError:
        pass
    return out


def touch_free(mib, huge):
    """Faults `mib` MiB of anonymous memory and frees it: the pages go back to
    the kernel's free lists. huge: the mapping is advised MADV_HUGEPAGE, so
    whole 2 MiB blocks are freed (4 KiB faults are served from the low-order
    free lists, scattered, and free no whole 2 MiB block)."""
    m = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge and hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    for i in range(0, mib << 20, PAGE):
        m[i] = 1
    m.close()


def prepare(state, args):
    if state == "fresh":
        touch_free(args.warm_mib, True)
    else:
        left = args.churn_mib
        while left > 0:
            touch_free(min(256, left), False)
            left -= 256
        time.sleep(args.settle)


def allocators(args):
    lib = os.path.abspath(args.locus_lib)
    al = [{"name": "locus-auto", "kind": "locus", "preload": lib,
           "env": {"LOCUS_PROFILE": args.profile, "LOCUS_THP": "auto"}},
          {"name": "locus-off", "kind": "locus", "preload": lib,
           "env": {"LOCUS_PROFILE": args.profile, "LOCUS_THP": "off"}},
          {"name": "locus-on", "kind": "locus", "preload": lib,
           "env": {"LOCUS_PROFILE": args.profile, "LOCUS_THP": "on"}}]
    if args.base_lib:
        al.append({"name": "locus-base", "kind": "locus", "preload": os.path.abspath(args.base_lib),
                   "env": {"LOCUS_PROFILE": args.profile, "LOCUS_THP": "auto"}})
    for name, cands in bench.PEERS:
        path = bench.find_lib(cands) if cands else None
        if cands is None or path:
            al.append({"name": name, "kind": "peer", "preload": path, "env": {}})
    if args.stats:
        for a in al:
            if a["kind"] == "locus":
                a["env"]["LOCUS_STATS"] = "1"
    want = [x for x in args.allocators.split(",") if x]
    missing = [w for w in want if w not in [a["name"] for a in al]]
    if missing:
        bench.log("bench_thp: not available, skipped: " + ", ".join(missing))
    return [a for a in al if a["name"] in want]


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def f3(x):
    return "—" if x is None else ("%.3f" % x if abs(x) < 10 else "%.1f" % x)


def summarise(runs, states, al):
    peers = [a["name"] for a in al if a["kind"] == "peer"]
    summ = {}
    for st in states:
        per = {}
        for a in al:
            rs = [r for r in runs if r["state"] == st and r["allocator"] == a["name"] and r["ok"]]
            if not rs:
                continue
            per[a["name"]] = {k: med([r.get(k) if k in r else r["vm"].get(k) for r in rs])
                              for k in ("value", "wall_s", "user_s", "sys_s", "cpu_s", "minflt",
                                        "thp_fault_alloc", "compact_stall")}
            per[a["name"]]["runs"] = len(rs)
            per[a["name"]]["values"] = [r["value"] for r in rs]
        best = min((n for n in peers if n in per), key=lambda n: per[n]["value"], default=None)
        for metric, pre in (("value", ""), ("cpu_s", "cpu_")):
            by_round = {}
            for r in runs:
                if r["state"] == st and r["ok"]:
                    by_round.setdefault(r["round"], {})[r["allocator"]] = r[metric]
            for n, s in per.items():
                for ref, key in (("locus-off", "vs_off"), (best, "vs_best_peer"), ("locus-base", "vs_base")):
                    if ref and ref in per and n != ref and per[ref][metric]:
                        s[pre + key] = s[metric] / per[ref][metric]
                        s[pre + key + "_paired"] = med([m[n] / m[ref] for m in by_round.values()
                                                        if n in m and ref in m and m[ref]])
        summ[st] = {"best_peer": best, "allocators": per}
    return summ


def markdown(meta, summ, al, runs):
    L = ["# Time step, fresh and churned (tools/bench_thp.py)\n",
         "- date: %s, commit %s, rounds %d, steps %d, profile %s" % (meta["date"], meta["commit"], meta["rounds"],
                                                                      meta["steps"], meta["profile"]),
         "- fresh: %d MiB touched and freed just before each run; churned: %d MiB touched and freed, "
         "then %.1f s pause" % (meta["warm_mib"], meta["churn_mib"], meta["settle"]),
         "- THP: %s; defrag: %s" % (meta.get("thp_enabled"), meta.get("thp_defrag")),
         "- command: `%s`\n" % meta["command"],
         "Medians over the rounds. Ratios: of the medians, and [paired: the median of the per-round "
         "ratios]; below 1 is faster.\n"]
    for st, s in summ.items():
        L.append("## %s (best peer: %s)\n" % (st, s["best_peer"]))
        L.append("Time: the workload's own (wall time of the steps); CPU: user + system time of the "
                 "process (steadier on shared cores).\n")
        L.append("| allocator | time (s) | wall s | user s | sys s | minor faults | thp_fault_alloc "
                 "| compact_stall | ×locus-off [paired] | ×best peer [paired] | ×locus-base [paired] "
                 "| CPU s | CPU ×locus-off [paired] | CPU ×best peer [paired] | CPU ×locus-base [paired] |")
        L.append("|---" * 15 + "|")
        for a in al:
            x = s["allocators"].get(a["name"])
            if not x:
                L.append("| %s | **failed** |" % a["name"] + " |" * 13)
                continue

            def ratio(k):
                return "%s [%s]" % (f3(x.get(k)), f3(x.get(k + "_paired"))) if x.get(k) else "—"
            L.append("| %s | %s | %s | %s | %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                a["name"], f3(x["value"]), f3(x["wall_s"]), f3(x["user_s"]), f3(x["sys_s"]), x["minflt"] or 0,
                x["thp_fault_alloc"] or 0, x["compact_stall"] or 0, ratio("vs_off"), ratio("vs_best_peer"),
                ratio("vs_base"), f3(x["cpu_s"]), ratio("cpu_vs_off"), ratio("cpu_vs_best_peer"),
                ratio("cpu_vs_base")))
        L.append("")
    fails = [r for r in runs if not r["ok"]]
    L.append("## Failures\n")
    L.append("None: every run validated its output.\n" if not fails else "")
    for r in fails:
        L.append("- %s / %s round %d: %s" % (r["state"], r["allocator"], r["round"], r["reason"]))
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--states", default="fresh,churned")
    ap.add_argument("--allocators", default="locus-auto,locus-off,tcmalloc,mimalloc,jemalloc,glibc")
    ap.add_argument("--profile", default="uma", help="LOCUS_PROFILE of the locus columns (default uma)")
    ap.add_argument("--locus-lib", default=os.path.join(bench.default_build_dir(), "liblocus.so"))
    ap.add_argument("--base-lib", default=None, help="another locus build, run as locus-base (LOCUS_THP=auto)")
    ap.add_argument("--bin-dir", default=None)
    ap.add_argument("--warm-mib", type=int, default=768)
    ap.add_argument("--churn-mib", type=int, default=512)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after the churn (default 3)")
    ap.add_argument("--stats", action="store_true", help="LOCUS_STATS=1 for the locus runs (decision kept)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    states = [s for s in args.states.split(",") if s]
    if any(s not in ("fresh", "churned") for s in states) or args.rounds < 1:
        ap.error("--states takes fresh and/or churned; --rounds >= 1")
    al = allocators(args)
    if not al:
        ap.error("no allocator to run")
    prog = os.path.join(bench.find_bin_dir(args.bin_dir), "bench_timestep")
    if not os.access(prog, os.X_OK):
        ap.error("%s not found: build first (ninja -C build)" % prog)
    argv = [prog, "--steps", str(args.steps)]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = os.path.abspath(args.out or os.path.join(REPO, "results", "scratch", "thp-" + stamp))
    os.makedirs(outdir, exist_ok=True)
    runs = []
    total = args.rounds * len(states) * len(al)
    with tempfile.TemporaryDirectory(prefix="locus-thp-") as scratch:
        for rnd in range(args.rounds):
            for st in (states if rnd % 2 == 0 else states[::-1]):
                order = al[rnd % len(al):] + al[:rnd % len(al)]
                for a in order:
                    prepare(st, args)
                    v0 = vmstat()
                    rec, out, err = bench.run_one(argv, bench.child_env(a), args.timeout, scratch)
                    v1 = vmstat()
                    bench.evaluate(rec, out, err)
                    rec["cpu_s"] = rec["user_s"] + rec["sys_s"]
                    rec.update({"round": rnd, "state": st, "allocator": a["name"],
                                "vm": {k: v1.get(k, 0) - v0.get(k, 0) for k in v1}})
                    m = re.search(r"^.*huge pages.*$", err, re.M)
                    if m:
                        rec["thp_decision"] = m.group(0).strip()
                    runs.append(rec)
                    bench.log("[%d/%d] round %d %s %s: %s s (sys %.2f, thp faults %d)%s" % (
                        len(runs), total, rnd, st, a["name"], f3(rec.get("value")), rec["sys_s"],
                        rec["vm"].get("thp_fault_alloc", 0), "" if rec["ok"] else " FAILED: " + rec["reason"]))
    summ = summarise(runs, states, al)
    host = bench.host_info()
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": host.get("git_commit"),
            "rounds": args.rounds, "steps": args.steps, "profile": args.profile, "warm_mib": args.warm_mib,
            "churn_mib": args.churn_mib, "settle": args.settle, "thp_enabled": host.get("thp_enabled"),
            "thp_defrag": host.get("thp_defrag"), "command": " ".join(["tools/bench_thp.py"] + sys.argv[1:]),
            "locus_lib": args.locus_lib, "base_lib": args.base_lib}
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": meta, "allocators": al, "summary": summ, "runs": runs}, f, indent=1)
    md = markdown(meta, summ, al, runs)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)
    bench.log("bench_thp: results in %s" % outdir)
    return 1 if any(not r["ok"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
