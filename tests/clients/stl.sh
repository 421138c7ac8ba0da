#!/usr/bin/env bash
# Real client: a C++ program built by the tests' CMake (stl_client.cpp: maps,
# vectors, strings, shared_ptr, aligned new, threads), run with and without
# the allocator preloaded; output compared byte for byte.
#   stl.sh PATH-TO-locus_client_stl [SCALE]
. "$(dirname "$0")/common.sh"
bin=${1:?usage: stl.sh BINARY [SCALE]}
[ -x "$bin" ] || die "$bin not built"
cd "$WORK"
run_and_compare stl "$bin" "${2:-3}"
grep -q '^done$' "$WORK/stl.lib.out" || die "program did not finish"
say "PASS"
