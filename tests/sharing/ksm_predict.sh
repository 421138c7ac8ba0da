#!/bin/sh
# Runs inside the test bed's guest, under ksm_guest.sh (KSM on): locus dedup's
# prediction for ksm_ranks beside what KSM merged (docs/sharing.md,
# "Measurements"). The guest needs python3 and the locus command (run.sh
# --file: see the commands in docs/sharing.md).
#   ksm_predict.sh LOCUS-COMMAND [KSM_RANKS-ARGS...]
# 1. LOCUS_KSM=off: the ranks hold their data after the steps; locus dedup
#    reads every process (one sample): the prediction.
# 2. LOCUS_KSM=large: once the merged pages have not grown for 3 s, locus
#    dedup reads them again: its "KSM now" line is what KSM merged.
locus=$1
shift
run() {     # run MODE: ksm_ranks held until killed; dedup once merging is steady
  mode=$1
  shift
  /ksm_ranks --modes "$mode" --hold 100000 "$@" >/tmp/ranks.txt 2>&1 &
  rp=$!
  until grep -q ":hold" /tmp/ranks.txt; do sleep 0.5; done
  prev=-1
  while :; do
    m=$(tail -n 1 /tmp/ranks.txt | sed -n 's/.* merging=\([0-9]*\) .*/\1/p')
    [ "$m" = "$prev" ] && break
    prev=$m
    sleep 3
  done
  grep -m1 "^ksm_ranks:" /tmp/ranks.txt
  tail -n 1 /tmp/ranks.txt
  echo "=== locus dedup, LOCUS_KSM=$mode (pids $(pidof ksm_ranks))"
  t0=$(cut -d' ' -f1 /proc/uptime)
  python3 "$locus" dedup $(pidof ksm_ranks)
  echo "=== locus dedup took $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { print b - a }') s (guest clock)"
  kill "$rp"
  wait "$rp" 2>/dev/null
  sleep 1
}
run off "$@"
run large "$@"
