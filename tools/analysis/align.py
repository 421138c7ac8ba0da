"""locus align: large arrays used together whose start addresses collide in the caches.

The alignment analyser of S. Valat's PhD thesis (2014, §3.6), on top of locus:
the program runs with liblocus.so and liblocus_sample.so preloaded;
 - locus writes every large allocation, resize and free with its call-site
   candidates to a trace file (LOCUS_TRACE_FILE, src/config/trace.c);
 - the sampling library protects the live arrays at every tick of a CPU-time
   timer and records which of them the program touches before the next tick
   (tools/analysis/sample.c);
then this module resolves the call sites (addr2line, or the symbol table),
groups the arrays touched in the same windows, and reports the pairs of such
arrays whose starts fall in the same cache set modulo 4 KiB and modulo the
way size of each cache level (cache.py). The program runs twice: with locus's
random start offsets (LOCUS_COLOR=1) and without (LOCUS_COLOR=0, every large
block then starts 64 bytes into a page, as glibc's mmap'ed blocks start 16
bytes into one), and the report says what the offsets changed.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import cache
from cli_common import Fail, parse_size
import callsite

HELP = """\
usage: locus align [options] [--] CMD [ARG...]

Find the large arrays CMD uses together whose start addresses collide in the
caches (same set modulo 4 KiB and modulo the way size of L1, L2, ...), with the
source line of each allocation, and what locus's random start offsets change:
CMD runs twice, with the offsets (LOCUS_COLOR=1) and without (LOCUS_COLOR=0).
Access is sampled by page protection every PERIOD of CPU time: the arrays
touched in the same window are used together. CMD should be built with -g for
file:line (else function names from the symbol table).

options:
  --threshold SIZE  smallest array traced (default: locus's large threshold,
                    1M; a smaller one lowers LOCUS_LARGE_THRESHOLD for the runs)
  --period US       sampling window in microseconds of CPU time (default 2000)
  --no-compare      one run only, with the offsets
  --baseline-only   one run only, without the offsets (LOCUS_COLOR=0)
  --json FILE       write the full report as JSON ('-' for stdout)
  --plot OUT.png    cache-set histograms of the arrays used together (matplotlib)
  --keep DIR        keep the raw trace and sample files in DIR
  --help, -h        this help
