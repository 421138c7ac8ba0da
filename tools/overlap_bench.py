#!/usr/bin/env python3
"""Overlap of MPI communication with computation on a shaped link (issue 32).

Runs bench/overlap_mpi.c (the ping-pong with computation of A. Lescouet's
thesis, "Commmama", 2021, Chapter 3) on 2 ranks over a grid of message sizes
x compute times x variants, on a link that takes real time without taking CPU:
a private network namespace (unshare -n) whose loopback is rate-limited by a
token bucket (tc qdisc tbf; this kernel has no netem), Open MPI forced to TCP
over that loopback (ob1, btl tcp,self: no shared memory).

Variants (interleaved within every repeat, order rotated from one to the next):
  blocking      MPI_Send/MPI_Recv (at C = 0 the program's `nocompute` variant)
  overlap       the same binary with LD_PRELOAD=liblocus-overlap.so (--overlap-lib)
  nonblocking   hand-written MPI_Isend/MPI_Irecv, MPI_Wait just before the access
  nonblocking-pt  (--nb-progress-thread) the same with Open MPI's own TCP
                progress thread (btl_tcp_progress_thread=1): MPI-side
                background progress, which plain nonblocking lacks

Reports the median time per iteration of each cell and variant, the speedup of
overlap over blocking (t_blocking / t_overlap - 1), overlap's distance to the
hand-written nonblocking version (t_overlap / t_nonblocking - 1), its overhead
where nothing overlaps (C = 0) and the optimum max(C, t_comm) with t_comm the
blocking round trip at C = 0.  Writes results.json, results.md and plots
(overlap.png, overlap-speedup.png; matplotlib, when importable) to --out.  Progress and ETA on stderr.

Must run as root (or where unshare -n, ip and tc are allowed): the script
re-executes itself inside `unshare -n`, sets up the loopback there and runs
every mpirun inside it.  Exit status 77 when mpirun, unshare, ip or tc is
missing or the namespace cannot be made; 1 when a run fails to validate.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (host_info)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETNS_ENV = "LOCUS_OVERLAP_NETNS"
SKIP = 77

DEFAULT_SIZES = "4K,64K,1M,4M"
DEFAULT_COMPUTES = "0,400,4000,40000"
QUICK_SIZES = "4K,256K"
QUICK_COMPUTES = "0,2000"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_size(s):
    s = s.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def size_label(n):
    for unit, m in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return "%d %s" % (n // m, unit)
    return "%d B" % n


def parse_rate(s):
    """tc rate string (1gbit, 100mbit, 500kbit, bits per second) -> bytes/s."""
    s = s.strip().lower()
    for suf, m in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)):
        if s.endswith(suf):
            return float(s[:-len(suf)]) * m / 8
    return float(s) / 8


def fmt_eta(s):
    s = int(max(0, s))
    return "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s


def find_bin(arg):
    cands = [arg] if arg else [os.path.join(REPO, d, "bench", "bench_overlap_mpi")
                               for d in ("build", "build-release", "build-bench")]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def host_info():
    """The harness's host description (tools/bench.py) and the MPI runtime."""
    info = bench.host_info()
    try:
        out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=30).stdout
        info["mpi"] = out.splitlines()[0].strip() if out else None
    except (OSError, subprocess.SubprocessError):
        info["mpi"] = None
    return info


def loadavg():
    """1-minute load average after a run: the other jobs sharing the cores."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running_now():
    """Runnable tasks on the machine besides this script: the median of 5
    samples of /proc/stat's procs_running over half a second."""
    vals = []
    for k in range(5):
        try:
            with open("/proc/stat") as f:
                for line in f:
                    if line.startswith("procs_running"):
                        vals.append(int(line.split()[1]) - 1)
        except (OSError, ValueError):
            return None
        if k < 4:
            time.sleep(0.1)
    return statistics.median(vals) if vals else None


