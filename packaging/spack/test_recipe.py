#!/usr/bin/env python3
"""Check the Spack recipe packaging/spack/locus/package.py without Spack.

Spack itself cannot be installed where this project is built, so this script
loads the recipe against a small stand-in for the part of Spack's package API
that the recipe uses (written here from Spack's documented behaviour: directives
are recorded, define() and define_from_variant() format -D arguments the way
Spack's CMakeBuilder does). Then:

1. the recipe imports both ways it is written for: Spack 0.x (CMakePackage from
   spack.package) and Spack >= 1.0 (CMakePackage from
   spack_repo.builtin.build_systems.cmake);
2. its directives are the expected ones (version, variants and their defaults
   and values, dependencies, platform and target requirements, LD_PRELOAD
   documented);
3. cmake_args() gives the expected flags for each of the 8 variant combinations;
4. for the default combination and the one with every variant changed (all 8
   with --all), it runs the configure/build/install steps Spack would run
   (Spack's standard CMake arguments + cmake_args(), "Unix Makefiles", make,
   make install) into a temporary prefix, and checks the installed files and
   that each variant took effect (compile definitions, TLS flag of the
   library, exported malloc, a program built against the prefix, LD_PRELOAD).

Exit 0 pass, 1 fail, 77 skip (a tool is missing). Usage:
    test_recipe.py [--source DIR] [--cmake CMAKE] [--generator GEN] [--all] [--keep]
"""

import argparse
import glob
import importlib.util
import itertools
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPE = os.path.join(HERE, "locus", "package.py")
SKIP = 77


def say(msg):
    print(f"[spack_recipe] {msg}", flush=True)


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# ---------------------------------------------------------------------------
# The stand-in for Spack's package API.

