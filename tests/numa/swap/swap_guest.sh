#!/usr/bin/env bash
# calloc with swap (host side): boots a one-node guest of the NUMA test bed
# (tests/numa/guest/run.sh) with a 64 MiB zram device as swap and runs
# swap_calloc there with LIBLOCUS preloaded (swap_init.sh).
#   swap_guest.sh LIBLOCUS SWAP_CALLOC [TIMEOUT]
# Exit status: the guest's (0 pass, 1 a non-zero word, 2 set-up failure),
# 77 (skip) when QEMU, the kernel or its zram module cannot be had.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
guest=$here/../guest
lib=${1:?usage: swap_guest.sh LIBLOCUS SWAP_CALLOC [TIMEOUT]}
prog=${2:?usage: swap_guest.sh LIBLOCUS SWAP_CALLOC [TIMEOUT]}
timeout=${3:-240}
files=()
# A kernel whose config has zram built in needs no module; else the modules
# of the cached kernel (kernel.sh keeps them; fetched once if missing).
if [ -z "${LOCUS_GUEST_KERNEL:-}" ]; then
  "$guest/kernel.sh" >/dev/null
  st=$?
  ((st == 77)) && { echo "swap_guest: SKIP: no guest kernel"; exit 77; }
  ((st == 0)) || exit 1
  cfg=$(ls -1 "${LOCUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/locus}"/guest-kernel/config-* 2>/dev/null | sort -V | tail -n 1)
  if ! grep -q '^CONFIG_ZRAM=y' "${cfg:-/dev/null}" 2>/dev/null; then
    for m in zram lz4_compress lz4hc_compress; do
      mod=$("$guest/kernel.sh" --module "$m")
      st=$?
      ((st == 77)) && { echo "swap_guest: SKIP: no $m module for the guest kernel"; exit 77; }
      ((st == 0)) || exit 1
      files+=(--file "$mod:/$m.ko")
    done
  fi
fi
"$guest/run.sh" --nodes 1 --cpus 1 --mem-per-node 512M --timeout "$timeout" \
  --file "$lib:/liblocus.so" --file "$prog:/swap_calloc" --file "$here/swap_init.sh:/swap_init.sh" "${files[@]}" \
  --env LOCUS_LIB=/liblocus.so \
  -- /swap_init.sh
