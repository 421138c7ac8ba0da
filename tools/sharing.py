#!/usr/bin/env python3
"""Cache lines that pass between two threads' caches, by function: a
deterministic stand-in for hardware counters (perf c2c), which a virtual
machine without a PMU does not have.

    tools/sharing.py [--lib LIB] [--ops N] [--warm N] [--min B] [--max B] \\
                     [--bench-bin DIR] [--top K]

Runs bench_ab_lockstep (two threads taking turns, one ab_exchange operation
each) under valgrind's lackey tool (--trace-mem, --trace-sched), with LIB
preloaded (none, or "glibc": the system allocator), and replays the trace
through two private caches of unbounded size, one per thread:

  hitm   a load of a line that the other thread holds modified
         (it must come from the other core's cache)
  rfo    a store to a line that the other thread holds modified
  inval  a store to a line that the other thread also holds, clean
         (the other copy must be invalidated first)

Every event is charged to the function of the instruction that made it (the
workload's own code, or a symbol of the preloaded library) and reported per
operation; a library without a symbol table is named by its nearest
exported symbol. The hand-off between the threads is left out. Capacity misses and the order of a real two-core run are not
modelled: the counts say which lines an allocator makes travel between the
cores, not how long that takes. Needs valgrind and nm (binutils).
"""

import argparse
import bisect
import collections
import os
import re
import shutil
import subprocess
import sys

EVENTS = ("hitm", "rfo", "inval")


