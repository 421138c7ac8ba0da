#!/usr/bin/env bash
# Builds the locus test kernel (Debian's linux-source-6.12 with the patch
# series of kernel/) and runs the kernel tests in a QEMU guest.
#
#   kernel.sh build [--stock]   builds (or finds cached) the kernel, prints the
#                               path of its vmlinux (PVH ELF, booted directly)
#   kernel.sh image [--stock]   prints the cached kernel's path; 77 if not built
#   kernel.sh test [--stock]    boots the cached kernel (building it first) and
#                               runs the guest tests (tests/kernel/guest_init.sh)
#   kernel.sh boot [--stock] [-- CMD...]  boots it and runs CMD (default: sh -c uname -a)
#   kernel.sh ci                build + test of the patched kernel; a kernel
#                               that cannot be had is a SKIP (exit 0 with a
#                               message), a failing guest test fails (exit 1);
#                               then `debug` and `cross` if time allows (see
#                               ci below)
#   kernel.sh key [--stock|--debug]  prints the cache key
#   kernel.sh debug             builds (or finds cached) the debug kernel (the
#                               series' config plus kernel/config-debug:
#                               lockdep, DEBUG_VM, KASAN, page_owner,
#                               debug_pagealloc, page_table_check) and runs the
#                               guest tests on it; any lockdep splat, BUG,
#                               KASAN report or WARNING in dmesg fails them
#   build/image/boot --debug    the same for the debug kernel
#   kernel.sh cross [ARCH...]   cross-builds what the series touches (the mm/
#                               objects, fs/proc/task_mmu.o, kernel/fork.o and
#                               the uapi headers) for arm64 alpha mips parisc
#                               (default; LOCUS_CROSS_ARCHES), CONFIG_PAGE_REUSE
#                               on and off, with Debian's cross compilers
#                               (installed with apt-get when missing); xtensa
#                               has no Debian Linux cross compiler
#
# --stock: the same source and config without the patch series (a baseline
# with the same config; `ci` and tests/kernel/run_guest.sh --stock use
# Debian's stock kernel of the NUMA test bed instead, which needs no build).
# --debug: the series with kernel/config-debug merged last, built in a tree
# of its own (work-debug/, so that neither build undoes the other's objects),
# cached under its own key.
#
# Config: `make tinyconfig` with kernel/config (and, with the series,
# kernel/config-series: the options the series adds) merged over it, then
# `make olddefconfig`.  Cache (outside the repository):
#   ${LOCUS_CACHE_DIR:-~/.cache/locus}/kernel/
#     work/linux-source-6.12   one source tree; the series applied to it is
#                              recorded in work/applied/ and reverted before
#                              another series is applied, so make rebuilds
#                              only the files the patches touch
#     ccache/                  the compiler cache (CCACHE_BASEDIR = the tree)
#     images/<key>/vmlinux     one kernel per key = sha256 of the source
#                              package version, kernel/config and the series
# so CI rebuilds only when the patches or the config change.  Builds run at
# nice 19 with make -j$(nproc) (LOCUS_KERNEL_JOBS overrides), for at most
# LOCUS_KERNEL_BUILD_TIMEOUT seconds (2700): a slower machine skips the tests.
#
# Exit status: 0 success; 77 the kernel cannot be had (reason on stderr);
# 1 build or test failure; 2 usage.
set -uo pipefail

me=kernel.sh
say() { echo "$me: $*" >&2; }
skip() { say "SKIP: $*"; exit 77; }
die() { say "ERROR: $*"; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${LOCUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/locus}/kernel
pkg=linux-source-6.12
series_dir=$repo/kernel
jobs=${LOCUS_KERNEL_JOBS:-$(nproc 2>/dev/null || echo 2)}
# CI has 90 min; the test suite takes ~10 and a build from scratch ~10-20 on
# 2 quiet cores: past this limit the build is abandoned (a skip, see build()).
build_limit=${LOCUS_KERNEL_BUILD_TIMEOUT:-2700}

cmd=${1:-}; shift || true
stock=0 debug=0
if [ "${1:-}" = --stock ]; then stock=1; shift; fi
if [ "${1:-}" = --debug ] || [ "$cmd" = debug ]; then debug=1; [ "${1:-}" = --debug ] && shift; fi
# The source tree of the build: one per flavour (the debug config rebuilds
# everything; sharing the tree would undo the normal build's objects).
work=$cache/work
((debug)) && work=$cache/work-debug
# Kernel arguments of the debug kernel's guest (run-time switches of what
# kernel/config-debug builds in).
debug_append="debug_pagealloc=on page_owner=on"

# patches: the series in order (empty with --stock).
patches() {
  ((stock)) && return 0
  [ -f "$series_dir/series" ] || return 0
  grep -v '^\s*#' "$series_dir/series" | sed '/^\s*$/d'
}

# ---- cross-builds of the series' objects --------------------------------
# One clean source tree (work/cross-src: O= builds need a tree without the
# x86 build's objects) with the series applied, one output directory per
# architecture and option, ccache shared with the x86 build.
cross_triplet() {
  case $1 in
    arm64) echo aarch64-linux-gnu ;;
    alpha) echo alpha-linux-gnu ;;
    mips) echo mips64-linux-gnuabi64 ;;
    parisc) echo hppa64-linux-gnu ;;
    *) return 1 ;;
  esac
}
cross_packages() {
  local a=$1 t
  t=$(cross_triplet "$a") || return 1
  echo "gcc-$t"
  # parisc64's vdso32 (built by make prepare) needs the 32-bit compiler too.
  [ "$a" = parisc ] && echo gcc-hppa-linux-gnu
  return 0
}

