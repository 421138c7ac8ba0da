#!/usr/bin/env bash
# Installs what locus needs to build, test and benchmark, on Debian/Ubuntu.
# Idempotent: packages already present are not touched. Usage:
#   scripts/setup.sh [build|test|bench|all]   (default: all)
set -euo pipefail
what=${1:-all}

build_pkgs=(gcc g++ cmake ninja-build make)
peer_pkgs=(libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 time)
test_pkgs=(python3 sqlite3 git redis-server redis-tools openmpi-bin libopenmpi-dev
           clang libclang-rt-14-dev libfuzzer-14-dev libpython3.11-testsuite)

want=("${build_pkgs[@]}")
case "$what" in
  build) ;;
  test)  want+=("${peer_pkgs[@]}" "${test_pkgs[@]}") ;;
  bench) want+=("${peer_pkgs[@]}") ;;
  all)   want+=("${peer_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|bench|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq || true
  # A package that cannot be had (old distribution, closed mirror) is skipped:
  # the tests and benchmarks that need it say so and skip themselves.
  for p in "${missing[@]}"; do
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$p" \
      >/dev/null 2>&1 || echo "setup: warning: could not install $p (dependent tests/peers will be skipped)" >&2
  done
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 -c "import matplotlib" 2>/dev/null || {
    echo "setup: installing matplotlib"
    python3 -m pip install -q matplotlib 2>/dev/null || python3 -m pip install -q --break-system-packages matplotlib ||
      echo "setup: warning: matplotlib unavailable, plots will be skipped" >&2
  }
fi
exit 0
