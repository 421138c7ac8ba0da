#!/usr/bin/env bash
# env_and_report: what the library reads from the environment and what its
# report says (config/options.c, api/stats.c; README "Environment variables").
#
#  1. LOCUS_STATS_FILE expands %p (the process id), %r (the MPI rank from
#     OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID; the pid when
#     none is set) and %% in each process: a shell and the two programs it
#     starts write three files, each holding its own process's report.
#  2. LOCUS_TRACE_FILE=t.%p: a process that forks writes two traces, each
#     with its own header (python3 only; skipped without it).
#  3. A misspelled setting (LOCUS_PROFLE) is warned about once, naming
#     LOCUS_PROFILE, in a tree of three processes; the tools' names
#     (LOCUS_LIB, LOCUS_CACHE_DIR, LOCUS_SAMPLE_FILE) and names far from every
#     setting are not.
#  4. LOCUS_VERBOSE=1 prints the banner once in the same tree, and the
#     children see LOCUS_SHOWN_BY=<pid of the first>:<hash> (a misspelling
#     only a child has is still warned about); LOCUS_VERBOSE=all prints
#     it in each of the three.
#  5. The report labels what it counts: large blocks live, heap chunks,
#     cached, reserved (= chunks + cached for ls, which has no large
#     block), peak reserved, resident (> 0, below 64 MiB).
#
# Environment: LOCUS_LIB (liblocus.so). Exit 0 pass, 1 fail.
set -u
say() { printf '[env_and_report] %s\n' "$*"; }
fail=0
bad() { say "FAIL: $*" >&2; fail=1; }
[ -n "${LOCUS_LIB:-}" ] && [ -f "$LOCUS_LIB" ] || { say "FAIL: LOCUS_LIB not set or missing" >&2; exit 1; }
case "$LOCUS_LIB" in /*) ;; *) LOCUS_LIB=$PWD/$LOCUS_LIB ;; esac
TRUE=/bin/true; [ -x "$TRUE" ] || TRUE=/usr/bin/true
lib=$LOCUS_LIB
for v in $(env | sed -n 's/^\(LOCUS_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
LOCUS_LIB=$lib
unset LD_PRELOAD OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK SLURM_PROCID
W=$(mktemp -d "${TMPDIR:-/tmp}/locus-env.XXXXXX") || exit 1
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1
# A tree of three processes: bash (dash leaves with _exit, without reports)
# and two programs it forks (the ':'
# keeps the shell from exec'ing the last one).
tree() { env LD_PRELOAD="$LOCUS_LIB" "$@" "$BASH" -c '"$0"; "$0"; :' "$TRUE"; }

# 1. %p, %r, %%
tree LOCUS_STATS=1 LOCUS_STATS_FILE="$W/s.%p.txt" 2>"$W/tree.err"
n=$(ls "$W"/s.*.txt 2>/dev/null | wc -l)
[ "$n" -eq 3 ] || bad "LOCUS_STATS_FILE=s.%p.txt in a tree of 3 processes: $n files ($(ls "$W"))"
for f in "$W"/s.*.txt; do
  [ -f "$f" ] || continue
  pid=${f#"$W"/s.}; pid=${pid%.txt}
  [ "$(grep -c 'statistics (pid ' "$f")" -eq 1 ] || bad "$f: not one report"
  grep -q "statistics (pid $pid," "$f" || bad "$f holds another process's report: $(head -n1 "$f")"
done
[ -e "$W/s.%p.txt" ] && bad "a file named s.%p.txt was written"
env LD_PRELOAD="$LOCUS_LIB" LOCUS_STATS=1 LOCUS_STATS_FILE="$W/r%r.txt" OMPI_COMM_WORLD_RANK=5 "$TRUE"
env LD_PRELOAD="$LOCUS_LIB" LOCUS_STATS=1 LOCUS_STATS_FILE="$W/r%r.txt" SLURM_PROCID=7 "$TRUE"
env LD_PRELOAD="$LOCUS_LIB" LOCUS_STATS=1 LOCUS_STATS_FILE="$W/pct%%.txt" "$TRUE"
[ -s "$W/r5.txt" ] || bad "OMPI_COMM_WORLD_RANK=5: no r5.txt ($(ls "$W"))"
[ -s "$W/r7.txt" ] || bad "SLURM_PROCID=7: no r7.txt"
[ -s "$W/pct%.txt" ] || bad "%% did not give a percent sign"
env LD_PRELOAD="$LOCUS_LIB" LOCUS_STATS=1 LOCUS_STATS_FILE="$W/norank.%r.txt" "$TRUE" & wait $!
[ -s "$W/norank.$!.txt" ] || bad "%r without a rank: no norank.<pid>.txt ($(ls "$W"))"
# A FIFO nobody reads: the report goes to stderr with a warning, the
# program does not hang at its exit (timeout outside the preload).
if mkfifo "$W/fifo" 2>/dev/null; then
  timeout 20 env LD_PRELOAD="$LOCUS_LIB" LOCUS_STATS=1 LOCUS_STATS_FILE="$W/fifo" "$TRUE" 2>"$W/fifo.err"
  st=$?
  [ $st -eq 0 ] || bad "LOCUS_STATS_FILE naming a FIFO without a reader: exit status $st (124: hung)"
  grep -q "cannot open LOCUS_STATS_FILE \"$W/fifo\"" "$W/fifo.err" || bad "FIFO without a reader: no warning"
  grep -q 'statistics (pid ' "$W/fifo.err" || bad "FIFO without a reader: no report on stderr"
fi
say "1. LOCUS_STATS_FILE: %p one file per process of a tree, %r from OMPI_COMM_WORLD_RANK / SLURM_PROCID / the pid, %%; a FIFO without a reader: stderr"

# 2. the trace file, per process across a fork
if command -v python3 >/dev/null 2>&1; then
  env LD_PRELOAD="$LOCUS_LIB" LOCUS_TRACE_FILE="$W/t.%p" python3 -c '
import os
a = bytearray(4 << 20)
pid = os.fork()
b = bytearray(4 << 20)
if pid:
    os.waitpid(pid, 0)
else:
    os._exit(0)' || bad "python3 under LOCUS_TRACE_FILE failed"
  n=$(ls "$W"/t.* 2>/dev/null | wc -l)
  [ "$n" -eq 2 ] || bad "LOCUS_TRACE_FILE=t.%p with a fork: $n files, expected 2"
  for f in "$W"/t.*; do
    [ -f "$f" ] || continue
    pid=${f#"$W"/t.}
    grep -q "^H $pid locus-trace" "$f" || bad "$f: no header of process $pid"
    grep -vq "^[HMARF] $pid " "$f" && bad "$f holds lines of another process"
  done
  # A name longer than 255 bytes once expanded (the pattern itself is not):
  # no trace and a warning, not a file whose name is cut short.
  mkdir "$W/long" || bad "mkdir"
  long=$(printf 'd%.0s' $(seq 1 200))%p%p%p%p%p%p%p%p%p%p
  env LD_PRELOAD="$LOCUS_LIB" LOCUS_TRACE_FILE="$W/long/$long" python3 -c 'a = bytearray(4 << 20)' \
    2>"$W/long.err" || bad "python3 under a long LOCUS_TRACE_FILE failed"
  [ -z "$(ls "$W/long")" ] || bad "LOCUS_TRACE_FILE expanded past 255 bytes wrote $(ls "$W/long")"
  grep -q 'LOCUS_TRACE_FILE is longer than 255 bytes once expanded' "$W/long.err" ||
    bad "no warning for a LOCUS_TRACE_FILE longer than 255 bytes once expanded: $(cat "$W/long.err")"
  say "2. LOCUS_TRACE_FILE=t.%p: parent and forked child each trace to their own file; past 255 bytes: none"
else
  say "2. skipped: no python3"
fi

# 3. unknown names
tree LOCUS_PROFLE=eco LOCUS_LIB=/x LOCUS_CACHE_DIR=/y LOCUS_SAMPLE_FILE=z LOCUS_NOPE=1 2>"$W/names.err"
n=$(grep -c 'LOCUS_PROFLE is not a locus setting (ignored); did you mean LOCUS_PROFILE?' "$W/names.err")
[ "$n" -eq 1 ] || bad "LOCUS_PROFLE in a tree of 3: $n warnings, expected 1: $(cat "$W/names.err")"
others=$(grep -v LOCUS_PROFLE "$W/names.err")
[ -z "$others" ] && say "3. LOCUS_PROFLE warned once in the tree, naming LOCUS_PROFILE; tool names not" ||
  bad "other messages: $others"

# 4. the banner once per tree
tree LOCUS_VERBOSE=1 2>"$W/v1.err"
n=$(grep -c ' active in pid ' "$W/v1.err")
[ "$n" -eq 1 ] || bad "LOCUS_VERBOSE=1 in a tree of 3: $n banners, expected 1"
shown=$(env LD_PRELOAD="$LOCUS_LIB" LOCUS_VERBOSE=1 sh -c 'echo "${LOCUS_SHOWN_BY%%:*} $$"' 2>/dev/null)
set -- $shown
[ $# -eq 2 ] && [ "$1" = "$2" ] || bad "the children do not see LOCUS_SHOWN_BY=<pid of the shell>:<hash>: '$shown'"
# A misspelling only a child has is still warned about, below a parent that printed.
env LD_PRELOAD="$LOCUS_LIB" LOCUS_VERBOSE=1 sh -c 'LOCUS_PROFLE=eco /bin/true' 2>"$W/child.err"
grep -q 'LOCUS_PROFLE is not a locus setting' "$W/child.err" ||
  bad "a child's own misspelling below a banner was not warned about: $(cat "$W/child.err")"
tree LOCUS_VERBOSE=all 2>"$W/vall.err"
n=$(grep -c ' active in pid ' "$W/vall.err")
[ "$n" -eq 3 ] || bad "LOCUS_VERBOSE=all in a tree of 3: $n banners, expected 3"
grep -qx 'locus:   LOCUS_VERBOSE=all' "$W/vall.err" || bad "LOCUS_VERBOSE=all is not listed as all"
say "4. LOCUS_VERBOSE=1: one banner in a tree of 3, LOCUS_SHOWN_BY set for the children; all: 3 banners"

# 5. the report's labels
env LD_PRELOAD="$LOCUS_LIB" LOCUS_STATS=1 ls -l / >/dev/null 2>"$W/report.err"
mib() { sed -n "s/^  $1 *: \([0-9.]*\) MiB\$/\1/p" "$W/report.err"; }
for l in "large blocks live" "heap chunks" "cached" "reserved" "peak reserved" "resident" "returned to OS"; do
  [ -n "$(mib "$l")" ] || bad "report: no line '$l : N MiB'"
done
grep -q 'bytes in use' "$W/report.err" && bad "report: the ambiguous 'bytes in use' label is back"
awk -v r="$(mib reserved)" -v c="$(mib 'heap chunks')" -v k="$(mib cached)" -v s="$(mib resident)" 'BEGIN {
  if (r + 0 != c + k) { print "reserved " r " != chunks " c " + cached " k; exit 1 }
  if (s <= 0 || s >= 64) { print "resident " s " MiB for ls"; exit 1 } }' ||
  bad "report figures inconsistent: $(cat "$W/report.err")"
say "5. report: reserved $(mib reserved) MiB = chunks + cached, resident $(mib resident) MiB, labels present"

if [ $fail -ne 0 ]; then echo "env_and_report: FAIL" >&2; exit 1; fi
echo "env_and_report: ok"
