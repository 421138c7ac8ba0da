#!/usr/bin/env python3
"""Summarises the workload part of a guest log of run_guest.sh --bench:
medians per (workload, configuration) of time, CPU time and peak RSS, and
the ratios to uma measured in the same interleaved run.

    tests/kernel/bench_summary.py GUEST-LOG
"""
import re
import statistics
import sys
from collections import defaultdict

runs = defaultdict(lambda: defaultdict(list))
cur = None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("RUN "):
        d = dict(x.split("=", 1) for x in line.split()[1:])
        cur = (d["prog"].lstrip("/"), "uma" if d["profile"] == "uma" else
               ("eco+reuse" if d["reuse"] == "1" else "eco"))
    elif cur and line.startswith("RESULT"):
        runs[cur]["time"].append(float(re.search(r"value=([\d.]+)", line).group(1)))
    elif cur and line.startswith("MAXRSS"):
        runs[cur]["rss"].append(int(line.split()[1]) / 1024)
        m = re.search(r"CPU ([\d.]+)", line)
        if m:
            runs[cur]["cpu"].append(float(m.group(1)))
med = {k: {m: statistics.median(v) for m, v in d.items() if v} for k, d in runs.items()}
for prog in sorted({k[0] for k in med}):
    print(f"{prog}:")
    base = med.get((prog, "uma"), {})
    for cfg in ("uma", "eco", "eco+reuse"):
        r = med.get((prog, cfg))
        if not r:
            continue
        n = len(runs[(prog, cfg)]["time"])
        s = f"  {cfg:10s} n={n} time {r['time']:.2f} s"
        if "cpu" in r:
            s += f", cpu {r['cpu']:.2f} s"
        s += f", peak RSS {r['rss']:.0f} MiB"
        if base and cfg != "uma":
            s += f"; /uma: time {r['time'] / base['time']:.2f}"
            if "cpu" in r and "cpu" in base:
                s += f", cpu {r['cpu'] / base['cpu']:.2f}"
        s += "  (times: " + " ".join(f"{t:.2f}" for t in runs[(prog, cfg)]["time"]) + ")"
        print(s)
