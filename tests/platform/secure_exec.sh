#!/usr/bin/env bash
# secure_exec STATIC_HELPER SHARED_HELPER: in secure-execution mode (AT_SECURE:
# setuid, setgid, file capabilities) locus ignores every LOCUS_* variable: a
# less privileged user must not steer a privileged program's allocator or make
# it write files (src/os/os.c: os_getenv returns NULL when os_secure()).
#
# ld.so ignores LD_PRELOAD paths containing a slash for such programs, so the
# helper (secure_helper.c) is linked with locus: STATIC_HELPER with
# liblocus.a, SHARED_HELPER with liblocus.so through its absolute build RPATH
# (ld.so honours an absolute RPATH/RUNPATH in secure mode, not $ORIGIN). It
# prints its euid, locus_get_profile() and AT_SECURE.
#
# For each helper, a copy owned by root with mode 4755 in a fresh directory on
# a filesystem not mounted nosuid is run as nobody (setpriv, else su) with
#   LOCUS_STATS=1 LOCUS_STATS_FILE=<dir writable by all>/... LOCUS_VERBOSE=1
#   LOCUS_PROFILE=eco LOCUS_LARGE_THRESHOLD=bogus
# and must report euid 0, AT_SECURE 1, profile auto (the default: LOCUS_PROFILE ignored),
# create no statistics file and print nothing on stderr (no banner, no
# warning about the malformed value, no report). Control: a copy without the
# setuid bit, run as nobody with the same environment, reports euid of
# nobody, AT_SECURE 0, profile eco, creates the statistics file and prints the
# banner and the warning: so the difference comes from secure mode.
#
# Exit 77 (with the reason) when this cannot be tested here: not root, no
# setpriv/su, no user nobody, no_new_privs set, only nosuid filesystems, or
# the kernel did not honour the setuid bit.
set -u
set -o pipefail
say()  { printf '[secure_exec] %s\n' "$*"; }
skip() { say "SKIP: $*"; exit 77; }
fail=0
bad()  { say "FAIL: $*" >&2; fail=1; }
[ $# -eq 2 ] || { echo "usage: secure_exec.sh STATIC_HELPER SHARED_HELPER" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || skip "not running as root: cannot make a setuid-root program (run ctest as root)"
id nobody >/dev/null 2>&1 || skip "no user 'nobody' to run the setuid program as"
NOBODY_UID=$(id -u nobody) NOBODY_GID=$(id -g nobody)
if command -v setpriv >/dev/null 2>&1; then
  runas() { setpriv --reuid="$NOBODY_UID" --regid="$NOBODY_GID" --clear-groups -- "$@"; }
  how="setpriv --reuid=nobody --regid=$NOBODY_GID --clear-groups"
elif command -v su >/dev/null 2>&1; then
  runas() { su -s /bin/sh nobody -c "$(printf '%q ' "$@")"; }
  how="su -s /bin/sh nobody -c"
else
  skip "neither setpriv nor su is installed: cannot run as an unprivileged user"
fi
grep -qE '^NoNewPrivs:[[:space:]]+1' /proc/self/status &&
  skip "no_new_privs is set for this process tree: the kernel ignores setuid bits"

nosuid() {  # DIR: true when DIR is on a filesystem mounted nosuid
  local opts
  if command -v findmnt >/dev/null 2>&1; then
    opts=$(findmnt -n -o OPTIONS -T "$1" 2>/dev/null | head -n1)
  else
    local mp
    mp=$(df -P "$1" 2>/dev/null | awk 'NR==2 {print $6}')
    opts=$(awk -v m="$mp" '$2 == m {o = $4} END {print o}' /proc/self/mounts)
  fi
  printf '%s\n' "$opts" | tr ',' '\n' | grep -qx nosuid
}

# A fresh directory, reachable by nobody, on a filesystem that allows setuid.
WORK=""
for base in "${TMPDIR:-/tmp}" /tmp "$(dirname "$1")"; do
  [ -d "$base" ] || continue
  d=$(mktemp -d "$base/locus-secure.XXXXXX") || continue
  chmod 0755 "$d"
  if nosuid "$d"; then say "note: $base is mounted nosuid"; rm -rf "$d"; continue; fi
  if ! runas test -x "$d"; then say "note: nobody cannot reach $d"; rm -rf "$d"; continue; fi
  WORK=$d
  break
done
[ -n "$WORK" ] || skip "no directory reachable by nobody on a filesystem without nosuid"
trap 'rm -rf "$WORK"' EXIT
say "work directory $WORK ($(findmnt -n -o FSTYPE,OPTIONS -T "$WORK" 2>/dev/null || echo '?')), running as nobody with: $how"
STATS=$WORK/stats
mkdir "$STATS" && chmod 1777 "$STATS"

REPORT='^locus [0-9]+\.[0-9]+\.[0-9]+ statistics'
LOCUS_ENV=(LOCUS_STATS=1 LOCUS_VERBOSE=1 LOCUS_PROFILE=eco LOCUS_LARGE_THRESHOLD=bogus)

# field NAME FILE: value of NAME=... in the helper's line
field() { sed -n "s/^secure_helper: .*\\b$1=\\([^ ]*\\).*/\\1/p" "$2" | head -n1; }

variant() {  # TAG HELPER
  local tag=$1 src=$2
  local dir=$WORK/$tag
  mkdir "$dir" && chmod 0755 "$dir"
  cp "$src" "$dir/helper_suid" && cp "$src" "$dir/helper_plain" || { bad "$tag: cannot copy $src"; return; }
  chown root:root "$dir/helper_suid" "$dir/helper_plain"
  chmod 4755 "$dir/helper_suid"
  chmod 0755 "$dir/helper_plain"

  # The setuid run.
  local out=$dir/suid.out err=$dir/suid.err file=$STATS/$tag.suid.txt rc=0
  runas env -i PATH=/usr/bin:/bin "${LOCUS_ENV[@]}" LOCUS_STATS_FILE="$file" "$dir/helper_suid" >"$out" 2>"$err" || rc=$?
  say "$tag setuid: $(cat "$out" "$err" | head -n 3 | tr '\n' ' ')"
  if [ $rc -ne 0 ]; then bad "$tag: the setuid helper exited $rc: $(head -c 400 "$err")"; return; fi
  local euid
  euid=$(field euid "$out")
  if [ "$euid" != 0 ]; then
    [ "$tag" = static ] && skip "the setuid bit was not honoured (euid=$euid as nobody): user namespace or mount restrictions"
    bad "$tag: euid=$euid under the setuid bit (the static helper got 0)"; return
  fi
  [ "$(field secure "$out")" = 1 ] || bad "$tag setuid: AT_SECURE is not set"
  [ "$(field profile "$out")" = auto ] || bad "$tag setuid: profile '$(field profile "$out")', expected auto (the default): LOCUS_PROFILE=eco was obeyed"
  [ -e "$file" ] && bad "$tag setuid: LOCUS_STATS_FILE was created: $(ls -l "$file")"
  [ -n "$(ls -A "$STATS" | grep "^$tag\\.suid")" ] && bad "$tag setuid: files appeared in $STATS"
  [ -s "$err" ] && bad "$tag setuid: printed on stderr: $(head -c 400 "$err")"

  # Control: the same program without the bit, same user, same environment.
  out=$dir/plain.out err=$dir/plain.err file=$STATS/$tag.plain.txt rc=0
  runas env -i PATH=/usr/bin:/bin "${LOCUS_ENV[@]}" LOCUS_STATS_FILE="$file" "$dir/helper_plain" >"$out" 2>"$err" || rc=$?
  say "$tag control: $(head -n1 "$out")"
  if [ $rc -ne 0 ]; then bad "$tag: the control helper exited $rc: $(head -c 400 "$err")"; return; fi
  [ "$(field euid "$out")" = "$NOBODY_UID" ] || bad "$tag control: euid $(field euid "$out"), expected $NOBODY_UID"
  [ "$(field secure "$out")" = 0 ] || bad "$tag control: AT_SECURE is set"
  [ "$(field profile "$out")" = eco ] || bad "$tag control: profile '$(field profile "$out")', expected eco"
  if [ -f "$file" ] && grep -qE "$REPORT" "$file"; then :; else bad "$tag control: no statistics report in $file"; fi
  grep -q '^locus: locus .* active in pid ' "$err" || bad "$tag control: no LOCUS_VERBOSE banner on stderr"
  grep -q '^locus: warning: LOCUS_LARGE_THRESHOLD="bogus"' "$err" || bad "$tag control: no warning about LOCUS_LARGE_THRESHOLD"
  [ $fail -eq 0 ] && say "$tag: setuid run ignores LOCUS_* (euid 0, profile auto, no file, silent); control obeys them"
}

variant static "$1"
# The shared helper needs liblocus.so readable by nobody.
lib=$(ldd "$2" 2>/dev/null | awk '/liblocus/ {print $3}')
if [ -z "$lib" ]; then
  bad "shared helper: ldd finds no liblocus in $2"
elif ! runas test -r "$lib"; then
  say "note: nobody cannot read $lib: the shared variant is not tested"
else
  say "shared helper: RPATH/RUNPATH $(readelf -dW "$2" 2>/dev/null | grep -E 'R(UN)?PATH' | sed 's/.*\[\(.*\)\]/\1/'), loads $lib"
  variant shared "$2"
fi

if [ $fail -ne 0 ]; then echo "secure_exec: FAIL" >&2; exit 1; fi
echo "secure_exec: ok"
