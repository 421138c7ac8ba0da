#!/usr/bin/env python3
"""Summarises a guest-steady-*.log (steady.sh): per (workload, configuration)
medians of time, CPU time, peak RSS, munmap time (shim) and the THP faults
served from the pool; ratios to uma as ratio of medians and as median of the
per-round ratios (the rounds are interleaved: uma, eco, eco+reuse).

    summary.py GUEST-LOG
"""
import re
import statistics as st
import sys
from collections import defaultdict

runs = defaultdict(lambda: defaultdict(dict))  # (prog, cfg) -> round -> metrics
cur = None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("RUN "):
        d = dict(x.split("=", 1) for x in line.split()[1:])
        cfg = "uma" if d["profile"] == "uma" else ("eco+reuse" if d["reuse"] == "1" else "eco")
        if cfg == "eco+reuse" and d.get("lib", "").endswith("-old.so"):
            cfg = "eco+reuse-old"
        cur = (d["prog"], cfg, int(d["round"]))
        continue
    if not cur:
        continue
    m = runs[cur[:2]][cur[2]]
    if line.startswith("RESULT"):
        m["time"] = float(re.search(r"value=([\d.]+)", line).group(1))
    elif line.startswith("MAXRSS"):
        m["rss"] = int(line.split()[1]) / 1024
        m["cpu"] = float(re.search(r"CPU ([\d.]+)", line).group(1))
    elif line.startswith("SHIM munmap"):
        m["munmap_ms"] = float(re.search(r"total_ms=([\d.]+)", line).group(1))
        m["munmaps"] = int(re.search(r"calls=(\d+)", line).group(1))
    elif line.startswith("REUSE"):
        v = dict(zip(line.split()[1::2], map(int, line.split()[2::2])))
        m["huge_hit"] = v["huge_hits"] / v["thp_faults"] if v.get("thp_faults") else 0.0


def med(xs):
    return st.median(xs) if xs else float("nan")


for prog in sorted({k[0] for k in runs}):
    print(f"{prog}:")
    base = runs.get((prog, "uma"), {})
    for cfg in ("uma", "eco", "eco+reuse-old", "eco+reuse"):
        rs = runs.get((prog, cfg))
        if not rs:
            continue
        g = lambda k: [r[k] for r in rs.values() if k in r]
        s = f"  {cfg:9s} n={len(g('time'))} time {med(g('time')):.2f} s, cpu {med(g('cpu')):.2f} s, peak RSS {med(g('rss')):.0f} MiB"
        s += f" (max {max(g('rss')):.0f}), munmap {med(g('munmap_ms')):.0f} ms ({med(g('munmaps')):.0f} calls)"
        if cfg.startswith("eco+reuse") and g("huge_hit"):
            s += f", THP faults from the pool {med(g('huge_hit')) * 100:.0f} %"
        if base and cfg != "uma":
            bt = [r["time"] for r in base.values() if "time" in r]
            bc = [r["cpu"] for r in base.values() if "cpu" in r]
            pt = [rs[k]["time"] / base[k]["time"] for k in rs if k in base and "time" in rs[k] and "time" in base[k]]
            pc = [rs[k]["cpu"] / base[k]["cpu"] for k in rs if k in base and "cpu" in rs[k] and "cpu" in base[k]]
            s += f"\n            /uma: time {med(g('time')) / med(bt):.2f} (per-round median {med(pt):.2f}),"
            s += f" cpu {med(g('cpu')) / med(bc):.2f} (per-round median {med(pc):.2f})"
        s += "\n            times: " + " ".join(f"{t:.2f}" for t in g("time"))
        print(s)
