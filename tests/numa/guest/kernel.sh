#!/usr/bin/env bash
# Obtains the guest kernel of the NUMA test bed once and prints its path.
#
#   kernel.sh               prints the path of a cached vmlinuz, fetching one first if the cache has none
#   kernel.sh --refresh     fetches the newest available kernel even if one is cached
#   kernel.sh --boot-image  prints the image run.sh boots: the uncompressed kernel
#                           (vmlinux-<version>, an ELF with a PVH entry point, which
#                           QEMU loads directly) taken out of the vmlinuz once, or
#                           the vmlinuz itself when that cannot be done
#   kernel.sh --module NAME prints the path of the kernel module NAME.ko of the cached
#                           kernel (uncompressed, for busybox insmod), fetching the
#                           kernel's package again if the cache has no copy
#
# Booting the uncompressed kernel saves the 2-3 s the bzImage's decompressor
# takes under TCG.  Taking it out needs the decompressor of the kernel's
# compression (zstd for Debian's, else xz or gzip) and readelf (binutils) to
# check that it has a PVH entry point.
#
# The kernel comes from Debian's package of a generic x86-64 kernel, which has
# NUMA, ACPI SRAT, the 8250 serial console, devtmpfs and initramfs support
# built in (no modules are needed).  The package is only downloaded
# (`apt-get download`) and unpacked into a temporary directory (`dpkg-deb -x`),
# never installed.  The vmlinuz, the vmlinux taken out of it, the kernel's
# config (for reference) and the few modules a test loads in the guest (zram
# and the lz4 modules it needs, for the swap test; --module fetches others),
# uncompressed for busybox insmod, are kept outside the repository:
#
#   ${LOCUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/locus}/guest-kernel/vmlinuz-<version>
#   .../guest-kernel/modules-<version>/<name>.ko
#
# Choice of package: $LOCUS_GUEST_KERNEL_PKG if set, else the newest
# linux-image-6.12.*-amd64-unsigned the package lists know, else the newest
# linux-image-<version>-amd64[-unsigned] of any version (said on stderr).
# $LOCUS_GUEST_KERNEL, if set, names a kernel image to use as it is (printed
# for both forms).
#
# Exit status: 0 and the path on stdout; 77 (the test suite's "skip") with the
# reason on stderr when no kernel can be had; 1 on a usage error.
set -euo pipefail

say() { echo "kernel.sh: $*" >&2; }
skip() { say "$*"; exit 77; }

refresh=0 boot=0 module=""
keep_modules="zram lz4_compress lz4hc_compress"   # kept with every kernel fetched
case "${1:-}" in
  "") ;;
  --refresh) refresh=1 ;;
  --boot-image) boot=1 ;;
  --module)
    module=${2:-}
    [[ $module =~ ^[A-Za-z0-9_-]+$ ]] || { say "--module needs a module name"; exit 1; } ;;
  -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) say "unknown argument '$1' (try --help)"; exit 1 ;;
esac

if [ -n "${LOCUS_GUEST_KERNEL:-}" ]; then
  [ -z "$module" ] || skip "LOCUS_GUEST_KERNEL is set: its modules cannot be fetched"
  [ -r "$LOCUS_GUEST_KERNEL" ] || skip "LOCUS_GUEST_KERNEL=$LOCUS_GUEST_KERNEL is not a readable file"
  echo "$LOCUS_GUEST_KERNEL"
  exit 0
fi

cache_root=${LOCUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/locus}
dir=$cache_root/guest-kernel
mkdir -p "$dir" || skip "cannot create the cache directory $dir"

# One fetch at a time per cache directory (parallel test runs).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.lock"
  flock -w 900 9 || skip "timed out waiting for the lock $dir/.lock"
fi