Exit status: 0 when the analysis ran, 2 bad usage, 127 CMD not found, 1 when
nothing could be traced (CMD not dynamically linked, or no large array).
"""

PAGE = 4096
MAX_ROWS = 24                          # arrays listed in the text report beyond those used together


# ---- the runs ---------------------------------------------------------------------
def run_once(cmd, lib, sampler, env_extra, workdir, tag):
    trace = os.path.join(workdir, "trace-%s.txt" % tag)
    sample = os.path.join(workdir, "sample-%s.txt" % tag)
    for f in (trace, sample):
        if os.path.exists(f):
            os.unlink(f)
    env = dict(os.environ)
    env.update(env_extra)
    env["LOCUS_TRACE_FILE"] = trace
    env["LOCUS_SAMPLE_FILE"] = sample
    env["LD_PRELOAD"] = ":".join([lib, sampler] + [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
                                                   if p])
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(cmd, env=env)
    except FileNotFoundError:
        raise Fail("align: %s: command not found" % cmd[0], 127)
    except PermissionError:
        raise Fail("align: %s: permission denied" % cmd[0], 126)
    status = proc.wait()
    return proc.pid, status, trace, sample


def parse_trace(path):
    """pid -> {'maps': [(lo, hi, off, path)], 'arrays': {seq: {...}}, 'order': [seq]}"""
    procs = {}
    if not os.path.exists(path):
        return procs
    with open(path, errors="replace") as f:
        for line in f:
            w = line.split()
            if len(w) < 3:
                continue
            try:
                pid = int(w[1])
            except ValueError:
                continue
            kind = w[0]
            if kind == "H" or pid not in procs:
                # H starts a process image: after an execve (same pid) the old
                # image's records are void (its sampling data died with it)
                procs[pid] = {"maps": [], "arrays": {}, "live": {}, "order": []}
            p = procs[pid]
            try:
                if kind == "M" and len(w) >= 6:
                    p["maps"].append((int(w[2], 16), int(w[3], 16), int(w[4], 16), " ".join(w[5:])))
                elif kind == "A" and len(w) >= 5:
                    seq, addr, size = int(w[2]), int(w[3], 16), int(w[4])
                    p["arrays"][seq] = {"seq": seq, "addr": addr, "size": size,
                                        "cands": [int(x, 16) for x in w[5:]], "freed": False, "via": "malloc"}
                    p["live"][addr] = seq
                    p["order"].append(seq)
                elif kind == "R" and len(w) >= 6:
                    seq, old, addr, size = int(w[2]), int(w[3], 16), int(w[4], 16), int(w[5])
                    prev = p["live"].pop(old, None)
                    if prev is not None:
                        p["arrays"][prev]["freed"] = True
                    p["arrays"][seq] = {"seq": seq, "addr": addr, "size": size,
                                        "cands": [int(x, 16) for x in w[6:]], "freed": False, "via": "realloc"}
                    p["live"][addr] = seq
                    p["order"].append(seq)
                elif kind == "F":
                    seq = p["live"].pop(int(w[2], 16), None)
                    if seq is not None:
                        p["arrays"][seq]["freed"] = True
            except ValueError:
                continue
    return procs


def parse_sample(path):
    """pid -> {'period': us, 'windows': n, 'sets': [(count, (seq, ...))]}"""
    out = {}
    if not os.path.exists(path):
        return out
    cur = None
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "S" and len(w) >= 4:
                cur = out.setdefault(int(w[1]), {"period": int(w[2]), "windows": int(w[3]), "sets": [],
                                                 "truncated": "truncated" in w})
            elif w[0] == "W" and cur is not None:
                cur["sets"].append((int(w[1]), tuple(int(x) for x in w[2:])))
    return out


# ---- call sites -------------------------------------------------------------------
def elf_loads(path):
    """PT_LOAD segments (offset, vaddr, filesz) of a 64-bit little-endian ELF file."""
    try:
        with open(path, "rb") as f:
            hdr = f.read(64)
            if hdr[:4] != b"\x7fELF" or hdr[4] != 2 or hdr[5] != 1:
                return []
            phoff, = struct.unpack_from("<Q", hdr, 32)
            phentsize, phnum = struct.unpack_from("<HH", hdr, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return []
    out = []
    for i in range(phnum):
        ptype, _flags, off, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if ptype == 1:
            out.append((off, vaddr, filesz))
    return out


class Resolver:
    """Run-time address -> (object, function, file:line), through the M lines."""

    def __init__(self, maps):
        self.maps = maps
        self.loads = {}
        self.cache = {}
        self.verifier = callsite.Verifier()
        self.chains = {}

    def locate(self, addr):
        for lo, hi, off, path in self.maps:
            if lo <= addr < hi:
                fileoff = addr - lo + off
                if path not in self.loads:
                    self.loads[path] = elf_loads(path)
                for poff, pvaddr, filesz in self.loads[path]:
                    if poff <= fileoff < poff + filesz:
                        return path, pvaddr + fileoff - poff
                return path, fileoff
        return None, None

    def resolve_all(self, addrs):
        by_obj = {}
        for a in addrs:
            if a in self.cache:
                continue
            path, vaddr = self.locate(a)
            if path is None:
                self.cache[a] = {"object": None, "function": "??", "line": "??:0"}
                continue
            by_obj.setdefault(path, []).append((a, vaddr))
        tool = shutil.which("addr2line")
        for path, items in by_obj.items():
            res = None
            if tool:
                try:
                    # vaddr - 1: a return address follows the call; its line is the caller's
                    r = subprocess.run([tool, "-f", "-C", "-e", path] + ["%x" % (v - 1) for _, v in items],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       universal_newlines=True, timeout=60)
                    lines = r.stdout.splitlines()
                    if len(lines) == 2 * len(items):
                        res = [(lines[2 * i], lines[2 * i + 1].split(" (discriminator")[0])
                               for i in range(len(items))]
                except (OSError, subprocess.SubprocessError):
                    res = None
            for i, (a, v) in enumerate(items):
                fn, fl = res[i] if res else ("??", "??:0")
                self.cache[a] = {"object": path, "function": fn, "line": fl, "offset": v}
        return [self.cache[a] for a in addrs]

    def inlined(self, info):
        """The chain of inlined calls at a resolved address, innermost first
        (addr2line -i): [(function, file:line)]; empty without addr2line."""
        key = (info.get("object"), info.get("offset"))
        if key in self.chains:
            return self.chains[key]
        chain = []
        tool = shutil.which("addr2line")
        if tool and key[0] and key[1] is not None:
            try:
                r = subprocess.run([tool, "-i", "-f", "-C", "-e", key[0], "%x" % (key[1] - 1)],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                                   timeout=60)
                lines = r.stdout.splitlines()
                chain = [(lines[k], lines[k + 1].split(" (discriminator")[0]) for k in range(0, len(lines) - 1, 2)]
            except (OSError, subprocess.SubprocessError):
                chain = []
        self.chains[key] = chain
        return chain

    def site(self, cands, skip_objects):
        c, i = self.site_raw(cands, skip_objects)
        chain = self.inlined(i) if i.get("object") else []
        if len(chain) > 1 and not chain[-1][1].startswith("??"):
            # inlined (a template, an inline wrapper): the outermost frame is the caller's code
            i = dict(i, function=chain[-1][0], line=chain[-1][1], inlined=["%s %s" % f for f in chain[:-1]])
        return c, i

    def site_raw(self, cands, skip_objects):
        """The call site: among the candidates outside the skipped objects, the
        first verified call to an allocation function (callsite.py) outside the
        system libraries, else the first verified one; without any, the first
        candidate with a source line, else the first (marked unverified)."""
        infos = self.resolve_all(cands)
        usable = [(c, i) for c, i in zip(cands, infos) if i["object"] not in skip_objects]
        verified = []
        for c, i in usable:
            name = self.verifier.callee(i["object"], i.get("offset"))
            if name and callsite.is_alloc(name):
                i = dict(i, calls=name.split("@")[0], verified=True)
                verified.append((c, i))
        for c, i in verified:
            if not callsite.is_system(i["object"]):
                return c, i
        if verified:
            return verified[0]
        for c, i in usable:
            if not i["line"].startswith("??"):
                return c, dict(i, verified=False)
        if usable:
            return usable[0][0], dict(usable[0][1], verified=False)
        return None, {"object": None, "function": "??", "line": "??:0", "verified": False}


def short_line(info):
    line = info.get("line") or "??:0"
    if ":" in line and not line.startswith("??"):
        f, n = line.rsplit(":", 1)
        line = "%s:%s" % (os.path.basename(f), n)
    fn = info.get("function") or "??"
    obj = info.get("object")
    if line.startswith("??"):
        return "%s (%s)" % (fn, os.path.basename(obj) if obj else "unknown object")
    return "%s (%s)" % (line, fn)


# ---- analysis ---------------------------------------------------------------------
def levels_for(caches):
    """The moduli checked: 4 KiB pages, then each cache's way (deduplicated)."""
    line = caches[0]["line"] if caches else 64
    out = [{"name": "4K", "modulus": PAGE, "ways": None, "line": line}]
    for c in caches:
        out.append({"name": c["name"], "modulus": c["way"], "ways": c["ways"], "line": c["line"]})
    return out