def wait_quiet(limit, max_wait):
    """Waits until at most `limit` other tasks are runnable (other jobs on the
    shared cores), at most max_wait seconds; returns the seconds waited."""
    t0 = time.monotonic()
    said = False
    while True:
        n = running_now()
        if n is None or n <= limit or time.monotonic() - t0 >= max_wait:
            return time.monotonic() - t0
        if not said:
            log("overlap_bench: %g other runnable tasks, waiting (up to %ds) for at most %d" % (n, max_wait, limit))
            said = True
        time.sleep(2)


def parse_overlap_stderr(err):
    """liblocus-overlap.so's lines on stderr: its counters per rank
    ("locus-overlap: rank N: 12 guarded, 0 copied, ...") summed over the
    ranks, and any other line it printed (a warning: overlap disabled...)."""
    stats, notes = {}, []
    for line in err.splitlines():
        if "locus-overlap:" not in line:
            continue
        body = line.split("locus-overlap:", 1)[1].strip()
        if body.startswith("rank ") and ":" in body:
            for part in body.split(":", 1)[1].split(","):
                words = part.split()
                if len(words) >= 2 and words[0].isdigit():
                    key = "_".join(words[1:])
                    stats[key] = stats.get(key, 0) + int(words[0])
        elif body not in notes:
            notes.append(body)
    return stats, notes


def parse_result(text):
    """The RESULT line of rank 0 as a dict, or None."""
    res = None
    for line in text.splitlines():
        if line.startswith("RESULT "):
            d = {}
            for tok in line.split()[1:]:
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    d[k] = v
            res = d
    return res


class Runner:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.env = dict(os.environ)
        self.env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                         "OMPI_MCA_plm_rsh_agent": "false", "TMPDIR": tmp})
        self.env.pop("LD_PRELOAD", None)
        self.env.pop(NETNS_ENV, None)

    def mpirun(self, extra_mca, preload, prog_args, stats=False):
        cmd = ["nice", "-n", str(self.args.nice)] if self.args.nice else []
        cmd += ["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
               "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
               "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
               # 2 ranks (and an overlap library's progress threads) on 2 shared cores: a
               # rank that waits must let the other one run.
               "--mca", "mpi_yield_when_idle", "1"]
        for k, v in extra_mca:
            cmd += ["--mca", k, v]
        if preload:
            cmd += ["-x", "LD_PRELOAD=" + preload]
        if stats:
            # liblocus-overlap.so's counters, printed by each rank at MPI_Finalize
            cmd += ["-x", "LOCUS_OVERLAP_STATS=1"]
        return cmd + [self.args.bin] + prog_args

    def run(self, cmd, timeout):
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env,
                             start_new_session=True)
        if self.args.nice:
            # The run is a new session, hence (with sched_autogroup_enabled) a scheduling
            # group of its own: a nice value counts only inside its group, and the group's
            # own nice weighs it against other sessions' jobs.
            try:
                with open("/proc/%d/autogroup" % p.pid, "w") as f:
                    f.write(str(self.args.nice))
            except OSError:
                pass
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rc = "timeout"
        except BaseException:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise
        return rc, out, err, time.monotonic() - t0


def setup_link(args):
    """Inside the namespace: loopback up with the MTU, tbf on it."""
    cmds = [["ip", "link", "set", "lo", "up", "mtu", str(args.mtu)],
            ["tc", "qdisc", "replace", "dev", "lo", "root", "tbf", "rate", args.rate, "burst", args.burst,
             "latency", args.tbf_latency]]
    for c in cmds:
        r = subprocess.run(c, capture_output=True, text=True)
        if r.returncode:
            log("overlap_bench: `%s` failed: %s" % (" ".join(c), r.stderr.strip()))
            return None
    return subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True).stdout.strip()


def variant_spec(variant, compute, args):
    """(program variant, extra MCA params, preload) of a grid variant."""
    if variant in ("blocking", "overlap"):
        pv = "nocompute" if compute == 0 else "blocking"
        return pv, [], (args.overlap_lib if variant == "overlap" else args.base_preload)
    if variant == "nonblocking":
        return "nonblocking", [], args.base_preload
    if variant == "nonblocking-pt":
        return "nonblocking", [("btl_tcp_progress_thread", "1")], args.base_preload
    raise ValueError(variant)


