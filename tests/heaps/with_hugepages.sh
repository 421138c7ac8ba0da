#!/bin/sh
# Runs a program that needs N free 2 MiB hugetlb pages (default 8). When the
# system has fewer free and we may raise vm.nr_hugepages (root), it reserves
# the missing ones for the run and puts the setting back afterwards, so the
# hugetlb example is tested on CI machines that reserve none; otherwise the
# program runs as is (and skips, exit 77, without its pages).
#   with_hugepages.sh N PROGRAM [ARGS...]
need=$1; shift
knob=/proc/sys/vm/nr_hugepages
free_pages() { awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo; }
free=$(free_pages)
if [ -n "$free" ] && [ "$free" -lt "$need" ] && [ -w "$knob" ]; then
  old=$(cat "$knob")
  trap 'echo "$old" > "$knob"' EXIT
  echo $((old + need - free)) > "$knob" 2>/dev/null || true
  echo "with_hugepages: vm.nr_hugepages $old -> $(cat "$knob") for this run (HugePages_Free: $(free_pages))"
  "$@"; st=$?
  exit $st
fi
exec "$@"
