#!/bin/sh
# Runs inside the guest (busybox sh, as root): the auto profile under a real
# cgroup v2 memory limit. Mounts cgroup2, enables the memory controller and
# checks, with /cgroup_probe and LD_PRELOAD=/liblocus.so:
#  1. the pressure reader finds v2 and the limit: memory.max of the process's
#     own cgroup; memory.high when it is the smaller; an ancestor's memory.max
#     when the process's cgroup has none;
#  2. under a memory.max of 1.1 x eco's peak (+8 MiB, measured in the same
#     cgroup: memory.peak), LOCUS_PROFILE=auto finishes: no NULL, no OOM kill
#     (memory.events oom_kill unchanged). uma's outcome in the same cgroup is
#     printed for comparison (it keeps up to 500 MiB and is expected to die).
# Exit 77 (skip) with the reason when cgroup2 or its memory controller cannot
# be had.
set -u
cg=/sys/fs/cgroup
probe=/cgroup_probe
lib=${LOCUS_LIB:-/liblocus.so}
mkdir -p $cg
mount -t cgroup2 none $cg 2>/dev/null || { echo "cgroup_v2: SKIP: cannot mount cgroup2"; exit 77; }
grep -qw memory $cg/cgroup.controllers || { echo "cgroup_v2: SKIP: no memory controller in cgroup2"; exit 77; }
echo +memory > $cg/cgroup.subtree_control || { echo "cgroup_v2: SKIP: cannot enable the memory controller"; exit 77; }
fail=0
# run CGROUP ENV... -- ARGS: the probe in CGROUP (a subshell joins it first)
run() {
  dir=$1; shift
  ( echo 0 > $dir/cgroup.procs && exec env LD_PRELOAD=$lib "$@" $probe_args )
}
oomk() { awk '$1 == "oom_kill" { print $2 }' $1/memory.events; }

# 1. the reader
mkdir $cg/a
echo $((96 << 20)) > $cg/a/memory.max
probe_args="--steps 1 --arrays 2 --max-mib 4 --expect-version 2 --expect-limit $((96 << 20))"
run $cg/a LOCUS_PROFILE=auto $probe || { echo "cgroup_v2: FAIL: memory.max not seen"; fail=1; }
echo $((80 << 20)) > $cg/a/memory.high
probe_args="--steps 1 --arrays 2 --max-mib 4 --expect-version 2 --expect-limit $((80 << 20))"
run $cg/a LOCUS_PROFILE=auto $probe || { echo "cgroup_v2: FAIL: memory.high not seen"; fail=1; }
echo +memory > $cg/a/cgroup.subtree_control
mkdir $cg/a/b
echo max > $cg/a/memory.high
probe_args="--steps 1 --arrays 2 --max-mib 4 --expect-version 2 --expect-limit $((96 << 20))"
run $cg/a/b LOCUS_PROFILE=auto $probe || { echo "cgroup_v2: FAIL: the parent's memory.max not seen"; fail=1; }
rmdir $cg/a/b $cg/a

# 2. under a limit eco fits in
mkdir $cg/w
echo 0 > $cg/w/memory.swap.max 2>/dev/null
work="--steps 20 --arrays 8 --max-mib 20"
probe_args="$work"
run $cg/w LOCUS_PROFILE=eco $probe || { echo "cgroup_v2: FAIL: eco failed without a limit"; fail=1; }
peak=$(cat $cg/w/memory.peak 2>/dev/null || echo 0)
rmdir $cg/w
[ "$peak" -gt 0 ] || { echo "cgroup_v2: SKIP: no memory.peak"; exit 77; }
limit=$(( (peak + peak / 10 + (8 << 20)) / 4096 * 4096 ))
echo "cgroup_v2: eco peak $((peak >> 20)) MiB, limit $((limit >> 20)) MiB"
for prof in auto uma; do
  mkdir $cg/$prof
  echo 0 > $cg/$prof/memory.swap.max 2>/dev/null
  echo $limit > $cg/$prof/memory.max
  run $cg/$prof LOCUS_PROFILE=$prof $probe
  st=$?
  k=$(oomk $cg/$prof)
  echo "cgroup_v2: $prof: exit status $st, oom_kill $k, peak $(( $(cat $cg/$prof/memory.peak) >> 20 )) MiB"
  if [ $prof = auto ] && { [ $st -ne 0 ] || [ "$k" != 0 ]; }; then echo "cgroup_v2: FAIL: auto did not finish under the limit"; fail=1; fi
  rmdir $cg/$prof
done
[ $fail -eq 0 ] && echo "cgroup_v2: PASS"
exit $fail