def calibrate(runner, args):
    """Compute-loop units per microsecond: the fastest of 3 start-up calibrations
    (the program's own, rank 0's), then passed to every run."""
    best = 0.0
    for _ in range(1 if args.quick else 3):
        cmd = runner.mpirun([], args.base_preload,
                            ["--variant", "nocompute", "--size", "4096", "--iters", "2", "--warmup", "0"])
        rc, out, err, _ = runner.run(cmd, 120)
        res = parse_result(out)
        if rc != 0 or not res or res.get("check") != "ok":
            log("overlap_bench: calibration run failed (exit %s):\n%s%s" % (rc, out, err[-2000:]))
            return None
        best = max(best, float(res["my_work_per_us"]))
    return best


def summarize(runs, sizes, computes, variants):
    cells = []
    for s in sizes:
        for c in computes:
            cell = {"size": s, "compute_us": c, "median_us": {}, "n": {}, "stretch": {}, "mean_us": {}}
            for v in variants:
                vals = [r["iter_us"] for r in runs if r["size"] == s and r["compute_us"] == c
                        and r["variant"] == v and r["ok"]]
                if vals:
                    cell["median_us"][v] = statistics.median(vals)
                    cell["n"][v] = len(vals)
                mv = [float(r["result"]["mean_us"]) for r in runs if r["size"] == s and r["compute_us"] == c
                      and r["variant"] == v and r["ok"] and "mean_us" in r["result"]]
                if mv:
                    cell["mean_us"][v] = statistics.median(mv)
                st = [r["stretch"] for r in runs if r["size"] == s and r["compute_us"] == c
                      and r["variant"] == v and r["ok"] and "stretch" in r]
                if st:
                    cell["stretch"][v] = statistics.median(st)
                if v == "overlap":
                    ov = [r for r in runs if r["size"] == s and r["compute_us"] == c and r["variant"] == v
                          and r.get("overlap_stats")]
                    if ov:
                        cell["overlap_stats"] = dict(ov[-1]["overlap_stats"], iters=ov[-1]["iters"])
            cells.append(cell)
    comm = {}
    for cell in cells:
        if cell["compute_us"] == 0 and "blocking" in cell["median_us"]:
            comm[cell["size"]] = cell["median_us"]["blocking"]
    for cell in cells:
        m = cell["median_us"]
        c = cell["compute_us"]
        cell["t_comm_us"] = comm.get(cell["size"])
        cell["optimal_us"] = max(c, comm[cell["size"]]) if cell["size"] in comm else None
        r = {}
        b, o, nb = m.get("blocking"), m.get("overlap"), m.get("nonblocking")
        if b and o:
            r["overlap_speedup"] = b / o - 1
        if o and nb:
            r["overlap_vs_nonblocking"] = o / nb - 1
        if o and m.get("nonblocking-pt"):
            r["overlap_vs_nonblocking_pt"] = o / m["nonblocking-pt"] - 1
        if b and nb:
            r["nonblocking_speedup"] = b / nb - 1
        if b and m.get("nonblocking-pt"):
            r["nonblocking_pt_speedup"] = b / m["nonblocking-pt"] - 1
        if b and cell["optimal_us"]:
            r["max_speedup"] = b / cell["optimal_us"] - 1
        if c == 0 and b and o:
            r["overlap_overhead"] = o / b - 1
        cell["ratios"] = r
    return cells


def pct(x):
    return "—" if x is None else "%+.1f %%" % (100 * x)


def ms(x):
    return "—" if x is None else ("%.3f" % (x / 1e3) if x < 1e4 else "%.2f" % (x / 1e3))