def analyse(trace, sample, pid, threshold, levels, skip_objects):
    """The report of one run (one process)."""
    p = trace.get(pid)
    s = sample.get(pid)
    if p is None:
        return None
    res = Resolver(p["maps"])
    arrays = []
    index = {}
    for seq in p["order"]:
        a = p["arrays"][seq]
        if a["size"] < threshold:
            continue
        _, info = res.site(a["cands"], skip_objects)
        entry = {"id": len(arrays) + 1, "seq": seq, "addr": "0x%x" % a["addr"], "size": a["size"],
                 "via": a["via"], "site": short_line(info), "function": info.get("function"),
                 "source": info.get("line"), "object": info.get("object"), "calls": info.get("calls"),
                 "verified": bool(info.get("verified")), "inlined": info.get("inlined", []),
                 "offsets": {}, "sets": {}, "windows": 0}
        for lv in levels:
            m = a["addr"] % lv["modulus"]
            entry["offsets"][lv["name"]] = m
            entry["sets"][lv["name"]] = m // lv["line"]
        arrays.append(entry)
        index[seq] = entry
    # access windows
    busy = 0
    together = {}
    groups = {}
    if s:
        for count, seqs in s["sets"]:
            ids = tuple(sorted(index[q]["id"] for q in seqs if q in index))
            if not ids:
                continue
            busy += count
            groups[ids] = groups.get(ids, 0) + count
            for i in ids:
                arrays[i - 1]["windows"] += count
            for x in range(len(ids)):
                for y in range(x + 1, len(ids)):
                    together[(ids[x], ids[y])] = together.get((ids[x], ids[y]), 0) + count
    hot_groups = sorted(((n, ids) for ids, n in groups.items()), key=lambda t: (-t[0], t[1]))
    hot_groups = [{"arrays": list(ids), "windows": n, "share": n / float(busy)} for n, ids in hot_groups
                  if n >= 2 and n >= 0.01 * busy][:12]
    pairs = []
    for (i, j), n in sorted(together.items()):
        ti, tj = arrays[i - 1]["windows"], arrays[j - 1]["windows"]
        if n < 2 or n < 0.5 * min(ti, tj):
            continue
        same = {lv["name"]: arrays[i - 1]["sets"][lv["name"]] == arrays[j - 1]["sets"][lv["name"]] for lv in levels}
        pairs.append({"a": i, "b": j, "windows": n, "same_set": same})
    # per level: the arrays of the colliding pairs, by set, against the ways
    clusters = []
    for lv in levels:
        by_set = {}
        for q in pairs:
            if q["same_set"][lv["name"]]:
                st = arrays[q["a"] - 1]["sets"][lv["name"]]
                by_set.setdefault(st, set()).update((q["a"], q["b"]))
        for st, ids in sorted(by_set.items()):
            ids = sorted(ids)
            clusters.append({"level": lv["name"], "modulus": lv["modulus"], "set": st, "arrays": ids,
                             "ways": lv["ways"], "exceeds_ways": bool(lv["ways"] and len(ids) > lv["ways"])})
    return {"pid": pid, "arrays": arrays, "sampled_windows": s["windows"] if s else 0,
            "busy_windows": busy, "period_us": s["period"] if s else None, "groups": hot_groups,
            "pairs": pairs, "collisions": [q for q in pairs if q["same_set"]["4K"]], "clusters": clusters}


