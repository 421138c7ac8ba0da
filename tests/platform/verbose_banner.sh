#!/usr/bin/env bash
# verbose_banner VERSION OPTIONS_C: what LOCUS_VERBOSE=1 prints.
#
# With LD_PRELOAD=liblocus.so LOCUS_VERBOSE=1 /bin/true, stderr holds exactly:
#   locus: locus <VERSION> active in pid <pid of true> (...): profile auto, ...
#   locus: kernel features: ...
#   locus:   LOCUS_<NAME>=<value>[ (default)]     one line per option
# The options and their documented defaults are read from the table in
# src/config/options.c; every option not set in the environment must print its
# documented default followed by " (default)". Then:
#  - LOCUS_VERBOSE=1 LOCUS_PROFILE=eco: the banner says "profile eco" and the
#    line is "LOCUS_PROFILE=eco" without "(default)";
#  - a malformed value (LOCUS_CACHE_MAX=lots) prints one warning naming it and
#    the default stays ("LOCUS_CACHE_MAX=500M (default)");
#  - without LOCUS_VERBOSE, or with LOCUS_VERBOSE=0, nothing is printed.
#  - a wrong LD_PRELOAD path: that is ld.so's business (glibc prints
#    "ERROR: ld.so: object '...' from LD_PRELOAD cannot be preloaded ...:
#    ignored." and runs the program without it). Checked only so far as: the
#    program still runs, the message names the path, no locus banner.
#
# Environment: LOCUS_LIB (liblocus.so). Exit 0 pass, 1 fail.
set -u
set -o pipefail
version=$1 options_c=$2
say() { printf '[verbose_banner] %s\n' "$*"; }
fail=0
bad() { say "FAIL: $*" >&2; fail=1; }
[ -n "${LOCUS_LIB:-}" ] && [ -f "$LOCUS_LIB" ] || { say "FAIL: LOCUS_LIB not set or missing" >&2; exit 1; }
case "$LOCUS_LIB" in /*) ;; *) LOCUS_LIB=$PWD/$LOCUS_LIB ;; esac
TRUE=$(command -v true); TRUE=${TRUE:-/bin/true}
[ "${TRUE#/}" != "$TRUE" ] || TRUE=/bin/true

WORK=$(mktemp -d "${TMPDIR:-/tmp}/locus-verbose.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

# The options table: {{"name", "LOCUS_NAME", "type", "default", ...
grep -oE '\{\{"[a-z_]+", "LOCUS_[A-Z_]+", "[a-z]+", "[^"]*"' "$options_c" |
  sed -E 's/^\{\{"[a-z_]+", "(LOCUS_[A-Z_]+)", "[a-z]+", "([^"]*)"$/\1 \2/' >"$WORK/table"
nopt=$(wc -l <"$WORK/table")
[ "$nopt" -ge 5 ] || { bad "only $nopt options parsed from $options_c"; exit 1; }
grep -q '^LOCUS_VERBOSE ' "$WORK/table" && grep -q '^LOCUS_PROFILE ' "$WORK/table" ||
  { bad "LOCUS_VERBOSE or LOCUS_PROFILE missing from the parsed table"; exit 1; }
while read -r env _; do unset "$env"; done <"$WORK/table"
unset LD_PRELOAD

# run TAG ENV...: /bin/true preloaded with ENV; stderr in $WORK/TAG.err,
# stdout in $WORK/TAG.out, pid in $pid, status in $rc.
run() {
  local tag=$1; shift
  env LD_PRELOAD="$LOCUS_LIB" "$@" "$TRUE" >"$WORK/$tag.out" 2>"$WORK/$tag.err" &
  pid=$!
  wait $pid; rc=$?
}

# check_listing TAG PROFILE: the banner, the features line and one line per
# option; options named in the remaining arguments (NAME=VALUE) are expected
# with that value and without "(default)".
check_listing() {
  local tag=$1 profile=$2; shift 2
  local err=$WORK/$tag.err n
  [ $rc -eq 0 ] || bad "$tag: /bin/true exited $rc"
  n=$(grep -c '' "$err")
  local first
  first=$(grep -v '^locus: warning: ' "$err" | head -n1)
  case "$first" in
    "locus: locus $version active in pid $pid "*) ;;
    *) bad "$tag: first line is not 'locus: locus $version active in pid $pid ...': '$first'" ;;
  esac
  printf '%s\n' "$first" | grep -q ": profile $profile, " || bad "$tag: the banner does not say 'profile $profile'"
  grep -q '^locus: kernel features: MADV_FREE ' "$err" || bad "$tag: no 'kernel features' line"
  local env def line want
  while read -r env def; do
    line=$(grep -E "^locus:   $env=" "$err")
    [ "$(printf '%s' "$line" | grep -c '')" -eq 1 ] || { bad "$tag: $(printf '%s' "$line" | grep -c '') lines for $env"; continue; }
    want="locus:   $env=$def (default)"
    for kv in "$@"; do
      [ "${kv%%=*}" = "$env" ] && want="locus:   $kv"
    done
    [ "$line" = "$want" ] || bad "$tag: '$line', expected '$want'"
  done <"$WORK/table"
  local others
  others=$(grep -vE '^locus: (locus .* active in pid|kernel features:|  LOCUS_[A-Z_]+=|warning: )' "$err")
  [ -z "$others" ] || bad "$tag: unexpected lines: $others"
  [ -s "$WORK/$tag.out" ] && bad "$tag: output on stdout: $(head -c 200 "$WORK/$tag.out")"
  say "$tag: banner + features + $nopt option lines ($n lines)"
}

run verbose LOCUS_VERBOSE=1
sed 's/^/    | /' "$WORK/verbose.err"
check_listing verbose auto LOCUS_VERBOSE=1
grep -qx 'locus:   LOCUS_CACHE_MAX=500M (default)' "$WORK/verbose.err" || bad "no line 'LOCUS_CACHE_MAX=500M (default)'"

run eco LOCUS_VERBOSE=1 LOCUS_PROFILE=eco
check_listing eco eco LOCUS_VERBOSE=1 LOCUS_PROFILE=eco
grep -q '^locus:   LOCUS_PROFILE=eco$' "$WORK/eco.err" || bad "eco: no line 'LOCUS_PROFILE=eco' (without '(default)')"

run malformed LOCUS_VERBOSE=1 LOCUS_CACHE_MAX=lots
check_listing malformed auto LOCUS_VERBOSE=1
w=$(grep -c '^locus: warning: LOCUS_CACHE_MAX="lots" ' "$WORK/malformed.err")
[ "$w" -eq 1 ] || bad "malformed: $w warnings naming LOCUS_CACHE_MAX=\"lots\", expected 1"

for v in unset 0; do
  if [ $v = unset ]; then run quiet_$v; else run quiet_$v LOCUS_VERBOSE=0; fi
  [ $rc -eq 0 ] || bad "quiet ($v): exit $rc"
  if [ -s "$WORK/quiet_$v.err" ] || [ -s "$WORK/quiet_$v.out" ]; then
    bad "LOCUS_VERBOSE $v: something was printed: $(head -c 300 "$WORK/quiet_$v.err")"
  else
    say "LOCUS_VERBOSE $v: nothing printed"
  fi
done
# The preload did take in the quiet runs (else their silence proves nothing).
# (A pattern match on a variable, no pipe: under pipefail, grep -q leaving at
# its first match kills the writer with SIGPIPE when the maps pass 4 KiB.)
maps=$(LD_PRELOAD=$LOCUS_LIB cat /proc/self/maps 2>/dev/null)
real=$(readlink -f "$LOCUS_LIB")
[[ $maps == *"$real"* ]] || bad "$LOCUS_LIB is not mapped in a preloaded process"

# A wrong path: glibc's ld.so complains and runs the program without it.
wrong=$WORK/no-such-dir/liblocus.so
LD_PRELOAD=$wrong LOCUS_VERBOSE=1 "$TRUE" >/dev/null 2>"$WORK/wrong.err"; rc=$?
say "wrong LD_PRELOAD path, ld.so says: $(head -n1 "$WORK/wrong.err")"
[ $rc -eq 0 ] || bad "wrong LD_PRELOAD: /bin/true exited $rc"
grep -qF "$wrong" "$WORK/wrong.err" || bad "wrong LD_PRELOAD: the loader's message does not name the path"
grep -q 'active in pid' "$WORK/wrong.err" && bad "wrong LD_PRELOAD: a locus banner was printed"

if [ $fail -ne 0 ]; then echo "verbose_banner: FAIL" >&2; exit 1; fi
echo "verbose_banner: ok"
