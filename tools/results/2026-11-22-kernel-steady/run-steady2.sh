#!/usr/bin/env bash
# Host side of the kernel-steady measurements after the eco huge-tail change
# (from the repository root).  OLD_LIB: liblocus.so before the change
# (default build-rel/), NEW_LIB: after (default build-rel2/).
#  1. calloc_test (guest test, eco) with the old and the new locus: the
#     huge-tail check must fail with the old one  -> guest-calloc-tail.log
#  2. steady2.sh in a 1 GiB guest (2 x 512 MiB)    -> guest-steady2-1g.log
#  3. steady2.sh in a 2 GiB guest (2 x 1 GiB)      -> guest-steady2-2g.log
img=$(bash scripts/kernel.sh image) || exit 1
R=results/2026-11-22-kernel-steady T=tools/results/2026-11-22-kernel-steady
old=${OLD_LIB:-build-rel/liblocus.so} new=${NEW_LIB:-build-rel2/liblocus.so}
gcc -O2 -Wall -static -o /tmp/kreuse_prt tests/kernel/page_reuse_test.c || exit 1
gcc -O2 -Wall -o /tmp/kreuse_calloc tests/kernel/calloc_test.c || exit 1
gcc -O2 -shared -fPIC -o /tmp/kreuse_shim.so $T/syscall_shim.c -ldl || exit 1
files=(--file /tmp/kreuse_prt:/page_reuse_test --file "$new:/liblocus.so" --file "$old:/liblocus-old.so"
       --file /tmp/kreuse_shim.so:/shim.so --file /tmp/kreuse_calloc:/calloc_test
       --file build-rel/bench/bench_timestep:/timestep --file build-rel/bench/bench_hera:/hera --file $T/steady2.sh:/steady2.sh)
if [ "${SKIP_CALLOC:-0}" != 1 ]; then
bash tests/numa/guest/run.sh --nodes 2 --cpus 2 --mem-per-node 512M --timeout 600 --kernel "$img" "${files[@]}" -- /bin/sh -c '
  echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
  for lib in /liblocus-old.so /liblocus.so; do echo "== $lib"; LD_PRELOAD=$lib LOCUS_PROFILE=eco /calloc_test patched; done' > $R/guest-calloc-tail.log 2>&1
fi
bash tests/numa/guest/run.sh --nodes 2 --cpus 2 --mem-per-node 512M --timeout 5000 --kernel "$img" "${files[@]}" -- /bin/sh /steady2.sh ${ROUNDS:-7} > $R/guest-steady2-1g.log 2>&1
bash tests/numa/guest/run.sh --nodes 2 --cpus 2 --mem-per-node 1G --timeout 5000 --kernel "$img" "${files[@]}" -- /bin/sh /steady2.sh ${ROUNDS:-7} > $R/guest-steady2-2g.log 2>&1