def main_pid(trace, sample, pid):
    """The process to analyse: the one started, or else the one with most arrays."""
    if pid in trace:
        return pid
    cands = sorted(trace, key=lambda q: (-len(trace[q]["order"]), q))
    return cands[0] if cands else None


# ---- reports ------------------------------------------------------------------------
def hexoff(n):
    return "0x%03x" % n if n < 0x1000 else "0x%x" % n


def print_run(title, r, levels):
    print("%s: pid %d, %d large array%s, %d sampling windows of %s us CPU (%d with a large array touched)" %
          (title, r["pid"], len(r["arrays"]), "" if len(r["arrays"]) == 1 else "s", r["sampled_windows"],
           r["period_us"], r["busy_windows"]))
    names = [lv["name"] for lv in levels]
    print("  %-4s %-10s %-8s %s  %s" % ("id", "size", "windows", "  ".join("%-8s" % ("mod " + n) for n in names),
                                         "allocated at"))
    hot = {i for g in r["groups"] for i in g["arrays"]} | {i for q in r["pairs"] for i in (q["a"], q["b"])}
    shown = [a for a in r["arrays"] if a["id"] in hot]
    if len(shown) < MAX_ROWS:
        shown += [a for a in r["arrays"] if a["id"] not in hot][:MAX_ROWS - len(shown)]
    shown.sort(key=lambda a: a["id"])
    for a in shown:
        print("  #%-3d %-10s %-8d %s  %s%s" % (a["id"], cache.human(a["size"]), a["windows"],
                                            "  ".join("%-8s" % hexoff(a["offsets"][n]) for n in names),
                                            a["site"] + ("" if a["verified"] else " ?"),
                                            " (realloc)" if a["via"] == "realloc" else ""))
    if len(shown) < len(r["arrays"]):
        print("  ... and %d more arrays, not used with others (all in --json)" %
              (len(r["arrays"]) - len(shown)))
    if any(not a["verified"] for a in shown):
        print("  ? call site not verified (no call to an allocation function found before the return address)")
    if r["groups"]:
        print("  used together (share of the windows that touched a large array):")
        for g in r["groups"]:
            print("    {%s}  %.0f %% (%d windows)" % (" ".join("#%d" % i for i in g["arrays"]), 100 * g["share"],
                                                     g["windows"]))
    if not r["clusters"]:
        print("  collisions: none (no two arrays used together start in the same cache set)")
        return
    print("  collisions (arrays used together starting in the same set):")
    seen = set()
    for c in r["clusters"]:
        key = (c["level"], tuple(c["arrays"]))
        if key in seen:
            continue
        seen.add(key)
        ways = " > %d ways: thrashing" % c["ways"] if c["exceeds_ways"] else \
            (" (%d of %d ways)" % (len(c["arrays"]), c["ways"]) if c["ways"] else "")
        print("    mod %-7s %s start at set %d (offset %s)%s" % (
            cache.human(c["modulus"]) if c["level"] == "4K" else "%s way" % c["level"],
            " ".join("#%d" % i for i in c["arrays"]), c["set"], hexoff(c["set"] * levels[0]["line"]), ways))