def symbols(path, base):
    """Sorted (address, name) of the code symbols of a loaded object."""
    names = {}
    for flags in (["-D"], []):
        out = subprocess.run(["nm", "--defined-only"] + flags + [path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 3 and f[1] in "tTwWiI":
                names.setdefault(int(f[0], 16) + base, f[2])
    table = sorted(names.items())
    return [a for a, _ in table], [n for _, n in table]


class Model:
    """Two private caches of unbounded size, MSI, one line = 64 bytes."""

    def __init__(self):
        self.lines = {}     # line -> (modified by thread or -1, bitmask of holders)
        self.counts = collections.Counter()   # (where, event) -> n

    def access(self, thread, kind, addr, where):
        line = addr >> 6
        other = 1 - thread
        mod, holders = self.lines.get(line, (-1, 0))
        if kind in ("S", "M"):
            if mod == other:
                self.counts[(where, "hitm" if kind == "M" else "rfo")] += 1
            elif holders & (1 << other):
                self.counts[(where, "inval")] += 1
            self.lines[line] = (thread, 1 << thread)
        else:
            if mod == other:
                self.counts[(where, "hitm")] += 1
                self.lines[line] = (-1, 3)
            else:
                self.lines[line] = (mod, holders | (1 << thread))


def replay(stream, lib):
    """Reads the trace; returns the model (events between the markers)."""
    segments = []           # (lo, hi, name, base)
    named = {}              # instruction address -> function
    tables = {}
    model = Model()
    thread = None
    active = False
    ip = 0
    workers = []            # valgrind thread ids of the two workers, in order of appearance
    sync = None             # the hand-off's line: the same for every allocator, left out

    def where(addr):
        for lo, hi, name, base in segments:
            if lo <= addr < hi:
                if lib and os.path.realpath(name) == os.path.realpath(lib):
                    if name not in tables:
                        tables[name] = symbols(name, base)
                    a, n = tables[name]
                    k = bisect.bisect_right(a, addr) - 1
                    return "allocator:" + (n[k] if k >= 0 else "?")
                return "workload" if name == "main" else os.path.basename(name)
        return "?"

    for line in stream:
        c = line[:2]
        if c == "I ":
            ip = int(line[3:].split(",", 1)[0], 16)
        elif c in (" L", " S", " M"):
            addr = int(line[3:].split(",", 1)[0], 16)
            if active and thread is not None and addr >> 6 != sync:
                fn = named.get(ip)
                if fn is None:
                    fn = named[ip] = where(ip)
                model.access(thread, c[1], addr, fn)
        elif "SCHED[" in line and "acquired lock" in line:
            tid = int(re.search(r"SCHED\[(\d+)\]", line).group(1))
            if tid != 1 and tid not in workers:
                workers.append(tid)
            thread = workers.index(tid) if tid in workers[:2] else None
        elif line.startswith("MOD "):
            f = line.split()
            segments.append((int(f[3], 16), int(f[4], 16), f[1], int(f[2], 16)))
        elif line.startswith("SYNC "):
            sync = int(line.split()[1], 16) >> 6
        elif line.startswith("=====MARK"):
            active = True
            model.lines.clear()
        elif line.startswith("=====END"):
            active = False
    if not segments:
        sys.exit("sharing: no MOD lines in the trace (is this bench_ab_lockstep?)")
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default="glibc", help="allocator to preload (default: glibc, none)")
    ap.add_argument("--ops", type=int, default=20000, help="operations per thread, traced (20000)")
    ap.add_argument("--warm", type=int, default=2000, help="operations per thread before the trace (2000)")
    ap.add_argument("--min", type=int, default=8)
    ap.add_argument("--max", type=int, default=1024)
    ap.add_argument("--bench-bin", default=os.environ.get("LOCUS_BENCH_BUILD_DIR", "build") + "/bench",
                    help="where bench_ab_lockstep is ($LOCUS_BENCH_BUILD_DIR/bench, else build/bench)")
    ap.add_argument("--top", type=int, default=12, help="functions listed (12)")
    ap.add_argument("--trace", help="read this saved trace instead of running valgrind")
    a = ap.parse_args()
    lib = None if a.lib in ("glibc", "") else os.path.abspath(a.lib)
    if a.trace:
        with open(a.trace) as f:
            model = replay(f, lib)
    else:
        prog = os.path.join(a.bench_bin, "bench_ab_lockstep")
        if not os.access(prog, os.X_OK):
            sys.exit("sharing: %s not found (build the benchmarks, or give --bench-bin)" % prog)
        if not shutil.which("valgrind"):
            sys.exit("sharing: valgrind is not installed (scripts/setup.sh installs it)")
        env = dict(os.environ)
        if lib:
            env["LD_PRELOAD"] = lib
        cmd = ["valgrind", "--tool=lackey", "--trace-mem=yes", "--trace-sched=yes", prog,
               "--ops", str(a.ops), "--warm", str(a.warm), "--min", str(a.min), "--max", str(a.max)]
        sys.stderr.write("sharing: tracing %d operations per thread under %s ...\n" % (a.ops, a.lib))
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        model = replay(p.stderr, lib)
        out = p.stdout.read()
        if p.wait() != 0 or "check=ok" not in out:
            sys.exit("sharing: the workload failed: %s" % out.strip())
    n = 2 * a.ops
    total = collections.Counter()
    byfn = collections.defaultdict(collections.Counter)
    for (fn, ev), v in model.counts.items():
        side = "allocator" if fn.startswith("allocator:") else "workload" if fn == "workload" else "other"
        total[(side, ev)] += v
        byfn[fn][ev] += v
    print("lines passed between the two threads' caches, per operation (%d operations, %s):" % (n, a.lib))
    print("  %-10s %8s %8s %8s" % ("code", *EVENTS))
    for side in ("workload", "allocator", "other"):
        print("  %-10s %8.3f %8.3f %8.3f" % (side, *(total[(side, e)] / n for e in EVENTS)))
    print("by function:")
    rows = sorted(byfn.items(), key=lambda kv: -sum(kv[1].values()))[:a.top]
    for fn, c in rows:
        print("  %-40s %8.3f %8.3f %8.3f" % (fn[:40], *(c[e] / n for e in EVENTS)))


if __name__ == "__main__":
    main()
