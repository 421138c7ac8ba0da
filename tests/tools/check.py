#!/usr/bin/env python3
"""ctest tools_*: the analysers of the locus command on constructed cases.

usage: check.py align|pages|bad_input|trace|rss|dedup LOCUS ALIGN_SWEEP PAGES_CASE TRACE_CASE DEDUP_CASE
Exit 0 pass, 1 fail, 77 skip.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

mode, locus, sweep, pages_case, trace_case, dedup_case = sys.argv[1:7]
tmp = tempfile.mkdtemp(prefix="locus-tools.")


def say(msg):
    print("[tools_%s] %s" % (mode, msg), flush=True)


def fail(msg):
    say("FAIL: " + msg)
    sys.exit(1)


def run(args, want=None, **kw):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw)
    if want is not None and r.returncode != want:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        fail("'%s' exited %d, expected %d" % (" ".join(args), r.returncode, want))
    return r


def check_align():
    out = os.path.join(tmp, "align.json")
    r = run([locus, "align", "--json", out, "--", sweep, "0.4"], want=0)
    sys.stdout.write(r.stdout)
    rep = json.load(open(out))
    runs = {x["mode"]: x for x in rep["runs"]}
    if set(runs) != {"offsets", "none"}:
        fail("expected two runs, got %s" % sorted(runs))
    for name, x in sorted(runs.items()):
        arrays = x["arrays"]
        if len(arrays) != 5 or any(a["size"] != 4 << 20 for a in arrays):
            fail("%s run: expected five arrays of 4 MiB, got %s" % (name, [(a["id"], a["size"]) for a in arrays]))
        # the allocation sites: five distinct lines of align_sweep.c
        sites = [a["source"] or "" for a in arrays]
        if not all(os.path.basename(s).startswith("align_sweep.c:") for s in sites) or len(set(sites)) != 5:
            fail("%s run: allocation sites not resolved to five lines of align_sweep.c: %s" % (name, sites))
        if not all(a["verified"] for a in arrays):
            fail("%s run: call sites not verified: %s" % (name, [a["id"] for a in arrays if not a["verified"]]))
        # access pattern: #1-#4 together, #5 alone
        groups = [tuple(g["arrays"]) for g in x["groups"]]
        if (1, 2, 3, 4) not in groups or (5,) not in groups:
            fail("%s run: groups %s, expected (1, 2, 3, 4) and (5,)" % (name, groups))
        for q in x["pairs"]:
            if 5 in (q["a"], q["b"]):
                fail("%s run: #5 reported as used with #%d" % (name, q["a"] if q["b"] == 5 else q["b"]))
        together = {(q["a"], q["b"]) for q in x["pairs"]}
        want = {(i, j) for i in range(1, 5) for j in range(i + 1, 5)}
        if not want <= together:
            fail("%s run: pairs used together %s, expected %s" % (name, sorted(together), sorted(want)))
    none = {(q["a"], q["b"]) for q in runs["none"]["collisions"]}
    if none != want:
        fail("without offsets: collisions modulo 4 KiB %s, expected every pair of #1-#4" % sorted(none))
    if any(q["same_set"]["4K"] for q in runs["offsets"]["pairs"]):
        fail("with offsets: collisions modulo 4 KiB %s, expected none" % runs["offsets"]["collisions"])
    l1 = [lv["name"] for lv in rep["levels"] if lv["name"].startswith("L1")]
    if l1 and any(q["same_set"][l1[0]] for q in runs["offsets"]["pairs"]):
        fail("with offsets: arrays used together share an %s set" % l1[0])
    if "6 pairs without offsets -> 0 with" not in r.stdout:
        fail("the text summary does not say what the offsets changed")
    say("collision of #1-#4 found without offsets (6 pairs mod 4 KiB), none with locus's offsets: ok")


def check_pages():
    colors, same, per = 16, 32, 4
    p = subprocess.Popen([pages_case, str(colors), str(same), str(per)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True)
    line = p.stdout.readline().split()
    if not line:
        st = p.wait()
        if st == 77:
            say("SKIP: /proc/self/pagemap shows no frame numbers (not root)")
            sys.exit(77)
        fail("pages_case exited %d" % st)
    try:
        pid = line[1]
        a_same = line[2].split("=", 1)[1]
        a_uni = line[3].split("=", 1)[1]
        out = os.path.join(tmp, "pages.json")
        r = run([locus, "pages", pid, "--colors", str(colors), "--array", a_same, "--array", a_uni,
                 "--json", out], want=0)
        sys.stdout.write(r.stdout)
        rep = json.load(open(out))
        lv = rep["levels"][0]
        s, u = lv["arrays"]
        if s["counts"] != [same] + [0] * (colors - 1):
            fail("'same' array: colour counts %s, expected all %d pages on colour 0" % (s["counts"], same))
        if u["counts"] != [per] * colors:
            fail("'uniform' array: colour counts %s, expected %d on each colour" % (u["counts"], per))
        if abs(s["imbalance"] - colors) > 1e-9 or abs(u["imbalance"] - 1.0) > 1e-9 or u["chi2"] != 0:
            fail("imbalance %s / %s (expected %d / 1.0), chi2 of uniform %s (expected 0)" %
                 (s["imbalance"], u["imbalance"], colors, u["chi2"]))
        pair = lv["pairs"][0]
        if pair["competing_pages"] != per or pair["shared_colors"] != 1:
            fail("pair: %d competing pages on %d colours, expected %d on 1" %
                 (pair["competing_pages"], pair["shared_colors"], per))
        # the machine's own cache levels: every present page counted once per level
        out2 = os.path.join(tmp, "pages2.json")
        run([locus, "pages", pid, "--array", a_same, "--array", a_uni, "--json", out2], want=0)
        for lv in json.load(open(out2))["levels"]:
            for k, n in ((0, same), (1, colors * per)):
                if sum(lv["arrays"][k]["counts"]) != n:
                    fail("%s: array %d counted %d pages, expected %d" % (lv["name"], k + 1,
                                                                        sum(lv["arrays"][k]["counts"]), n))
    finally:
        p.stdin.close()
        p.wait()
    say("colour counts exactly as constructed (%d on one colour; %d on each of %d): ok" % (same, per, colors))


def check_bad_input():
    cases = [
        (["align"], 2, "no command given"),
        (["align", "--frobnicate", "--", "/bin/true"], 2, "unknown option --frobnicate"),
        (["align", "--threshold", "12q", "/bin/true"], 2, "not a size"),
        (["align", "--period", "5", "/bin/true"], 2, "microseconds"),
        (["align", "--", os.path.join(tmp, "no-such-program")], 127, "command not found"),
        (["align", "--", "/bin/true"], 1, "nothing traced"),
        (["pages"], 2, "no process given"),
        (["pages", "abc"], 2, "not a process id"),
        (["pages", "999999999"], 1, "no process 999999999"),
        (["pages", "self", "--frobnicate"], 2, "unknown option --frobnicate"),
        (["pages", "self", "--array", "0x1000"], 2, "expected ADDR:LEN"),
        (["pages", "self", "--trace", os.path.join(tmp, "missing.trace")], 1, "No such file"),
    ]
    for args, want, text in cases:
        r = run([locus] + args, want=want)
        if text not in r.stderr:
            fail("'locus %s': message lacks '%s': %s" % (" ".join(args), text, r.stderr.strip()))
        say("locus %s -> %d: %s" % (" ".join(args), want, r.stderr.strip()))
    # pagemap without frame numbers: the same command as an unprivileged user
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        r = run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, locus,
                 "pages", "self", "--min-size", "4k"], cwd="/")
        if r.returncode == 0 or "frame" not in r.stderr:
            fail("unprivileged 'locus pages self' exited %d: %s%s" % (r.returncode, r.stdout, r.stderr))
        say("unprivileged pages -> %d: %s" % (r.returncode, r.stderr.strip()))
    else:
        say("not root (or no setpriv): the unprivileged pagemap case is not run")


def check_trace():
    lib = os.environ["LOCUS_LIB"]
    path = os.path.join(tmp, "t.trace")
    env = dict(os.environ, LD_PRELOAD=lib)
    env.pop("LOCUS_TRACE_FILE", None)
    run([trace_case], want=0, env=env)
    if os.path.exists(path):
        fail("a trace file appeared without LOCUS_TRACE_FILE")
    env["LOCUS_TRACE_FILE"] = path
    r = run([trace_case], want=0, env=env)
    addr = {w[0]: int(w[1], 16) for w in (l.split() for l in r.stdout.splitlines())}
    lines = [l.split() for l in open(path)]
    if not lines or lines[0][0] != "H" or lines[0][2:4] != ["locus-trace", "1"]:
        fail("first line %s, expected the H header" % (lines[:1],))
    maps = [(int(w[2], 16), int(w[3], 16)) for w in lines if w[0] == "M" and w[5] == os.path.realpath(trace_case)]
    if not maps:
        fail("no M line for the program %s" % trace_case)
    events = [w for w in lines if w[0] in "ARF"]
    got = [(w[0],) + tuple(w[2:5] if w[0] == "A" else w[2:6] if w[0] == "R" else w[2:3]) for w in events]
    want = [("A", "1", "%x" % addr["a"], str(2 << 20)),
            ("R", "2", "%x" % addr["a"], "%x" % addr["b"], str(64 << 20)),
            ("F", "%x" % addr["b"]),
            ("A", "3", "%x" % addr["c"], str(3 << 20)),
            ("F", "%x" % addr["c"])]
    # growing over a cached neighbour or copying into a cached segment frees the old block first
    got = [g for g in got if not (g[0] == "F" and g[1] == "%x" % addr["a"] and addr["a"] != addr["b"])]
    if got != want:
        fail("events %s, expected %s" % (got, want))
    for w in events:
        if w[0] in "AR":
            cands = [int(x, 16) for x in w[6 if w[0] == "R" else 5:]]
            if not any(lo <= c < hi for c in cands for lo, hi in maps):
                fail("%s record without a call-site candidate in the program: %s" % (w[0], " ".join(w)))
    say("header, mapping, A/R/F events of the large blocks only, call-site candidates: ok")


def check_rss():
    out = os.path.join(tmp, "r%p.txt")
    # a program that grows to 64 MiB resident, holds it, then exits with status 3
    prog = "import time; b = bytearray(64 << 20); time.sleep(0.5); raise SystemExit(3)"
    r = run([locus, "run", "--stats=" + out, "--rss=" + out, "--rss-interval", "20", "--", sys.executable, "-c",
             prog], want=3)
    files = [f for f in os.listdir(tmp) if f.startswith("r") and f.endswith(".txt")]
    if len(files) != 1:
        fail("expected one r<pid>.txt, found %s" % files)
    path = os.path.join(tmp, files[0])
    r = run([locus, "stats", "--json", path], want=0)
    d = json.loads(r.stdout)
    if len(d["processes"]) != 1 or len(d["rss"]) != 1:
        fail("locus stats --json: %d reports and %d RSS series, expected 1 and 1" % (len(d["processes"]),
                                                                                   len(d["rss"])))
    series = list(d["rss"].values())[0]
    peak = max(kb for _, kb in series)
    if len(series) < 5 or peak < 64 << 10:
        fail("RSS series of %d samples peaking at %d KiB, expected >= 5 samples and >= 65536 KiB" %
             (len(series), peak))
    if any(b[0] < a[0] for a, b in zip(series, series[1:])):
        fail("RSS series times not increasing")
    r = run([locus, "stats", path], want=0)
    if "resident set size over" not in r.stdout:
        fail("locus stats does not summarise the RSS series: %s" % r.stdout)
    run([locus, "run", "--rss-interval", "0", "--rss=" + out, "--", "true"], want=2)
    run([locus, "run", "--rss=" + out, "--", os.path.join(tmp, "missing")], want=127)
    say("--rss: exit status 3 kept, %d samples peaking at %d MiB, stats summary and JSON: ok" %
        (len(series), peak >> 10))


def dedup_start(*args):
    """Starts dedup_case ARGS; returns the process, its pid and its three arrays {name: (addr, len)}."""
    p = subprocess.Popen([dedup_case] + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         universal_newlines=True)
    w = p.stdout.readline().split()
    if len(w) != 5 or w[0] != "ready":
        fail("dedup_case printed %s (status %s)" % (w, p.poll()))
    arrays = {}
    for x in w[2:]:
        name, rng = x.split("=", 1)
        a, n = rng.split(":")
        arrays[name] = (int(a, 16), int(n))
    return p, w[1], arrays


# name: pages, zero, duplicated, unique, distinct, save (use_zero_pages=0), save (use_zero_pages=1)
DEDUP_WANT = {"zero": (300, 300, 0, 0, 0, 299, 300), "dup": (200, 0, 200, 0, 10, 190, 190),
              "unique": (100, 0, 0, 100, 100, 0, 0)}
DEDUP_KEYS = ("pages", "zero", "duplicated", "unique", "distinct", "save", "save_use_zero_pages")


def dedup_check_arrays(rows, arrays, what, shared=False):
    by_addr = {int(r["addr"], 16): r for r in rows}
    for name, (addr, n) in arrays.items():
        r = by_addr.get(addr)
        if r is None:
            fail("%s: no row for the %s array at 0x%x (rows at %s)" % (what, name, addr, sorted(by_addr)))
        want = list(DEDUP_WANT[name])
        if shared and name == "unique":     # the other process holds the same 100 contents
            want[2:4] = [100, 0]
        got = tuple(r[k] for k in DEDUP_KEYS)
        if got != tuple(want):
            fail("%s, %s array: %s = %s, expected %s" % (what, name, "/".join(DEDUP_KEYS), got, tuple(want)))


def check_dedup():
    # 1. one process, its arrays given by hand: the exact counts
    p, pid, arrays = dedup_start()
    try:
        rng = []
        for name in ("zero", "dup", "unique"):
            rng += ["--range", "0x%x:%d" % arrays[name]]
        r = run([locus, "dedup", pid, "--json"] + rng, want=0)
        rep = json.loads(r.stdout)
        proc = rep["processes"][0]
        dedup_check_arrays(proc["arrays"], arrays, "locus dedup PID --range")
        t = proc["total"]
        if t["zero"] < 300 or t["duplicated"] < 200 or t["save"] < 489:
            fail("process total %s: expected at least the arrays' 300 zero, 200 duplicated pages, saving 489" % t)
        r = run([locus, "dedup", pid] + rng, want=0)
        if "KSM could save" not in r.stdout or "[stack]" not in r.stdout:
            fail("text report lacks the saving or the [stack] mapping:\n" + r.stdout)
        say("pid %s: 300 zero pages, 200 pages of 10 contents, 100 unique: counted exactly; process total %d "
            "pages, KSM could save %d" % (pid, t["pages"], t["save"]))
        # 2. two processes with the same contents: the duplicates between them
        q, pid2, arrays2 = dedup_start("0", pid)
        p.stdin.close()
        p.wait()
        p, pid, arrays = dedup_start("0", pid)      # the first one again, now with the same seed as the second
        try:
            r = run([locus, "dedup", pid, pid2, "--json"], want=0)
            rep = json.loads(r.stdout)
            if [x["pid"] for x in rep["processes"]] != [int(pid), int(pid2)]:
                fail("processes %s, expected %s %s" % ([x["pid"] for x in rep["processes"]], pid, pid2))
            between = rep["between_processes"]
            # the second copy of 100 unique and 10 duplicated contents, and of the zero page
            if not 111 <= between <= 111 + 256:
                fail("between processes: %d pages, expected 111 (+ the programs' identical pages, < 256)" % between)
            for x in rep["processes"]:
                if x["total"]["duplicated"] < 300:
                    fail("pid %d: %d duplicated pages, expected >= 300 (dup, and unique found in the other)" %
                         (x["pid"], x["total"]["duplicated"]))
            say("pids %s %s (same contents): %d pages more saved between them (111 constructed)" % (pid, pid2, between))
        finally:
            q.stdin.close()
            q.wait()
        # 3. errors: no process, not a number, unreadable (as nobody), bad options
        for args, want, text in ((["999999999"], 1, "no process 999999999"), (["abc"], 2, "not a process id"),
                                 ([], 2, "no process given"), ([pid, "--frobnicate"], 2, "unknown option"),
                                 ([pid, "--samples", "0"], 2, "a positive number"),
                                 ([pid, "--interval", "x"], 2, "a number of seconds"),
                                 ([pid, "--range", "0x1000"], 2, "expected ADDR:LEN"),
                                 (["--", os.path.join(tmp, "missing")], 127, "command not found"),
                                 ([pid, "--", "true"], 2, "not both")):
            r = run([locus, "dedup"] + args, want=want)
            if text not in r.stderr:
                fail("'locus dedup %s': message lacks '%s': %s" % (" ".join(args), text, r.stderr.strip()))
        setpriv = shutil.which("setpriv")
        if os.geteuid() == 0 and setpriv:
            r = run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, locus,
                     "dedup", pid], cwd="/")
            if r.returncode != 1 or "permission denied" not in r.stderr:
                fail("'locus dedup %s' as nobody exited %d: %s%s" % (pid, r.returncode, r.stdout, r.stderr))
            say("as nobody: %s" % r.stderr.strip())
        say("errors: no process, not a number, bad options, command not found: messages and statuses ok")
    finally:
        p.stdin.close()
        p.wait()
    # 4. -- CMD: the traced arrays, sampled until the command exits
    png = os.path.join(tmp, "dedup.png")
    r = run([locus, "dedup", "--threshold", "256k", "--interval", "0.2", "--json", "--plot", png, "--",
             dedup_case, "2"], want=0)
    rep = json.loads(r.stdout[r.stdout.index("{"):])
    ready = r.stdout.split("\n", 1)[0].split()
    arrays = {}
    for x in ready[2:]:
        name, rng = x.split("=", 1)
        arrays[name] = (int(rng.split(":")[0], 16), int(rng.split(":")[1]))
    if rep["exit_status"] != 0 or len(rep["samples"]) < 3:
        fail("-- CMD: exit status %s, %d samples (expected 0 and >= 3)" % (rep["exit_status"], len(rep["samples"])))
    proc = [x for x in rep["processes"] if x["pid"] == int(ready[1])]
    if not proc:
        fail("-- CMD: the command's process %s is not in the report" % ready[1])
    rows = proc[0]["arrays"]
    if [x["size"] for x in rows] != [1228800, 819200, 409600]:
        fail("-- CMD: traced arrays of %s bytes, expected the three of dedup_case" % [x["size"] for x in rows])
    dedup_check_arrays(rows, arrays, "locus dedup -- CMD")
    sites = [x.get("site", "") for x in rows]
    if not all(x.startswith("dedup_case.c:") for x in sites):
        fail("-- CMD: call sites %s, expected lines of dedup_case.c" % sites)
    hist = rep["stability"]
    if not hist or not sum(b["changed"] for b in hist) >= 16 or not sum(b["unchanged_at_end"] for b in hist) >= 600:
        fail("-- CMD: stability histogram %s: expected the 16 rewritten pages changed and >= 600 pages the same" % hist)
    try:
        import matplotlib  # noqa: F401
        if not os.path.getsize(png):
            fail("--plot wrote an empty file")
    except ImportError:
        pass
    say("-- CMD: %d samples, the three traced arrays counted exactly at %s, stability histogram: ok" % (
        len(rep["samples"]), ", ".join(sites)))


try:
    {"align": check_align, "pages": check_pages, "bad_input": check_bad_input, "trace": check_trace, "rss": check_rss,
     "dedup": check_dedup}[mode]()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
say("PASS")
