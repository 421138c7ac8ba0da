#!/usr/bin/env bash
# dlopen_check.sh DLOPEN_EXE LIB STATIC_TLS(yes|no) [no-override]: check LIB's
# TLS model in its dynamic section and relocations (and with no-override that
# it exports no malloc/free/operator new), then run DLOPEN_EXE LIB (dlopen_c.c).
#
# TLS models as the ELF file shows them (x86_64, glibc 2.36, checked by hand):
#  - initial-exec (the default liblocus.so): `readelf -d` shows
#    "FLAGS  BIND_NOW STATIC_TLS" and `readelf -r` an R_X86_64_TPOFF64
#    relocation. ld.so can still dlopen it: its 8 bytes of TLS are taken from
#    the surplus static TLS space reserved at start-up (glibc >= 2.32:
#    tunable glibc.rtld.optional_static_tls, 512 bytes). When that space is
#    used up, dlopen fails with "cannot allocate memory in static TLS block".
#  - global-dynamic with TLS descriptors (locus_dyntls, -mtls-dialect=gnu2):
#    no STATIC_TLS flag, no TPOFF relocation, R_X86_64_TLSDESC instead: any
#    dlopen can place its TLS.
set -u
set -o pipefail
exe=$1 lib=$2 want=$3 override=${4:-}
say() { printf '[dlopen_check] %s\n' "$*"; }
die() { say "FAIL: $*" >&2; exit 1; }
[ -x "$exe" ] || die "no program $exe"
[ -f "$lib" ] || die "no library $lib"
command -v readelf >/dev/null || { say "SKIP: readelf not installed (binutils)"; exit 77; }

phdrs=$(readelf -lW "$lib")   # not piped into grep -q: pipefail and SIGPIPE
printf '%s\n' "$phdrs" | grep -qE '^ +TLS ' || die "$lib has no PT_TLS segment: was it built from locus's sources?"
flags=$(readelf -dW "$lib" | grep -E '\(FLAGS\)' || true)
say "$(basename "$lib"): dynamic FLAGS: ${flags:-(none)}"
tprel=$(readelf -rW "$lib" | grep -cE 'R_[A-Z0-9_]*(TPOFF|TPREL)' || true)
desc=$(readelf -rW "$lib" | grep -cE 'R_[A-Z0-9_]*(TLSDESC|DTPMOD)' || true)
say "$(basename "$lib"): $tprel static-TLS (TPOFF/TPREL) and $desc dynamic-TLS (TLSDESC/DTPMOD) relocations"
case "$want" in
  yes)
    printf '%s\n' "$flags" | grep -qw STATIC_TLS || die "initial-exec build without the STATIC_TLS flag"
    [ "$tprel" -gt 0 ] || die "initial-exec build without a TPOFF/TPREL relocation"
    # Every thread-local of the library is LOCUS_TLS: one reached through
    # __tls_get_addr may call malloc (a DTV resize) inside malloc's locks.
    [ "$desc" -eq 0 ] || die "initial-exec build with $desc dynamic-TLS relocations: a thread-local not declared LOCUS_TLS"
    ;;
  no)
    printf '%s\n' "$flags" | grep -qw STATIC_TLS && die "$lib carries STATIC_TLS: it was built with initial-exec TLS"
    [ "$tprel" -eq 0 ] || die "$lib has $tprel static-TLS relocations"
    [ "$desc" -gt 0 ] || die "$lib has no TLSDESC/DTPMOD relocation: how does it reach its TLS?"
    ;;
  *) die "third argument must be yes or no, not '$want'" ;;
esac

if [ "$override" = no-override ]; then
  command -v nm >/dev/null || { say "SKIP: nm not installed (binutils)"; exit 77; }
  std=$(nm -D --defined-only "$lib" | awk 'NF>=3 {print $3}' | grep -vE '^locus_' | tr '\n' ' ')
  [ -z "$std" ] || die "$lib was to be built with LOCUS_NO_OVERRIDE but exports: $std"
  say "$(basename "$lib"): exports only locus_* names (LOCUS_NO_OVERRIDE)"
fi

out=$("$exe" "$lib" 2>&1); rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || die "dlopen_c exited $rc"
printf '%s\n' "$out" | grep -qx 'dlopen_c: ok' || die "dlopen_c did not print its ok line"
say "ok"
