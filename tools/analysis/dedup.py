"""locus dedup: duplicated page contents in running processes, and what KSM could save.

S. Valat's PhD thesis (2014, ch. 6) studies the pages of simulation codes
whose contents are identical (zero pages, constant fields, tables every MPI
rank of a node builds alike): Linux's kernel samepage merging (KSM) saved
about 15 % of the memory of the CEA code Hera. This module measures that
potential on a running process, or on the processes of one node:

  - the private mappings are read from /proc/PID/smaps (anonymous ones, the
    heap, the stack, and the anonymous pages -- copied on write -- of private
    file mappings);
  - /proc/PID/pagemap says which pages are present; only those are read, from
    /proc/PID/mem, in runs of consecutive present pages. A page that is not
    present is never read: reading /proc/PID/mem there returns zeros without
    allocating memory, but maps the kernel's zero page into the process (its
    pagemap then says "present") and would swap a swapped-out page back in;
  - each 4 KiB page is hashed (hashlib: sha1 by default, the fastest of the
    standard library where the CPU has SHA instructions; --hash blake2b);
    all-zero pages are recognised by comparison, without a hash;
  - contents are counted per mapping, per traced array (the live large blocks
    of a locus trace, LOCUS_TRACE_FILE), per process and over all processes.

What KSM could save, for a set of pages: the pages present (with memory of
their own) minus what remains once identical pages are merged: one page per
distinct non-zero content, plus one page for all the zero pages (none with
/sys/kernel/mm/ksm/use_zero_pages=1: KSM then maps them to the kernel's zero
page). Pages that map the kernel's zero page already (read, never written)
hold no memory and are counted apart.

Sampled over time (--interval, --samples, or until the command exits), each
page's content is followed: how long it stayed identical (a histogram), and
which part of the saving was made of contents stable for at least two full
KSM scans at the kernel's current scan rate (KSM merges a page once its
checksum held between two scans): what KSM could actually catch.
"""

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from bisect import bisect_right
from collections import Counter

from cli_common import Fail, parse_size

HELP = """\
usage: locus dedup PID... [options]
       locus dedup [options] -- CMD [ARG...]

Find the pages of running processes whose contents are identical and what
the kernel's samepage merging (KSM) could save: the present pages of their
private anonymous memory (/proc/PID/pagemap, read through /proc/PID/mem:
root, or the processes' owner with ptrace access) are hashed per 4 KiB page
and counted per mapping, per array, per process and, with several PIDs (the
MPI ranks of a node), between processes. With '-- CMD', CMD runs under locus
with the large-block trace on (LOCUS_TRACE_FILE) and its pages are also
attributed to the large arrays live at each sample; sampling goes on until
CMD exits (or --samples), and the report is that of the sample with the
largest saving.

options:
  --interval S      seconds between samples (default 1; decimals allowed)
  --samples N       number of samples (default 1 for PIDs; for CMD: until it
                    exits); over several, how long each page kept its content
  --trace FILE      a locus trace of PID (LOCUS_TRACE_FILE): its live large
                    blocks are the arrays
  --range ADDR:LEN  an array given by hand (hex 0x.. or decimal start, length
                    with k, M, G suffixes); repeatable
  --threshold SIZE  with CMD: smallest array traced (default locus's large
                    threshold, 1M; lower sets LOCUS_LARGE_THRESHOLD)
  --ksm-merge       with CMD: let KSM merge CMD's memory (prctl
                    PR_SET_MEMORY_MERGE, inherited by its children; merges
                    only while /sys/kernel/mm/ksm/run is 1): the pages KSM
                    merged are then shown beside the prediction
  --scan-time S     the time KSM takes for one full scan (default: from
                    /sys/kernel/mm/ksm, pages_to_scan every sleep_millisecs,
                    over the pages present)
  --hash NAME       sha1 (default) or blake2b (digest_size 16)
  --json            the report as JSON on stdout instead of text
  --json=FILE       the text report, and the JSON in FILE
  --plot OUT.png    saving and duplicates over time, and the histogram of
                    how long contents stayed identical (matplotlib)
  --quiet, -q       no progress on stderr
  --help, -h        this help
Exit status: 0 done, 2 bad usage, 127 CMD not found, 1 a process missing or
unreadable (permission: needs root or ptrace access to it).
"""

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
ZERO_BYTES = bytes(PAGE)
ZERO = b"0"                 # key of an all-zero page with memory of its own
ZPAGE = b"z"                # key of a page mapping the kernel's zero page (no memory)
PM_PRESENT, PM_SWAP, PM_FILE, PM_EXCL = 1 << 63, 1 << 62, 1 << 61, 1 << 56
PFN_MASK = (1 << 55) - 1
SPECIAL = ("[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]", "[uprobes]")
KSM_DIR = "/sys/kernel/mm/ksm"
CHUNK_PAGES = 256           # pages per read of /proc/PID/mem (1 MiB)
PAGEMAP_CHUNK = 1 << 16     # pagemap entries per read (512 KiB)


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / float(1 << shift)
            return ("%d %s" % (v, unit)) if v == int(v) else ("%.1f %s" % (v, unit))
    return "%d B" % n


def parse_addr(text):
    t = text.strip().lower()
    return int(t, 16) if t.startswith("0x") else int(t)


