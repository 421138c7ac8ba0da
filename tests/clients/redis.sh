#!/usr/bin/env bash
# Real client: redis-server on 127.0.0.1 (a free random port, its own
# directory, no persistence), once on its usual allocator and once with the
# allocator under test preloaded. Each server is driven by redis-benchmark
# (bounded request count) and a data check: N keys of many sizes, lists and
# hashes are written, read back, partly deleted and read again. The server
# must stay up throughout; the data read back must be the same in both runs
# and equal to what was written. The server is always stopped (trap).
#   redis.sh [KEYS] [REQUESTS]   (defaults 30000, 20000)
. "$(dirname "$0")/common.sh"
need redis-server redis-cli redis-benchmark awk
keys=${1:-30000}
requests=${2:-20000}
cd "$WORK"

SERVER_PID=
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill "$SERVER_PID" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=
}
on_exit stop_server

# start_server MODE: sets PORT and SERVER_PID; retries on a taken port.
start_server() {
  local mode=$1 try pre=()
  [ "$mode" = lib ] && pre=(env LD_PRELOAD="$LOCUS_LIB")
  mkdir -p "$WORK/$mode"
  for try in 1 2 3 4 5 6 7 8; do
    PORT=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    "${pre[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --dir "$WORK/$mode" \
      --save '' --appendonly no --daemonize no --protected-mode yes \
      --enable-debug-command local --logfile "$WORK/$mode/redis.log" &
    SERVER_PID=$!
    for _ in $(seq 100); do
      if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
      [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] && return 0
      sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then stop_server; die "server ($mode) did not answer on port $PORT"; fi
    wait "$SERVER_PID" 2>/dev/null; SERVER_PID=
    grep -qi 'address already in use' "$WORK/$mode/redis.log" 2>/dev/null || {
      tail -n 20 "$WORK/$mode/redis.log" >&2; die "server ($mode) exited at start"; }
  done
  die "no free port found"
}

alive() {
  kill -0 "$SERVER_PID" 2>/dev/null && [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] ||
    { tail -n 30 "$WORK/$1/redis.log" >&2; die "server ($1) is down $2"; }
}

# Data set in the Redis protocol: strings of sizes 1 B .. 200 KiB, lists,
# hashes; values are printable, without spaces.
awk -v n="$keys" 'function resp(a, b, c, d, m) {
    m = (d == "" ? 3 : 4)
    printf "*%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", m, length(a), a, length(b), b, length(c), c
    if (d != "") printf "$%d\r\n%s\r\n", length(d), d
  }
  function val(i, len, s, ch) {
    ch = substr("abcdefghijklmnopqrstuvwxyz", 1 + i % 26, 1)
    s = ch i ":"
    while (length(s) < len) s = s s
    return substr(s, 1, len)
  }
  BEGIN {
    for (i = 0; i < n; i++) {
      len = (i % 100 == 0) ? 200000 - i % 7 : 1 + (i * 37) % 3000
      resp("SET", "k:" i, val(i, len))
      if (i % 10 == 0) resp("RPUSH", "l:" (i % 500), val(i, 1 + i % 300))
      if (i % 7 == 0) resp("HSET", "h:" (i % 300), "f" i, val(i, 1 + i % 1000))
    }
  }' >load.resp
awk -v n="$keys" 'BEGIN {
  for (i = 0; i < n; i++) print "GET k:" i
  for (j = 0; j < 500; j++) print "LRANGE l:" j " 0 -1"
  print "DBSIZE"
}' >read.cmds
awk -v n="$keys" 'BEGIN { for (i = 0; i < n; i += 2) print "DEL k:" i; for (j = 0; j < 300; j += 3) print "DEL h:" j }' >del.cmds
awk -v n="$keys" 'BEGIN { for (i = 1; i < n; i += 2) print "STRLEN k:" i; for (j = 0; j < 300; j++) print "HLEN h:" j; print "DBSIZE" }' >read2.cmds

job() {
  local mode=$1; local out=$WORK/data.$mode
  start_server "$mode"
  say "server ($mode) pid $SERVER_PID on port $PORT"
  redis-benchmark -h 127.0.0.1 -p "$PORT" -n "$requests" -c 20 -r 100000 -d 512 -q \
    -t set,get,incr,lpush,rpop,sadd,hset,spop,lrange_100,mset >"$WORK/bench.$mode" 2>&1 ||
    { cat "$WORK/bench.$mode" >&2; die "redis-benchmark ($mode) failed"; }
  [ "$(grep -c 'requests per second' "$WORK/bench.$mode")" -ge 10 ] ||
    { cat "$WORK/bench.$mode" >&2; die "redis-benchmark ($mode) did not complete its tests"; }
  alive "$mode" "after redis-benchmark"
  redis-cli -p "$PORT" flushall >/dev/null
  redis-cli -p "$PORT" --pipe <"$WORK/load.resp" >"$WORK/pipe.$mode" 2>&1 ||
    { cat "$WORK/pipe.$mode" >&2; die "loading the data ($mode) failed"; }
  grep -q 'errors: 0' "$WORK/pipe.$mode" || { cat "$WORK/pipe.$mode" >&2; die "errors while loading ($mode)"; }
  alive "$mode" "after loading"
  { redis-cli -p "$PORT" <"$WORK/read.cmds"
    redis-cli -p "$PORT" debug digest
    redis-cli -p "$PORT" <"$WORK/del.cmds" | sort | uniq -c
    redis-cli -p "$PORT" memory purge
    redis-cli -p "$PORT" <"$WORK/read2.cmds"
    redis-cli -p "$PORT" debug digest
  } >"$out" 2>"$WORK/cli.$mode.err" || die "reading back ($mode) failed"
  alive "$mode" "after the data check"
  stop_server
}
job ref
job lib

# What was written must be what is read back.
awk -v n="$keys" 'function val(i, len, s, ch) {
    ch = substr("abcdefghijklmnopqrstuvwxyz", 1 + i % 26, 1); s = ch i ":"
    while (length(s) < len) s = s s
    return substr(s, 1, len)
  }
  BEGIN { for (i = 0; i < n; i++) print val(i, (i % 100 == 0) ? 200000 - i % 7 : 1 + (i * 37) % 3000) }' >expected.get
head -n "$keys" data.lib | cmp -s - expected.get || die "values read back from the preloaded server are not the values written"
say "$keys values read back intact"
same "$WORK/data.ref" "$WORK/data.lib" "data read back"
say "PASS"
