#!/usr/bin/env python3
"""dlopen_ctypes DYNTLS_LIB [DEFAULT_LIB]: locus loaded by Python's ctypes.

ctypes.CDLL dlopens the library (RTLD_NOW | RTLD_LOCAL) into a running
interpreter, the case the global-dynamic TLS build exists for. With each
library: locus_version, locus_malloc / locus_usable_size / locus_free over
16 B .. 64 MiB (a word written and read back at both ends of every block), and
locus_stats_json parsed with json.loads (keys "features" with "thp",
"page_size", "madv_free", and "options"), from the main thread and from a
threading.Thread.

DYNTLS_LIB must load and pass. DEFAULT_LIB (initial-exec TLS) is tried too:
if ctypes cannot load it, the reason is printed and the test does not fail
for it; if it loads, it must pass the same checks. The last line says which.
Exit 0 pass, 1 fail.
"""
import ctypes
import json
import os
import sys
import threading

SIZES = []
s = 16
while s <= 64 << 20:
    SIZES += [s, s + s // 2 + 8]
    s *= 2


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def bind(lib):
    lib.locus_malloc.restype = ctypes.c_void_p
    lib.locus_malloc.argtypes = [ctypes.c_size_t]
    lib.locus_free.restype = None
    lib.locus_free.argtypes = [ctypes.c_void_p]
    lib.locus_usable_size.restype = ctypes.c_size_t
    lib.locus_usable_size.argtypes = [ctypes.c_void_p]
    lib.locus_version.restype = ctypes.c_char_p
    lib.locus_version.argtypes = []
    lib.locus_stats_json.restype = ctypes.c_size_t
    lib.locus_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def stats(lib):
    need = lib.locus_stats_json(None, 0)
    check(need > 2, f"locus_stats_json(NULL, 0) returned {need}")
    # The report holds live figures (resident bytes, counters): between the
    # two calls its length may change by a few digits, so room is left.
    buf = ctypes.create_string_buffer(need + 257)
    got = lib.locus_stats_json(buf, need + 257)
    check(abs(got - need) <= 64, f"locus_stats_json: {got} bytes, announced {need}")
    check(len(buf.value) == got, f"locus_stats_json wrote {len(buf.value)} bytes, returned {got}")
    try:
        doc = json.loads(buf.value.decode())
    except ValueError as e:
        raise Fail(f"locus_stats_json is not JSON ({e}): {buf.value[:200]!r}")
    for k in ("features", "options"):
        check(k in doc, f"JSON has no key '{k}'")
    for k in ("thp", "page_size", "madv_free"):
        check(k in doc["features"], f"JSON features have no key '{k}'")
    check(isinstance(doc["features"]["page_size"], int) and doc["features"]["page_size"] >= 4096,
          f"features.page_size = {doc['features']['page_size']!r}")
    check(isinstance(doc["features"]["madv_free"], bool), "features.madv_free is not a boolean")
    check(isinstance(doc["options"], dict) and "profile" in doc["options"], "options lack 'profile'")
    return doc


def exercise(lib, where):
    version = lib.locus_version().decode()
    check(len(version.split(".")) == 3, f"locus_version() = {version!r}")
    blocks = []
    for i, n in enumerate(SIZES):
        p = lib.locus_malloc(n)
        check(p, f"locus_malloc({n}) returned NULL")
        u = lib.locus_usable_size(p)
        check(u >= n, f"locus_usable_size = {u} < {n}")
        head = ctypes.c_uint64.from_address(p)
        tail = ctypes.c_uint64.from_address(p + n - 8)
        head.value = (i << 8) | 0xA5
        tail.value = (i << 8) | 0x5A
        blocks.append((p, n, i))
    for p, n, i in blocks:
        check(ctypes.c_uint64.from_address(p).value == (i << 8) | 0xA5, f"start of block {n} overwritten")
        check(ctypes.c_uint64.from_address(p + n - 8).value == (i << 8) | 0x5A, f"end of block {n} overwritten")
        lib.locus_free(p)
    doc = stats(lib)
    check(doc.get("version") == version, f"JSON version {doc.get('version')!r} != {version!r}")
    print(f"  {where}: {len(SIZES)} blocks 16 B .. 64 MiB ok; stats JSON ok "
          f"(thp {doc['features']['thp']}, page {doc['features']['page_size']}, "
          f"madv_free {doc['features']['madv_free']}, {len(doc['heaps'])} heap(s))")
    return doc


def run(path):
    lib = ctypes.CDLL(path)
    bind(lib)
    print(f"loaded {path}: locus {lib.locus_version().decode()}")
    exercise(lib, "main thread")
    errors = []

    def body():
        try:
            exercise(lib, f"thread {threading.get_native_id()}")
        except Exception as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    doc = stats(lib)
    check(len(doc["heaps"]) >= 2, f"2 threads allocated but the JSON lists {len(doc['heaps'])} heap(s)")


def main():
    if len(sys.argv) < 2:
        print("usage: dlopen_ctypes.py DYNTLS_LIB [DEFAULT_LIB]", file=sys.stderr)
        return 2
    dyn = sys.argv[1]
    try:
        run(dyn)
    except (OSError, AttributeError, Fail) as e:
        print(f"dlopen_ctypes: FAIL with {dyn}: {e}", file=sys.stderr)
        return 1
    summary = f"global-dynamic {os.path.basename(dyn)}: loads and works"
    if len(sys.argv) > 2:
        default = sys.argv[2]
        try:
            lib = ctypes.CDLL(default)
        except OSError as e:
            print(f"note: ctypes cannot load the default library {default}: {e}")
            summary += f"; default {os.path.basename(default)}: does not load ({e})"
        else:
            del lib
            try:
                run(default)
            except (AttributeError, Fail) as e:
                print(f"dlopen_ctypes: FAIL with {default} (it loads but fails): {e}", file=sys.stderr)
                return 1
            summary += f"; default {os.path.basename(default)}: loads and works"
    print(summary)
    print("dlopen_ctypes: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
