#!/usr/bin/env bash
# Host side of the kernel-steady measurements (from the repository root):
# one boot with 1 GiB (2 x 512 MiB, default bounds, then the bound doubled),
# one with 2 GiB (2 x 1 GiB, default bounds).  Only the first boot was run
# (guest-steady-1g.log, locus before the eco huge-tail change); the 2 GiB
# boot was replaced by run-steady2.sh.
img=$(bash scripts/kernel.sh image) || exit 1
R=results/2026-11-22-kernel-steady T=tools/results/2026-11-22-kernel-steady
gcc -O2 -Wall -static -o /tmp/kreuse_prt tests/kernel/page_reuse_test.c || exit 1
gcc -O2 -shared -fPIC -o /tmp/kreuse_shim.so $T/syscall_shim.c -ldl || exit 1
files=(--file /tmp/kreuse_prt:/page_reuse_test --file build-rel/liblocus.so:/liblocus.so --file /tmp/kreuse_shim.so:/shim.so
       --file build-rel/bench/bench_timestep:/timestep --file build-rel/bench/bench_hera:/hera --file $T/steady.sh:/steady.sh)
bash tests/numa/guest/run.sh --nodes 2 --cpus 2 --mem-per-node 512M --timeout 5000 --kernel "$img" "${files[@]}" -- /bin/sh /steady.sh ${ROUNDS:-7} raise > $R/guest-steady-1g.log 2>&1
bash tests/numa/guest/run.sh --nodes 2 --cpus 2 --mem-per-node 1G --timeout 5000 --kernel "$img" "${files[@]}" -- /bin/sh /steady.sh ${ROUNDS:-7} > $R/guest-steady-2g.log 2>&1
