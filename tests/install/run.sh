#!/usr/bin/env bash
# ctest install_consumers: installs the build tree into a temporary prefix and
# uses it the ways a program would, each checked by running the program:
#   (a) pkg-config --cflags --libs locus, with an rpath to the prefix's libdir;
#   (b) a CMake project with find_package(locus X.Y) linking locus::locus
#       (and find_package's version checks: SameMinorVersion while major is 0);
#   (c) the same project linking locus::locus-static (no liblocus.so needed).
# Also checks the installed file set and that no installed file names the build
# or source tree. Exit 0 pass, 1 fail, 77 skip (pkg-config missing).
# The prefix is removed at exit (LOCUS_KEEP_TMP=1 keeps it).
#
# usage: run.sh CMAKE BUILD_DIR SOURCE_DIR LIBDIR INCLUDEDIR VERSION override|no-override CC GENERATOR [MAKE_PROGRAM]
set -euo pipefail
# (no grep -q after a pipe: it may exit before the writer is done, whose
# SIGPIPE would then fail the pipeline)

say()  { printf '[install_consumers] %s\n' "$*"; }
die()  { say "FAIL: $*" >&2; exit 1; }

[ $# -ge 9 ] || die "usage: $0 CMAKE BUILD_DIR SOURCE_DIR LIBDIR INCLUDEDIR VERSION override|no-override CC GENERATOR [MAKE_PROGRAM]"
cmake=$1 build=$2 src=$3 libdir=$4 incdir=$5 version=$6 mode=$7 cc=$8 gen=$9 make=${10:-}
here=$(cd "$(dirname "$0")" && pwd)

command -v pkg-config >/dev/null 2>&1 || { say "SKIP: pkg-config not installed (apt-get install pkg-config)"; exit 77; }
case "$libdir$incdir" in
  /*) die "absolute CMAKE_INSTALL_LIBDIR/INCLUDEDIR: this test installs into a temporary prefix only" ;;
esac
unset LD_PRELOAD LD_LIBRARY_PATH PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR CMAKE_PREFIX_PATH

major=${version%%.*}; rest=${version#*.}; minor=${rest%%.*}
soname=liblocus.so.$major.$minor
if [ "$mode" = override ]; then expect_malloc=locus; else expect_malloc=other; fi
expected="locus-consumer ok $version malloc=$expect_malloc"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-install.XXXXXX")
cleanup() {
  if [ "${LOCUS_KEEP_TMP:-0}" = 1 ]; then say "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
P=$tmp/prefix
L=$P/$libdir

# ---- install ------------------------------------------------------------------
"$cmake" --install "$build" --prefix "$P" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; die "cmake --install"; }
for f in "$L/liblocus.so" "$L/$soname" "$L/liblocus.so.$version" "$L/liblocus.a" "$P/$incdir/locus.h" \
         "$L/cmake/locus/locus-config.cmake" "$L/cmake/locus/locus-config-version.cmake" \
         "$L/cmake/locus/locus-targets.cmake" "$L/pkgconfig/locus.pc"; do
  [ -e "$f" ] || { find "$P" >&2; die "not installed: ${f#"$P"/}"; }
done
cmp -s "$P/$incdir/locus.h" "$src/include/locus.h" || die "installed locus.h differs from include/locus.h"
readelf -d "$L/liblocus.so" | grep "SONAME.*\[$soname\]" >/dev/null || die "SONAME of liblocus.so is not $soname"
say "installed $(find "$P" -type f | wc -l) files into <prefix> (libdir $libdir)"

# No installed file may name the build or source tree. Text files: anywhere
# (the prefix itself, which may lie below them, is masked). Binaries: in their
# dynamic section (RPATH/RUNPATH), and anywhere unless they carry debug info,
# whose source and build paths are expected (RelWithDebInfo/Debug builds).
while IFS= read -r -d '' f; do
  rel=${f#"$P"/}
  if grep -Iq '' "$f"; then
    if sed "s#$P#<prefix>#g" "$f" | grep -nF -e "$build" -e "$src" >&2; then
      die "$rel names the build or source tree"
    fi
  else
    case "$rel" in *.so*)
      if readelf -d "$f" | grep -E 'RPATH|RUNPATH' | grep -F -e "$build" -e "$src" >&2; then
        die "$rel has an RPATH/RUNPATH into the build tree"
      fi ;;
    esac
    if readelf -S -W "$f" 2>/dev/null | grep '\.debug_info' >/dev/null; then continue; fi
    if grep -aqF -e "$build" -e "$src" "$f"; then die "$rel contains a path of the build or source tree"; fi
  fi
done < <(find "$P" -type f -print0)
say "no installed file names $build or $src"

check_run() {  # check_run NAME EXE: the program prints the expected line
  local out
  out=$("$2" "$mode") || die "$1: the consumer failed (output: $out)"
  [ "$out" = "$expected" ] || die "$1: printed '$out', expected '$expected'"
}
needs_so() {  # needs_so EXE: prints the liblocus.so the program resolves
  ldd "$1" | awk '/liblocus\.so/ { print $3 }'
}

# ---- (a) pkg-config -----------------------------------------------------------
export PKG_CONFIG_PATH=$L/pkgconfig
[ "$(pkg-config --modversion locus)" = "$version" ] || die "pkg-config --modversion locus: $(pkg-config --modversion locus)"
[ "$(pkg-config --variable=prefix locus)" = "$P" ] || die "locus.pc: prefix=$(pkg-config --variable=prefix locus), expected the install prefix"
pc_libdir=$(pkg-config --variable=libdir locus)
[ "$pc_libdir" = "$L" ] || die "locus.pc: libdir=$pc_libdir, expected $L"
pkg-config --static --libs locus | grep -- '-pthread' >/dev/null || die "pkg-config --static --libs locus lacks -pthread"
# shellcheck disable=SC2046
"$cc" -O2 -Wall -Wextra -o "$tmp/consumer_pc" "$here/consumer/consumer.c" \
  $(pkg-config --cflags --libs locus) -Wl,-rpath,"$pc_libdir" 2>"$tmp/cc.log" || { cat "$tmp/cc.log"; die "(a) pkg-config build"; }
[ "$(needs_so "$tmp/consumer_pc")" = "$L/$soname" ] || { ldd "$tmp/consumer_pc"; die "(a) does not load $L/$soname"; }
check_run "(a) pkg-config" "$tmp/consumer_pc"
say "(a) pkg-config --cflags --libs locus + rpath: ok ($expected)"

# ---- (b), (c) find_package ----------------------------------------------------
cmake_consumer() {  # cmake_consumer DIR TARGET [extra cmake args]
  local dir=$1 target=$2; shift 2
  local args=(-S "$here/consumer" -B "$dir" -G "$gen" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$search"
              -DLOCUS_TARGET="$target" -DLOCUS_REQUEST="$major.$minor")
  if [ -n "$make" ]; then args+=(-DCMAKE_MAKE_PROGRAM="$make"); fi
  "$cmake" "${args[@]}" "$@" >"$dir.log" 2>&1 || { cat "$dir.log"; die "configure of the CMake consumer ($target)"; }
  grep -qF -- "-- locus $version from $L/cmake/locus" "$dir.log" || { cat "$dir.log"; die "find_package(locus) did not find the installed locus"; }
  "$cmake" --build "$dir" >>"$dir.log" 2>&1 || { cat "$dir.log"; die "build of the CMake consumer ($target)"; }
}

# find_package searches <prefix>/lib/cmake and <prefix>/lib/<arch>/cmake, but
# <prefix>/lib64/cmake only where the platform uses lib64 (not on Debian): for
# any other libdir, the consumer also names <libdir>/cmake, as a user would
# (docs/install.md).
search=$P
case "$libdir" in
  lib|lib/*) ;;
  *) search="$P;$L/cmake"; say "libdir $libdir: CMAKE_PREFIX_PATH=<prefix>;<prefix>/$libdir/cmake" ;;
esac

# find_package(locus V) must accept X.Y and X.Y.Z, and reject the next minor
# and major; while the major is 0, also an earlier minor (SameMinorVersion).
checks="$major.$minor=1;$version=1;$major.$((minor + 1))=0;$((major + 1)).0=0"
if [ "$major" = 0 ] && [ "$minor" -gt 0 ]; then checks="$checks;0.$((minor - 1))=0"; fi
cmake_consumer "$tmp/shared" locus::locus -DLOCUS_VERSION_CHECKS="$checks"
grep -c 'as expected' "$tmp/shared.log" | grep -x "$(tr ';' '\n' <<<"$checks" | wc -l)" >/dev/null || { cat "$tmp/shared.log"; die "version checks did not run"; }
[ "$(needs_so "$tmp/shared/consumer")" = "$L/$soname" ] || { ldd "$tmp/shared/consumer"; die "(b) does not load $L/$soname"; }
check_run "(b) locus::locus" "$tmp/shared/consumer"
say "(b) find_package(locus $major.$minor) + locus::locus: ok; version checks ${checks//;/ } passed"

cmake_consumer "$tmp/static" locus::locus-static
if readelf -d "$tmp/static/consumer" | grep -F 'NEEDED' | grep liblocus >/dev/null; then
  readelf -d "$tmp/static/consumer"; die "(c) the locus::locus-static program needs liblocus.so"
fi
[ -z "$(needs_so "$tmp/static/consumer")" ] || die "(c) ldd lists liblocus.so"
nm "$tmp/static/consumer" | grep ' T locus_malloc$' >/dev/null || die "(c) locus_malloc is not defined in the program"
if [ "$mode" = override ]; then
  nm "$tmp/static/consumer" | grep ' T malloc$' >/dev/null || die "(c) malloc is not defined in the program"
fi
check_run "(c) locus::locus-static" "$tmp/static/consumer"
say "(c) find_package(locus $major.$minor) + locus::locus-static: ok (no liblocus.so needed)"
say "PASS"
