#!/usr/bin/env bash
# Redis's instructions per request, counted by callgrind: SPEC §18's "Redis CPU per request"
# without this machine's noise (redis-server's CPU per request moves 2x between runs an hour
# apart here; this count by a few percent). The Redis bench's redis+leases gateway (1 worker,
# 100 tenants, five limits, the route, IP and global ones leased) serves wrk for a while; every
# script call it makes is recorded (MONITOR), with the script it loaded, and then replayed in
# order, pipelined, into a redis-server of its own under callgrind.
#   bench/run-redis-instructions.sh [seconds of load, default 6]
#   TOKENGATE_BENCH_BIN=<binary>: another build (its own script and calls: a before/after).
#   BENCH_CONNS=N: wrk's connections (default 64; the calls' batch sizes follow the load).
#   BENCH_REDIS_SERVER=<binary>: the replay's redis-server (one built from Debian's source with
#     symbols shows where its instructions go: BENCH_KEEP=1 keeps the callgrind dump).
# Prints the script calls per request, by op, and redis-server's instructions per request.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}
source bench/lib.sh tokengate-redis-instructions valgrind redis-server
start_static_completion
redis_port=$(port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no > "$work/redis.log" 2>&1 & pids+=($!)
wait_port "$redis_port"
redis-cli -p "$redis_port" MONITOR > "$work/monitor.txt" & monitor=$!; pids+=("$monitor")
gw=$(port)
{ bench_limits_config "$gw" 1 ""; echo "log: { access: $work/access.log, level: warn }"
  echo "store:"; echo "  backend: redis"
  echo "  redis: { url: \"redis://127.0.0.1:$redis_port/0\", timeout: 250ms, pool: 8, on_error: fail_closed }"
  echo "  leases: { fraction: 0.05, min_period: 200ms }"; } > "$work/gateway.yaml"
"$bin" serve -c "$work/gateway.yaml" > "$work/gateway.log" 2>&1 & gateway=$!; pids+=("$gateway")
wait_port "$gw"
wrk -t2 -c"${BENCH_CONNS:-64}" -d"${secs}s" -s bench/wrk-chat.lua "http://127.0.0.1:$gw" > "$work/wrk.txt" 2>&1
kill -TERM "$gateway"; wait "$gateway" 2>/dev/null || true  # its drain's calls count too
sleep 0.5; kill "$monitor" 2>/dev/null || true
requests=$(awk '/^RESULT/{print $6}' "$work/wrk.txt")

replay_port=$(port)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/callgrind.out.%p" \
  "${BENCH_REDIS_SERVER:-redis-server}" --port "$replay_port" --bind 127.0.0.1 --save "" --appendonly no > "$work/replay.log" 2>&1 & vg=$!
pids+=("$vg")
for _ in $(seq 300); do redis-cli -p "$replay_port" PING > /dev/null 2>&1 && break; sleep 0.1; done
python3 - "$work/monitor.txt" "$replay_port" "$vg" "$requests" <<'PY'
import collections, glob, re, socket, subprocess, sys
monitor, port, vg, requests = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
quoted = re.compile(rb'"((?:[^"\\]|\\.)*)"')
escapes = {b'n': b'\n', b'r': b'\r', b't': b'\t', b'a': b'\a', b'b': b'\b'}
def unescape(b):  # MONITOR's quoting: \\, \", \n, \r, \t, \a, \b and \xHH
    return re.sub(rb'\\(x[0-9a-fA-F]{2}|.)', lambda m: bytes([int(m.group(1)[1:], 16)]) if m.group(1)[:1] == b'x'
                  else escapes.get(m.group(1), m.group(1)), b)
script, calls, ops = None, [], collections.Counter()
for line in open(monitor, 'rb'):
    args = [unescape(a) for a in quoted.findall(line)]
    if len(args) >= 3 and args[0].upper() == b'SCRIPT' and args[1].upper() == b'LOAD' and script is None:
        script = args[2]
    elif len(args) > 3 and args[0].upper() == b'EVALSHA':
        ops[args[3 + int(args[2])].decode()] += 1
        calls.append(args[2:])
assert script, 'no SCRIPT LOAD seen'
sock = socket.create_connection(('127.0.0.1', port))
replies = sock.makefile('rb')
def enc(parts): return b'*%d\r\n' % len(parts) + b''.join(b'$%d\r\n%s\r\n' % (len(p), p) for p in parts)
def read():  # one reply; errors as bytes starting with '-'
    line = replies.readline()
    if line[:1] == b'$':
        n = int(line[1:])
        return None if n < 0 else replies.read(n + 2)[:-2]
    if line[:1] == b'*':
        return [read() for _ in range(max(int(line[1:]), 0))]
    return line.rstrip()
sock.sendall(enc([b'SCRIPT', b'LOAD', script]))
sha = read()
subprocess.run(['callgrind_control', '-i', 'on', vg], capture_output=True)
for i in range(0, len(calls), 200):  # pipelined, 200 at a time
    batch = calls[i:i + 200]
    sock.sendall(b''.join(enc([b'EVALSHA', sha] + c) for c in batch))
    errors = [r for r in (read() for _ in batch) if isinstance(r, bytes) and r.startswith(b'-')]
    assert not errors, errors[:3]
subprocess.run(['callgrind_control', '-i', 'off', vg], capture_output=True)
subprocess.run(['callgrind_control', '-d', vg], capture_output=True)
dump = sorted(glob.glob(f'{sys.argv[1].rsplit("/", 1)[0]}/callgrind.out.*'))[-1]
# With instrumentation off at start the header's summary is 0: the totals line at the end counts.
total = max(int(l.split()[1]) for l in open(dump) if l.startswith(('summary:', 'totals:')))
print(f"requests {requests}, script calls {len(calls)} ({len(calls) / requests:.3f} a request): "
      + ', '.join(f'{op} {n}' for op, n in ops.most_common()))
print(f"redis-server instructions per request: {total // requests} ({total} in all, replayed)")
PY
kill "$vg" 2>/dev/null || true
echo "machine: $(nproc) cores; $(date -u +%Y-%m-%d); valgrind $(valgrind --version | sed 's/valgrind-//')"
