#!/usr/bin/env python3
"""Benchmarks of the auto profile and of transparent huge pages (issue: adaptive
memory sources). Three parts, each run interleaved (A B C A B C ...), medians:

  phased  bench_phased under locus eco, uma, auto (and glibc): resident set
          over time through a time-step phase and a small-object phase; the
          RSS one second after the phase change, auto / eco.
  cgroup  bench_phased and bench_timestep in a memory cgroup the harness
          creates (v1 memory.limit_in_bytes or v2 memory.max), with a limit
          of 1.1 x eco's peak RSS (+ 8 MiB) measured first: which profiles finish, get
          OOM-killed or see malloc return NULL. Each run is bounded in time;
          the cgroup is removed afterwards.
  thp     bench_timestep (--thp-report: share of the arrays' resident memory
          in huge pages) and bench_stencil under locus uma with LOCUS_THP=on
          (the default auto) and off, and auto: time, minor faults, coverage.

Writes results.json, results.md and rss_phased.png to results/scratch/adaptive-<ts>/
(or --out). Usage: tools/bench_adaptive.py [--parts phased,cgroup,thp] [--repeat N] [--quick]
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the host harness: run_one, evaluate, child_env)

REPO = bench.REPO


def alloc(name, lib, env):
    return {"name": name, "kind": "locus" if lib else "peer", "preload": lib, "env": env}


def run(a, argv, timeout, scratch, wrap=None):
    env = bench.child_env(a)
    full = (wrap or []) + argv
    rec, out, err = bench.run_one(full, env, timeout, scratch)
    rec = bench.evaluate(rec, out, err)
    rec["alloc"] = a["name"]
    rec["argv"] = argv
    return rec


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


# --------------------------------------------------------------------------
# cgroups

def cgroup2_mount():
    """(mount point, root) of the cgroup2 hierarchy, from /proc/self/mountinfo, or (None, None)."""
    try:
        with open("/proc/self/mountinfo") as f:
            for l in f:
                if " - cgroup2 " in l:
                    fields = l.split()
                    return fields[4], fields[3]
    except OSError:
        pass
    return None, None


def cgroup_parents():
    """Candidate (version, parent directory) pairs for a child memory cgroup,
    best first: the process's own v1 memory cgroup; on v2, the process's own
    cgroup, then the root of the cgroup2 mount (a v2 cgroup with processes in
    it cannot give its children controllers: the no-internal-process rule)."""
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    out = []
    for l in lines:
        parts = l.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            d = "/sys/fs/cgroup/memory" + (parts[2] if parts[2] != "/" else "")
            if os.path.exists(os.path.join(d, "memory.limit_in_bytes")):
                out.append((1, d))
    point, root = cgroup2_mount()
    if point:
        with open(os.path.join(point, "cgroup.controllers")) as f:
            has_memory = "memory" in f.read().split()
        if has_memory:
            for l in lines:
                if l.startswith("0::"):
                    rel = l[3:]
                    if root not in ("/", None) and rel.startswith(root):
                        rel = rel[len(root):]
                    d = point + (rel if rel != "/" else "")
                    if d != point:
                        out.append((2, d))
            out.append((2, point))
    return out


class Cgroup:
    """A child memory cgroup with a limit; removed by close(). Raises
    RuntimeError with the reason when none can be created here."""

    def __init__(self, limit):
        cands = cgroup_parents()
        if not cands:
            raise RuntimeError("no memory controller in any cgroup hierarchy (v1 memory or cgroup2 with memory)")
        why = []
        for version, parent in cands:
            self.version = version
            self.path = os.path.join(parent, "locus-bench-%d-%d" % (os.getpid(), int(time.time() * 1000) % 100000))
            try:
                if version == 2:
                    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                        enabled = "memory" in f.read().split()
                    if not enabled:
                        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                            f.write("+memory")
                os.mkdir(self.path)
            except OSError as e:
                why.append("v%d %s: %s" % (version, parent, e))
                continue
            try:
                if version == 1:
                    self.write("memory.limit_in_bytes", str(limit))
                    try:
                        self.write("memory.memsw.limit_in_bytes", str(limit))
                    except OSError:
                        pass
                else:
                    self.write("memory.max", str(limit))
                    try:
                        self.write("memory.swap.max", "0")
                    except OSError:
                        pass
                return
            except OSError as e:
                why.append("v%d %s: %s" % (version, self.path, e))
                self.close()
        raise RuntimeError("cannot create a memory cgroup: " + "; ".join(why))

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def read(self, name):
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return ""

    def wrap(self):
        # the child joins the cgroup, then execs the workload
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path]

    def peak(self):
        v = self.read("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak").strip()
        return int(v) if v.isdigit() else None

    def reset_peak(self):
        if self.version == 1:
            try:
                self.write("memory.max_usage_in_bytes", "0")
            except OSError:
                pass

    def oom_kills(self):
        if self.version == 1:
            for l in self.read("memory.oom_control").splitlines():
                if l.startswith("oom_kill "):
                    return int(l.split()[1])
            return None
        for l in self.read("memory.events").splitlines():
            if l.startswith("oom_kill "):
                return int(l.split()[1])
        return None

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        bench.log("warning: could not remove cgroup %s" % self.path)


# --------------------------------------------------------------------------

def part_phased(args, allocs, bindir, scratch):
    argv = [os.path.join(bindir, "bench_phased")] + (["--quick"] if args.quick else [])
    runs = []
    for r in range(args.repeat):
        for a in allocs:
            rec = run(a, argv, 300, scratch)
            runs.append(rec)
            bench.log("phased %s run %d: %s" % (a["name"], r + 1, rec.get("value") if rec["ok"] else rec["reason"]))
    summ = {}
    for a in allocs:
        rs = [x for x in runs if x["alloc"] == a["name"] and x["ok"]]
        summ[a["name"]] = {
            "rss_1s_after_mib": med([x["value"] for x in rs]),
            "rss_peak_mib": med([x["extra"].get("rss_peak_mib") for x in rs]),
            "phase1_s": med([x["extra"].get("phase1_s") for x in rs]),
            "wall_s": med([x["wall_s"] for x in rs]),
            "runs": len(rs),
        }
    return runs, summ


def part_cgroup(args, allocs, bindir, scratch):
    out = {"workloads": {}}
    eco = [a for a in allocs if a["name"] == "locus-eco"][0]
    work = [("phased", [os.path.join(bindir, "bench_phased"), "--small-ms", "1500"] + (["--quick"] if args.quick else [])),
            ("timestep", [os.path.join(bindir, "bench_timestep"), "--steps", "10" if args.quick else "40"])]
    for wname, argv in work:
        ref = [run(eco, argv, 300, scratch) for _ in range(2)]
        peak_kib = max(x["maxrss_kib"] for x in ref)
        limit = int(peak_kib * 1024 * 1.1) + (8 << 20)
        entry = {"eco_peak_rss_mib": peak_kib / 1024.0, "limit_mib": limit / 1048576.0, "runs": []}
        try:
            cg = Cgroup(limit)
        except RuntimeError as e:
            bench.log("cgroup part skipped: %s" % e)
            out["skipped"] = str(e)
            return out
        entry["cgroup_version"] = cg.version
        try:
            for r in range(args.repeat):
                for a in allocs:
                    k0 = cg.oom_kills()
                    cg.reset_peak()
                    rec = run(a, argv, 120, scratch, wrap=cg.wrap())
                    k1 = cg.oom_kills()
                    rec["oom_killed"] = (k1 or 0) > (k0 or 0) or rec["rc"] == -9
                    rec["enomem"] = not rec["ok"] and "enomem" in (rec.get("reason") or "")
                    rec["cg_peak_mib"] = (cg.peak() or 0) / 1048576.0
                    entry["runs"].append(rec)
                    bench.log("cgroup %s %s run %d: %s" % (wname, a["name"], r + 1,
                              "ok" if rec["ok"] else rec["reason"]))
        finally:
            cg.close()
        summ = {}
        for a in allocs:
            rs = [x for x in entry["runs"] if x["alloc"] == a["name"]]
            summ[a["name"]] = {"runs": len(rs), "ok": sum(1 for x in rs if x["ok"]),
                               "oom_killed": sum(1 for x in rs if x["oom_killed"]),
                               "enomem": sum(1 for x in rs if x["enomem"]),
                               "wall_s": med([x["wall_s"] for x in rs if x["ok"]]),
                               "cg_peak_mib": med([x["cg_peak_mib"] for x in rs])}
        entry["summary"] = summ
        out["workloads"][wname] = entry
    return out


def part_thp(args, lib, bindir, scratch):
    allocs = [alloc("locus-uma-thp", lib, {"LOCUS_PROFILE": "uma", "LOCUS_THP": "on"}),
              alloc("locus-uma-nothp", lib, {"LOCUS_PROFILE": "uma", "LOCUS_THP": "off"}),
              alloc("locus-auto", lib, {"LOCUS_PROFILE": "auto"}),
              alloc("glibc", None, {})]
    steps = "20" if args.quick else "100"
    work = [("timestep", [os.path.join(bindir, "bench_timestep"), "--steps", steps, "--thp-report"]),
            ("stencil", [os.path.join(bindir, "bench_stencil")] + (["--quick"] if args.quick else []))]
    runs = []
    for r in range(args.repeat):
        for wname, argv in work:
            for a in allocs:
                rec = run(a, argv, 600, scratch)
                rec["workload"] = wname
                runs.append(rec)
                bench.log("thp %s %s run %d: %s" % (wname, a["name"], r + 1,
                          "%.3f s, %d faults" % (rec["wall_s"], rec["minflt"]) if rec["ok"] else rec["reason"]))
    summ = {}
    for wname, _ in work:
        for a in allocs:
            rs = [x for x in runs if x["workload"] == wname and x["alloc"] == a["name"] and x["ok"]]
            cov = [d.get("coverage") for x in rs for d in x["data"] if d.get("series") == "thp"]
            summ["%s/%s" % (wname, a["name"])] = {
                "value_s": med([x["value"] for x in rs]), "minflt": med([x["minflt"] for x in rs]),
                "coverage": med(cov), "sweep_s": med([x["extra"].get("sweep_s") for x in rs]),
                "init_s": med([x["extra"].get("init_s") for x in rs]), "runs": len(rs)}
    return runs, summ


def plot_phased(outdir, runs, summ):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name in summ:
        rs = [x for x in runs if x["alloc"] == name and x["ok"]]
        if not rs:
            continue
        m = summ[name]["rss_1s_after_mib"]
        r = min(rs, key=lambda x: abs(x["value"] - m))      # the run closest to the median
        pts = [d for d in r["data"] if d.get("series") == "rss"]
        change = next((d["t"] for d in pts if d.get("phase") == 2), 0.0)
        ax.plot([d["t"] - change for d in pts], [d["rss_mib"] for d in pts], label=name, lw=1)
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.axvline(1, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("time since the end of the time-step phase (s); dashed: 1 s after")
    ax.set_ylabel("resident set (MiB)")
    ax.set_title("bench_phased: time-step phase, then small objects only")
    ax.legend()
    fig.tight_layout()
    p = os.path.join(outdir, "rss_phased.png")
    fig.savefig(p, dpi=110)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="phased,cgroup,thp")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--locus-lib", default=os.path.join(REPO, "build", "liblocus.so"))
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bench"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--replot", default=None, help="redraw rss_phased.png of an earlier output directory")
    args = ap.parse_args()
    if args.replot:
        with open(os.path.join(args.replot, "results.json")) as f:
            ph = json.load(f)["phased"]
        print(plot_phased(args.replot, ph["runs"], ph["summary"]))
        return
    if args.repeat is None:
        args.repeat = 1 if args.quick else 5
    lib = os.path.abspath(args.locus_lib)
    bindir = os.path.abspath(args.bin_dir)
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    outdir = args.out or os.path.join(REPO, "results", "scratch", "adaptive-" + ts)
    os.makedirs(outdir, exist_ok=True)
    allocs = [alloc("locus-eco", lib, {"LOCUS_PROFILE": "eco"}),
              alloc("locus-uma", lib, {"LOCUS_PROFILE": "uma"}),
              alloc("locus-auto", lib, {"LOCUS_PROFILE": "auto"})]
    res = {"meta": {"date": ts, "argv": sys.argv, "host": bench.host_info(), "repeat": args.repeat,
                    "quick": args.quick}}
    md = ["# Adaptive profile and THP benchmarks", "",
          "`%s` (%s), interleaved runs, medians of %d." % (" ".join(sys.argv), ts, args.repeat), ""]
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="locus-bench-adaptive-") as scratch:
        if "phased" in parts:
            runs, summ = part_phased(args, allocs + [alloc("glibc", None, {})], bindir, scratch)
            res["phased"] = {"summary": summ, "runs": runs}
            plot_phased(outdir, runs, summ)
            md += ["## Phased workload (RSS over time: `rss_phased.png`)", "",
                   "| allocator | RSS 1 s after the phase change (MiB) | peak RSS (MiB) | time-step phase (s) | runs |",
                   "|---|---|---|---|---|"]
            for n, s in summ.items():
                md.append("| %s | %s | %s | %s | %d |" % (n, fmt(s["rss_1s_after_mib"]), fmt(s["rss_peak_mib"]),
                                                       fmt(s["phase1_s"]), s["runs"]))
            e, au = summ["locus-eco"]["rss_1s_after_mib"], summ["locus-auto"]["rss_1s_after_mib"]
            if e and au:
                md += ["", "auto / eco RSS 1 s after the phase change: **%.2f**" % (au / e)]
            u = summ["locus-uma"]["phase1_s"]
            if u and summ["locus-auto"]["phase1_s"]:
                md += ["auto / uma time-step phase time: **%.3f**" % (summ["locus-auto"]["phase1_s"] / u)]
            md.append("")
        if "cgroup" in parts:
            cg = part_cgroup(args, allocs, bindir, scratch)
            res["cgroup"] = cg
            md += ["## Under a memory cgroup limit (1.1 x eco's peak RSS + 8 MiB)", ""]
            if cg.get("skipped"):
                md += ["Skipped: %s" % cg["skipped"], ""]
            for w, e in cg["workloads"].items():
                md += ["### %s: cgroup v%d, limit %.0f MiB (eco peak RSS %.0f MiB)" %
                       (w, e["cgroup_version"], e["limit_mib"], e["eco_peak_rss_mib"]), "",
                       "| allocator | runs | finished | OOM-killed | malloc NULL | median time (s) | cgroup peak (MiB) |",
                       "|---|---|---|---|---|---|---|"]
                for n, s in e["summary"].items():
                    md.append("| %s | %d | %d | %d | %d | %s | %s |" % (n, s["runs"], s["ok"], s["oom_killed"],
                              s["enomem"], fmt(s["wall_s"]), fmt(s["cg_peak_mib"])))
                md.append("")
        if "thp" in parts:
            runs, summ = part_thp(args, lib, bindir, scratch)
            res["thp"] = {"summary": summ, "runs": runs}
            md += ["## Transparent huge pages (THP mode: %s)" % thp_mode(), "",
                   "| workload / allocator | time (s) | minor faults | huge-page coverage | first touch (s) | sweeps (s) |",
                   "|---|---|---|---|---|---|"]
            for k, s in summ.items():
                md.append("| %s | %s | %s | %s | %s | %s |" % (k, fmt(s["value_s"]), fmt(s["minflt"]),
                          fmt(s["coverage"]), fmt(s["init_s"]), fmt(s["sweep_s"])))
            md.append("")
    for r in (res.get("phased", {}).get("runs", []) + res.get("thp", {}).get("runs", [])):
        r.pop("stderr_tail", None)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    bench.log("written to %s" % outdir)


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, float):
        return "%.3g" % x if abs(x) < 1000 else "%.0f" % x
    return str(x)


def thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().strip()
    except OSError:
        return "absent"


if __name__ == "__main__":
    main()