# version_of PKG: the kernel release that PKG's name carries
# (linux-image-6.12.117+deb12-amd64-unsigned -> 6.12.117+deb12-amd64).
version_of() {
  local v=${1#linux-image-}
  echo "${v%-unsigned}"
}

# The newest cached kernel, if any (and the one of the pinned package, if pinned).
cached() {
  if [ -n "${LOCUS_GUEST_KERNEL_PKG:-}" ]; then
    local f
    f=$dir/vmlinuz-$(version_of "$LOCUS_GUEST_KERNEL_PKG")
    [ -s "$f" ] && echo "$f"
    return 0
  fi
  local f
  # shellcheck disable=SC2012
  f=$(ls -1 "$dir"/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
  [ -n "$f" ] && [ -s "$f" ] && echo "$f"
  return 0
}

# extract_elf VMLINUZ OUT: puts at OUT the ELF kernel compressed inside the
# bzImage VMLINUZ, if it has a PVH entry point; fails otherwise.  The boot
# protocol's header says where the compressed kernel is (payload_offset and
# payload_length, from the protected-mode code after the setup sectors); the
# kernel's build may append the uncompressed size (4 bytes) to it.
extract_elf() {
  local img=$1 out=$2 setup off len start magic dec cut st
  command -v readelf >/dev/null 2>&1 || return 1
  byte_at() { od -An -t u"$2" -j "$3" -N "$2" "$1" | tr -d ' '; }
  [ "$(byte_at "$img" 4 $((0x202)))" = 1400005704 ] || return 1 # "HdrS"
  setup=$(byte_at "$img" 1 $((0x1f1)))
  [ "$setup" = 0 ] && setup=4
  off=$(byte_at "$img" 4 $((0x248)))
  len=$(byte_at "$img" 4 $((0x24c)))
  [ -n "$off" ] && [ -n "$len" ] && ((len > 0)) || return 1
  start=$(((setup + 1) * 512 + off))
  magic=$(od -An -tx1 -j "$start" -N 6 "$img" | tr -d ' \n')
  case "$magic" in
    28b52ffd*) dec="zstd -dcq" ;;
    fd377a585a00) dec="xz -dcq" ;;
    1f8b08*) dec="gzip -dcq" ;;
    *) return 1 ;;
  esac
  command -v "${dec%% *}" >/dev/null 2>&1 || return 1
  for cut in 4 0; do
    dd if="$img" iflag=skip_bytes,count_bytes skip="$start" count=$((len - cut)) bs=1M status=none |
      $dec >"$out.tmp" 2>/dev/null
    st=$?
    ((st == 0)) && [ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' \n')" = '177ELF' ] && break
    st=1
  done
  # XEN_ELFNOTE_PHYS32_ENTRY (18): QEMU's PVH boot needs it.
  if ((st == 0)) && grep -qE 'Xen.*(0x00000012|PHYS32_ENTRY)' <<<"$(readelf -n "$out.tmp" 2>/dev/null)"; then
    mv "$out.tmp" "$out"
    return 0
  fi
  rm -f "$out.tmp"
  return 1
}

# save_module ROOT VERSION NAME: keeps NAME.ko of the unpacked package ROOT,
# uncompressed, in the cache.
save_module() {
  local f out=$dir/modules-$2/$3.ko
  f=$(find "$1/lib/modules" -name "$3.ko" -o -name "$3.ko.xz" -o -name "$3.ko.zst" -o -name "$3.ko.gz" 2>/dev/null | head -n 1)
  [ -n "$f" ] || return 1
  mkdir -p "$dir/modules-$2"
  case "$f" in
    *.xz) xz -dcq "$f" >"$out.tmp" ;;
    *.zst) zstd -dcq "$f" >"$out.tmp" ;;
    *.gz) gzip -dcq "$f" >"$out.tmp" ;;
    *) cp "$f" "$out.tmp" ;;
  esac || { rm -f "$out.tmp"; return 1; }
  mv "$out.tmp" "$out"
}

