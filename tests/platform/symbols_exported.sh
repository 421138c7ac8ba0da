#!/usr/bin/env bash
# symbols_exported: liblocus.so and liblocus.a define only the allocator API.
#
#  1. every defined global symbol of the .so (nm -D --defined-only) and of the
#     .a (nm -g --defined-only) is a standard allocation name, a glibc alias
#     (__libc_*, __posix_memalign), a C++ operator new/delete (_Zn*, _Zd*) or
#     a function declared in include/locus.h, or sigaction and signal (interposed
#     while next touch's SIGSEGV handler is installed: os.c);
#  2. every function declared in include/locus.h is defined by both;
#  3. the .a has no undefined reference to an internal name (a name defined
#     by liblocus_internal.a, the same objects with internal names visible);
#  4. a program that defines lock_acquire, os_map, registry_add, fmt_buf,
#     heap_get_slow and locus_stats (internal names of locus) links with
#     liblocus.a (dynamically linked with libc, and fully static when the
#     static libc is installed), calls them and malloc/free, and runs.
#
# Environment (ctest sets it): LOCUS_LIB (.so), LOCUS_STATIC_LIB (.a),
# LOCUS_INTERNAL_LIB, LOCUS_HEADER, LOCUS_CLASH_SRC, LOCUS_NO_OVERRIDE (0/1),
# NM, CC. Exit 0 pass, 1 fail.
set -u
set -o pipefail

fail=0
say()  { printf '[symbols_exported] %s\n' "$*"; }
bad()  { say "FAIL: $*" >&2; fail=1; }

for v in LOCUS_LIB LOCUS_STATIC_LIB LOCUS_INTERNAL_LIB LOCUS_HEADER LOCUS_CLASH_SRC; do
  [ -n "${!v:-}" ] && [ -f "${!v}" ] || { say "FAIL: $v is not set or not a file: '${!v:-}'" >&2; exit 1; }
done
NM=${NM:-nm}
CC=${CC:-cc}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/locus-symbols.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

# Functions of the public header: "locus_xxx(".
grep -oE 'locus_[a-z_]+\(' "$LOCUS_HEADER" | tr -d '(' | sort -u >"$WORK/header"
n_header=$(wc -l <"$WORK/header")
[ "$n_header" -ge 20 ] || bad "only $n_header functions found in $LOCUS_HEADER (parse error?)"

# The standard names (malloc.c, extra.c, glibc aliases).
cat >"$WORK/standard" <<'EOF'
malloc
free
calloc
realloc
reallocarray
free_sized
free_aligned_sized
posix_memalign
aligned_alloc
memalign
valloc
pvalloc
malloc_usable_size
cfree
malloc_trim
__posix_memalign
sigaction
signal
EOF

# nm prints "value type name" (defined) or "U name"; keep the names.
"$NM" -D --defined-only "$LOCUS_LIB" | awk 'NF>=3 {print $3}' | sort -u >"$WORK/so" ||
  { bad "nm -D failed on $LOCUS_LIB"; exit 1; }
"$NM" -g --defined-only "$LOCUS_STATIC_LIB" | awk 'NF>=3 {print $3}' | sort -u >"$WORK/a" ||
  { bad "nm -g failed on $LOCUS_STATIC_LIB"; exit 1; }

# allowed NAME: the allocator API. A locus_* name must be declared in the
# header: locus_init, locus_opt, locus_stats... are internal.
allowed() {
  case "$1" in
    __libc_*|_Zn*|_Zd*) return 0 ;;
    locus_*) grep -qxF "$1" "$WORK/header" ;;
    *) grep -qxF "$1" "$WORK/standard" ;;
  esac
}

check_defined() {  # LABEL FILE-OF-NAMES
  local label=$1 names=$2 n bad_names=""
  n=$(wc -l <"$names")
  [ "$n" -gt 0 ] || { bad "$label defines no global symbol at all"; return; }
  while read -r s; do
    allowed "$s" || bad_names="$bad_names $s"
  done <"$names"
  if [ -n "$bad_names" ]; then
    bad "$label exports names outside the allocator API:$bad_names"
  else
    say "$label: $n defined global symbols, all part of the allocator API"
  fi
  local missing
  missing=$(comm -23 "$WORK/header" "$names" | tr '\n' ' ')
  if [ -n "$missing" ]; then
    bad "$label lacks functions declared in locus.h: $missing"
  else
    say "$label: all $n_header functions of locus.h are defined"
  fi
}
check_defined "liblocus.so ($LOCUS_LIB)" "$WORK/so"
check_defined "liblocus.a ($LOCUS_STATIC_LIB)" "$WORK/a"

# Undefined references of the .a against the internal names.
"$NM" -g --defined-only "$LOCUS_INTERNAL_LIB" | awk 'NF>=3 {print $3}' | sort -u >"$WORK/internal_all"
while read -r s; do allowed "$s" || echo "$s"; done <"$WORK/internal_all" >"$WORK/internal"
n_internal=$(wc -l <"$WORK/internal")
[ "$n_internal" -ge 20 ] || bad "only $n_internal internal names found in $LOCUS_INTERNAL_LIB"
"$NM" -u "$LOCUS_STATIC_LIB" | awk 'NF>=2 {print $2}' | sort -u >"$WORK/undef"
leaked=$(comm -12 "$WORK/internal" "$WORK/undef" | tr '\n' ' ')
if [ -n "$leaked" ]; then
  bad "liblocus.a has undefined references to internal names: $leaked"
else
  say "liblocus.a: $(wc -l <"$WORK/undef") undefined references, none to one of the $n_internal internal names"
fi

# A program defining internal names of locus, linked with liblocus.a.
for s in lock_acquire os_map registry_add fmt_buf heap_get_slow locus_stats; do
  grep -qxF "$s" "$WORK/internal" || say "note: '$s' is no longer an internal name of locus (the clash test still runs)"
done
inc=$(dirname "$LOCUS_HEADER")
defs=""
[ "${LOCUS_NO_OVERRIDE:-0}" = 1 ] && defs="-DCLASH_NO_OVERRIDE=1"
link_and_run() {  # LABEL EXTRA-LDFLAGS...
  local label=$1; shift
  local exe=$WORK/clash_$label
  # shellcheck disable=SC2086
  if ! "$CC" -O1 -fno-builtin $defs -I"$inc" -o "$exe" "$LOCUS_CLASH_SRC" "$LOCUS_STATIC_LIB" -lpthread "$@" \
       >"$WORK/ld_$label.log" 2>&1; then
    bad "linking a program that defines locus's internal names with liblocus.a ($label) failed:"
    sed 's/^/    /' "$WORK/ld_$label.log" | head -n 20 >&2
    return
  fi
  local out rc=0
  out=$("$exe" 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -qx 'static_clash: ok'; then
    bad "the program linked with liblocus.a ($label) exited $rc without its ok line"
  else
    say "program defining internal names links with liblocus.a and runs ($label)"
  fi
}
link_and_run dynamic-libc
# Fully static: only when the C library's static archive is installed.
printf 'int main(void){return 0;}\n' >"$WORK/t.c"
if "$CC" -static -o "$WORK/t" "$WORK/t.c" >/dev/null 2>&1; then
  link_and_run static -static
else
  say "note: no static C library (libc.a), the fully static link is not tried"
fi

if [ $fail -ne 0 ]; then
  echo "symbols_exported: FAIL" >&2
  exit 1
fi
echo "symbols_exported: ok"
