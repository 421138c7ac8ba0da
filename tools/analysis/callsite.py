"""Which of the call-site candidates of a locus trace record is the call to malloc.

The trace (src/config/trace.c) lists the words of the stack above locus's frames
that point into executable code. Most are return addresses of live frames, but
some are stale: words left in unused frame slots by earlier, deeper calls. A
return address is the caller's call to the allocator when the instruction just
before it calls an allocation function (x86-64):

  e8 rel32            call f@plt: f's PLT stub jumps through a GOT slot
                      (ff 25 disp32, after an optional endbr64 / bnd prefix);
  ff 15 disp32        call *f@GOTPCREL(%rip) (-fno-plt);

and the GOT slot's dynamic relocation names malloc, calloc, realloc,
posix_memalign, aligned_alloc, memalign, valloc, pvalloc, reallocarray or an
operator new. Candidates that pass are "verified". Other architectures, or
calls this does not decode, leave every candidate unverified.
"""

import os
import platform
import struct

ALLOC = {"malloc", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc", "memalign",
         "valloc", "pvalloc"}


def is_alloc(name):
    name = name.split("@")[0]
    return name in ALLOC or name.startswith("_Znw") or name.startswith("_Zna")


class Elf:
    """The parts of a 64-bit little-endian ELF file needed to name PLT calls."""

    def __init__(self, path):
        self.ok = False
        try:
            with open(path, "rb") as f:
                self.data = f.read()
        except OSError:
            return
        d = self.data
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            return
        phoff, shoff = struct.unpack_from("<QQ", d, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", d, 54)
        self.loads = []
        for i in range(phnum):
            ptype, _f, off, vaddr, _p, filesz = struct.unpack_from("<IIQQQQ", d, phoff + i * phentsize)
            if ptype == 1:
                self.loads.append((off, vaddr, filesz))
        secs = []
        for i in range(shnum):
            secs.append(struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize))
        self.got = {}                  # GOT slot vaddr -> symbol name
        for s in secs:
            stype, off, size, link, entsize = s[1], s[4], s[5], s[6], s[9]
            if stype != 4 or not entsize:  # SHT_RELA
                continue
            sym = secs[link] if link < len(secs) else None
            if not sym:
                continue
            strsec = secs[sym[6]] if sym[6] < len(secs) else None
            if not strsec:
                continue
            for k in range(size // entsize):
                r_offset, r_info = struct.unpack_from("<QQ", d, off + k * entsize)
                idx = r_info >> 32
                if not idx:
                    continue
                st_name, = struct.unpack_from("<I", d, sym[4] + idx * 24)
                end = d.find(b"\0", strsec[4] + st_name)
                self.got[r_offset] = d[strsec[4] + st_name:end].decode("ascii", "replace")
        self.ok = True

    def read(self, vaddr, n):
        for off, va, filesz in self.loads:
            if va <= vaddr and vaddr + n <= va + filesz:
                return self.data[off + vaddr - va: off + vaddr - va + n]
        return None

    def callee(self, ret):
        """The function called by the instruction that ends at vaddr `ret`, when
        it is called through a GOT slot with a symbol; else None."""
        b = self.read(ret - 6, 6)
        if not b:
            return None
        if b[0] == 0xFF and b[1] == 0x15:                    # call *disp32(%rip)
            disp, = struct.unpack_from("<i", b, 2)
            return self.got.get(ret + disp)
        if b[1] == 0xE8:                                     # call rel32
            rel, = struct.unpack_from("<i", b, 2)
            stub = self.read(ret + rel, 16)
            if not stub:
                return None
            for k in range(0, 10):
                if stub[k] == 0xFF and stub[k + 1] == 0x25:  # jmp *disp32(%rip)
                    disp, = struct.unpack_from("<i", stub, k + 2)
                    return self.got.get(ret + rel + k + 6 + disp)
                if stub[k] not in (0xF3, 0x0F, 0x1E, 0xFA, 0xF2):   # endbr64, bnd
                    break
        return None


class Verifier:
    def __init__(self):
        self.elfs = {}
        self.x86 = platform.machine() in ("x86_64", "AMD64")

    def callee(self, path, vaddr):
        if not self.x86 or not path:
            return None
        if path not in self.elfs:
            self.elfs[path] = Elf(path) if os.path.isfile(path) else None
        e = self.elfs[path]
        return e.callee(vaddr) if e and e.ok else None


SYSTEM_DIRS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/")


def is_system(path):
    return bool(path) and path.startswith(SYSTEM_DIRS)
