# Spack recipe for locus. How a site adds it to its Spack: packaging/spack/README.md.
# Checked by packaging/spack/test_recipe.py (ctest spack_recipe).

from spack.package import *

try:  # Spack >= 1.0: the build systems live in the builtin package repository
    from spack_repo.builtin.build_systems.cmake import CMakePackage
except ImportError:  # Spack 0.x: spack.package exports them
    pass


class Locus(CMakePackage):
    """locus: a NUMA-aware memory allocator for HPC on Linux, a drop-in
    replacement for malloc/free/realloc/... and the C++ operators new/delete.

    Use it without rebuilding a program, by preloading the installed library:

        LD_PRELOAD=$(spack location -i locus)/lib/liblocus.so ./app

    (lib64 instead of lib where CMake installs libraries there), or link it:
    -llocus with pkg-config (`pkg-config --cflags --libs locus`), or
    find_package(locus) and the CMake target locus::locus (shared) or
    locus::locus-static. The locus_* API (profiles, statistics, release of
    cached memory) is declared in <locus.h>.

    Variants: +debug checks the allocator's invariants (slower);
    tls=global-dynamic is for a locus loaded with dlopen (plugins, Python
    ctypes), initial-exec (default) is faster and right for LD_PRELOAD and
    linking; ~override exports only the locus_* names, so that locus can
    live beside another allocator.
    """

    homepage = "https://example.org/locus"  # placeholder: no public page yet
    git = "https://example.org/locus.git"  # placeholder: set to the real repository

    version("main", branch="main")

    variant("debug", default=False, description="Check the allocator's invariants with assertions (slower)")
    variant(
        "tls",
        default="initial-exec",
        values=("initial-exec", "global-dynamic"),
        multi=False,
        description="TLS model: initial-exec (LD_PRELOAD, linking) or global-dynamic (dlopen)",
    )
    variant("override", default=True, description="Export malloc/free/new/delete, not only locus_*")

    depends_on("c", type="build")
    depends_on("cxx", type="build")  # project(... C CXX): CMake enables C++
    depends_on("cmake@3.18:", type="build")

    # Linux only (mmap/mremap, NUMA system calls, glibc's allocator names), and
    # only the architectures of its arch layer: every other platform and target
    # conflicts.
    requires("platform=linux", msg="locus runs on Linux only")
    requires(
        "target=x86_64:",
        "target=aarch64:",
        policy="one_of",
        msg="locus supports x86_64 and aarch64 only",
    )

    def cmake_args(self):
        return [
            self.define_from_variant("LOCUS_DEBUG", "debug"),
            self.define_from_variant("LOCUS_TLS_MODEL", "tls"),
            self.define("LOCUS_NO_OVERRIDE", self.spec.satisfies("~override")),
            # the installed package is the library: no test suite, no benchmarks
            self.define("LOCUS_BUILD_TESTS", False),
            self.define("LOCUS_BUILD_BENCH", False),
        ]
