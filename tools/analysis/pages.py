"""locus pages: physical page colours of a running process's arrays.

The cache-conflict estimator of S. Valat's PhD thesis (2014, §3.1-3.2). A
physically indexed cache of size S with A ways has C = S / A / U page colours
(U the page size); a page of frame number F has colour F mod C. An array
whose N pages spread over the colours unevenly loses cache capacity: the
pages of a colour beyond the A ways evict each other even when the array would
fit. For each array this module reads the frames from /proc/PID/pagemap (root
only: the kernel hides frame numbers from others), counts pages per colour of
each cache level, and reports

  - imbalance: the largest count over the mean, and the chi-square statistic
    against the uniform distribution (0 for a perfectly even spread);
  - excess: pages beyond the A ways summed over the colours, split into the
    capacity part max(0, N - A*C) and the part due to the page placement
    (thesis eq. 3.6-3.8), next to the expectation of the same quantity when
    the kernel picks frames at random (binomial model, eq. 3.5-3.6);
  - for each pair of arrays: the pages that compete for the same colours
    (sum over colours of the smaller count) and the excess of the two together.

Arrays: --array ADDR:LEN, or the live large blocks of a locus trace file
(--trace FILE, written under LOCUS_TRACE_FILE), or by default every anonymous
mapping of at least --min-size bytes in /proc/PID/maps.
"""

import json
import math
import os
import struct
import sys

import cache
from cli_common import Fail, parse_size

HELP = """\
usage: locus pages PID [--array ADDR:LEN]... [--trace FILE] [options]

Map the pages of a running process's arrays to physical frames
(/proc/PID/pagemap: needs root) and report how they spread over the page
colours (cache sets) of the L2 and L3 caches: imbalance, pages beyond the
associativity against a random placement, and pairs of arrays competing for
the same colours. PID 'self' is this command's own process (for trying it).

arrays (default: every anonymous mapping of at least --min-size):
  --array ADDR:LEN  an array: start (hex 0x.. or decimal) and length in bytes
                    (k, M, G suffixes allowed); repeatable
  --trace FILE      the live large blocks of PID in a locus trace
                    (LOCUS_TRACE_FILE=FILE, as written for locus align)
  --min-size SIZE   smallest mapping taken by default (default 1M)
options:
  --colors N        use N colours instead of the caches' (a modulus for tests)
  --json FILE       write the report as JSON ('-' for stdout)
  --plot OUT.png    colour histograms of each array (matplotlib)
  --help, -h        this help
Exit status: 0 done, 2 bad usage, 1 process or pagemap unreadable (not root:
the kernel shows frame number 0 to others).
"""

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def parse_addr(text):
    t = text.strip().lower()
    return int(t, 16) if t.startswith("0x") else int(t)


# ---- reading the process --------------------------------------------------------
def anon_maps(pid, min_size):
    """Anonymous read-write mappings of at least min_size bytes: (start, length, name)."""
    out = []
    with open("/proc/%s/maps" % pid) as f:
        for line in f:
            w = line.split()
            lo, hi = (int(x, 16) for x in w[0].split("-"))
            name = w[5] if len(w) > 5 else ""
            if w[1].startswith("rw") and (not name or name == "[heap]") and hi - lo >= min_size:
                out.append((lo, hi - lo, name or "anonymous"))
    return out


def trace_arrays(path, pid):
    """Live large blocks of pid in a locus trace file: (start, length, 'seq N')."""
    live = {}
    with open(path, errors="replace") as f:
        for line in f:
            w = line.split()
            if len(w) < 3 or w[1] != str(pid):
                continue
            try:
                if w[0] == "A" and len(w) >= 5:
                    live[int(w[3], 16)] = (int(w[4]), "seq %s" % w[2])
                elif w[0] == "R" and len(w) >= 6:
                    live.pop(int(w[3], 16), None)
                    live[int(w[4], 16)] = (int(w[5]), "seq %s" % w[2])
                elif w[0] == "F":
                    live.pop(int(w[2], 16), None)
            except ValueError:
                continue
    return [(a, n, name) for a, (n, name) in sorted(live.items(), key=lambda t: int(t[1][1].split()[1]))]


