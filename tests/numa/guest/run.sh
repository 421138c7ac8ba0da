#!/usr/bin/env bash
# Boots a QEMU guest with N NUMA nodes (TCG, no KVM needed), runs one command
# in it and exits with the command's exit status.
#
#   run.sh --nodes N [--cpus C] [--mem-per-node SIZE] [--timeout S]
#          [--file HOSTPATH[:GUESTPATH]]... [--env NAME=VALUE]...
#          [--kernel IMAGE] [--append KERNEL-ARGS] [--qemu-arg ARG]... [--keep]
#          -- CMD [ARGS...]
#
#   --nodes N            NUMA nodes of the guest (1..64)
#   --cpus C             virtual CPUs (default N). With C >= N each node has a
#                        block of CPUs (CPU i on node floor(i*N/C)); with C < N
#                        CPU i is on node i and nodes C..N-1 are memory-only
#                        (e.g. 4 nodes, 2 CPUs: nodes 2 and 3 have no CPU).
#                        (Linux numbers nodes in the order the firmware's SRAT
#                        lists them, CPUs first: this keeps its numbers = QEMU's.)
#   --mem-per-node SIZE  memory of each node, with a K, M or G suffix (default 512M)
#   --timeout S          seconds before the guest is killed (default 300): exit 124
#   --file H[:G]         puts host file or directory H into the guest at G
#                        (default /basename(H)), with every shared library it
#                        needs (ldd on the host); repeatable
#   --env NAME=VALUE     sets NAME in the command's environment; repeatable
#   --kernel IMAGE       the guest kernel, a bzImage or an ELF vmlinux with a PVH
#                        entry (default: what kernel.sh --boot-image prints)
#   --append ARGS        more kernel command line arguments
#   --qemu-arg ARG       one more QEMU argument; repeatable
#   --keep               keep the temporary directory (initramfs, console log)
#
# The guest's root is an initramfs (an uncompressed cpio archive, made anew
# for each run in well under a second): busybox (static) with its
# applet links, the --file files, the dynamic loader, libc, libm, libpthread,
# libdl, librt, libgcc_s, libstdc++, the libraries the files need, and numactl,
# numastat and libnuma when the host has them.  Each library is at the same
# path as on the host (so RUNPATHs of build trees work), and an ld.so.cache
# made for that root names them all.  /init mounts proc, sysfs, devtmpfs and a
# tmpfs on /tmp, prints the CPUs and nodes the guest sees, runs CMD (cwd /,
# PATH=/bin:/sbin:/usr/bin:/usr/sbin:/), prints GUEST-EXIT-STATUS=<status> and
# powers off.  The guest's console is copied to stdout (without the serial
# line's carriage returns); the boot time is printed at the end.
#
# Exit status: CMD's; 124 on timeout; 125 when the guest stopped without
# reporting a status (kernel panic, QEMU error); 77 when QEMU, busybox, cpio or
# the kernel cannot be had (the test suite's "skip"); 2 on a usage error.
# Environment: LOCUS_QEMU (default qemu-system-x86_64), LOCUS_CACHE_DIR and
# LOCUS_GUEST_KERNEL (see kernel.sh), TMPDIR.
set -uo pipefail

me=run.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "$me: $*" >&2; }
usage() { say "$*"; say "usage: run.sh --nodes N [--cpus C] [--mem-per-node SIZE] [--timeout S] [--file H[:G]]... [--env N=V]... -- CMD [ARGS...]"; exit 2; }
skip() { say "SKIP: $*"; exit 77; }
now() { if [ -n "${EPOCHREALTIME:-}" ]; then echo "${EPOCHREALTIME/,/.}"; else date +%s.%N; fi; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

nodes="" cpus="" mem=512M timeout=300 kernel="" append="" keep=0
files=() envs=() qemu_extra=()
while (($#)); do
  case "$1" in
    --nodes) nodes=${2:-}; shift 2 || usage "--nodes needs a value" ;;
    --cpus) cpus=${2:-}; shift 2 || usage "--cpus needs a value" ;;
    --mem-per-node) mem=${2:-}; shift 2 || usage "--mem-per-node needs a value" ;;
    --timeout) timeout=${2:-}; shift 2 || usage "--timeout needs a value" ;;
    --file) files+=("${2:-}"); shift 2 || usage "--file needs a value" ;;
    --env) envs+=("${2:-}"); shift 2 || usage "--env needs a value" ;;
    --kernel) kernel=${2:-}; shift 2 || usage "--kernel needs a value" ;;
    --append) append=${2:-}; shift 2 || usage "--append needs a value" ;;
    --qemu-arg) qemu_extra+=("${2:-}"); shift 2 || usage "--qemu-arg needs a value" ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