def compare(with_off, without, levels):
    """Pairs colliding in one run and not in the other, matched by allocation order."""
    if not with_off or not without:
        return None
    n = min(len(with_off["arrays"]), len(without["arrays"]))

    def coll(r):
        out = {}
        for q in r["pairs"]:
            if q["a"] <= n and q["b"] <= n:
                for name, same in q["same_set"].items():
                    if same:
                        out.setdefault(name, set()).add((q["a"], q["b"]))
        return out

    a, b = coll(with_off), coll(without)
    out = []
    for lv in levels:
        x, y = a.get(lv["name"], set()), b.get(lv["name"], set())
        out.append({"level": lv["name"], "modulus": lv["modulus"], "pairs_without_offsets": len(y),
                    "pairs_with_offsets": len(x), "removed": sorted(y - x), "added": sorted(x - y)})
    return out


def plot(runs, levels, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("locus: align: matplotlib is not installed, no plot written\n")
        return False
    shown = [lv for lv in levels if lv["name"] != "4K"][:2] or levels[:1]
    fig, axes = plt.subplots(len(runs), len(shown), figsize=(6 * len(shown), 2.8 * len(runs)), squeeze=False)
    for r_i, (title, r) in enumerate(runs):
        hot = sorted({i for g in r["groups"] for i in g["arrays"]})
        for l_i, lv in enumerate(shown):
            ax = axes[r_i][l_i]
            nsets = lv["modulus"] // lv["line"]
            counts = {}
            for i in hot:
                st = r["arrays"][i - 1]["sets"][lv["name"]]
                counts[st] = counts.get(st, 0) + 1
            xs = sorted(counts)
            ax.bar(xs, [counts[x] for x in xs], width=max(1, nsets // 64),
                   color=["tab:red" if counts[x] > 1 else "tab:blue" for x in xs])
            ax.set_xlim(-1, nsets)
            ax.set_ylim(0, max([2] + list(counts.values())) + 0.5)
            ax.set_title("%s: %s set of each array start (%d sets)" % (title, lv["name"], nsets), fontsize=9)
            ax.set_xlabel("cache set (start mod %s / %d B)" % (cache.human(lv["modulus"]), lv["line"]), fontsize=8)
            ax.set_ylabel("arrays used together", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return True


# ---- command ------------------------------------------------------------------------
def main(args, libs, prog="locus"):
    threshold = None
    period = None
    modes = ["offsets", "none"]
    json_out = plot_out = keep = None
    i = 0

    def value(opt):
        nonlocal i
        if "=" in args[i]:
            return args[i].split("=", 1)[1]
        if i + 1 >= len(args):
            raise Fail("align: %s needs a value (see locus align --help)" % opt, 2)
        i += 1
        return args[i]

    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a == "--threshold" or a.startswith("--threshold="):
            v = value("--threshold")
            try:
                threshold = parse_size(v)
            except ValueError:
                raise Fail("align: --threshold %s: not a size (e.g. 64k, 1M)" % v, 2)
            if not 16 << 10 <= threshold <= 32 << 20:
                raise Fail("align: --threshold %s: must lie in 16k..32M (locus's large-block range)" % v, 2)
        elif a == "--period" or a.startswith("--period="):
            v = value("--period")
            if not v.isdigit() or int(v) < 100:
                raise Fail("align: --period %s: a number of microseconds >= 100" % v, 2)
            period = int(v)
        elif a == "--no-compare":
            modes = ["offsets"]
        elif a == "--baseline-only":
            modes = ["none"]
        elif a == "--json" or a.startswith("--json="):
            json_out = value("--json")
        elif a == "--plot" or a.startswith("--plot="):
            plot_out = value("--plot")
        elif a == "--keep" or a.startswith("--keep="):
            keep = value("--keep")
        elif a.startswith("-") and a != "-":
            raise Fail("align: unknown option %s (see locus align --help; put '--' before the command)" % a, 2)
        else:
            break
        i += 1
    cmd = args[i:]
    if not cmd:
        raise Fail("align: no command given (usage: locus align [options] [--] CMD [ARG...])", 2)
    if not shutil.which(cmd[0]):
        raise Fail("align: %s: command not found" % cmd[0], 127)
    lib, sampler = libs()
    if not os.path.isfile(sampler):
        raise Fail("align: the sampling library is missing: %s (build the project: it is built with liblocus.so)"
                   % sampler)

    caches = cache.levels()
    geometry_note = ""
    if not caches:
        caches = cache.fallback()
        geometry_note = " (sysfs has no cache information: assumed)"
    levels = levels_for(caches)
    extra = {}
    if threshold is not None and threshold < (1 << 20):
        extra["LOCUS_LARGE_THRESHOLD"] = str(threshold)
    if threshold is None:
        threshold = 1 << 20
    if period:
        extra["LOCUS_SAMPLE_PERIOD_US"] = str(period)
    workdir = keep or tempfile.mkdtemp(prefix="locus-align.")
    os.makedirs(workdir, exist_ok=True)
    skip = {os.path.realpath(lib), os.path.realpath(sampler)}
    titles = {"offsets": "with locus's random offsets (LOCUS_COLOR=1)",
              "none": "without offsets (LOCUS_COLOR=0)"}
    runs = []
    try:
        for mode in modes:
            env = dict(extra)
            env["LOCUS_COLOR"] = "1" if mode == "offsets" else "0"
            pid, st, tpath, spath = run_once(cmd, lib, sampler, env, workdir, mode)
            if st != 0:
                sys.stderr.write("%s: align: %s exited with status %d (%s run); analysing what was traced\n" %
                                 (prog, cmd[0], st, mode))
            trace, sample = parse_trace(tpath), parse_sample(spath)
            main = main_pid(trace, sample, pid)
            if main is None:
                raise Fail("align: nothing traced: %s allocated no block above %s under locus, or does not "
                           "load liblocus.so (statically linked, or setuid)" % (cmd[0], cache.human(threshold)))
            skip_objs = {m[3] for m in trace[main]["maps"] if os.path.realpath(m[3]) in skip or
                         os.path.basename(m[3]).startswith("ld-linux")}
            r = analyse(trace, sample, main, threshold, levels, skip_objs)
            r["mode"] = mode
            r["exit_status"] = st
            r["settings"] = env
            runs.append((titles[mode], r))
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)

    by_mode = {r["mode"]: r for _, r in runs}
    changed = compare(by_mode.get("offsets"), by_mode.get("none"), levels)
    print("locus align: %s" % " ".join(cmd))
    print("caches: %s; line %d B%s" % (cache.describe(caches), levels[0]["line"], geometry_note))
    for title, r in runs:
        print_run(title, r, levels)
    if changed:
        print("what the random offsets changed (pairs used together starting in the same set):")
        for c in changed:
            if c["pairs_without_offsets"] or c["pairs_with_offsets"]:
                print("  mod %-8s %d pair%s without offsets -> %d with" % (
                    cache.human(c["modulus"]) if c["level"] == "4K" else c["level"] + " way",
                    c["pairs_without_offsets"], "" if c["pairs_without_offsets"] == 1 else "s",
                    c["pairs_with_offsets"]))
        if not any(c["pairs_without_offsets"] or c["pairs_with_offsets"] for c in changed):
            print("  nothing: no pair collides in either run")
    report = {"command": cmd, "threshold": threshold, "caches": caches, "levels": levels,
              "runs": [r for _, r in runs], "changed": changed}
    if json_out:
        text = json.dumps(report, indent=1, default=list)
        if json_out == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(json_out, "w") as f:
                f.write(text + "\n")
    if plot_out and plot(runs, levels, plot_out):
        print("plot: %s" % plot_out)
    return 0
