#!/usr/bin/env bash
# ctest cli_*: the locus command (tools/locus, docs/tools.md).
#   installed   cmake --install into a temporary prefix; <prefix>/bin/locus:
#               --help of the command and of every subcommand, run (profile,
#               --stats=FILE, exit status, --verbose banner, LD_PRELOAD kept),
#               info --json, stats on a file with two reports, bench without
#               the source tree; align, pages and dedup run from the prefix; the man
#               page is installed.
#   build-tree  <build>/tools/locus uses the build's library and knows the source tree;
#               --stats=t%p.txt reaches the program unexpanded (one file per
#               process of its tree), --set refuses unknown names, a missing
#               --lib / LOCUS_LIB is named as the cause, run --help on eco.
#   mpi         mpirun -np 2 <prefix>/bin/locus run --stats=<tmp>/r%r.txt -- /bin/true
#               writes r0.txt and r1.txt (skip without mpirun).
# Exit 0 pass, 1 fail, 77 skip. The temporary directory is removed at exit
# (LOCUS_KEEP_TMP=1 keeps it).
#
# usage: run.sh installed|build-tree|mpi CMAKE BUILD_DIR SOURCE_DIR BINDIR LIBDIR MANDIR VERSION
set -euo pipefail

mode=${1:-}
say()  { printf '[cli_%s] %s\n' "$mode" "$*"; }
die()  { say "FAIL: $*" >&2; exit 1; }
skip() { say "SKIP: $*"; exit 77; }

[ $# -eq 8 ] || die "usage: $0 installed|build-tree|mpi CMAKE BUILD_DIR SOURCE_DIR BINDIR LIBDIR MANDIR VERSION"
cmake=$2 build=$3 src=$4 bindir=$5 libdir=$6 mandir=$7 version=$8
unset LD_PRELOAD LOCUS_LIB LOCUS_SOURCE_DIR LOCUS_PROFILE LOCUS_STATS LOCUS_STATS_FILE LOCUS_VERBOSE LOCUS_NUMA

tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-cli.XXXXXX")
cleanup() { if [ "${LOCUS_KEEP_TMP:-0}" = 1 ]; then say "kept $tmp"; else rm -rf "$tmp"; fi; }
trap cleanup EXIT
P=$tmp/prefix

install_prefix() {
  "$cmake" --install "$build" --prefix "$P" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; die "cmake --install"; }
  locus=$P/$bindir/locus
  [ -x "$locus" ] || { find "$P" >&2; die "not installed: $bindir/locus"; }
}

# expect_status WANT CMD...: runs CMD (output in $tmp/out, $tmp/err), checks its status.
expect_status() {
  local want=$1 got=0; shift
  "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
  [ "$got" = "$want" ] || { cat "$tmp/out" "$tmp/err" >&2; die "'$*' exited $got, expected $want"; }
}
contains() {  # contains FILE TEXT WHAT
  grep -F -- "$2" "$1" >/dev/null || { cat "$1" >&2; die "$3: '$2' not found"; }
}