# module_of VERSION: prints the cached module $module of that kernel and
# exits, fetching the kernel's package first if it is not cached.
module_of() {
  local ver=$1 out=$dir/modules-$1/$module.ko pkg t deb
  if [ -s "$out" ]; then echo "$out"; exit 0; fi
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
    skip "no apt-get or dpkg-deb to fetch the module $module"
  pkg=${LOCUS_GUEST_KERNEL_PKG:-linux-image-$ver-unsigned}
  t=$(mktemp -d "${TMPDIR:-/tmp}/locus-kernel.XXXXXX")
  chmod 0777 "$t"
  say "downloading $pkg again for its module $module (once; cached in $dir/modules-$ver)"
  if (cd "$t" && apt-get -q download "$pkg") >"$t/download.log" 2>&1 && deb=$(ls "$t"/*.deb 2>/dev/null | head -n 1) &&
     [ -n "$deb" ] && dpkg-deb -x "$deb" "$t/x" && save_module "$t/x" "$ver" "$module"; then
    for m in $keep_modules; do save_module "$t/x" "$ver" "$m" || true; done
    rm -rf "$t"
    echo "$out"
    exit 0
  fi
  rm -rf "$t"
  skip "no module $module for kernel $ver (package $pkg)"
}

# finish VMLINUZ: prints what was asked for, VMLINUZ or the image to boot.
finish() {
  local z=$1 elf
  if [ -n "$module" ]; then module_of "${z##*/vmlinuz-}"; fi
  if [ "$boot" = 1 ]; then
    elf=$dir/vmlinux-${z##*/vmlinuz-}
    if [ -s "$elf" ]; then echo "$elf"; exit 0; fi
    if [ ! -e "$elf.none" ]; then
      if extract_elf "$z" "$elf"; then echo "$elf"; exit 0; fi
      say "could not take an ELF kernel with a PVH entry out of $z (no zstd/xz/gzip or readelf?): booting the vmlinuz"
      : >"$elf.none"
    fi
  fi
  echo "$z"
  exit 0
}

if [ "$refresh" = 0 ]; then
  k=$(cached)
  if [ -n "$k" ]; then finish "$k"; fi
fi

command -v apt-get >/dev/null 2>&1 || skip "no apt-get: not a Debian system; set LOCUS_GUEST_KERNEL to an x86-64 vmlinuz with NUMA built in"
command -v dpkg-deb >/dev/null 2>&1 || skip "no dpkg-deb; set LOCUS_GUEST_KERNEL to an x86-64 vmlinuz with NUMA built in"

# The newest package name the lists know that matches an extended regex and
# has a download candidate.
candidate() {
  apt-cache search --names-only "$1" 2>/dev/null | awk '{print $1}' | grep -E "$1" | sort -rV |
    while read -r p; do
      # (Not "apt-cache policy | grep -q": with pipefail, grep's early exit
      # could fail the test by a SIGPIPE.)
      pol=$(apt-cache policy "$p" 2>/dev/null) || continue
      case "$pol" in
        *"Candidate: ("*) ;;
        *"Candidate: "*) echo "$p"; break ;;
      esac
    done
}

choose() {
  local p
  if [ -n "${LOCUS_GUEST_KERNEL_PKG:-}" ]; then
    echo "$LOCUS_GUEST_KERNEL_PKG"
    return 0
  fi
  p=$(candidate '^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64-unsigned$')
  if [ -n "$p" ]; then echo "$p"; return 0; fi
  p=$(candidate '^linux-image-[0-9][0-9.]*(-[0-9]+|\.[0-9]+\+deb[0-9]+)-amd64(-unsigned)?$')
  if [ -n "$p" ]; then
    say "no linux-image-6.12.*-amd64-unsigned available; taking the newest generic kernel there is: $p"
    echo "$p"
    return 0
  fi
  return 0
}

pkg=$(choose)
if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
  say "no kernel package in the package lists; running apt-get update once"
  apt-get -q -o DPkg::Lock::Timeout=300 update >"$dir/.apt-update.log" 2>&1 ||
    say "apt-get update failed: $(tail -n 3 "$dir/.apt-update.log" | tr '\n' ' ')"
  pkg=$(choose)
fi
[ -n "$pkg" ] || skip "no linux-image-*-amd64 kernel package is known to apt (run 'apt-get update'), or set LOCUS_GUEST_KERNEL"

ver=$(version_of "$pkg")
out=$dir/vmlinuz-$ver
if [ -s "$out" ]; then finish "$out"; fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-kernel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# apt drops root to the _apt user for downloads when it may: let it write here.
chmod 0777 "$tmp"
say "downloading $pkg (once; cached in $dir)"
if ! (cd "$tmp" && apt-get -q download "$pkg") >"$tmp/download.log" 2>&1; then
  skip "apt-get download $pkg failed: $(grep -v '^Get:' "$tmp/download.log" | tail -n 3 | tr '\n' ' ')"
fi
deb=$(ls "$tmp"/*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || skip "apt-get download $pkg produced no .deb"
dpkg-deb -x "$deb" "$tmp/x" || skip "dpkg-deb -x $deb failed"
img=$(ls "$tmp"/x/boot/vmlinuz-* 2>/dev/null | head -n 1)
[ -n "$img" ] || skip "$pkg holds no boot/vmlinuz-*"
cfg=$(ls "$tmp"/x/boot/config-* 2>/dev/null | head -n 1)
if [ -n "$cfg" ]; then
  grep -q '^CONFIG_NUMA=y' "$cfg" || skip "$pkg's kernel is built without CONFIG_NUMA"
  cp "$cfg" "$dir/config-$ver.tmp" && mv "$dir/config-$ver.tmp" "$dir/config-$ver"
fi
for m in $keep_modules; do save_module "$tmp/x" "$ver" "$m" || say "$pkg has no module $m"; done
# The cached name carries the release the package says; mv makes it appear whole.
cp "$img" "$out.tmp"
mv "$out.tmp" "$out"
say "cached $(basename "$img") from $pkg ($(du -h "$out" | cut -f1))"
rm -rf "$tmp"
trap - EXIT
finish "$out"
