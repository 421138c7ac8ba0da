#!/usr/bin/env python3
"""Paired ratios of two allocators in one tools/bench.py run.

    tools/paired.py RESULTS.json A B

For every workload: within each repetition (whose runs follow each other),
the ratio A/B of the workload's own cost (its RESULT metric: a time, or the
inverse of a throughput), of the process's CPU time (user + sys) and of its
wall time, then the median over the repetitions; and the ratio of the
medians of the minor faults and of the peak RSS (the workload's own
peak_rss_kib when it prints one, else the child's ru_maxrss). Prints a
Markdown table. Used for the auto profile's figures in docs/adaptive.md.
"""
import json
import statistics
import sys


def cost(r):
    v = r.get("value")
    if not isinstance(v, (int, float)) or v <= 0:
        return None
    return v if r.get("better", "lower") == "lower" else 1.0 / v


def rss(r):
    v = (r.get("extra") or {}).get("peak_rss_kib")
    return v if isinstance(v, (int, float)) and v > 0 else r.get("maxrss_kib")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b and b > 0 else None


def fmt(x):
    return "—" if x is None else "%.3f" % x


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    d = json.load(open(sys.argv[1]))
    a, b = sys.argv[2], sys.argv[3]
    runs = [r for r in d["runs"] if r.get("ok")]
    order = []
    for r in runs:
        if r["workload"] not in order:
            order.append(r["workload"])
    print("| workload | %s/%s cost (paired) | CPU time (paired) | wall (paired) | minor faults | peak RSS | reps |"
          % (a, b))
    print("|---|---|---|---|---|---|---|")
    for w in order:
        by = {}
        for r in runs:
            if r["workload"] == w and r["allocator"] in (a, b):
                by.setdefault(r["rep"], {})[r["allocator"]] = r
        pairs = [(p[a], p[b]) for p in by.values() if a in p and b in p]
        if not pairs:
            continue
        c = med([ratio(cost(x), cost(y)) for x, y in pairs])
        cpu = med([ratio(x["user_s"] + x["sys_s"], y["user_s"] + y["sys_s"]) for x, y in pairs])
        wall = med([ratio(x["wall_s"], y["wall_s"]) for x, y in pairs])
        flt = ratio(med([x["minflt"] for x, _ in pairs]), med([y["minflt"] for _, y in pairs]))
        mem = ratio(med([rss(x) for x, _ in pairs]), med([rss(y) for _, y in pairs]))
        print("| %s | %s | %s | %s | %s | %s | %d |" % (w, fmt(c), fmt(cpu), fmt(wall), fmt(flt), fmt(mem), len(pairs)))


if __name__ == "__main__":
    main()