case $mode in
installed)
  install_prefix
  [ -f "$P/$mandir/man1/locus.1" ] || die "not installed: $mandir/man1/locus.1"
  if grep -F -e "$build" -e "$src" "$locus" >&2; then die "the installed locus names the build or source tree"; fi

  expect_status 0 "$locus" --help
  contains "$tmp/out" "usage: locus" "locus --help"
  for c in run info stats bench align pages dedup; do
    expect_status 0 "$locus" "$c" --help
    contains "$tmp/out" "usage: locus $c" "locus $c --help"
  done
  expect_status 2 "$locus" frobnicate
  say "--help of locus and of run, info, stats, bench, align, pages, dedup: ok"
  # the analysers find their modules and the sampling library in the prefix
  expect_status 0 "$locus" align --no-compare -- "${PYTHON:-python3}" -c 'b = bytearray(8 << 20); print(sum(b[::4096]))'
  contains "$tmp/out" "1 large array" "locus align from the prefix"
  expect_status 1 "$locus" pages 999999999
  contains "$tmp/err" "no process 999999999" "locus pages from the prefix"
  expect_status 0 "$locus" dedup --json $$
  contains "$tmp/out" '"save"' "locus dedup from the prefix"
  say "align (sampling library and modules of the prefix), pages, dedup: ok"

  expect_status 0 "$locus" --version
  contains "$tmp/out" "library $version ($P/$libdir/" "locus --version (the library of the prefix)"

  # run: settings, the report in a file, the program's exit status, the banner
  expect_status 0 "$locus" run --profile eco --stats="$tmp/s.txt" -- /bin/true
  contains "$tmp/s.txt" "statistics (pid" "the report of locus run --stats=FILE"
  contains "$tmp/s.txt" "profile eco)" "the report of locus run --profile eco"
  expect_status 3 "$locus" run -- sh -c 'exit 3'
  expect_status 127 "$locus" run -- /nonexistent/program
  expect_status 0 "$locus" run --verbose -- true
  contains "$tmp/err" "locus: locus $version active" "the banner of locus run --verbose"
  # the program sees the preload first, the earlier LD_PRELOAD kept, and the settings
  LD_PRELOAD=libdl.so.2 expect_status 0 "$locus" run --numa interleave --set cache_max=64M -- \
    sh -c 'printf "%s\n" "$LD_PRELOAD" "$LOCUS_NUMA" "$LOCUS_CACHE_MAX"'
  printf '%s\n' "$P/$libdir/liblocus.so.${version%.*}:libdl.so.2" interleave 64M | diff - "$tmp/out" >&2 \
    || die "locus run: LD_PRELOAD / LOCUS_* seen by the program differ"
  expect_status 2 "$locus" run --profile fast -- true
  say "run: --profile/--stats=FILE report, exit status 3 and 127, --verbose banner, LD_PRELOAD and settings: ok"

  # info
  expect_status 0 "$locus" info --json
  "${PYTHON:-python3}" - "$tmp/out" "$version" <<'PY' || die "locus info --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == sys.argv[2], d["version"]
assert d["nodes"] and all("cpus" in n and "mem_total_kb" in n for n in d["nodes"]), d["nodes"]
assert d["library"]["preloaded"] is True and "features" in d["library"] and "options" in d["library"]
assert d["library"]["features"]["numa_nodes"] >= 1
PY
  expect_status 0 "$locus" info
  contains "$tmp/out" "node 0" "locus info"
  contains "$tmp/out" "version     : locus $version" "locus info"
  say "info --json: valid, nodes and version $version; info: ok"

  # stats: two processes appended to one file -> two rows and the totals
  expect_status 0 "$locus" run --profile eco --stats="$tmp/two.txt" -- /bin/true
  expect_status 0 "$locus" run --profile uma --stats="$tmp/two.txt" -- /bin/true
  expect_status 0 "$locus" stats "$tmp/two.txt"
  rows=$(grep -cE '^ *[0-9]+  (eco|uma|numa) ' "$tmp/out" || true)
  [ "$rows" = 2 ] || { cat "$tmp/out" >&2; die "locus stats on two reports: $rows rows, expected 2"; }
  contains "$tmp/out" "total  2 proc" "locus stats totals"
  expect_status 0 "$locus" stats --json "$tmp/two.txt"
  "${PYTHON:-python3}" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [p["profile"] for p in d["processes"]] == ["eco", "uma"], d' "$tmp/out" \
    || die "locus stats --json"
  expect_status 1 "$locus" stats /dev/null
  say "stats: two reports in one file give two rows and the totals: ok"

  # bench: the installed command has no source tree
  expect_status 1 "$locus" bench
  contains "$tmp/err" "need the locus source tree" "locus bench without the sources"
  say "bench without the source tree: says so (status 1): ok"
  ;;