(($#)) || usage "no command given after --"
[[ $nodes =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 64)) || usage "--nodes must be 1..64"
cpus=${cpus:-$nodes}
[[ $cpus =~ ^[0-9]+$ ]] && ((cpus >= 1 && cpus <= 255)) || usage "--cpus must be 1..255"
[[ $timeout =~ ^[0-9]+$ ]] && ((timeout > 0)) || usage "--timeout must be a positive number of seconds"
case "$mem" in
  *[0-9]G|*[0-9]g) mem_mb=$((${mem%?} * 1024)) ;;
  *[0-9]M|*[0-9]m) mem_mb=${mem%?} ;;
  *[0-9]K|*[0-9]k) mem_mb=$((${mem%?} / 1024)) ;;
  *) usage "--mem-per-node must be a size like 512M or 1G" ;;
esac 2>/dev/null
[[ ${mem_mb:-} =~ ^[0-9]+$ ]] && ((mem_mb >= 64)) || usage "--mem-per-node must be at least 64M"

# ---------------------------------------------------------------- tools
qemu=${LOCUS_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null 2>&1 || skip "$qemu not found (Debian: apt-get install qemu-system-x86)"
command -v cpio >/dev/null 2>&1 || skip "cpio not found (Debian: apt-get install cpio)"
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) not found"
busybox=""
for b in /bin/busybox /usr/bin/busybox /usr/lib/busybox/busybox; do
  [ -x "$b" ] && { busybox=$b; break; }
done
[ -n "$busybox" ] || skip "busybox not found (Debian: apt-get install busybox-static)"
if [ -z "$kernel" ]; then
  kernel=$("$here/kernel.sh" --boot-image)
  st=$?
  ((st == 77)) && skip "no guest kernel (kernel.sh said why above)"
  ((st == 0)) || { say "kernel.sh failed ($st)"; exit 1; }
fi
[ -r "$kernel" ] || skip "guest kernel $kernel is not readable"

ldconfig_bin=$(command -v ldconfig || echo /sbin/ldconfig)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/locus-guest.XXXXXX") || exit 1
qpid=""
cleanup() {
  [ -n "$qpid" ] && kill -TERM "$qpid" 2>/dev/null
  if ((keep)); then say "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
root=$tmp/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc,proc,sys,dev,tmp,root,run}

t_build=$(now)

# ---------------------------------------------------------------- root file system
declare -A placed=()      # guest path -> host path
# put HOST GUEST: copies HOST (symlinks followed) to GUEST in the guest root.
put() {
  local h=$1 g=$2
  [ -n "${placed[$g]:-}" ] && return 0
  placed[$g]=$h
  mkdir -p "$root$(dirname "$g")"
  cp -L "$h" "$root$g" || { say "cannot copy $h"; exit 1; }
}
missing_libs=()
# deps FILE: the shared libraries FILE needs, as absolute host paths.
deps() {
  env -u LD_PRELOAD -u LD_AUDIT ldd "$1" 2>/dev/null | while read -r a b c _; do
    if [ "$b" = "=>" ]; then
      if [ "$c" = not ]; then echo "MISSING:$a"; elif [ "${c:0:1}" = / ]; then echo "$c"; fi
    elif [ "${a:0:1}" = / ]; then
      echo "$a"
    fi
  done
}
# put_with_deps HOST GUEST
put_with_deps() {
  local l
  put "$1" "$2"
  while read -r l; do
    [ -n "$l" ] || continue
    case "$l" in
      MISSING:*) missing_libs+=("${l#MISSING:} (needed by $1)") ;;
      *) put "$l" "$l" ;;
    esac
  done < <(deps "$1")
}
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' \n')" = '177ELF' ]; }

# busybox and its applet links, all in /bin.  busybox --install makes them in
# one process; they point to the path busybox runs from on the host, so the
# guest has busybox there too.
"$busybox" --install -s "$root/bin" 2>/dev/null
bb=$(readlink "$root/bin/sh" 2>/dev/null)
[ "${bb:0:1}" = / ] || bb=/bin/busybox
put_with_deps "$busybox" "$bb"
[ -e "$root/bin/busybox" ] || ln -s "$bb" "$root/bin/busybox"
[ -e "$root/bin/sh" ] || ln -s "$bb" "$root/bin/sh"

# The C and C++ run-time libraries, wanted or not (dlopen, LD_PRELOAD).
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1 libstdc++.so.6; do
  p=$("$ldconfig_bin" -p 2>/dev/null | awk -v n="$lib" '$1 == n && /x86-64/ { print $NF; exit }')
  [ -n "$p" ] && put_with_deps "$p" "$p"