cross_tree() {
  local src=$cache/work/cross-src k
  k=$(key)
  if [ "$(cat "$src/.locus-key" 2>/dev/null)" != "$k" ]; then
    say "cross: unpacking a clean source tree with the series ($k)"
    rm -rf "$src"; mkdir -p "$src"
    tar -xf "/usr/src/$pkg.tar.xz" -C "$src" --strip-components=1 || die "cannot unpack the source for the cross-builds"
    local p
    for p in $(patches); do
      patch -d "$src" -p1 -s --batch <"$series_dir/$p" >&2 || die "$p does not apply"
    done
    echo "$k" >"$src/.locus-key"
  fi
  echo "$src"
}

# cross_one ARCH on|off: configures a small kernel and builds the objects.
cross_one() {
  local a=$1 opt=$2 src=$3 t out log cfg
  t=$(cross_triplet "$a")
  out=$cache/cross/$a-$opt
  log=$out.log
  mkdir -p "$out"
  cfg=$out/fragment
  {
    echo "CONFIG_MMU=y"
    echo "CONFIG_ADVISE_SYSCALLS=y"
    echo "CONFIG_PROC_FS=y"
    echo "CONFIG_CGROUPS=y"
    echo "CONFIG_MEMCG=y"
    echo "CONFIG_TRANSPARENT_HUGEPAGE=y"
    echo "CONFIG_MEMORY_FAILURE=y"
    [ "$a" = parisc ] && { echo "CONFIG_PA8X00=y"; echo "CONFIG_64BIT=y"; }
    if [ "$opt" = on ]; then echo "CONFIG_PAGE_REUSE=y"; else echo "# CONFIG_PAGE_REUSE is not set"; fi
  } >"$cfg"
  local base=tinyconfig
  [ "$a" = mips ] && base=64r2_defconfig   # a 64-bit MIPS (tinyconfig is 32-bit)
  local mk=(make -s -C "$src" O="$out" ARCH="$a" CROSS_COMPILE="$t-" CC="ccache $t-gcc" HOSTCC="ccache gcc" -j"$jobs")
  (
    export CCACHE_DIR=$cache/ccache CCACHE_BASEDIR=$src CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
    "${mk[@]}" $base >/dev/null &&
    (cd "$out" && "$src/scripts/kconfig/merge_config.sh" -m -O "$out" .config "$cfg" >/dev/null) &&
    "${mk[@]}" olddefconfig >/dev/null &&
    if [ "$opt" = on ] && ! grep -qx CONFIG_PAGE_REUSE=y "$out/.config"; then
      echo "CONFIG_PAGE_REUSE did not stick (64BIT/MMU?)"; exit 1; fi &&
    nice -n 19 "${mk[@]}" prepare &&
    local objs="mm/mmap.o mm/madvise.o mm/memory.o mm/mmu_gather.o mm/swap.o fs/proc/task_mmu.o kernel/fork.o" &&
    { grep -qx CONFIG_TRANSPARENT_HUGEPAGE=y "$out/.config" && objs+=" mm/huge_memory.o" || true; } &&
    { grep -qx CONFIG_NUMA=y "$out/.config" && objs+=" mm/mempolicy.o" || true; } &&
    { grep -qx CONFIG_COMPACTION=y "$out/.config" && objs+=" mm/compaction.o" || true; } &&
    { grep -qx CONFIG_MEMORY_ISOLATION=y "$out/.config" && objs+=" mm/page_isolation.o" || true; } &&
    { grep -qx CONFIG_MEMCG=y "$out/.config" && objs+=" mm/memcontrol.o" || true; } &&
    { [ "$opt" = on ] && objs+=" mm/page_reuse.o" || true; } &&
    nice -n 19 "${mk[@]}" $objs &&
    # The uapi headers: the flag and the advice defined, the flag unlike
    # every other MAP_ bit of the architecture.
    nice -n 19 "${mk[@]}" headers_install INSTALL_HDR_PATH="$out/usr" >/dev/null &&
    printf '#include <linux/mman.h>\n#if !defined(MAP_PAGE_REUSE) || MADV_PAGE_REUSE != 26 || MADV_NO_PAGE_REUSE != 27\n#error uapi\n#endif\n_Static_assert(!(MAP_PAGE_REUSE & (MAP_SHARED | MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS | MAP_GROWSDOWN | MAP_DENYWRITE | MAP_EXECUTABLE | MAP_LOCKED | MAP_NORESERVE | MAP_POPULATE | MAP_NONBLOCK | MAP_STACK | MAP_HUGETLB | MAP_FIXED_NOREPLACE)), "MAP_PAGE_REUSE overlaps");\n' |
      "$t-gcc" -fsyntax-only -nostdinc -I"$out/usr/include" -x c -
  ) >"$log" 2>&1
}