build-tree)
  locus=$build/tools/locus
  [ -x "$locus" ] || die "$locus missing"
  expect_status 0 "$locus" info --json
  "${PYTHON:-python3}" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["library"]["path"].startswith(sys.argv[2]) and d["version"] == sys.argv[3], d["library"]' \
    "$tmp/out" "$build" "$version" || die "the build-tree locus does not use the build's library"
  expect_status 0 "$locus" run --stats="$tmp/b%p.txt" -- /bin/true
  ls "$tmp"/b[0-9]*.txt >/dev/null 2>&1 || die "--stats=b%p.txt wrote no b<pid>.txt"
  # the pattern reaches the program unexpanded: each process of its tree
  # expands it (bash: dash leaves with _exit, before the report)
  expect_status 0 "$locus" run --stats="$tmp/t%p.txt" -- bash -c 'printf "%s\n" "$LOCUS_STATS_FILE"; /bin/true; /bin/true; :'
  [ "$(cat "$tmp/out")" = "$tmp/t%p.txt" ] || die "LOCUS_STATS_FILE seen by the program: $(cat "$tmp/out")"
  n=$(ls "$tmp"/t[0-9]*.txt | wc -l)
  [ "$n" = 3 ] || die "--stats=t%p.txt over bash and two children: $n files"
  # --set: unknown names refused, with the closest one
  expect_status 2 "$locus" run --set NOPE=1 -- true
  contains "$tmp/err" "--set LOCUS_NOPE: not a setting of locus" "--set of an unknown name"
  expect_status 2 "$locus" run --set profle=eco -- true
  contains "$tmp/err" "did you mean LOCUS_PROFILE?" "--set of a misspelled name"
  # the error names the setting that chose the missing library
  expect_status 1 "$locus" --lib /nonexistent/liblocus.so info
  contains "$tmp/out" "error       : --lib /nonexistent/liblocus.so: no such file" "locus --lib /nonexistent info"
  expect_status 1 "$locus" --lib /nonexistent/liblocus.so run -- true
  contains "$tmp/err" "--lib /nonexistent/liblocus.so: no such file" "locus --lib /nonexistent run"
  # a file that is no liblocus.so: the loader would ignore it (or load it
  # without effect) and the command run without locus, so run refuses it
  printf 'not a library\n' > "$tmp/text.so"
  expect_status 1 "$locus" --lib "$tmp/text.so" run -- true
  contains "$tmp/err" "--lib $tmp/text.so: not an ELF shared library" "locus --lib <text file> run"
  libc=$(ldd /bin/sh 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*libc\.so[^ ]*\) .*/\1/p' | head -n1)
  if [ -n "$libc" ]; then
    expect_status 1 "$locus" --lib "$libc" run -- true
    contains "$tmp/err" "--lib $libc: not liblocus.so (no locus_version symbol)" "locus --lib libc.so run"
  fi
  # the profiles' help states eco's cost
  expect_status 0 "$locus" run --help
  contains "$tmp/out" "slower than glibc" "locus run --help on eco"
  # LOCUS_LIB overrides the configured library
  LOCUS_LIB=$tmp/none.so expect_status 1 "$locus" run -- true
  contains "$tmp/err" "LOCUS_LIB=$tmp/none.so: no such file" "LOCUS_LIB override"
  # bench knows the source tree: its --help is tools/bench.py's
  expect_status 0 "$locus" bench -- --help
  contains "$tmp/out" "usage: bench.py" "locus bench -- --help from the build tree"
  say "build tree: library, %p expanded by each process, --set checked, errors name their cause, LOCUS_LIB override, bench finds the source tree: ok"
  ;;

mpi)
  command -v mpirun >/dev/null 2>&1 || skip "mpirun not installed (apt-get install openmpi-bin)"
  install_prefix
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=false TMPDIR=$tmp
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$locus" run --stats="$tmp/r%r.txt" -- /bin/true \
    >"$tmp/mpi.log" 2>&1 || { cat "$tmp/mpi.log" >&2; die "mpirun ... locus run failed"; }
  for r in 0 1; do
    contains "$tmp/r$r.txt" "statistics (pid" "rank $r's report ($tmp/r$r.txt)"
  done
  "$locus" stats "$tmp/r0.txt" "$tmp/r1.txt" >"$tmp/out" || die "locus stats on the two ranks' files"
  say "mpirun -np 2 locus run --stats=r%r.txt: r0.txt and r1.txt written: ok"
  ;;
*) die "unknown mode $mode" ;;
esac
say "PASS"