done
[ -e /lib64/ld-linux-x86-64.so.2 ] && put /lib64/ld-linux-x86-64.so.2 /lib64/ld-linux-x86-64.so.2
# Debugging aids when the host has them.
for t in numactl numastat migratepages; do
  p=$(command -v "$t" 2>/dev/null) && put_with_deps "$p" "/usr/bin/$t"
done

# The caller's files.
for spec in "${files[@]}"; do
  h=${spec%%:*}
  g=${spec#"$h"}; g=${g#:}
  [ -n "$g" ] || g=/$(basename "$h")
  [ "${g:0:1}" = / ] || g=/$g
  [ -e "$h" ] || { say "--file $h: no such file"; exit 2; }
  case "$g" in /init|/guest-cmd) say "--file: $g is reserved"; exit 2 ;; esac
  if [ -d "$h" ]; then
    mkdir -p "$root$g"
    cp -rL "$h/." "$root$g/" || { say "cannot copy $h"; exit 1; }
    while IFS= read -r -d '' f; do
      is_elf "$f" || continue
      while read -r l; do
        case "$l" in MISSING:*) missing_libs+=("${l#MISSING:} (needed by $f)") ;; ?*) put "$l" "$l" ;; esac
      done < <(deps "$f")
    done < <(find "$h" -type f -print0)
  else
    if is_elf "$h"; then put_with_deps "$h" "$g"; else put "$h" "$g"; fi
  fi