cross() {
  ensure_source
  local arches=("$@") a p src missing=() st=0 t0
  ((${#arches[@]})) || read -r -a arches <<<"${LOCUS_CROSS_ARCHES:-arm64 alpha mips parisc}"
  for a in "${arches[@]}"; do
    cross_triplet "$a" >/dev/null || die "cross: no cross compiler known for $a (xtensa: none in Debian)"
    for p in $(cross_packages "$a"); do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
  done
  if ((${#missing[@]})); then
    command -v apt-get >/dev/null 2>&1 || skip "cross: ${missing[*]} not installed and there is no apt-get"
    say "cross: installing ${missing[*]} (apt-get)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >&2 ||
      skip "cross: cannot install ${missing[*]}"
  fi
  src=$(cross_tree) || exit 1
  for a in "${arches[@]}"; do
    for p in on off; do
      t0=$SECONDS
      if cross_one "$a" "$p" "$src"; then
        say "cross: $a PAGE_REUSE=$p ok ($((SECONDS - t0)) s)"
      else
        tail -15 "$cache/cross/$a-$p.log" >&2
        say "cross: $a PAGE_REUSE=$p FAILED ($((SECONDS - t0)) s; log: $cache/cross/$a-$p.log)"; st=1
      fi
    done
  done
  return $st
}

pkg_version() { dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null; }

key() {
  {
    echo "pkg $(pkg_version)"
    cat "$series_dir/config"
    ((stock)) || cat "$series_dir/config-series"
    ((debug)) && cat "$series_dir/config-debug"
    local p
    for p in $(patches); do echo "patch $p"; cat "$series_dir/$p"; done
  } | sha256sum | cut -c1-16
}

ensure_source() {
  if [ -z "$(pkg_version)" ]; then
    command -v apt-get >/dev/null 2>&1 || skip "$pkg is not installed and there is no apt-get"
    say "installing $pkg and the build dependencies (apt-get)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        "$pkg" ccache bc flex bison libelf-dev libssl-dev xz-utils cpio build-essential; } >&2 ||
      skip "cannot install $pkg with apt-get (not root, no network, or no such package)"
  fi
  [ -n "$(pkg_version)" ] || skip "$pkg is not installed"
  local tarball=/usr/src/$pkg.tar.xz
  [ -r "$tarball" ] || skip "$tarball missing (package $pkg broken?)"
  local v
  v=$(pkg_version)
  if [ ! -f "$work/.unpacked-$v" ]; then
    say "unpacking $tarball into $work"
    rm -rf "$work"
    mkdir -p "$work" && tar -xf "$tarball" -C "$work" || die "cannot unpack $tarball"
    mkdir -p "$work/applied"
    touch "$work/.unpacked-$v"
  fi
  for t in gcc make flex bison bc; do
    command -v $t >/dev/null 2>&1 || skip "$t not found (apt-get install build-essential flex bison bc)"
  done
}

# apply_series: makes work/applied/ equal to the wanted series.
apply_series() {
  local tree=$work/$pkg app=$work/applied want=() have=() p i
  mapfile -t want < <(patches)
  [ -f "$app/series" ] && mapfile -t have <"$app/series"
  if [ "${want[*]:-}" = "${have[*]:-}" ]; then
    local same=1
    for p in "${want[@]}"; do cmp -s "$series_dir/$p" "$app/$p" || same=0; done
    ((same)) && return 0
  fi
  # Files whose content ends up as it was keep their old mtime, so that
  # make does not rebuild what includes them.
  local keep=$work/keep-mtime f
  rm -rf "$keep"; mkdir -p "$keep"
  for p in "${have[@]}" "${want[@]}"; do
    for f in $(grep -h '^+++ b/' "$app/$p" "$series_dir/$p" 2>/dev/null | sed 's|^+++ b/||' | sort -u); do
      [ -f "$tree/$f" ] && [ ! -e "$keep/$f" ] && { mkdir -p "$keep/$(dirname "$f")"; cp -p "$tree/$f" "$keep/$f"; }
    done
  done
  for ((i = ${#have[@]} - 1; i >= 0; i--)); do
    p=${have[i]}
    say "reverting $p"
    patch -d "$tree" -p1 -R -s --batch <"$app/$p" >&2 || {
      say "cannot revert $p: unpacking the source again"
      rm -f "$work"/.unpacked-*; ensure_source; break; }
  done
  rm -f "$app"/*
  : >"$app/series"
  for p in "${want[@]}"; do
    [ -f "$series_dir/$p" ] || die "series names $p, which is not in kernel/"
    say "applying $p"
    patch -d "$tree" -p1 -s --batch <"$series_dir/$p" >&2 || die "$p does not apply to $pkg $(pkg_version)"
    cp "$series_dir/$p" "$app/$p"
    echo "$p" >>"$app/series"
  done
  (cd "$keep" && find . -type f) | while read -r f; do
    cmp -s "$keep/$f" "$tree/$f" && touch -r "$keep/$f" "$tree/$f"
  done
  rm -rf "$keep"
}

build() {
  local k img
  ensure_source
  k=$(key)
  img=$cache/images/$k/vmlinux
  if [ -s "$img" ]; then echo "$img"; return 0; fi
  apply_series
  local tree=$work/$pkg
  mkdir -p "$cache/ccache" "$cache/images/$k"
  local cc=gcc
  if command -v ccache >/dev/null 2>&1; then cc="ccache gcc"; else say "no ccache: building without it"; fi
  export CCACHE_DIR=$cache/ccache CCACHE_BASEDIR=$tree CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  export KBUILD_BUILD_TIMESTAMP="locus" KBUILD_BUILD_USER=locus KBUILD_BUILD_HOST=locus
  local t0=$SECONDS log=$cache/images/$k/build.log
  say "building $( ((debug)) && echo "debug ")kernel $k ($([ $stock = 1 ] && echo stock || echo "series: $(patches | tr '\n' ' ')")) with -j$jobs at nice 19; log: $log"
  (
    cd "$tree" || exit 1
    make -s tinyconfig >/dev/null &&
    scripts/kconfig/merge_config.sh -m .config "$series_dir/config" $( ((stock)) || echo "$series_dir/config-series") \
      $( ((debug)) && echo "$series_dir/config-debug") >/dev/null &&
    make -s olddefconfig >/dev/null &&
    timeout "$build_limit" nice -n 19 make -j"$jobs" CC="$cc" HOSTCC="$cc" vmlinux
  ) >"$log" 2>&1
  local st=$?
  # A machine too slow to build within the limit cannot run the tests: a
  # skip with that reason (the ccache keeps what was compiled for next time).
  ((st == 124)) && skip "the kernel build did not finish within $build_limit s on this machine (LOCUS_KERNEL_BUILD_TIMEOUT; log: $log)"
  ((st == 0)) || { tail -30 "$log" >&2; die "kernel build failed (log: $log)"; }
  # The config must keep what the guest and the tests rely on.
  local opt
  local opts=(CONFIG_NUMA CONFIG_TRANSPARENT_HUGEPAGE CONFIG_MIGRATION CONFIG_USERFAULTFD CONFIG_PVH CONFIG_SERIAL_8250_CONSOLE CONFIG_BLK_DEV_INITRD)
  # The debug config must have kept every option it asks for (a missing
  # dependency drops one silently).
  ((debug)) && mapfile -t -O ${#opts[@]} opts < <(sed -n 's/^\(CONFIG_[A-Z0-9_]*\)=y$/\1/p' "$series_dir/config-debug")
  for opt in "${opts[@]}"; do
    grep -qx "$opt=y" "$tree/.config" || die "$opt is not set in the built config"
  done
  cp "$tree/vmlinux" "$img.tmp" && strip --strip-debug "$img.tmp" 2>/dev/null; mv "$img.tmp" "$img"
  cp "$tree/.config" "$cache/images/$k/config"
  say "built $img in $((SECONDS - t0)) s"
  echo "$img"
}

image() {
  local img
  img=$cache/images/$(key)/vmlinux
  [ -s "$img" ] || { say "no cached kernel for key $(key) (run: scripts/kernel.sh build$([ $stock = 1 ] && echo ' --stock')$([ $debug = 1 ] && echo ' --debug'))"; return 77; }
  echo "$img"
}

# guest_tests IMAGE: builds the static test programs and runs them in the guest.
guest_tests() {
  local img=$1
  if ((debug)); then
    # Slower (KASAN, lockdep, debug_pagealloc under TCG): a longer timeout.
    LOCUS_KERNEL_GUEST_APPEND="$debug_append" LOCUS_KERNEL_TEST_TIMEOUT=${LOCUS_KERNEL_DEBUG_TEST_TIMEOUT:-2400} \
      bash "$repo/tests/kernel/run_guest.sh" "$img"
  elif ((stock)); then bash "$repo/tests/kernel/run_guest.sh" --stock "$img"; else bash "$repo/tests/kernel/run_guest.sh" "$img"; fi
}

case "$cmd" in
  key) ensure_source; key ;;
  cross) cross "$@" ;;
  build) build ;;
  image) image ;;
  boot)
    img=$(image) || exit $?
    [ "${1:-}" = -- ] && shift
    (($#)) || set -- sh -c 'uname -a; cat /proc/cmdline'
    dappend=()
    ((debug)) && dappend=(--append "$debug_append")
    exec bash "$repo/tests/numa/guest/run.sh" --nodes 2 --cpus 2 --kernel "$img" "${dappend[@]}" -- "$@" ;;
  test|debug)
    img=$(build) || exit $?
    guest_tests "$img" ;;
  ci)
    img=$(build); st=$?
    if ((st == 77)); then say "kernel tests skipped: the kernel cannot be built here (reason above)"; exit 0; fi
    ((st == 0)) || exit 1
    guest_tests "$img"; st=$?
    if ((st == 77)); then say "kernel tests skipped: the guest cannot run here (reason above)"; exit 0; fi
    ((st == 0)) || { say "kernel guest tests FAILED (patched kernel)"; exit 1; }
    # The same tests on a stock kernel: the advice is rejected, nothing is reused.
    bash "$repo/tests/kernel/run_guest.sh" --stock; st=$?
    ((st == 0 || st == 77)) || { say "kernel guest tests FAILED (stock kernel)"; exit 1; }
    say "kernel guest tests passed"
    # Optional parts, cheapest first, each only while the time left of the
    # whole CI run allows it (LOCUS_CI_START, set by .ci/run; else this
    # step's start; LOCUS_CI_BUDGET seconds in all, 85 min by default, of
    # CI's 90), and within that time: a failure fails CI, a machine too
    # slow skips them.
    #  - cross-builds of what the series touches (arm64 alpha mips parisc,
    #    the option on and off; ~7 min cold on 2 quiet cores, cached);
    #  - the debug kernel (lockdep, DEBUG_VM, KASAN, page_owner,
    #    debug_pagealloc): a build from scratch as long as the normal one or
    #    longer, and guest tests ~10 times slower; cached like the normal
    #    build.
    start=${LOCUS_CI_START:-$(($(date +%s) - SECONDS))}
    budget=${LOCUS_CI_BUDGET:-5100}
    left() { echo $((budget - ($(date +%s) - start))); }
    optional() {                       # optional NAME NEEDED-SECONDS COMMAND...
      local name=$1 need=$2; shift 2
      local l; l=$(left)
      if ((l < need)); then
        say "$name skipped: $l s left of the CI budget (LOCUS_CI_BUDGET=$budget s), $need s wanted"
        return 0
      fi
      timeout -k 30 "$l" "$@"; local st=$?
      case $st in
        0) say "$name passed" ;;
        77) say "$name skipped (reason above)" ;;
        124|137) say "$name skipped: not done within the $l s left of the CI budget" ;;
        *) say "$name FAILED"; return 1 ;;
      esac
    }
    optional "cross-builds" "${LOCUS_CROSS_NEED:-600}" bash "$0" cross || exit 1
    optional "debug kernel guest tests" "${LOCUS_DEBUG_NEED:-1500}" bash "$0" debug || exit 1
    ;;
  *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
