#!/usr/bin/env python3
"""The documentation's example outputs and figures against what the code does.

  1. README: a newcomer runs a program under locus within the first 60 lines
     (install, `locus run`, LD_PRELOAD, linking, the banner that shows it).
  2. README: the banner example has the shape of the real banner
     (LD_PRELOAD=liblocus.so LOCUS_VERBOSE=1 /bin/true), line by line.
  3. docs/tools.md: the example report has the labels of a real report
     (LOCUS_STATS=1 ls), in the same order, and the `locus stats` example
     table has the real table's header.
  4. docs/install.md: its app.c, built against this tree, prints what the
     page says it prints.
  5. README: the results table is the table of the published run it links
     (tools/bench.py's ratio_table of that run's results.json, for the
     README's columns), cell by cell, and its plot exists.
  6. README and docs/testing.md give the same time for the test suite.
  7. docs/heaps.md: every program of tests/heaps/ (run by ctest -L heaps) is
     shown on the page, each code block is its file's text exactly, and the
     page names every function of locus.h's Heaps section and no locus_heap_*
     function that locus.h lacks.
  8. docs/tools.md: the `locus dedup` tables have the real header, and the
     arrays of tests/tools/dedup_case.c, built and read by `locus dedup PID
     --range ...`, have the counts the page shows.

Usage: docs_examples.py SOURCE_DIR LIBLOCUS LOCUS_COMMAND CC   (exit 0 pass, 1 fail)
"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

src, lib, locus, cc = sys.argv[1:5]
lib = os.path.abspath(lib)
failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def read(rel):
    with open(os.path.join(src, rel)) as f:
        return f.read()


def env_clean(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUS_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env


readme = read("README.md")
lines = readme.splitlines()

# 1. the first screen
first = "\n".join(lines[:60])
for what, pat in (("an install command", r"^cmake --install "),
                  ("locus run -- CMD", r"^locus run .*-- \./"),
                  ("LD_PRELOAD=...liblocus.so CMD", r"^LD_PRELOAD=\S*liblocus\.so \./"),
                  ("a link command", r"^cc .*-llocus"),
                  ("the banner that shows locus is active", r"^locus: locus \S+ active in pid ")):
    check(re.search(pat, first, re.M) is not None, "README's first 60 lines: %s" % what)

# 2. the banner
real = subprocess.run(["/bin/true"], env=env_clean(LD_PRELOAD=lib, LOCUS_VERBOSE="1"),
                      stderr=subprocess.PIPE, universal_newlines=True).stderr.splitlines()
BANNER = [re.compile(r"^locus: locus \d+\.\d+\.\d+ active in pid \d+ \([\w-]+, \w+ build, [\w-]+ TLS\): "
                     r"profile \w+, \d+ NUMA nodes?, THP \w+, page \d+ KiB, kernel \S+$"),
          re.compile(r"^locus: kernel features: MADV_FREE (yes|no), MADV_POPULATE_WRITE (yes|no), "
                     r"page reuse (yes|no), NUMA calls (yes|no), NUMA balancing -?\d+$"),
          re.compile(r"^locus:   LOCUS_PROFILE=auto \(default\)$")]
doc = [l for l in lines if l.startswith("locus: ")]
check(len(doc) >= 3, "README shows %d banner lines" % len(doc))
for i, rx in enumerate(BANNER):
    check(i < len(real) and rx.match(real[i]) is not None, "real banner line %d has the documented shape: %s"
          % (i + 1, real[i] if i < len(real) else "(missing)"))
    check(i < len(doc) and rx.match(doc[i]) is not None, "README banner line %d has the real shape: %s"
          % (i + 1, doc[i] if i < len(doc) else "(missing)"))

# 3. the report and the stats table of docs/tools.md
def labels(text):
    """The '  label : ' lines of a report, numbers replaced by N."""
    out = []
    for l in text.splitlines():
        m = re.match(r"^  (\S[^:]*?)\s*: ", l)
        if m:
            out.append(re.sub(r"\d+", "N", m.group(1)))
    return out

tools = read("docs/tools.md")
m = re.search(r"^\$ cat run\.\d+\.txt\n(locus .*?)\n\n", tools, re.M | re.S)
check(m is not None, "docs/tools.md has an example report")
with tempfile.TemporaryDirectory() as tmp:
    rep = os.path.join(tmp, "r.txt")
    subprocess.run(["ls", "/"], env=env_clean(LD_PRELOAD=lib, LOCUS_STATS="1", LOCUS_STATS_FILE=rep),
                   stdout=subprocess.DEVNULL, check=True)
    real_report = open(rep).read()
    if m:
        # Lines that appear only in some reports (huge pages, auto releases, next touch).
        optional = {"huge-page bytes", "auto released", "next touch", "auto"}
        d = [x for x in labels(m.group(1)) if x not in optional]
        r = [x for x in labels(real_report) if x not in optional]
        check(d == r, "docs/tools.md's report has the real report's labels in order:\n  doc  %s\n  real %s" % (d, r))
    out = subprocess.run([locus, "stats", rep], stdout=subprocess.PIPE, universal_newlines=True).stdout
    header = out.splitlines()[0].split() if out else []
    doc_headers = [l.split() for l in tools.splitlines() if l.strip().startswith("pid  profile")]
    check(bool(doc_headers) and all(h == header for h in doc_headers),
          "docs/tools.md's locus stats tables have the real header: %s" % " ".join(header))

    # 4. install.md's program
    install = read("docs/install.md")
    code = re.search(r"`app\.c`:\n\n```c\n(.*?)```", install, re.S)
    said = re.search(r"prints `([^`]*)`", install)
    check(code is not None and said is not None, "docs/install.md has app.c and what it prints")
    if code and said:
        with open(os.path.join(tmp, "app.c"), "w") as f:
            f.write(code.group(1))
        libdir = os.path.dirname(lib)
        b = subprocess.run([cc, "-O2", os.path.join(tmp, "app.c"), "-I", os.path.join(src, "include"), "-L", libdir,
                            "-Wl,-rpath," + libdir, "-llocus", "-o", os.path.join(tmp, "app")],
                           stderr=subprocess.PIPE, universal_newlines=True)
        check(b.returncode == 0, "app.c builds: %s" % b.stderr.strip()[-300:])
        if b.returncode == 0:
            got = subprocess.run([os.path.join(tmp, "app")], env=env_clean(), stdout=subprocess.PIPE,
                                 universal_newlines=True).stdout.strip()
            check(got == said.group(1), "docs/install.md says app prints '%s', it prints '%s'" % (said.group(1), got))

# 5. the results table
spec = importlib.util.spec_from_file_location("bench", os.path.join(src, "tools", "bench.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
res = readme[readme.index("## Results"):]
res = res[:res.index("\n## ", 4)]
run = re.search(r"\]\((results/[^)]+)/results\.md\)", res)
check(run is not None, "README's results name the published run they come from")
if run:
    import json
    d = json.load(open(os.path.join(src, run.group(1), "results.json")))
    table = [l for l in res.splitlines() if l.startswith("|")]
    columns = [c.strip() for c in table[0].strip("|").split("|")][1:] if table else []
    want = bench.ratio_table(d["summary"], columns)
    check(table == want, "README's results table is %s's (ratio_table), cell by cell%s" % (
        run.group(1), "" if table == want else ":\n  " + "\n  ".join(
            "README %s\n  run    %s" % (a, b) for a, b in zip(table, want) if a != b)[:1500]))
    img = re.search(r"!\[[^\]]*\]\(([^)]+\.png)\)", res)
    check(img is not None and os.path.isfile(os.path.join(src, img.group(1))), "README's plot exists: %s"
          % (img.group(1) if img else "(none)"))

# 6. the test suite's time
row = next((l for l in lines if l.startswith("| `scripts/test.sh`")), "")
t = row.rstrip(" |").rsplit("|", 1)[-1].strip()
check(bool(t) and t in read("docs/testing.md"), "docs/testing.md gives the README's suite time '%s'" % t)

# 7. docs/heaps.md's examples are the files ctest runs
heaps = read("docs/heaps.md")
shown = {}
for m in re.finditer(r"^\[`(tests/heaps/[^`]+)`\]\([^)]*\):\n\n```\w*\n(.*?)^```$", heaps, re.M | re.S):
    shown[m.group(1)] = m.group(2)
progs = sorted("tests/heaps/" + f for f in os.listdir(os.path.join(src, "tests", "heaps"))
               if f.endswith((".c", ".cpp")))
check(bool(progs), "tests/heaps/ has example programs")
for prog in progs:
    check(prog in shown, "docs/heaps.md shows %s" % prog)
    if prog in shown:
        check(shown[prog] == read(prog), "docs/heaps.md's %s is the file's text%s" % (prog, "" if shown[prog] == read(prog)
              else " (copy the file into the page's block)"))
for extra in sorted(set(shown) - set(progs)):
    check(False, "docs/heaps.md shows %s, which is not in tests/heaps/" % extra)
hdr = read("include/locus.h")
sec = hdr[hdr.index("---- Heaps"):]
sec = sec[:sec.index("locus_heap_name")]
api = set(re.findall(r"\b(locus_heap_\w+)\s*\(", sec)) | {"locus_heap_name"}
named = set(re.findall(r"\b(locus_heap_\w+)\b", heaps))
missing = sorted(api - named)
check(not missing, "docs/heaps.md names every function of locus.h's Heaps section%s" % (
    "" if not missing else ": missing " + ", ".join(missing)))
unknown = sorted(n for n in named if not re.search(r"\b%s\b" % n, hdr))
check(not unknown, "every locus_heap_* name in docs/heaps.md is in locus.h%s" % (
    "" if not unknown else ": not there: " + ", ".join(unknown)))

# 8. locus dedup's example
with tempfile.TemporaryDirectory() as tmp:
    exe = os.path.join(tmp, "dedup_case")
    b = subprocess.run([cc, "-O2", os.path.join(src, "tests", "tools", "dedup_case.c"), "-o", exe],
                       stderr=subprocess.PIPE, universal_newlines=True)
    check(b.returncode == 0, "dedup_case.c builds: %s" % b.stderr.strip()[-300:])
    if b.returncode == 0:
        p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env_clean(),
                             universal_newlines=True)
        try:
            w = p.stdout.readline().split()
            ranges = []
            for x in w[2:5]:
                ranges += ["--range", x.split("=", 1)[1]]
            out = subprocess.run([locus, "dedup", w[1]] + ranges, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 universal_newlines=True).stdout
        finally:
            p.stdin.close()
            p.wait()
        real = out.splitlines()
        header = [l for l in real if l.split()[:6] == ["pages", "zero", "dup", "unique", "distinct", "save"]]
        doc_headers = [l for l in tools.splitlines() if l.split()[:6] == ["pages", "zero", "dup", "unique",
                                                                          "distinct", "save"]]
        check(bool(header) and bool(doc_headers) and all(h == header[0] for h in doc_headers),
              "docs/tools.md's locus dedup tables have the real header: %s" % (header[:1] or "(none)"))

        def array_rows(lines):
            i = next((k for k, l in enumerate(lines) if l.strip() == "arrays (pages overlapping each):"), None)
            return [l.split()[-6:] for l in lines[i + 1:i + 4]] if i is not None else []
        blk = re.search(r"^\$ locus dedup \d+ --range .*?\n(.*?)^```", tools, re.M | re.S)
        check(blk is not None, "docs/tools.md shows locus dedup on dedup_case with --range")
        if blk:
            d, r = array_rows(blk.group(1).splitlines()), array_rows(real)
            check(len(d) == 3 and d == r, "docs/tools.md's dedup_case arrays have the real counts:\n  doc  %s\n  real %s"
                  % (d, r))

if failures:
    print("docs_examples: %d check(s) failed" % len(failures))
    sys.exit(1)
print("docs_examples: ok")
