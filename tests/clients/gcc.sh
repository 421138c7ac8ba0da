#!/usr/bin/env bash
# Real client: gcc (driver, cc1, as, collect2/ld, all preloaded) compiling a
# generated multi-file C program with -O2, then the program is run. The
# object files, and the program's output, must be the same with and without
# the allocator preloaded.
#   gcc.sh [MODULES]   (default 24)
. "$(dirname "$0")/common.sh"
CC=${LOCUS_CC:-gcc}
need "$CC" awk cmp
mods=${1:-24}
cd "$WORK"
mkdir src
# Each module: a lookup table, a struct type, a recursive function, a long
# straight-line function (big basic blocks: the optimiser's memory use grows
# with them) and a switch. main.c calls every module and prints the results.
awk -v mods="$mods" 'BEGIN {
  hdr = "src/mods.h"
  print "#include <stdint.h>" > hdr
  for (m = 0; m < mods; m++) printf "uint64_t mod%d_run(uint64_t);\n", m > hdr
  close(hdr)
  for (m = 0; m < mods; m++) {
    f = sprintf("src/mod%d.c", m)
    print "#include <stdint.h>\n#include <string.h>\n#include \"mods.h\"" > f
    printf "static const uint32_t tab%d[256] = {", m > f
    for (i = 0; i < 256; i++) printf "%s%u", (i ? "," : ""), (i * 2654435761 + m * 97) % 4294967296 > f
    print "};" > f
    printf "struct rec%d { uint64_t a; uint32_t b[%d]; char name[%d]; };\n", m, 3 + m % 7, 8 + m % 13 > f
    printf "static uint64_t rec%d_fold(int n) { return n <= 1 ? 1 : (uint64_t)n * rec%d_fold(n - 1) %% 1000000007u; }\n", m, m > f
    printf "static uint64_t line%d(uint64_t x) {\n  uint64_t a = x, b = x ^ 0x9e3779b97f4a7c15ull, c = %d;\n", m, m > f
    for (i = 0; i < 400 + 40 * (m % 10); i++)
      printf "  a += (b ^ %du) * tab%d[(c + %d) & 255]; b = (b << %d) | (b >> %d); c ^= a + %d;\n", i, m, i, 1 + i % 31, 63 - i % 31, i * 3 > f
    print "  return a ^ b ^ c;\n}" > f
    printf "static uint64_t sw%d(uint64_t x) {\n  switch (x %% 64) {\n", m > f
    for (i = 0; i < 64; i++) printf "  case %d: return x * %d + tab%d[%d];\n", i, i * 7 + m, m, (i * 5) % 256 > f
    print "  }\n  return 0;\n}" > f
    printf "uint64_t mod%d_run(uint64_t seed) {\n  struct rec%d r; memset(&r, 0, sizeof r);\n", m, m > f
    printf "  r.a = seed; for (unsigned i = 0; i < sizeof r.b / sizeof r.b[0]; i++) r.b[i] = tab%d[(seed + i) & 255];\n", m > f
    printf "  uint64_t acc = rec%d_fold(20 + %d);\n", m, m % 50 > f
    print "  for (int i = 0; i < 1000; i++) acc = line" m "(acc + r.a + r.b[i % (sizeof r.b / sizeof r.b[0])]) ^ sw" m "(acc + i);" > f
    print "  return acc;\n}" > f
    close(f)
  }
  f = "src/main.c"
  print "#include <stdio.h>\n#include <inttypes.h>\n#include \"mods.h\"\nint main(void) {\n  uint64_t s = 1;" > f
  for (m = 0; m < mods; m++) printf "  s = mod%d_run(s); printf(\"mod%d %%\" PRIu64 \"\\n\", s);\n", m, m > f
  print "  return 0;\n}" > f
  close(f)
}' || die "could not generate the sources"
say "generated $(ls src/*.c | wc -l) C files, $(cat src/*.c | wc -l) lines"

build() {  # build DIR: compile every file (2 at a time), link, run
  local d=$1
  cp -r src "$d" && cd "$d" || return 1
  ls *.c | xargs -P 2 -I{} "$CC" -O2 -c {} -o {}.o || return 1
  "$CC" -O2 *.o -o prog || return 1
  ./prog
}
run_one ref gcc build "$WORK/ref" || die "reference build failed"
cd "$WORK"
run_one lib gcc build "$WORK/lib" || die "build with the preloaded compiler failed"
cd "$WORK"
n=0
for o in ref/*.o; do
  cmp -s "$o" "lib/$(basename "$o")" || die "object $(basename "$o") differs between the two compilers"
  n=$((n + 1))
done
say "$n object files identical"
same "$WORK/gcc.ref.out" "$WORK/gcc.lib.out" "program output"
[ "$(wc -l <"$WORK/gcc.lib.out")" -eq "$mods" ] || die "program printed $(wc -l <"$WORK/gcc.lib.out") lines, expected $mods"
say "PASS"