done
if ((${#missing_libs[@]})); then
  say "ldd cannot find on the host these libraries the guest would need:"
  printf '  %s\n' "${missing_libs[@]}" >&2
  exit 1
fi

# An ld.so.cache for the guest's root that knows every library directory.
for g in "${!placed[@]}"; do
  case "$g" in *.so|*.so.*) dirname "$g" ;; esac
done | sort -u >"$root/etc/ld.so.conf"
"$ldconfig_bin" -r "$root" >/dev/null 2>&1 || true

# The command, with its environment.
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
{
  echo "#!/bin/sh"
  for e in "${envs[@]}"; do
    [[ $e == *=* ]] || { say "--env $e: not NAME=VALUE"; exit 2; }
    echo "export $(q "$e")"
  done
  printf 'exec'
  for a in "$@"; do printf ' %s' "$(q "$a")"; done
  echo
} >"$root/guest-cmd"
chmod 755 "$root/guest-cmd"

cat >"$root/init" <<'EOF'
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin:/ HOME=/root TMPDIR=/tmp
mount -t devtmpfs dev /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
echo "GUEST-INIT uptime=$(cut -d' ' -f1 /proc/uptime)s kernel=$(uname -r) nproc=$(nproc) nodes-online=$(cat /sys/devices/system/node/online 2>/dev/null || echo none)"
for n in /sys/devices/system/node/node[0-9]*; do
  [ -d "$n" ] || continue
  kb=$(awk '/MemTotal/ { print $4 }' "$n/meminfo")
  echo "GUEST-NODE ${n##*/} cpus=$(cat "$n/cpulist") memtotal=$((kb / 1024))MiB"
done
cd /
/bin/sh /guest-cmd
st=$?
echo "GUEST-EXIT-STATUS=$st"
sync
poweroff -f
sleep 5
EOF
chmod 755 "$root/init"
# A console for the kernel to open before /init runs (when allowed to mknod).
mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null || true

initrd=$tmp/initramfs.cpio
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) >"$initrd" ||
  { say "cannot build the initramfs"; exit 1; }
t_built=$(now)

# ---------------------------------------------------------------- QEMU
# One socket per node when the CPUs divide evenly among the nodes, else one per
# CPU: a socket (a last-level cache) never spans two nodes.
if ((cpus % nodes == 0)); then sockets=$nodes; else sockets=$cpus; fi
qargs=(-accel tcg -cpu max -smp "$cpus,sockets=$sockets,cores=$((cpus / sockets)),threads=1" -m "$((nodes * mem_mb))M"
       -nodefaults -no-user-config -display none -serial stdio -no-reboot)
declare -a node_cpus
for ((i = 0; i < cpus; i++)); do
  if ((cpus >= nodes)); then n=$((i * nodes / cpus)); else n=$i; fi
  node_cpus[n]+=",cpus=$i"
done
for ((k = 0; k < nodes; k++)); do
  qargs+=(-object "memory-backend-ram,id=m$k,size=${mem_mb}M"
          -numa "node,nodeid=$k,memdev=m$k${node_cpus[k]:-}")
done
# Boot faster under TCG: no delay-loop calibration of the secondary CPUs (lpj
# from the host's clock at HZ=250, as Debian builds it: it only scales udelay);
# none of the initcalls that take longest under TCG and that nothing here needs
# (jitter entropy, the crypto self-tests, the kernel's X.509 certificates,
# encrypted keys, BPF's BTF set-up for TCP congestion control and struct_ops);
# no read-only remapping of the kernel's data, no Spectre/Meltdown
# mitigations, no watchdog.  Together about 40 % of the boot.
mhz=$(awk -F: '/^cpu MHz/ { printf "%d", $2; exit }' /proc/cpuinfo 2>/dev/null)
[[ ${mhz:-} =~ ^[0-9]+$ ]] && ((mhz >= 100)) || mhz=2000
slow_initcalls=jent_mod_init,crypto_kdf108_init,load_system_certificate_list,init_encrypted
slow_initcalls+=,bpf_tcp_ca_kfunc_init,bpf_dummy_struct_ops_init
cmdline="console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init"
cmdline+=" mitigations=off nowatchdog tsc=reliable no_timer_check lpj=$((mhz * 4000)) 8250.nr_uarts=1"
cmdline+=" initcall_blacklist=$slow_initcalls cryptomgr.notests=1 rodata=off"
cmdline+=" $append"
qargs+=(-kernel "$kernel" -initrd "$initrd" -append "$cmdline" "${qemu_extra[@]}")

[ -n "${LOCUS_GUEST_DEBUG:-}" ] && say "$qemu ${qargs[*]}"
say "booting $(basename "$kernel"): $nodes node(s), $cpus CPU(s), ${mem_mb} MiB per node, initramfs $(du -k "$initrd" | cut -f1) KiB built in $(secs "$t_build" "$t_built") s"
log=$tmp/console.log
# A guest that dies before /init runs says nothing about the command: the
# kernel under TCG with several CPUs sometimes oopses while it patches its
# own text at boot (int3 in sched_clock_cpu, seen once in ~40 boots). Such a
# boot is tried once more; a guest that reached /init is never run again.
for attempt in 1 2; do
: >"$log"
rm -f "$tmp/console"
mkfifo "$tmp/console" || { say "cannot make a FIFO in $tmp"; exit 1; }
t0=$(now)
# timeout(1) runs QEMU in a process group of its own; cleanup() stops it
# through its pid if this script is interrupted.
timeout -k 10 "$timeout" "$qemu" "${qargs[@]}" </dev/null >"$tmp/console" 2>"$tmp/qemu.err" &
qpid=$!
# The console line by line: carriage returns dropped, the times of /init's
# first line and of the exit marker noted, the last marker's status kept.
t_init="" t_exit="" status=""
while IFS= read -r line || [ -n "$line" ]; do
  line=${line//$'\r'/}
  case "$line" in
    *GUEST-INIT*) [ -n "$t_init" ] || t_init=$(now) ;;
    *GUEST-EXIT-STATUS=[0-9]*)
      t_exit=$(now)
      status=${line##*GUEST-EXIT-STATUS=}
      status=${status%%[!0-9]*} ;;
  esac
  printf '%s\n' "$line"
  printf '%s\n' "$line" >>"$log"
done <"$tmp/console"
wait "$qpid"
qst=$?
qpid=""
t1=$(now)
if [ -z "$status" ] && [ -z "$t_init" ] && ((qst != 124 && qst != 137)) && ((attempt == 1)); then
  say "the guest died before /init (QEMU status $qst): booting it once more"
  continue
fi
break
done

if ((qst == 124 || qst == 137)) && [ -z "$status" ]; then
  say "TIMEOUT: the guest did not finish in $timeout s (raise --timeout); QEMU killed"
  exit 124
fi
if [ -z "$status" ]; then
  say "the guest stopped without reporting an exit status (QEMU status $qst)"
  [ -s "$tmp/qemu.err" ] && { say "QEMU said:"; sed 's/^/  /' "$tmp/qemu.err" >&2; }
  [ -n "$t_init" ] || say "/init never ran: kernel panic or unusable kernel/initramfs (--append loglevel=7 shows all the kernel says)"
  exit 125
fi
if [ -n "$t_init" ]; then
  say "boot to /init $(secs "$t0" "$t_init") s, command $(secs "$t_init" "${t_exit:-$t1}") s, QEMU total $(secs "$t0" "$t1") s (host wall clock, TCG); guest exit status $status"
else
  say "QEMU total $(secs "$t0" "$t1") s; guest exit status $status"
fi
exit "$status"
