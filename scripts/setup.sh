#!/usr/bin/env bash
# Installs what locus needs to build, test and benchmark, on Debian/Ubuntu.
# Usage:
#   scripts/setup.sh [build|test|bench|all]   (default: all)
#
# Idempotent and quiet: when every package is already installed it prints
# nothing and makes no apt call at all.  Otherwise it runs `apt-get update`
# once, installs all missing packages with one `apt-get install`, retries
# them one by one if that fails, and finally checks with dpkg-query what is
# really installed: only packages that are still missing are reported, with
# apt's own error text.  A missing package is a warning, not a failure: the
# tests and benchmarks that need it say so and skip themselves.
set -euo pipefail
what=${1:-all}

build_pkgs=(gcc g++ cmake ninja-build make)
# libmimalloc-dev: mimalloc.h, for the mimalloc-heap variant of bench/heap_*.c
# (mi_heap_new/mi_heap_destroy, found with dlsym under the preload).
peer_pkgs=(libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 libmimalloc-dev time)
# MPI over a shaped loopback: the MPI client test and the overlap benchmark
# (bench/overlap_mpi.c, tools/overlap_bench.py: unshare -n from util-linux,
# ip and tc from iproute2).
mpi_pkgs=(openmpi-bin libopenmpi-dev util-linux iproute2)
test_pkgs=(python3 pkg-config sqlite3 git redis-server redis-tools
           clang libclang-rt-14-dev libfuzzer-14-dev libpython3.11-testsuite
           gcc-aarch64-linux-gnu g++-aarch64-linux-gnu binutils-aarch64-linux-gnu libc6-dev-arm64-cross
           qemu-user qemu-system-x86 busybox-static cpio numactl valgrind binutils xz-utils zstd)

want=("${build_pkgs[@]}")
case "$what" in
  build) ;;
  test)  want+=("${peer_pkgs[@]}" "${mpi_pkgs[@]}" "${test_pkgs[@]}") ;;
  bench) want+=("${peer_pkgs[@]}" "${mpi_pkgs[@]}") ;;
  all)   want+=("${peer_pkgs[@]}" "${mpi_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|bench|all]" >&2; exit 2 ;;
esac

# state PKG: dpkg's state of PKG ("installed", "unpacked", "half-installed",
# ...), or "absent" when dpkg does not know it.
# (With several architectures installed, one state per line.)
state() {
  local s
  s=$(dpkg-query -W -f='${db:Status-Status}\n' "$1" 2>/dev/null) || true
  echo "${s:-absent}"
}
# A package whose triggers have not run yet is usable.
usable() {
  state "$1" | grep -qx -e installed -e triggers-pending -e triggers-awaiting
}
# tail_of FILE: the last lines of a command's output, without apt's
# standard progress lines, indented.
tail_of() {
  grep -v -e '^Reading package lists' -e '^Building dependency tree' -e '^Reading state information' "$1" |
    tail -n "${2:-8}" | sed 's/^/    /'
}

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${want[@]}"; do
    usable "$p" || missing+=("$p")
  done
else
  echo "setup: warning: no dpkg-query: not a Debian/Ubuntu system; install by hand the equivalents of:" \
       "${want[*]}" >&2
fi

if ((${#missing[@]})); then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else SUDO=(false); fi
  fi
  log=$(mktemp -d "${TMPDIR:-/tmp}/locus-setup.XXXXXX")
  trap 'rm -rf "$log"' EXIT
  # Wait for another apt or dpkg run (unattended upgrades, a parallel setup)
  # to release its lock instead of failing at once.
  apt=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600)
  declare -A why=()

  echo "setup: installing ${missing[*]}"
  if [ "${SUDO[0]:-}" = false ]; then
    for p in "${missing[@]}"; do why[$p]="not root and no sudo: install it by hand"; done
  else
    if ! "${apt[@]}" update >"$log/update" 2>&1; then
      echo "setup: warning: apt-get update failed (the install below uses the package lists as they are):" >&2
      tail_of "$log/update" >&2
    fi
    if ! "${apt[@]}" install -y --no-install-recommends "${missing[@]}" >"$log/all" 2>&1; then
      if ((${#missing[@]} > 1)); then
        echo "setup: one apt-get install for all of them failed; installing them one by one" >&2
        for p in "${missing[@]}"; do
          usable "$p" && continue
          "${apt[@]}" install -y --no-install-recommends "$p" >"$log/pkg-$p" 2>&1 ||
            why[$p]=$(tail_of "$log/pkg-$p")
        done
      else
        why[${missing[0]}]=$(tail_of "$log/all")
      fi
    fi
  fi

  # What is really there now, whatever apt's exit status said.
  failed=0
  for p in "${missing[@]}"; do
    usable "$p" && continue
    failed=1
    s=$(state "$p" | paste -sd, -)
    echo "setup: warning: $p is not installed (dpkg state: $s); tests and benchmarks that need it will be skipped" >&2
    if [ -n "${why[$p]:-}" ]; then
      printf '  apt-get said:\n%s\n' "${why[$p]}" >&2
    elif [ "$s" != absent ] && [ "$s" != not-installed ] && [ "$s" != config-files ]; then
      echo "  it is unpacked but not configured: an install was interrupted or is still running;" \
           "'dpkg --configure -a' finishes it" >&2
    else
      echo "  apt-get install reported success but did not install it; its last lines:" >&2
      tail_of "$log/all" >&2
    fi
  done
  ((failed)) || echo "setup: done"
fi

# matplotlib: the benchmarks' plots, and the plot checks of ctest bench_harness_logic.
if [ "$what" = bench ] || [ "$what" = test ] || [ "$what" = all ]; then
  if ! python3 -c "import matplotlib" 2>/dev/null; then
    echo "setup: installing matplotlib"
    pipout=$(mktemp "${TMPDIR:-/tmp}/locus-pip.XXXXXX")
    if python3 -m pip install -q matplotlib >"$pipout" 2>&1; then :
    else
      first=$(tail -n 8 "$pipout" | sed 's/^/    /')
      # Debian's own python3 refuses pip installs outside a virtual
      # environment unless told otherwise (PEP 668).
      if ! python3 -m pip install -q --break-system-packages matplotlib >"$pipout" 2>&1; then
        echo "setup: warning: matplotlib unavailable, plots will be skipped; pip said:" >&2
        printf '%s\n' "$first" >&2
        echo "  and with --break-system-packages:" >&2
        tail -n 8 "$pipout" | sed 's/^/    /' >&2
      fi
    fi
    rm -f "$pipout"
  fi
fi
exit 0