def read_text(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


# ---- KSM ---------------------------------------------------------------------------
def ksm_system():
    """The settings and counters of /sys/kernel/mm/ksm (empty without KSM)."""
    out = {}
    for k in ("run", "pages_to_scan", "sleep_millisecs", "use_zero_pages", "pages_shared", "pages_sharing",
              "ksm_zero_pages", "general_profit", "full_scans"):
        v = read_text(os.path.join(KSM_DIR, k))
        if v is not None and v.strip().lstrip("-").isdigit():
            out[k] = int(v)
    return out


def ksm_process(pid):
    """/proc/PID/ksm_stat (and ksm_merging_pages) as a dict; None when the kernel has neither."""
    text = read_text("/proc/%s/ksm_stat" % pid)
    if text is None:
        v = read_text("/proc/%s/ksm_merging_pages" % pid)
        return {"ksm_merging_pages": int(v)} if v and v.strip().isdigit() else None
    out = {}
    for line in text.splitlines():
        w = line.split()
        if len(w) == 2 and w[1].lstrip("-").isdigit():
            out[w[0]] = int(w[1])
        elif len(w) == 2:
            out[w[0]] = w[1]
    return out


def ksm_scan_rate(k):
    """Pages KSM scans per second at its current settings, or None."""
    if not k.get("pages_to_scan") or not k.get("sleep_millisecs"):
        return None
    return k["pages_to_scan"] * 1000.0 / k["sleep_millisecs"]


# ---- reading a process --------------------------------------------------------------
def comm(pid):
    return (read_text("/proc/%s/comm" % pid, "?") or "?").strip()


def mappings(pid):
    """The private mappings of pid that may hold anonymous pages: dicts with
    lo, hi, label, file (a private file mapping: only its anonymous pages count)."""
    try:
        with open("/proc/%s/smaps" % pid) as f:
            text = f.read()
    except FileNotFoundError:
        raise Fail("dedup: no process %s" % pid)
    except PermissionError:
        raise Fail("dedup: cannot read the mappings of process %s (/proc/%s/smaps: permission denied): "
                   "reading another user's memory needs root, or ptrace access to the process "
                   "(same user, and kernel.yama.ptrace_scope allowing it)" % (pid, pid))
    except OSError as e:
        raise Fail("dedup: /proc/%s/smaps: %s" % (pid, e.strerror))
    out = []
    cur = None
    for line in text.splitlines():
        w = line.split(None, 5)
        if w and "-" in w[0] and len(w) >= 5 and not w[0].endswith(":"):
            lo, hi = (int(x, 16) for x in w[0].split("-"))
            path = w[5].strip() if len(w) > 5 else ""
            cur = None
            if w[1][3] != "p" or path in SPECIAL:
                continue
            is_file = bool(path) and not path.startswith("[")
            label = path or "[anon]"
            cur = {"lo": lo, "hi": hi, "label": label, "file": is_file, "anon_kb": 0, "swap_kb": 0}
            out.append(cur)
        elif cur is not None and w and w[0] in ("Anonymous:", "Swap:"):
            cur["anon_kb" if w[0] == "Anonymous:" else "swap_kb"] = int(w[1])
    return out


def zero_pfn():
    """The frame number of the kernel's zero page (root only: else None): a
    private anonymous page of this process, read and never written, maps it."""
    try:
        import mmap
        m = mmap.mmap(-1, PAGE, flags=mmap.MAP_PRIVATE)
        import ctypes
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        _ = m[0]
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(addr // PAGE * 8)
            e, = struct.unpack("<Q", f.read(8))
        del _
        return (e & PFN_MASK) if e & PM_PRESENT and e & PFN_MASK else None
    except Exception:
        return None


class Reader:
    """Reads the present anonymous pages of one process."""

    def __init__(self, pid, hashname, zpfn):
        self.pid = pid
        self.hashname = hashname
        self.zpfn = zpfn
        try:
            self.pagemap = open("/proc/%s/pagemap" % pid, "rb", buffering=0)
            self.mem = os.open("/proc/%s/mem" % pid, os.O_RDONLY)
        except FileNotFoundError:
            raise Fail("dedup: no process %s" % pid)
        except PermissionError:
            raise Fail("dedup: cannot read the memory of process %s (/proc/%s/mem: permission denied): "
                       "needs root, or ptrace access to the process (same user, and kernel.yama.ptrace_scope "
                       "allowing it)" % (pid, pid))

    def close(self):
        try:
            self.pagemap.close()
            os.close(self.mem)
        except OSError:
            pass

    def digest_fn(self, b):
        if self.hashname == "blake2b":
            return hashlib.blake2b(b, digest_size=16).digest()
        return hashlib.sha1(b).digest()

    def scan(self, maps, progress=None):
        """For each mapping: (addresses, keys) of its present anonymous pages,
        and counts of pages swapped out. Raises ProcessLookupError when the
        process is gone."""
        out = []
        for mi, m in enumerate(maps):
            addrs, keys = [], []
            stats = {"swapped": 0, "file_pages": 0, "unreadable": 0, "zero_page": 0, "not_exclusive": 0}
            out.append((m, addrs, keys, stats))
            if m["anon_kb"] == 0:
                stats["swapped"] = m["swap_kb"] // (PAGE // 1024)
                continue
            first, last = m["lo"] // PAGE, m["hi"] // PAGE
            p = first
            while p < last:
                n = min(PAGEMAP_CHUNK, last - p)
                try:
                    self.pagemap.seek(p * 8)
                    data = self.pagemap.read(n * 8)
                except OSError as e:
                    raise ProcessLookupError(e.strerror)
                if len(data) < n * 8:
                    if not data:
                        raise ProcessLookupError("pagemap ended")
                    n = len(data) // 8
                ents = struct.unpack("<%dQ" % n, data[:n * 8])
                run = []
                for i, e in enumerate(ents):
                    if e & PM_PRESENT and not e & PM_FILE:
                        run.append((p + i, e))
                        continue
                    if e & PM_SWAP:
                        stats["swapped"] += 1
                    elif e & PM_PRESENT:
                        stats["file_pages"] += 1
                    if run:
                        self._read_run(run, addrs, keys, stats)
                        run = []
                if run:
                    self._read_run(run, addrs, keys, stats)
                p += n
            if progress:
                progress(mi + 1, len(maps))
        return out

    def _read_run(self, run, addrs, keys, stats):
        # run: consecutive (page number, pagemap entry), at most PAGEMAP_CHUNK
        for s in range(0, len(run), CHUNK_PAGES):
            part = run[s:s + CHUNK_PAGES]
            start = part[0][0] * PAGE
            try:
                data = os.pread(self.mem, len(part) * PAGE, start)
            except OSError:
                data = b""
            if len(data) < len(part) * PAGE:      # a page unmapped meanwhile: page by page
                chunks = []
                for pn, _ in part:
                    try:
                        chunks.append(os.pread(self.mem, PAGE, pn * PAGE))
                    except OSError:
                        chunks.append(None)
            else:
                mv = memoryview(data)
                chunks = [mv[i * PAGE:(i + 1) * PAGE] for i in range(len(part))]
            digest = self.digest_fn
            zpfn = self.zpfn
            for (pn, e), b in zip(part, chunks):
                if b is None or len(b) < PAGE:
                    stats["unreadable"] += 1
                    continue
                if not e & PM_EXCL:
                    stats["not_exclusive"] += 1
                if b == ZERO_BYTES:
                    if (e & PFN_MASK) == zpfn if zpfn is not None else not e & PM_EXCL:
                        stats["zero_page"] += 1
                        key = ZPAGE
                    else:
                        key = ZERO
                else:
                    key = digest(b)
                addrs.append(pn * PAGE)
                keys.append(key)


# ---- counting ------------------------------------------------------------------------
def summarize(keys, everywhere, use_zero_pages):
    """Counts of a set of page keys; `everywhere` counts each content over the
    whole scope (a content found twice there is a duplicate)."""
    local = Counter(keys)
    zp = local.pop(ZPAGE, 0)
    zero = local.pop(ZERO, 0)
    pages = len(keys) - zp
    dup = sum(n for k, n in local.items() if everywhere[k] > 1)
    distinct = len(local)
    remain = distinct + (1 if zero and not use_zero_pages else 0)
    return {"pages": pages, "zero": zero, "duplicated": dup, "unique": pages - zero - dup,
            "distinct": distinct, "contents_duplicated": sum(1 for k, n in local.items() if everywhere[k] > 1),
            "save": pages - remain, "save_use_zero_pages": pages - distinct, "zero_page_mapped": zp}


def row_text(label, s):
    return "  %-44s %7d %7d %7d %7d %8d %7d" % (label[:44], s["pages"], s["zero"], s["duplicated"], s["unique"],
                                                 s["distinct"], s["save"])


HEAD = "  %-44s %7s %7s %7s %7s %8s %7s" % ("", "pages", "zero", "dup", "unique", "distinct", "save")


# ---- the trace of a command -----------------------------------------------------------
class Trace:
    """Follows a locus trace file as it grows: the live large blocks of each process."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.partial = ""
        self.procs = {}

    def _proc(self, pid):
        return self.procs.setdefault(pid, {"maps": [], "live": {}})

    def update(self):
        try:
            with open(self.path, errors="replace") as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except OSError:
            return
        text = self.partial + text
        lines = text.split("\n")
        self.partial = lines.pop()
        for line in lines:
            self.line(line.split())

    def line(self, w):
        if len(w) < 3:
            return
        try:
            pid = int(w[1])
            if w[0] == "H":
                self.procs[pid] = {"maps": [], "live": {}}      # a new process image
            elif w[0] == "M" and len(w) >= 6:
                self._proc(pid)["maps"].append((int(w[2], 16), int(w[3], 16), int(w[4], 16), " ".join(w[5:])))
            elif w[0] == "A" and len(w) >= 5:
                self._proc(pid)["live"][int(w[3], 16)] = (int(w[2]), int(w[4]), [int(x, 16) for x in w[5:]])
            elif w[0] == "R" and len(w) >= 6:
                live = self._proc(pid)["live"]
                live.pop(int(w[3], 16), None)
                live[int(w[4], 16)] = (int(w[2]), int(w[5]), [int(x, 16) for x in w[6:]])
            elif w[0] == "F":
                self._proc(pid)["live"].pop(int(w[2], 16), None)
        except ValueError:
            pass

    def arrays(self, pid):
        """[(addr, size, name, seq, candidates)] of the live blocks of pid, by address."""
        p = self.procs.get(int(pid))
        if not p:
            return []
        return [(a, size, "seq %d" % seq, seq, cands) for a, (seq, size, cands) in sorted(p["live"].items())]


def trace_file_arrays(path, pid):
    t = Trace(path)
    if not os.path.isfile(path):
        raise Fail("dedup: --trace %s: No such file" % path)
    t.update()
    if t.partial:
        t.line(t.partial.split())
    return t.arrays(pid), t


def descendants(pid):
    """pid and its descendants (/proc/PID/task/TID/children), in order."""
    out, todo = [], [int(pid)]
    while todo:
        p = todo.pop(0)
        out.append(p)
        try:
            for tid in os.listdir("/proc/%d/task" % p):
                kids = read_text("/proc/%d/task/%s/children" % (p, tid), "") or ""
                todo.extend(int(x) for x in kids.split() if int(x) not in out and int(x) not in todo)
        except OSError:
            pass
    return out


def resolve_sites(trace, pid, arrays):
    """Call sites of the traced arrays (align.py's resolver: addr2line), by seq."""
    p = trace.procs.get(int(pid)) if trace else None
    if not p or not p["maps"]:
        return {}
    try:
        import align
        res = align.Resolver(p["maps"])
        skip = {m[3] for m in p["maps"] if os.path.basename(m[3]).startswith(("liblocus", "ld-linux"))}
        out = {}
        for a in arrays:
            if a[4]:
                _, info = res.site(a[4], skip)
                out[a[3]] = align.short_line(info)
        return out
    except Exception:
        return {}


# ---- sampling ---------------------------------------------------------------------------
class Sampler:
    def __init__(self, hashname, use_zero_pages, quiet):
        self.hashname = hashname
        self.uzp = use_zero_pages
        self.zpfn = zero_pfn()
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.readers = {}
        self.samples = []          # summaries over time
        self.best = None           # the detailed data of the sample with the largest saving
        self.pages = {}            # (pid, addr) -> [key, first seen, last seen, last sample] of its content
        self.runs = []             # (duration, still identical at the end) of the closed contents
        self.t0 = time.monotonic()
        self.names = {}

    def reader(self, pid):
        r = self.readers.get(pid)
        if r is None:
            r = self.readers[pid] = Reader(pid, self.hashname, self.zpfn)
        return r

    def progress(self, text, final=False):
        if self.quiet:
            return
        if self.tty:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def sample(self, pids, arrays_of, scan_time, strict):
        """Reads every process once; returns False when none could be read."""
        t = time.monotonic() - self.t0
        n = len(self.samples) + 1
        data = {}
        for pid in pids:
            try:
                maps = mappings(pid)
                r = self.reader(pid)
                self.names[pid] = comm(pid)
                prog = None
                if self.tty and not self.quiet:
                    prog = lambda i, total, pid=pid: self.progress("locus dedup: sample %d, pid %s: mapping %d of %d"
                                                                   % (n, pid, i, total))
                scanned = r.scan(maps, prog)
                arrays = arrays_of(pid) if arrays_of else []
                data[pid] = {"maps": scanned, "arrays": arrays, "ksm": ksm_process(pid)}
            except Fail:
                if strict:
                    raise
            except (ProcessLookupError, OSError):
                if strict:
                    raise Fail("dedup: process %s ended while it was read" % pid)
        if not data:
            return False
        # contents over all processes, and the stability of each page's content
        everywhere = Counter()
        pages = self.pages
        for pid, d in data.items():
            for m, addrs, keys, st in d["maps"]:
                everywhere.update(keys)
                for a, k in zip(addrs, keys):
                    cur = pages.get((pid, a))
                    if cur is None:
                        pages[(pid, a)] = [k, t, t, n]
                    elif cur[0] == k:
                        cur[2] = t
                        cur[3] = n
                    else:
                        self.runs.append((cur[2] - cur[1], False))
                        pages[(pid, a)] = [k, t, t, n]
        everywhere.pop(ZERO, None)
        everywhere.pop(ZPAGE, None)
        for key in [key for key, cur in pages.items() if cur[3] != n]:
            cur = pages.pop(key)
            self.runs.append((cur[2] - cur[1], False))
        allkeys = [k for d in data.values() for _, _, keys, _ in d["maps"] for k in keys]
        total = summarize(allkeys, everywhere, self.uzp)
        k = ksm_system()
        rate = ksm_scan_rate(k)
        if scan_time is None and rate:
            scan_time = max(total["pages"], 1) / rate
        catch = None
        if scan_time is not None:
            stable = []
            for pid, d in data.items():
                for m, addrs, keys, st in d["maps"]:
                    for a, kk in zip(addrs, keys):
                        cur = self.pages[(pid, a)]
                        if cur[2] - cur[1] >= 2 * scan_time:
                            stable.append(kk)
            catch = summarize(stable, Counter(stable), self.uzp)["save"]
        merging = [d["ksm"].get("ksm_merging_pages") for d in data.values() if d["ksm"]]
        s = {"sample": n, "time": round(t, 3), "processes": len(data), "pages": total["pages"],
             "zero": total["zero"], "duplicated": total["duplicated"], "save": total["save"],
             "save_stable_2_scans": catch, "scan_time": scan_time,
             "ksm_merging_pages": sum(merging) if merging else None}
        self.samples.append(s)
        if self.best is None or total["save"] >= self.best["summary"]["save"]:
            self.best = {"summary": s, "data": data, "everywhere": everywhere, "ksm": k}
        self.progress("locus dedup: sample %d at %.1f s: %d process%s, %d pages, KSM could save %d (%.1f %%)" % (
            n, t, len(data), "" if len(data) == 1 else "es", total["pages"], total["save"],
            100.0 * total["save"] / total["pages"] if total["pages"] else 0.0), final=True)
        return True

    def finish(self):
        for cur in self.pages.values():
            self.runs.append((cur[2] - cur[1], True))
        self.pages = {}
        for r in self.readers.values():
            r.close()


def histogram(runs, interval, span):
    """Bins [0, I), [I, 2I), [2I, 4I), ... of the durations."""
    edges = [0.0, interval]
    while edges[-1] <= span:
        edges.append(edges[-1] * 2)
    bins = [{"from": edges[i], "to": edges[i + 1], "changed": 0, "unchanged_at_end": 0}
            for i in range(len(edges) - 1)]
    for d, censored in runs:
        i = min(bisect_right(edges, d + 1e-9) - 1, len(bins) - 1)
        bins[i]["unchanged_at_end" if censored else "changed"] += 1
    while len(bins) > 1 and not bins[-1]["changed"] and not bins[-1]["unchanged_at_end"]:
        bins.pop()
    return bins


# ---- the report -------------------------------------------------------------------------
def build_report(sm, cmd, interval, scan_time_opt, sites):
    best = sm.best
    data, everywhere, k = best["data"], best["everywhere"], best["ksm"]
    uzp = sm.uzp
    procs = []
    for pid, d in data.items():
        rows = []
        allkeys = []
        swapped = 0
        for m, addrs, keys, st in d["maps"]:
            allkeys.extend(keys)
            swapped += st["swapped"]
            if not keys and not st["swapped"]:
                continue
            s = summarize(keys, everywhere, uzp)
            s.update({"range": "%x-%x" % (m["lo"], m["hi"]), "path": m["label"], "swapped": st["swapped"],
                      "not_exclusive": st["not_exclusive"], "unreadable": st["unreadable"]})
            rows.append(s)
        arrays = []
        if d["arrays"]:
            flat = sorted((a, k_) for m, addrs, keys, st in d["maps"] for a, k_ in zip(addrs, keys))
            starts = [a for a, _ in flat]
            for addr, size, name, seq, cands in sorted(d["arrays"], key=lambda a: (a[3] is not None, a[3] or 0, a[0])):
                lo = bisect_right(starts, addr - PAGE)       # pages overlapping [addr, addr + size)
                hi = bisect_right(starts, addr + size - 1)
                s = summarize([kk for _, kk in flat[lo:hi]], everywhere, uzp)
                s.update({"addr": "0x%x" % addr, "size": size, "name": name,
                          "pages_spanned": (addr + size - 1) // PAGE - addr // PAGE + 1})
                if seq is not None:
                    s["seq"] = seq
                    if seq in sites.get(pid, {}):
                        s["site"] = sites[pid][seq]
                arrays.append(s)
        tot = summarize(allkeys, everywhere, uzp)
        tot["swapped"] = swapped
        procs.append({"pid": int(pid), "command": sm.names.get(pid, "?"), "total": tot, "mappings": rows,
                      "arrays": arrays, "ksm": d["ksm"]})
    allkeys = [kk for d in data.values() for _, _, keys, _ in d["maps"] for kk in keys]
    total = summarize(allkeys, everywhere, uzp)
    span = sm.samples[-1]["time"] - sm.samples[0]["time"] if sm.samples else 0.0
    gap = span / (len(sm.samples) - 1) if len(sm.samples) > 1 else interval
    hist = histogram(sm.runs, max(interval, round(gap, 2)), span) if len(sm.samples) > 1 else []
    rate = ksm_scan_rate(k)
    return {"command": cmd, "page_size": PAGE, "hash": sm.hashname, "use_zero_pages": bool(uzp), "mean_gap": gap,
            "zero_page_pfn_known": sm.zpfn is not None, "samples": sm.samples, "interval": interval,
            "reported_sample": best["summary"]["sample"], "processes": procs, "total": total,
            "between_processes": total["save"] - sum(p["total"]["save"] for p in procs) if len(procs) > 1 else 0,
            "ksm": k, "ksm_scan_pages_per_s": rate, "scan_time": best["summary"]["scan_time"],
            "scan_time_given": scan_time_opt is not None, "stability": hist}


def pct(a, b):
    return "%.1f %%" % (100.0 * a / b) if b else "-"


def print_report(rep, max_rows=16):
    w = sys.stdout.write
    ns = len(rep["samples"])
    procs = rep["processes"]
    who = ", ".join("%d (%s)" % (p["pid"], p["command"]) for p in procs[:6]) + (" ..." if len(procs) > 6 else "")
    w("locus dedup: pid%s %s; %d sample%s%s; pages of %s, contents hashed with %s\n" % (
        "s" if len(procs) > 1 else "", who, ns, "" if ns == 1 else "s",
        " (one every %.1f s: --interval %g and the reading), reported: sample %d at %.1f s (the largest saving)" % (
            rep["mean_gap"], rep["interval"], rep["reported_sample"],
            rep["samples"][rep["reported_sample"] - 1]["time"]) if ns > 1 else "", human(PAGE), rep["hash"]))
    for p in procs:
        if len(procs) > 1:
            w("pid %d (%s):\n" % (p["pid"], p["command"]))
        w(HEAD + "\n")
        rows = p["mappings"]
        shown = sorted(sorted(rows, key=lambda r: -r["pages"])[:max_rows], key=lambda r: int(r["range"].split("-")[0], 16))
        for r in shown:
            w(row_text("%s %s" % (r["range"], os.path.basename(r["path"]) if r["path"][:1] != "[" else r["path"]), r)
              + "\n")
        if len(shown) < len(rows):
            w("  ... %d more mappings (in --json)\n" % (len(rows) - len(shown)))
        w(row_text("total (%d mappings)" % len(rows), p["total"]) + "\n")
        if p["arrays"]:
            w("  arrays (pages overlapping each):\n")
            for a in p["arrays"]:
                label = ("#%d %s %s" % (a["seq"], human(a["size"]), a.get("site") or "")) if "seq" in a else \
                    "%s %s" % (a["addr"], human(a["size"]))
                w(row_text(label, a) + "\n")
        extra = []
        if p["total"]["zero_page_mapped"]:
            extra.append("%d page%s map%s the kernel's zero page (read, never written: no memory, not counted)"
                         % (p["total"]["zero_page_mapped"], "" if p["total"]["zero_page_mapped"] == 1 else "s",
                            "s" if p["total"]["zero_page_mapped"] == 1 else ""))
        if p["total"]["swapped"]:
            extra.append("%d pages swapped out (not read)" % p["total"]["swapped"])
        if p["ksm"] is not None:
            extra.append("KSM now: %d pages merged (ksm_merging_pages; predicted: the %d zero and duplicated)%s" % (
                p["ksm"].get("ksm_merging_pages", 0), p["total"]["zero"] + p["total"]["duplicated"],
                "; this process %s KSM (ksm_merge_any)" % ("lets" if p["ksm"]["ksm_merge_any"] == "yes" else
                                                          "has not opted in to")
                if "ksm_merge_any" in p["ksm"] else ""))
        for e in extra:
            w("  %s\n" % e)
    t = rep["total"]
    if len(procs) > 1:
        w("all %d processes:\n%s\n%s\n" % (len(procs), HEAD, row_text("together", t)))
        w("  between processes: %d pages more than each process merged alone (%s)\n" % (
            rep["between_processes"], human(rep["between_processes"] * PAGE)))
    w("KSM could save %d pages (%s), %s of the %d pages present: %d zero pages -> %d, %d duplicated pages "
      "(%d contents) -> %d%s\n" % (
          t["save"], human(t["save"] * PAGE), pct(t["save"], t["pages"]), t["pages"], t["zero"],
          0 if rep["use_zero_pages"] or not t["zero"] else 1, t["duplicated"], t["contents_duplicated"],
          t["contents_duplicated"], "" if rep["use_zero_pages"] else
          "; %d with use_zero_pages=1" % t["save_use_zero_pages"]))
    k = rep["ksm"]
    if k:
        rate = rep["ksm_scan_pages_per_s"]
        w("KSM on this machine: %s, use_zero_pages %d, %s pages every %s ms%s\n" % (
            "running" if k.get("run") == 1 else "not running (run %s)" % k.get("run"), k.get("use_zero_pages", 0),
            k.get("pages_to_scan"), k.get("sleep_millisecs"),
            "; a full scan of these %d pages: %.2g s" % (t["pages"], rep["scan_time"])
            if rate and not rep["scan_time_given"] else ""))
    else:
        w("KSM: not available in this kernel (/sys/kernel/mm/ksm missing)\n")
    hist = rep["stability"]
    if hist:
        last = rep["samples"][-1]
        w("how long page contents stayed identical (%d samples over %.1f s; a content seen in one sample only "
          "is in the first row):\n" % (len(rep["samples"]), last["time"] - rep["samples"][0]["time"]))
        w("  %-18s %10s %16s\n" % ("duration", "changed", "same at the end"))
        for b in hist:
            w("  %-18s %10d %16d\n" % ("%g - %g s" % (b["from"], b["to"]), b["changed"], b["unchanged_at_end"]))
        if rep["scan_time"] is not None:
            best = rep["samples"][rep["reported_sample"] - 1]
            w("  of the saving at sample %d, contents identical for at least two KSM scans (%.2g s) since "
              "sampling began: %d pages\n" % (best["sample"], 2 * rep["scan_time"], best["save_stable_2_scans"]))


def plot(rep, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("locus: dedup: matplotlib is not installed, no plot written "
                         "(pip install matplotlib, or apt-get install python3-matplotlib)\n")
        return False
    s = rep["samples"]
    hist = rep["stability"]
    fig, axes = plt.subplots(1, 2 if hist else 1, figsize=(12 if hist else 7, 4.5), squeeze=False)
    ax = axes[0][0]
    ts = [x["time"] for x in s]
    mib = PAGE / float(1 << 20)
    ax.plot(ts, [x["pages"] * mib for x in s], marker=".", label="present")
    ax.plot(ts, [(x["zero"] + x["duplicated"]) * mib for x in s], marker=".", label="zero + duplicated")
    ax.plot(ts, [x["save"] * mib for x in s], marker=".", label="KSM could save")
    if any(x["save_stable_2_scans"] is not None for x in s) and len(s) > 1:
        ax.plot(ts, [(x["save_stable_2_scans"] or 0) * mib for x in s], marker=".", linestyle="--",
                label="... of contents stable 2 KSM scans")
    if any(x["ksm_merging_pages"] for x in s):
        ax.plot(ts, [(x["ksm_merging_pages"] or 0) * mib for x in s], marker=".", linestyle=":", label="merged by KSM (ksm_merging_pages)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_title("duplicated pages over time", fontsize=10)
    ax.legend(fontsize=8)
    if hist:
        ax = axes[0][1]
        labels = ["%g-%g" % (b["from"], b["to"]) for b in hist]
        xs = range(len(hist))
        ax.bar(xs, [b["changed"] for b in hist], label="changed")
        ax.bar(xs, [b["unchanged_at_end"] for b in hist], bottom=[b["changed"] for b in hist],
               label="same at the end")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=7, rotation=30)
        ax.set_xlabel("seconds a page's content stayed identical")
        ax.set_ylabel("page contents")
        ax.set_title("stability of page contents", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return True


# ---- command -----------------------------------------------------------------------------
def main(args, libs=None, prog="locus"):
    pids = []
    ranges = []
    trace_path = None
    interval = 1.0
    samples = None
    threshold = None
    scan_time = None
    hashname = "sha1"
    as_json = False
    json_file = plot_out = None
    quiet = False
    ksm_merge = False
    cmd = None
    i = 0

    def value(opt):
        nonlocal i
        if args[i].startswith("--") and "=" in args[i]:
            return args[i].split("=", 1)[1]
        if i + 1 >= len(args):
            raise Fail("dedup: %s needs a value (see locus dedup --help)" % opt, 2)
        i += 1
        return args[i]

    def number(opt, v, lo):
        try:
            x = float(v)
        except ValueError:
            x = None
        if x is None or x != x or x < lo:
            raise Fail("dedup: %s %s: a number of seconds >= %g" % (opt, v, lo), 2)
        return x

    while i < len(args):
        a = args[i]
        if a == "--":
            cmd = args[i + 1:]
            break
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a == "--interval" or a.startswith("--interval="):
            interval = number("--interval", value("--interval"), 0.01)
        elif a == "--samples" or a.startswith("--samples="):
            v = value("--samples")
            if not v.isdigit() or int(v) < 1:
                raise Fail("dedup: --samples %s: a positive number" % v, 2)
            samples = int(v)
        elif a == "--trace" or a.startswith("--trace="):
            trace_path = value("--trace")
        elif a == "--range" or a.startswith("--range="):
            v = value("--range")
            try:
                addr, ln = v.split(":", 1)
                ranges.append((parse_addr(addr), parse_size(ln), v))
            except ValueError:
                raise Fail("dedup: --range %s: expected ADDR:LEN, e.g. 0x7f0000001000:4M" % v, 2)
            if ranges[-1][1] <= 0:
                raise Fail("dedup: --range %s: empty range" % v, 2)
        elif a == "--threshold" or a.startswith("--threshold="):
            v = value("--threshold")
            try:
                threshold = parse_size(v)
            except ValueError:
                raise Fail("dedup: --threshold %s: not a size (e.g. 64k, 1M)" % v, 2)
            if not 16 << 10 <= threshold <= 32 << 20:
                raise Fail("dedup: --threshold %s: must lie in 16k..32M (locus's large-block range)" % v, 2)
        elif a == "--scan-time" or a.startswith("--scan-time="):
            scan_time = number("--scan-time", value("--scan-time"), 0.0)
        elif a == "--hash" or a.startswith("--hash="):
            hashname = value("--hash")
            if hashname not in ("sha1", "blake2b"):
                raise Fail("dedup: --hash %s: sha1 or blake2b" % hashname, 2)
        elif a == "--json":
            as_json = True
        elif a.startswith("--json="):
            json_file = a.split("=", 1)[1]
            if not json_file:
                raise Fail("dedup: --json= needs a file name", 2)
        elif a == "--plot" or a.startswith("--plot="):
            plot_out = value("--plot")
        elif a == "--ksm-merge":
            ksm_merge = True
        elif a in ("-q", "--quiet"):
            quiet = True
        elif a.startswith("-"):
            raise Fail("dedup: unknown option %s (see locus dedup --help; put '--' before a command)" % a, 2)
        elif a.isdigit():
            pids.append(a)
        elif a == "self":
            pids.append(str(os.getpid()))
        else:
            raise Fail("dedup: %s is not a process id (a command goes after '--')" % a, 2)
        i += 1
    if cmd is not None and not cmd:
        raise Fail("dedup: no command after '--' (usage: locus dedup [options] -- CMD [ARG...])", 2)
    if cmd and pids:
        raise Fail("dedup: either PIDs or '-- CMD', not both", 2)
    if not cmd and not pids:
        raise Fail("dedup: no process given (usage: locus dedup PID... or locus dedup [options] -- CMD [ARG...])", 2)
    if cmd and trace_path:
        raise Fail("dedup: --trace is for PIDs; with '-- CMD' the command is traced", 2)
    if pids and threshold is not None:
        raise Fail("dedup: --threshold is for '-- CMD'", 2)
    if pids and ksm_merge:
        raise Fail("dedup: --ksm-merge is for '-- CMD' (a process can only opt itself in)", 2)
    if (ranges or trace_path) and len(pids) > 1:
        raise Fail("dedup: --range and --trace describe one process: give one PID", 2)
    for p in pids:
        if not os.path.isdir("/proc/%s" % p):
            raise Fail("dedup: no process %s" % p)
    ksm = ksm_system()
    uzp = ksm.get("use_zero_pages", 0) == 1
    sm = Sampler(hashname, uzp, quiet)

    trace = None
    sites = {}
    exit_status = None
    if pids:
        arrays = []
        if trace_path:
            try:
                arrays, trace = trace_file_arrays(trace_path, pids[0])
            except OSError as e:
                raise Fail("dedup: --trace %s: %s" % (trace_path, e.strerror))
        arrays += [(a, n, "range", None, []) for a, n, _ in ranges]
        arrays_of = (lambda pid: arrays) if arrays else None
        sm.quiet = sm.quiet or (samples or 1) == 1
        n = samples or 1
        try:
            for s in range(n):
                live = [p for p in pids if os.path.isdir("/proc/%s" % p)]
                if not live:
                    break
                if not sm.sample(live, arrays_of, scan_time, strict=(s == 0)):
                    break
                if s + 1 < n:
                    time.sleep(interval)
        except KeyboardInterrupt:
            sys.stderr.write("%s: dedup: interrupted, reporting the samples taken\n" % prog)
        if not sm.samples:
            raise Fail("dedup: no process could be read")
        if trace:
            sites = {pids[0]: resolve_sites(trace, pids[0], arrays)}
    else:
        import shutil
        if not shutil.which(cmd[0]):
            raise Fail("dedup: %s: command not found" % cmd[0], 127)
        lib = libs() if libs else None
        work = tempfile.mkdtemp(prefix="locus-dedup.")
        tpath = os.path.join(work, "trace.txt")
        env = dict(os.environ)
        env["LOCUS_TRACE_FILE"] = tpath
        if threshold is not None and threshold < (1 << 20):
            env["LOCUS_LARGE_THRESHOLD"] = str(threshold)
        if lib:
            old = [p for p in re.split(r"[: ]+", env.get("LD_PRELOAD", "")) if p]
            env["LD_PRELOAD"] = ":".join([lib] + [p for p in old if os.path.realpath(p) != os.path.realpath(lib)])
        trace = Trace(tpath)
        sys.stdout.flush()
        pre = None
        if ksm_merge:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)

            def pre():
                if libc.prctl(67, 1, 0, 0, 0) != 0:          # PR_SET_MEMORY_MERGE (Linux 6.4)
                    os.write(2, b"locus: dedup: --ksm-merge: prctl(PR_SET_MEMORY_MERGE) failed: %s\n"
                             % os.strerror(ctypes.get_errno()).encode())
                    os._exit(126)
        try:
            proc = subprocess.Popen(cmd, env=env, preexec_fn=pre)
        except FileNotFoundError:
            raise Fail("dedup: %s: command not found" % cmd[0], 127)
        except PermissionError:
            raise Fail("dedup: %s: permission denied" % cmd[0], 126)

        def arrays_of(pid):
            trace.update()
            return trace.arrays(pid)
        try:
            while exit_status is None:
                try:
                    exit_status = proc.wait(timeout=interval)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if samples is None or len(sm.samples) < samples:
                    sm.sample([str(p) for p in descendants(proc.pid)], arrays_of, scan_time, strict=False)
            if exit_status is None:
                exit_status = proc.wait()
        except KeyboardInterrupt:
            sys.stderr.write("%s: dedup: interrupted, reporting the samples taken\n" % prog)
            try:
                exit_status = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                exit_status = proc.wait()
        finally:
            try:
                trace.update()
            finally:
                import shutil as sh
                sh.rmtree(work, ignore_errors=True)
        if exit_status:
            sys.stderr.write("%s: dedup: %s exited with status %d\n" % (prog, cmd[0], exit_status))
        if not sm.samples:
            raise Fail("dedup: %s ended before the first sample (every %g s): nothing read (a shorter "
                       "--interval?)" % (cmd[0], interval))
        for pid, d in sm.best["data"].items():
            if d["arrays"]:
                sites[pid] = resolve_sites(trace, pid, d["arrays"])
    sm.finish()
    rep = build_report(sm, cmd, interval, scan_time, sites)
    if cmd:
        rep["exit_status"] = exit_status
    if as_json:
        json.dump(rep, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_report(rep)
    if json_file:
        with open(json_file, "w") as f:
            json.dump(rep, f, indent=1)
            f.write("\n")
    if plot_out and plot(rep, plot_out):
        (sys.stderr if as_json else sys.stdout).write("plot: %s\n" % plot_out)
    return 0
