"""Cache geometry of this machine, for the analysers of the locus command.

Read from /sys/devices/system/cpu/cpu0/cache/index*/ (level, type, size,
ways_of_associativity, coherency_line_size). A cache of size S with A ways
has ways of W = S / A bytes: two addresses congruent modulo W (at line
granularity) fall in the same set (S. Valat, PhD thesis, 2014, §3.1). With
pages of U bytes, a physically indexed cache has W / U page colours.
"""

import glob
import os

SYS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _size(text):
    """'32K' -> 32768, '8192K' -> 8388608, '1M' -> 1048576."""
    if not text:
        return None
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    digits = text[:-1] if text[-1].upper() in "KMG" else text
    try:
        return int(digits) * mult
    except ValueError:
        return None


def levels(sys_dir=SYS_CACHE):
    """Data and unified caches, innermost first: dicts with name ('L1d', 'L2',
    'L3'), level, size, ways, line, way (bytes), sets."""
    out = []
    for d in sorted(glob.glob(os.path.join(sys_dir, "index*"))):
        kind = _read(os.path.join(d, "type"))
        if kind not in ("Data", "Unified"):
            continue
        try:
            level = int(_read(os.path.join(d, "level")))
            size = _size(_read(os.path.join(d, "size")))
            ways = int(_read(os.path.join(d, "ways_of_associativity")))
            line = int(_read(os.path.join(d, "coherency_line_size")) or 64)
        except (TypeError, ValueError):
            continue
        if not size or ways <= 0:
            continue
        out.append({"name": "L%d%s" % (level, "d" if kind == "Data" else ""), "level": level, "size": size,
                    "ways": ways, "line": line, "way": size // ways, "sets": size // ways // line})
    out.sort(key=lambda c: c["level"])
    return out


def fallback():
    """A common geometry, used (and said to be used) when sysfs tells nothing."""
    return [{"name": "L1d", "level": 1, "size": 32 << 10, "ways": 8, "line": 64, "way": 4096, "sets": 64},
            {"name": "L2", "level": 2, "size": 1 << 20, "ways": 16, "line": 64, "way": 65536, "sets": 1024}]


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    if n >= 1 << 20:
        return "%.1f MiB" % (n / float(1 << 20))
    if n >= 1 << 10:
        return "%.1f KiB" % (n / 1024.0)
    return "%d B" % n


def describe(caches):
    return ", ".join("%s %s %d-way (way %s)" % (c["name"], human(c["size"]), c["ways"], human(c["way"]))
                     for c in caches)