def frames(pagemap, start, length):
    """Frame number of each page of [start, start+length) that is present
    (None for the others)."""
    first = start // PAGE
    last = (start + length + PAGE - 1) // PAGE
    pagemap.seek(first * 8)
    data = pagemap.read((last - first) * 8)
    out = []
    for i in range(len(data) // 8):
        e, = struct.unpack_from("<Q", data, 8 * i)
        out.append(e & ((1 << 55) - 1) if e >> 63 & 1 else None)
    return out


# ---- the model -----------------------------------------------------------------------
def excess(counts, ways):
    """Pages beyond the ways, summed over the colours (thesis eq. 3.6 with the counts observed)."""
    return sum(max(0, c - ways) for c in counts)


def expected_excess(n, colors, ways):
    """E[sum over colours of max(0, k - ways)] when each of n pages takes a colour
    at random (binomial, p = 1/colors): thesis eq. 3.5-3.6."""
    if n <= ways:
        return 0.0
    p = 1.0 / colors
    if colors == 1:
        return float(n - ways)
    mean = n * p
    sd = math.sqrt(n * p * (1 - p))
    hi = min(n, int(mean + 12 * sd + ways + 10))
    total = 0.0
    logp, logq = math.log(p), math.log1p(-p)
    for k in range(ways + 1, hi + 1):
        logpmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * logp + (n - k) * logq
        total += (k - ways) * math.exp(logpmf)
    return colors * total


def colour_stats(fr, colors, ways):
    present = [f for f in fr if f is not None]
    counts = [0] * colors
    for f in present:
        counts[f % colors] += 1
    n = len(present)
    mean = n / float(colors)
    chi2 = sum((c - mean) ** 2 / mean for c in counts) if n else 0.0
    ex = excess(counts, ways)
    capa = max(0, n - ways * colors)
    return {"pages": len(fr), "present": n, "counts": counts, "max": max(counts) if n else 0,
            "min": min(counts) if n else 0, "mean": mean,
            "imbalance": (max(counts) / mean) if n else None, "chi2": chi2, "dof": colors - 1,
            "excess": ex, "excess_capacity": capa, "excess_placement": ex - capa,
            "random_excess_placement": (expected_excess(n, colors, ways) - capa) if n else 0.0}


# ---- command -------------------------------------------------------------------------
def main(args, prog="locus"):
    pid = None
    arrays = []
    trace = None
    min_size = 1 << 20
    colors_opt = None
    json_out = plot_out = None
    i = 0

    def value(opt):
        nonlocal i
        if "=" in args[i] and args[i].startswith("--"):
            return args[i].split("=", 1)[1]
        if i + 1 >= len(args):
            raise Fail("pages: %s needs a value (see locus pages --help)" % opt, 2)
        i += 1
        return args[i]

    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a == "--array" or a.startswith("--array="):
            v = value("--array")
            try:
                addr, ln = v.split(":", 1)
                arrays.append((parse_addr(addr), parse_size(ln), v))
            except ValueError:
                raise Fail("pages: --array %s: expected ADDR:LEN, e.g. 0x7f0000001000:4M" % v, 2)
            if arrays[-1][1] <= 0:
                raise Fail("pages: --array %s: empty array" % v, 2)
        elif a == "--trace" or a.startswith("--trace="):
            trace = value("--trace")
        elif a == "--min-size" or a.startswith("--min-size="):
            v = value("--min-size")
            try:
                min_size = parse_size(v)
            except ValueError:
                raise Fail("pages: --min-size %s: not a size" % v, 2)
        elif a == "--colors" or a.startswith("--colors="):
            v = value("--colors")
            if not v.isdigit() or int(v) < 1:
                raise Fail("pages: --colors %s: a positive number" % v, 2)
            colors_opt = int(v)
        elif a == "--json" or a.startswith("--json="):
            json_out = value("--json")
        elif a == "--plot" or a.startswith("--plot="):
            plot_out = value("--plot")
        elif a.startswith("-") and a != "-":
            raise Fail("pages: unknown option %s (see locus pages --help)" % a, 2)
        elif pid is None:
            if a != "self" and not a.isdigit():
                raise Fail("pages: %s is not a process id" % a, 2)
            pid = a if a != "self" else str(os.getpid())
        else:
            raise Fail("pages: unexpected argument %s (one PID; arrays with --array)" % a, 2)
        i += 1
    if pid is None:
        raise Fail("pages: no process given (usage: locus pages PID [--array ADDR:LEN]...)", 2)
    if not os.path.isdir("/proc/%s" % pid):
        raise Fail("pages: no process %s" % pid)

    if trace:
        try:
            arrays += trace_arrays(trace, pid)
        except OSError as e:
            raise Fail("pages: --trace %s: %s" % (trace, e.strerror))
    if not arrays:
        try:
            arrays = anon_maps(pid, min_size)
        except OSError as e:
            raise Fail("pages: /proc/%s/maps: %s" % (pid, e.strerror))
    if not arrays:
        raise Fail("pages: process %s has no array to examine (none given, no anonymous mapping >= %s)" %
                   (pid, cache.human(min_size)))

    if colors_opt:
        levels = [{"name": "%d colours" % colors_opt, "colors": colors_opt, "ways": 1, "size": None}]
    else:
        caches = cache.levels() or cache.fallback()
        levels = [{"name": c["name"], "colors": c["way"] // PAGE, "ways": c["ways"], "size": c["size"]}
                  for c in caches if c["way"] > PAGE]
        if not levels:
            raise Fail("pages: no cache here has ways larger than a page: every page has the same colour "
                       "(use --colors N to choose a modulus)")

    try:
        pagemap = open("/proc/%s/pagemap" % pid, "rb")
    except OSError as e:
        raise Fail("pages: /proc/%s/pagemap: %s (needs root, or the process is gone)" % (pid, e.strerror))
    results = []
    with pagemap:
        for addr, ln, name in arrays:
            try:
                fr = frames(pagemap, addr, ln)
            except OSError as e:
                raise Fail("pages: cannot read the pagemap of %s at 0x%x: %s" % (pid, addr, e.strerror))
            results.append({"name": name, "addr": "0x%x" % addr, "length": ln, "frames": fr})
    present = [f for r in results for f in r["frames"] if f is not None]
    if present and not any(present):
        raise Fail("pages: /proc/%s/pagemap shows frame number 0 for every page: the kernel hides frames "
                   "from processes without CAP_SYS_ADMIN (run as root)" % pid)

    report = {"pid": int(pid), "page_size": PAGE, "levels": [], "arrays": []}
    for r in results:
        report["arrays"].append({"name": r["name"], "addr": r["addr"], "length": r["length"],
                                 "pages": len(r["frames"]),
                                 "present": sum(1 for f in r["frames"] if f is not None)})
    for lv in levels:
        per = [colour_stats(r["frames"], lv["colors"], lv["ways"]) for r in results]
        pairs = []
        for x in range(len(results)):
            for y in range(x + 1, len(results)):
                cx, cy = per[x]["counts"], per[y]["counts"]
                shared = sum(min(a, b) for a, b in zip(cx, cy))
                both = [a + b for a, b in zip(cx, cy)]
                n = per[x]["present"] + per[y]["present"]
                capa = max(0, n - lv["ways"] * lv["colors"])
                together = excess(both, lv["ways"])
                pairs.append({"a": x + 1, "b": y + 1, "competing_pages": shared,
                              "shared_colors": sum(1 for a, b in zip(cx, cy) if a and b),
                              "excess_together": together,
                              "excess_apart": per[x]["excess"] + per[y]["excess"],
                              "excess_placement_together": together - capa,
                              "random_excess_placement_together": expected_excess(n, lv["colors"], lv["ways"]) - capa})
        pairs.sort(key=lambda q: -q["competing_pages"])
        report["levels"].append({"name": lv["name"], "colors": lv["colors"], "ways": lv["ways"],
                                 "cache_size": lv["size"], "arrays": per, "pairs": pairs})

    print("locus pages: pid %s, %d array%s, page %s" % (pid, len(results), "" if len(results) == 1 else "s",
                                                        cache.human(PAGE)))
    for k, a in enumerate(report["arrays"], 1):
        print("  #%d %s %s (%s): %d pages, %d present" % (k, a["addr"], cache.human(a["length"]), a["name"],
                                                          a["pages"], a["present"]))
    for lv in report["levels"]:
        print("%s: %d colours, %d ways%s" % (lv["name"], lv["colors"], lv["ways"],
                                            ", %s" % cache.human(lv["cache_size"]) if lv["cache_size"] else ""))
        print("  %-4s %7s %9s %9s %10s %14s %14s" % ("id", "pages", "max/mean", "min..max", "chi2/dof",
                                                    "excess(place)", "random model"))
        for k, s in enumerate(lv["arrays"], 1):
            if not s["present"]:
                print("  #%-3d %7d  (no page present)" % (k, 0))
                continue
            print("  #%-3d %7d %9.2f %9s %10.2f %14d %14.1f" % (
                k, s["present"], s["imbalance"], "%d..%d" % (s["min"], s["max"]),
                s["chi2"] / s["dof"] if s["dof"] else 0.0, s["excess_placement"], s["random_excess_placement"]))
        shown = [q for q in lv["pairs"] if q["competing_pages"]][:8]
        if shown:
            print("  pairs competing for the same colours (pages on colours both use; pages beyond the ways "
                  "due to placement when used together, random model):")
            for q in shown:
                print("    #%d #%d: %d pages on %d shared colours; beyond the ways: %d (random %.1f)" % (
                    q["a"], q["b"], q["competing_pages"], q["shared_colors"], q["excess_placement_together"],
                    q["random_excess_placement_together"]))
    if json_out:
        text = json.dumps(report, indent=1)
        if json_out == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(json_out, "w") as f:
                f.write(text + "\n")
    if plot_out:
        plot(report, plot_out)
    return 0


def plot(report, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("locus: pages: matplotlib is not installed, no plot written\n")
        return False
    levels = report["levels"]
    n = len(report["arrays"])
    fig, axes = plt.subplots(n, len(levels), figsize=(6 * len(levels), 2.2 * n), squeeze=False)
    for j, lv in enumerate(levels):
        for k, s in enumerate(lv["arrays"]):
            ax = axes[k][j]
            ax.bar(range(lv["colors"]), s["counts"], width=1.0, color="tab:blue")
            if s["present"]:
                ax.axhline(s["mean"], color="tab:red", linewidth=0.8)
            ax.set_title("#%d %s: %s page colours (max/mean %s)" % (
                k + 1, report["arrays"][k]["name"], lv["name"],
                "%.2f" % s["imbalance"] if s["imbalance"] else "-"), fontsize=8)
            ax.set_xlabel("colour (frame mod %d)" % lv["colors"], fontsize=7)
            ax.set_ylabel("pages", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print("plot: %s" % out)
    return True