def write_md(path, meta, cells, variants):
    a = meta["config"]
    lines = ["# Overlap benchmark (bench/overlap_mpi.c, issue 32)", ""]
    if a["quick"]:
        lines += ["SMOKE TEST (--quick): a tiny grid, one short run per cell, to check that every variant "
                  "runs and validates. Its figures are not results.", ""]
    lines += ["- command: `%s`" % meta["command"],
              "- date: %s; host: %s, %s CPUs, kernel %s; %s" % (meta["date"], meta["host"].get("cpu", "?"),
                                                               meta["host"].get("cpus", meta["host"].get("nproc")), meta["host"].get("kernel"),
                                                               meta["host"].get("mpi")),
              "- link: loopback of a private network namespace, `%s`, MTU %d; Open MPI over TCP "
              "(pml ob1, btl tcp,self), 2 ranks, --bind-to none, mpi_yield_when_idle 1%s"
              % (meta["qdisc"], a["mtu"], ", ranks at nice %d" % a["nice"] if a.get("nice") else ""),
              "- compute loop: %.4f units/us (calibrated once, passed to every run); C is the compute time per "
              "iteration, two phases of C/2" % meta["work_per_us"],
              "- %d repeat(s) per cell, variants interleaved; values are medians over the repeats of each run's "
              "median time per iteration (one ping and one pong, as rank 0 sees it), in ms" % a["repeat"],
              "- load average (1 min) during the runs: median %s, max %s (other jobs share the 2 cores)"
              % (meta.get("load_median"), meta.get("load_max"))
              + ("; each run waited (up to %ds) for at most %d other runnable tasks, %.0f s in all"
                 % (a["max_wait"], a["max_running"], meta.get("waited_s", 0)) if a.get("max_running") is not None
                 else "")]
    if meta.get("overlap_note"):
        lines.append("- overlap: " + meta["overlap_note"])
    lines.append("")
    hdr = ["size", "C (ms)"] + variants + ["optimal", "t_comm"]
    cols = []
    names = {"overlap_speedup": "overlap speedup", "overlap_vs_nonblocking": "overlap vs nonblocking",
             "overlap_vs_nonblocking_pt": "overlap vs nonblocking-pt", "overlap_overhead": "overlap overhead (C=0)", "nonblocking_speedup": "nonblocking speedup",
             "nonblocking_pt_speedup": "nonblocking-pt speedup", "max_speedup": "max possible speedup"}
    for k in names:
        if any(k in c["ratios"] for c in cells):
            cols.append(k)
    hdr += [names[k] for k in cols]
    lines.append("| " + " | ".join(hdr) + " |")
    lines.append("|" + "---|" * len(hdr))
    for c in cells:
        row = [size_label(c["size"]), "%g" % (c["compute_us"] / 1e3)]
        row += [ms(c["median_us"].get(v)) for v in variants]
        row += [ms(c["optimal_us"]), ms(c["t_comm_us"])]
        row += [pct(c["ratios"].get(k)) for k in cols]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Mean time per iteration (each run's total time / iterations, median over the repeats), ms: "
              "a run whose iterations alternate fast and slow has a mean well above its median; preempted "
              "iterations (other jobs) raise it too:", "",
              "| size | C (ms) | " + " | ".join(variants) + " |", "|" + "---|" * (2 + len(variants))]
    for c in cells:
        lines.append("| %s | %g | %s |" % (size_label(c["size"]), c["compute_us"] / 1e3,
                                         " | ".join(ms(c["mean_us"].get(v)) for v in variants)))
    lines += ["", "Compute stretch (measured compute time per iteration / C, median over the runs; 1.00 = "
              "the compute phases ran at the calibrated speed, more = they were slowed by the other rank, "
              "progress threads or other jobs sharing the 2 cores):", "",
              "| size | C (ms) | " + " | ".join(variants) + " |", "|" + "---|" * (2 + len(variants))]
    for c in cells:
        if c["compute_us"]:
            lines.append("| %s | %g | %s |" % (size_label(c["size"]), c["compute_us"] / 1e3, " | ".join(
                "%.2f" % c["stretch"][v] if v in c["stretch"] else "—" for v in variants)))
    if any(c.get("overlap_stats") for c in cells):
        keys = []
        for c in cells:
            for k in c.get("overlap_stats", {}):
                if k != "iters" and k not in keys:
                    keys.append(k)
        lines += ["", "liblocus-overlap.so's counters (LOCUS_OVERLAP_STATS=1), both ranks, last run of each cell "
                  "(iterations timed + %d warm-up; each iteration is one send and one receive per rank):"
                  % a["warmup"], "",
                  "| size | C (ms) | iterations | " + " | ".join(k.replace("_", " ") for k in keys) + " |",
                  "|" + "---|" * (3 + len(keys))]
        for c in cells:
            st = c.get("overlap_stats")
            if st:
                lines.append("| %s | %g | %d | %s |" % (size_label(c["size"]), c["compute_us"] / 1e3, st["iters"],
                                                        " | ".join(str(st.get(k, 0)) for k in keys)))
    if meta.get("overlap_messages"):
        lines += ["", "liblocus-overlap.so printed: " + "; ".join("`%s`" % m for m in meta["overlap_messages"])]
    lines += ["", "speedup = t_blocking / t_variant - 1; overlap vs nonblocking(-pt) = t_overlap / t_nonblocking(-pt) - 1; "
              "optimal = max(C, t_comm), t_comm = blocking round trip at C = 0; max possible speedup = "
              "t_blocking / optimal - 1.", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def plot(path, cells, variants, computes, meta):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("overlap_bench: matplotlib not importable, no plot (scripts/setup.sh bench installs it)")
        return False
    n = len(computes)
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.2 * rows), squeeze=False)
    styles = {"blocking": ("tab:red", "o"), "overlap": ("tab:blue", "s"), "nonblocking": ("tab:green", "^"),
              "nonblocking-pt": ("tab:olive", "v")}
    for i, c in enumerate(computes):
        ax = axes[i // cols][i % cols]
        cs = [x for x in cells if x["compute_us"] == c]
        xs = [x["size"] for x in cs]
        for v in variants:
            pts = [(x["size"], x["median_us"][v] / 1e3) for x in cs if v in x["median_us"]]
            if pts:
                col, mk = styles.get(v, (None, "x"))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=mk, color=col, label=v)
        opt = [(x["size"], x["optimal_us"] / 1e3) for x in cs if x["optimal_us"]]
        if opt:
            ax.plot([p[0] for p in opt], [p[1] for p in opt], "k--", label="optimal max(C, t_comm)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([size_label(s) for s in xs])
        ax.set_xlabel("message size")
        ax.set_ylabel("time per iteration (ms)")
        ax.set_title("C = %g ms" % (c / 1e3))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle("MPI ping-pong with computation, 2 ranks, TCP over loopback shaped to %s (%s)"
                 % (meta["config"]["rate"], "quick" if meta["config"]["quick"] else
                    "%d repeats, medians" % meta["config"]["repeat"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    # Speedups over blocking, one line per compute time.
    base = os.path.splitext(path)[0]
    shown = [v for v in variants if v != "blocking"]
    fig, axes = plt.subplots(1, len(shown), figsize=(5.5 * len(shown), 4), squeeze=False)
    for j, v in enumerate(shown):
        ax = axes[0][j]
        for c in computes:
            cs = [x for x in cells if x["compute_us"] == c and v in x["median_us"] and "blocking" in x["median_us"]]
            if cs:
                ax.plot([x["size"] for x in cs], [100 * (x["median_us"]["blocking"] / x["median_us"][v] - 1)
                                                  for x in cs], marker="o", label="C = %g ms" % (c / 1e3))
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        xs = sorted({x["size"] for x in cells})
        ax.set_xticks(xs)
        ax.set_xticklabels([size_label(s) for s in xs])
        ax.set_xlabel("message size")
        ax.set_ylabel("speedup over blocking (%)")
        ax.set_title(v)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(base + "-speedup.png", dpi=110)
    plt.close(fig)
    return True


def write_outputs(out, meta, runs, failures, sizes, computes, variants, no_plot):
    cells = summarize(runs, sizes, computes, variants)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta, "cells": cells, "runs": runs, "failures": failures}, f, indent=1)
    write_md(os.path.join(out, "results.md"), meta, cells, variants)
    if not no_plot:
        plot(os.path.join(out, "overlap.png"), cells, variants, computes, meta)


def report_only(d, no_plot):
    """Tables and plots again from a run's results.json (the runs are kept as they are)."""
    with open(os.path.join(d, "results.json")) as f:
        data = json.load(f)
    meta = data["meta"]
    cfg = meta["config"]
    write_outputs(d, meta, data["runs"], data["failures"], cfg["sizes"], cfg["computes_us"], meta["variants"],
                  no_plot)
    log("overlap_bench: %s rewritten from its results.json" % os.path.join(d, "results.md"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (results.json, results.md, overlap.png); default "
                    "results/scratch/overlap-<timestamp> (git-ignored; publish by copying under results/)")
    ap.add_argument("--bin", help="bench_overlap_mpi (default: build*/bench/bench_overlap_mpi)")
    ap.add_argument("--overlap-lib", help="liblocus-overlap.so: adds the `overlap` variant")
    ap.add_argument("--base-preload", help="LD_PRELOAD of the other variants (e.g. liblocus.so; default none)")
    ap.add_argument("--quick", action="store_true", help="smoke grid: %s x %s us, 1 short run"
                    % (QUICK_SIZES, QUICK_COMPUTES))
    ap.add_argument("--sizes", help="message sizes (default %s)" % DEFAULT_SIZES)
    ap.add_argument("--computes", help="compute time per iteration, us (default %s)" % DEFAULT_COMPUTES)
    ap.add_argument("--repeat", type=int, help="runs per cell and variant (default 3, quick 1)")
    ap.add_argument("--budget", type=float, help="target seconds of timed iterations per run (default 1.0)")
    ap.add_argument("--min-iters", type=int, default=None)
    ap.add_argument("--rate", default="1gbit", help="tbf rate (default 1gbit)")
    ap.add_argument("--burst", default="64kb", help="tbf burst (default 64kb: ~0.5 ms at 1 Gbit/s)")
    ap.add_argument("--mtu", type=int, default=16384, help="loopback MTU, below the burst (default 16384)")
    ap.add_argument("--tbf-latency", default="100ms", help="tbf latency (queue bound, default 100ms)")
    ap.add_argument("--nb-progress-thread", action="store_true",
                    help="also run nonblocking with Open MPI's TCP progress thread (nonblocking-pt)")
    ap.add_argument("--max-running", type=int, default=None,
                    help="before each run, wait until at most N other tasks are runnable (other jobs on "
                    "shared cores); default: do not wait")
    ap.add_argument("--max-wait", type=int, default=120, help="seconds to wait for --max-running (default 120)")
    ap.add_argument("--nice", type=int, default=0,
                    help="run mpirun and the ranks at this nice value, and their session's scheduling "
                    "autogroup too (negative: ahead of other jobs on shared cores; root only); default 0")
    ap.add_argument("--report", metavar="DIR",
                    help="run nothing: rewrite DIR's results.md and plots from its results.json")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args()

    if args.report:
        return report_only(args.report, args.no_plot)
    if not args.out:
        args.out = os.path.join(REPO, "results", "scratch",
                                "overlap-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    args.out = os.path.abspath(args.out)
    for tool in ("mpirun", "unshare", "ip", "tc"):
        if not shutil.which(tool):
            log("overlap_bench: SKIP: %s not found (scripts/setup.sh bench installs openmpi-bin, iproute2, "
                "util-linux)" % tool)
            return SKIP
    args.bin = find_bin(args.bin)
    if not args.bin:
        log("overlap_bench: SKIP: bench_overlap_mpi not built (needs mpicc: libopenmpi-dev); pass --bin")
        return SKIP

    if os.environ.get(NETNS_ENV) != "1":
        # Re-execute inside a private network namespace.
        probe = subprocess.run(["unshare", "-n", "--", "true"], capture_output=True, text=True)
        if probe.returncode:
            log("overlap_bench: SKIP: cannot make a network namespace (unshare -n: %s); run as root"
                % probe.stderr.strip())
            return SKIP
        env = dict(os.environ)
        env[NETNS_ENV] = "1"
        env["LOCUS_OVERLAP_ARGV"] = json.dumps(sys.argv)
        argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--out", args.out]
        return subprocess.run(["unshare", "-n", "--"] + argv, env=env).returncode

    quick = args.quick
    sizes = [parse_size(s) for s in (args.sizes or (QUICK_SIZES if quick else DEFAULT_SIZES)).split(",")]
    computes = [int(float(c)) for c in (args.computes or (QUICK_COMPUTES if quick else DEFAULT_COMPUTES)).split(",")]
    if any(s < 16 or s % 8 for s in sizes):
        log("overlap_bench: sizes must be multiples of 8, at least 16")
        return 2
    repeat = args.repeat or (1 if quick else 3)
    budget = args.budget if args.budget is not None else (0.05 if quick else 1.0)
    min_iters = args.min_iters if args.min_iters is not None else (3 if quick else 8)
    warmup = 1 if quick else 2
    variants = ["blocking"]
    overlap_note = None
    if args.overlap_lib and os.path.isfile(args.overlap_lib):
        args.overlap_lib = os.path.abspath(args.overlap_lib)
        variants.append("overlap")
        overlap_note = "LD_PRELOAD=%s" % args.overlap_lib
    else:
        overlap_note = ("NOT RUN: %s" % ("%s not found" % args.overlap_lib if args.overlap_lib
                                          else "no --overlap-lib given")
                        + "; blocking vs nonblocking shows what overlap can gain at most on this link")
        log("overlap_bench: the overlap variant is not run (%s)" % overlap_note[9:].split(";")[0])
    variants.append("nonblocking")
    if args.nb_progress_thread:
        variants.append("nonblocking-pt")

    qdisc = setup_link(args)
    if qdisc is None:
        log("overlap_bench: SKIP: cannot shape the loopback in this namespace")
        return SKIP
    log("overlap_bench: link: %s, mtu %d" % (qdisc, args.mtu))
    os.makedirs(args.out, exist_ok=True)
    rate_bps = parse_rate(args.rate)

    with tempfile.TemporaryDirectory(prefix="locus-overlap.") as tmp:
        runner = Runner(args, tmp)
        wpu = calibrate(runner, args)
        if wpu is None:
            return 1
        log("overlap_bench: compute loop %.4f units/us" % wpu)

        # The plan: every repeat visits every cell, variants in rotated order.
        plan = []
        for r in range(repeat):
            for s in sizes:
                for c in computes:
                    t_est = 2 * s / rate_bps * 1e6 + c + 200  # us per iteration
                    iters = max(min_iters, min(2000, int(budget * 1e6 / t_est)))
                    k = r % len(variants)
                    for v in variants[k:] + variants[:k]:
                        plan.append((r, s, c, v, iters, t_est))
        runs = []
        failures = []
        overlap_msgs = []
        startup = [0.5]  # seconds of mpirun start-up and teardown, learnt as runs finish
        t_start = time.monotonic()

        def remaining(i):
            return sum((it + warmup) * te / 1e6 + statistics.median(startup) for (_, _, _, _, it, te) in plan[i:])

        log("overlap_bench: %d runs (%d sizes x %d compute times x %d variants x %d repeats), about %s"
            % (len(plan), len(sizes), len(computes), len(variants), repeat, fmt_eta(remaining(0))))
        interrupted = False
        try:
            for i, (r, s, c, v, iters, t_est) in enumerate(plan):
                pv, mca, preload = variant_spec(v, c, args)
                prog = ["--variant", pv, "--size", str(s), "--compute-us", str(c), "--iters", str(iters),
                        "--warmup", str(warmup), "--work-per-us", "%.6f" % wpu]
                cmd = runner.mpirun(mca, preload, prog, stats=(v == "overlap"))
                waited = wait_quiet(args.max_running, args.max_wait) if args.max_running is not None else 0.0
                busy = running_now()
                timeout = 120 + 20 * (iters + warmup) * t_est / 1e6
                rc, out, err, el = runner.run(cmd, timeout)
                res = parse_result(out)
                ok = rc == 0 and res is not None and res.get("check") == "ok"
                rec = {"repeat": r, "size": s, "compute_us": c, "variant": v, "iters": iters, "ok": ok,
                       "exit": rc, "wall_s": round(el, 3), "loadavg": loadavg(), "running_before": busy,
                       "waited_s": round(waited, 1), "cmd": cmd}
                if res:
                    rec["result"] = res
                if v == "overlap":
                    rec["overlap_stats"], rec["overlap_notes"] = parse_overlap_stderr(err)
                    for n in rec["overlap_notes"]:
                        if n not in overlap_msgs:
                            overlap_msgs.append(n)
                            log("overlap_bench: liblocus-overlap.so said: " + n)
                if ok:
                    rec["iter_us"] = float(res["value"])
                    if c:
                        rec["stretch"] = float(res["compute_us_measured"]) / c
                    startup.append(max(0.0, el - (iters + warmup) * rec["iter_us"] / 1e6))
                else:
                    rec["stderr"] = err[-3000:]
                    rec["stdout"] = out[-2000:]
                    failures.append(rec)
                    log("overlap_bench: FAIL %s size=%d C=%d: exit %s\n%s%s" % (v, s, c, rc, out[-1500:],
                                                                                err[-1500:]))
                runs.append(rec)
                log("[%d/%d] r%d %-8s C=%-6g %-14s %s  ETA %s" % (
                    i + 1, len(plan), r + 1, size_label(s), c / 1e3, v,
                    ("%.3f ms/iter" % (rec["iter_us"] / 1e3)) if ok else "FAILED", fmt_eta(remaining(i + 1))))
        except KeyboardInterrupt:
            interrupted = True
            log("overlap_bench: interrupted: writing the runs done so far")

    # Cross-variant check: every variant of a cell received the same stamps.
    for s in sizes:
        for c in computes:
            for r in range(repeat):
                sums = {x["variant"]: x["result"].get("checksum") for x in runs
                        if x["ok"] and x["size"] == s and x["compute_us"] == c and x["repeat"] == r}
                if len(set(sums.values())) > 1:
                    log("overlap_bench: FAIL checksums differ between variants at size=%d C=%d: %s" % (s, c, sums))
                    failures.append({"size": s, "compute_us": c, "repeat": r, "checksums": sums})

    loads = [x["loadavg"] for x in runs if x.get("loadavg") is not None]
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(json.loads(os.environ.get("LOCUS_OVERLAP_ARGV", "null")) or sys.argv),
            "host": host_info(), "qdisc": qdisc, "work_per_us": wpu, "variants": variants,
            "overlap_note": overlap_note, "overlap_messages": overlap_msgs, "interrupted": interrupted,
            "failures": len(failures), "waited_s": sum(x.get("waited_s", 0) for x in runs),
            "load_median": statistics.median(loads) if loads else None, "load_max": max(loads) if loads else None,
            "config": {"quick": quick, "sizes": sizes, "computes_us": computes, "repeat": repeat,
                       "budget_s": budget, "min_iters": min_iters, "warmup": warmup, "rate": args.rate,
                       "burst": args.burst, "mtu": args.mtu, "tbf_latency": args.tbf_latency,
                       "bin": args.bin, "overlap_lib": args.overlap_lib, "base_preload": args.base_preload,
                       "max_running": args.max_running, "max_wait": args.max_wait, "nice": args.nice}}
    write_outputs(args.out, meta, runs, failures, sizes, computes, variants, args.no_plot)
    log("overlap_bench: %d runs in %s, %d failure(s); %s" % (len(runs), fmt_eta(time.monotonic() - t_start),
                                                           len(failures), os.path.join(args.out, "results.md")))
    if failures:
        return 1
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