class FakeSpack:
    """Builds the modules `spack`, `spack.package` and, for the Spack >= 1.0
    layout, `spack_repo.builtin.build_systems.cmake`, and records the
    directives a recipe calls in its class body."""

    def __init__(self, layout):
        assert layout in ("0.x", "1.x")
        self.layout = layout
        self.directives = []

    def _directive(self, kind):
        def record(*args, **kwargs):
            self.directives.append((kind, args, kwargs))
        record.__name__ = kind
        return record

    def install(self):
        for name in [m for m in sys.modules if m == "spack" or m.startswith(("spack.", "spack_repo"))]:
            del sys.modules[name]
        spack = types.ModuleType("spack")
        spack.__path__ = []  # a package, so that `spack.package` imports
        pkgmod = types.ModuleType("spack.package")
        names = {}
        for kind in ("version", "variant", "depends_on", "requires", "conflicts"):
            names[kind] = self._directive(kind)
        cmake_package = make_cmake_package_class(self)
        if self.layout == "0.x":
            names["CMakePackage"] = cmake_package
        else:
            parents = ["spack_repo", "spack_repo.builtin", "spack_repo.builtin.build_systems"]
            for p in parents:
                m = types.ModuleType(p)
                m.__path__ = []
                sys.modules[p] = m
            cm = types.ModuleType("spack_repo.builtin.build_systems.cmake")
            cm.CMakePackage = cmake_package
            sys.modules[cm.__name__] = cm
        for k, v in names.items():
            setattr(pkgmod, k, v)
        pkgmod.__all__ = sorted(names)
        spack.package = pkgmod
        sys.modules["spack"] = spack
        sys.modules["spack.package"] = pkgmod
        self.cmake_package = cmake_package

    def load_recipe(self):
        self.install()
        sys.dont_write_bytecode = True  # no __pycache__ in the source tree
        spec = importlib.util.spec_from_file_location(f"locus_recipe_{self.layout.replace('.', '_')}", RECIPE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        check(hasattr(mod, "Locus"), "the recipe defines no class Locus")
        check(issubclass(mod.Locus, self.cmake_package),
              f"Locus does not derive from the CMakePackage of the Spack {self.layout} layout")
        return mod.Locus

    def variants(self):
        out = {}
        for kind, args, kwargs in self.directives:
            if kind == "variant":
                out[args[0]] = kwargs
        return out


class FakeVariant:
    def __init__(self, value):
        self.value = value


class FakeSpec:
    """A concrete spec: just variant values; satisfies() knows +v, ~v, v=x."""

    def __init__(self, variants):
        self.variants = {k: FakeVariant(v) for k, v in variants.items()}

    def satisfies(self, constraint):
        c = constraint.strip()
        if c[:1] in "+~" and c[1:].isidentifier():
            name = c[1:]
            check(name in self.variants, f"satisfies('{c}'): no variant {name}")
            value = self.variants[name].value
            check(isinstance(value, bool), f"satisfies('{c}'): {name} is not a boolean variant")
            return value == (c[0] == "+")
        if "=" in c and c.split("=", 1)[0].isidentifier():
            name, want = c.split("=", 1)
            check(name in self.variants, f"satisfies('{c}'): no variant {name}")
            return str(self.variants[name].value) == want
        raise Fail(f"the stand-in spec does not know the constraint '{constraint}'")


def define(var, value):
    """As Spack's define(): bool -> BOOL ON/OFF, list -> ;-joined STRING, else STRING."""
    if isinstance(value, bool):
        return f"-D{var}:BOOL={'ON' if value else 'OFF'}"
    if isinstance(value, (list, tuple)):
        return f"-D{var}:STRING={';'.join(str(v) for v in value)}"
    return f"-D{var}:STRING={value}"


def make_cmake_package_class(fake):
    class CMakePackage:
        """The parts of Spack's CMakePackage a cmake_args() may call."""

        def __init__(self, spec):
            self.spec = spec
            self.name = "locus"

        define = staticmethod(define)

        def has_variant(self, name):
            return name in fake.variants()

        def define_from_variant(self, var, variant=None):
            variant = variant or var.lower()
            if not self.has_variant(variant):
                raise KeyError(f'"{variant}" is not a variant of "locus"')
            if variant not in self.spec.variants:
                return ""
            value = self.spec.variants[variant].value
            if isinstance(value, (list, tuple)):
                value = sorted(value)
            return self.define(var, value)

    return CMakePackage


def spack_std_args(prefix, generator, build_type="Release"):
    """The standard arguments Spack's CMakeBuilder puts before cmake_args()
    (Spack adds its compiler wrappers and dependency prefixes too)."""
    args = ["-G", generator,
            define("CMAKE_INSTALL_PREFIX", prefix),
            define("CMAKE_INSTALL_RPATH_USE_LINK_PATH", True),
            define("CMAKE_INSTALL_RPATH", [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]),
            define("CMAKE_PREFIX_PATH", ""),
            define("CMAKE_BUILD_TYPE", build_type)]
    if generator == "Unix Makefiles":
        args.append(define("CMAKE_VERBOSE_MAKEFILE", True))
    return args


# ---------------------------------------------------------------------------
# 1-3: the recipe itself.

COMBOS = [dict(debug=d, tls=t, override=o)
          for d, t, o in itertools.product((False, True), ("initial-exec", "global-dynamic"), (True, False))]
DEFAULT = dict(debug=False, tls="initial-exec", override=True)


def expected_args(combo):
    return [f"-DLOCUS_DEBUG:BOOL={'ON' if combo['debug'] else 'OFF'}",
            f"-DLOCUS_TLS_MODEL:STRING={combo['tls']}",
            f"-DLOCUS_NO_OVERRIDE:BOOL={'OFF' if combo['override'] else 'ON'}",
            "-DLOCUS_BUILD_TESTS:BOOL=OFF",
            "-DLOCUS_BUILD_BENCH:BOOL=OFF"]


def check_directives(fake, cls):
    dirs = fake.directives
    versions = [(a, k) for kind, a, k in dirs if kind == "version"]
    check(versions == [(("main",), {"branch": "main"})], f"versions: {versions}")
    check(getattr(cls, "git", None) and getattr(cls, "homepage", None), "git and homepage must be set")

    v = fake.variants()
    check(set(v) == {"debug", "tls", "override"}, f"variants: {sorted(v)}")
    check(v["debug"].get("default") is False, "debug must default to False")
    check(v["override"].get("default") is True, "override must default to True")
    check(v["tls"].get("default") == "initial-exec", "tls must default to initial-exec")
    check(tuple(v["tls"].get("values", ())) == ("initial-exec", "global-dynamic"), f"tls values: {v['tls'].get('values')}")
    check(v["tls"].get("multi") is False, "tls must be single-valued (multi=False)")
    for name, kw in v.items():
        check(kw.get("description"), f"variant {name} has no description")

    deps = {a[0]: k for kind, a, k in dirs if kind == "depends_on"}
    check(deps.get("cmake@3.18:", {}).get("type") == "build", f"depends_on cmake@3.18: type=build: {deps}")
    check("c" in deps and "cxx" in deps, "depends_on c and cxx (the compilers CMake enables)")

    reqs = [(a, k) for kind, a, k in dirs if kind == "requires"]
    check(any(a == ("platform=linux",) for a, k in reqs), "requires('platform=linux') missing")
    targets = [(a, k) for a, k in reqs if any(s.startswith("target=") for s in a)]
    check(len(targets) == 1 and set(targets[0][0]) == {"target=x86_64:", "target=aarch64:"}
          and targets[0][1].get("policy") == "one_of",
          f"requires one_of target=x86_64:/aarch64:: {targets}")
    check(all(k.get("msg") for a, k in reqs), "every requirement needs a msg")

    doc = cls.__doc__ or ""
    check("LD_PRELOAD=" in doc and "liblocus.so" in doc, "the docstring must show LD_PRELOAD usage")


def check_cmake_args(cls):
    for combo in COMBOS:
        got = cls(FakeSpec(combo)).cmake_args()
        want = expected_args(combo)
        check(sorted(got) == sorted(want), f"cmake_args() for {spec_str(combo)}:\n  got  {got}\n  want {want}")


def spec_str(combo):
    return (f"locus@main {'+' if combo['debug'] else '~'}debug tls={combo['tls']} "
            f"{'+' if combo['override'] else '~'}override")


# ---------------------------------------------------------------------------
# 4: build and install as Spack would.

def run(cmd, log, cwd=None, env=None):
    with open(log, "a") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        r = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        with open(log) as f:
            sys.stdout.write(f.read()[-6000:])
        raise Fail(f"command failed ({r.returncode}): {' '.join(cmd)}")


def output(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


def cache_value(build, name):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return None


def version_of(source):
    parts = {}
    with open(os.path.join(source, "include", "locus.h")) as f:
        for line in f:
            w = line.split()
            if len(w) == 3 and w[0] == "#define" and w[1].startswith("LOCUS_VERSION_"):
                parts[w[1][len("LOCUS_VERSION_"):]] = w[2]
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def build_and_check(cls, combo, args, work, jobs, keep):
    name = "-".join([("+" if combo["debug"] else "~") + "debug", combo["tls"],
                     ("+" if combo["override"] else "~") + "override"])
    root = os.path.join(work, name)
    build, prefix, log = os.path.join(root, "spack-build"), os.path.join(root, "prefix"), os.path.join(root, "log")
    os.makedirs(build)
    generator = "Unix Makefiles" if shutil.which("make") else args.generator
    opts = spack_std_args(prefix, generator) + cls(FakeSpec(combo)).cmake_args()
    # not a Spack argument: lets this test read the compile definitions
    opts.append("-DCMAKE_EXPORT_COMPILE_COMMANDS:BOOL=ON")
    run([args.cmake] + opts + [os.path.abspath(args.source)], log, cwd=build)
    run([args.cmake, "--build", ".", "--parallel", str(jobs)], log, cwd=build)
    run([args.cmake, "--build", ".", "--target", "install"], log, cwd=build)

    # -- what was configured and built
    check(cache_value(build, "LOCUS_BUILD_TESTS") == "OFF" and cache_value(build, "LOCUS_BUILD_BENCH") == "OFF",
          f"{name}: tests/bench not off in CMakeCache.txt")
    check(not os.path.isdir(os.path.join(build, "tests")) and not os.path.isdir(os.path.join(build, "bench")),
          f"{name}: the test suite or the benchmarks were configured")
    check(cache_value(build, "LOCUS_TLS_MODEL") == combo["tls"], f"{name}: LOCUS_TLS_MODEL in CMakeCache.txt")
    with open(os.path.join(build, "compile_commands.json")) as f:
        cmds = [c for c in json.load(f) if c["file"].endswith(os.path.join("src", "api", "malloc.c"))]
    check(cmds, f"{name}: src/api/malloc.c not in compile_commands.json")
    cc = cmds[0]["command"]
    for define, on in (("-DLOCUS_DEBUG=1", combo["debug"]),
                       ("-DLOCUS_TLS_DYNAMIC=1", combo["tls"] == "global-dynamic"),
                       ("-DLOCUS_NO_OVERRIDE=1", not combo["override"])):
        check((define in cc) == on, f"{name}: {define} {'missing from' if on else 'present in'} the compile command")

    # -- what was installed
    libdir = None
    for cand in [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")] + \
            sorted(glob.glob(os.path.join(prefix, "lib", "*-linux-gnu*"))):
        if os.path.exists(os.path.join(cand, "liblocus.so")):
            libdir = cand
            break
    check(libdir, f"{name}: no liblocus.so installed under {prefix}")
    version = version_of(args.source)
    major, minor = version.split(".")[:2]
    for rel in ("liblocus.so", f"liblocus.so.{major}.{minor}", "liblocus.a", "cmake/locus/locus-config.cmake",
                "cmake/locus/locus-config-version.cmake", "cmake/locus/locus-targets.cmake", "pkgconfig/locus.pc"):
        check(os.path.exists(os.path.join(libdir, rel)), f"{name}: {rel} not installed in {libdir}")
    check(os.path.exists(os.path.join(prefix, "include", "locus.h")), f"{name}: include/locus.h not installed")
    bindir = os.path.join(prefix, "bin")
    progs = sorted(os.listdir(bindir)) if os.path.isdir(bindir) else []
    check(progs == ["locus"], f"{name}: bin/ holds {progs}, expected the locus command only")
    so = os.path.join(libdir, "liblocus.so")
    dyn = output(["readelf", "-d", so])
    check(("STATIC_TLS" in dyn) == (combo["tls"] == "initial-exec"),
          f"{name}: liblocus.so {'lacks' if combo['tls'] == 'initial-exec' else 'has'} the STATIC_TLS flag")
    syms = {line.split()[-1] for line in output(["nm", "-D", "--defined-only", so]).splitlines() if line.strip()}
    check("locus_malloc" in syms, f"{name}: locus_malloc not exported")
    check(("malloc" in syms) == combo["override"], f"{name}: malloc {'not ' if combo['override'] else ''}exported")

    # -- a program built against the prefix, and the documented LD_PRELOAD
    cc_bin = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    check(cc_bin, "no C compiler")
    exe = os.path.join(root, "consumer")
    run([cc_bin, "-O2", "-o", exe, os.path.join(args.source, "tests", "install", "consumer", "consumer.c"),
         "-I" + os.path.join(prefix, "include"), "-L" + libdir, "-llocus", "-Wl,-rpath," + libdir], log)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    mode = "override" if combo["override"] else "no-override"
    out = output([exe, mode], env=env).strip()
    want = f"locus-consumer ok {version} malloc={'locus' if combo['override'] else 'other'}"
    check(out == want, f"{name}: consumer printed '{out}', expected '{want}'")
    maps = output(["cat", "/proc/self/maps"], env=dict(env, LD_PRELOAD=so))
    check(os.path.realpath(so) in maps, f"{name}: LD_PRELOAD={so} did not load the library")
    say(f"{spec_str(combo)}: configured, built, installed; flags, files, TLS model, exports, "
        f"consumer ({out.split(' ', 2)[2]}) and LD_PRELOAD checked")
    if not keep:
        shutil.rmtree(root)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(HERE)), help="locus source tree")
    ap.add_argument("--cmake", default=shutil.which("cmake") or "cmake")
    ap.add_argument("--generator", default="Ninja", help="used only when make is missing")
    ap.add_argument("--all", action="store_true", help="build all 8 variant combinations")
    ap.add_argument("--keep", action="store_true", help="keep the build and install trees")
    args = ap.parse_args()

    try:
        for layout in ("0.x", "1.x"):
            fake = FakeSpack(layout)
            cls = fake.load_recipe()
            check_directives(fake, cls)
            check_cmake_args(cls)
            say(f"recipe loads as for Spack {layout}; directives ok; cmake_args() ok for all {len(COMBOS)} combinations")

        if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
            say(f"SKIP: the recipe builds on Linux x86_64/aarch64 only, not {platform.system()} {platform.machine()}")
            return SKIP
        for tool in ("readelf", "nm"):
            if not shutil.which(tool):
                say(f"SKIP: '{tool}' not installed (binutils)")
                return SKIP
        combos = COMBOS if args.all else [DEFAULT, dict(debug=True, tls="global-dynamic", override=False)]
        work = tempfile.mkdtemp(prefix="locus-spack-")
        try:
            for combo in combos:
                build_and_check(cls, combo, args, work, os.cpu_count() or 2, args.keep)
        finally:
            if args.keep:
                say(f"kept {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
    except Fail as e:
        say(f"FAIL: {e}")
        return 1
    say("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
