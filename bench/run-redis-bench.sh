#!/usr/bin/env bash
# The memory store against the Redis store, in one run, on this machine (issue 5's benchmark).
#   bench/run-redis-bench.sh [seconds per run, default 8]
#   BENCH_ROUNDS=N: each memory row and the Redis rows after it N times over, then each
#     store's median ratio and Redis CPU per request (this box's req/s moves by a third
#     between runs a minute apart: one pair of rows says little).
#   BENCH_STORES="redis+leases": only those Redis rows (default: redis redis+quota redis+leases).
#   BENCH_BASELINE_BIN=<binary>: one more Redis row, "baseline", that build on the plain redis
#     config (an older gateway, e.g. the one SPEC §18's "today's" was measured on), so that
#     Redis CPU per request is compared within one run; the medians then give each row's
#     Redis CPU per request as a fraction of the baseline's.
# Same realistic config for both (tenant requests + tokens with unit: cost, ip, route and
# global limits; 100 tenants), nginx serving a fixed chat completion as the upstream, a
# redis-server of its own. Prints req/s, latency, the ratio to the memory store, and the
# Redis round trips per request (EVALSHA + EVAL calls from INFO commandstats ÷ requests). The
# upstream's usage differs from the first reservations, so requests settle on Redis until the learned
# reservation matches it.
# The Lua script's own cost (issue 19): "redis+quota" adds a daily token quota to every tenant;
# "script us/req" is INFO commandstats' usec for EVALSHA + EVAL (decide and settle) per request.
# "redis+leases" (SPEC §18) leases the route, IP and global limits, so only the tenant's two are
# decided in Redis; every Redis row sends its settlements in batches (store.redis.flush_interval).
# timeout 250ms: on this box wrk, nginx, tokengate and Redis share the cores, and scheduling
# hiccups at 256 connections pass 50 ms (fail_closed then shows them as 503s).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${BENCH_ROUNDS:-1}
stores=${BENCH_STORES:-redis redis+quota redis+leases}
baseline_bin=${BENCH_BASELINE_BIN:-}
[ -z "$baseline_bin" ] || stores="baseline $stores"
source bench/lib.sh tokengate-redis-bench redis-server

start_static_completion
redis_port=$(port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no > "$work/redis.log" 2>&1 & pids+=($!)
wait_port "$redis_port"
redis() { redis-cli -p "$redis_port" "$@"; }
redis_cpu() { redis INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/{n+=$2} END{print n+0}'; }
script_calls() { redis INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_eval(sha)?:/{n+=$3} END{print n+0}'; }
script_usec() { redis INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_eval(sha)?:/{n+=$5} END{print n+0}'; }

start_tokengate() {  # name workers store
  local name=$1 workers=$2 store=$3 p program=$bin; p=$(port)
  # The baseline is an older build: only the config keys it has always had.
  [ "$store" = baseline ] && program=$baseline_bin
  mkdir -p "$work/$name"
  {
    local quota=""
    # The Lua script's own cost: a daily token quota more for every tenant.
    [ "$store" = redis+quota ] && quota="      - { name: daily-tokens, algorithm: quota, period: day, limit: 1000000G, unit: tokens }"
    bench_limits_config "$p" "$workers" "$quota"
    echo "log: { access: $work/$name/access.log, level: warn }"
    if [ "$store" != memory ]; then
      echo "store:"
      echo "  backend: redis"
      # The baseline's keys apart (prefix), so that neither build reads the other's state form.
      local prefix="tg:"; [ "$store" = baseline ] && prefix="tgbase:"
      echo "  redis: { url: \"redis://127.0.0.1:$redis_port/0\", prefix: \"$prefix\", timeout: 250ms, pool: 8, on_error: fail_closed }"
      # SPEC §18: the route, IP and global limits leased, only the tenant's decided in Redis.
      if [ "$store" = redis+leases ]; then echo "  leases: { fraction: 0.05, min_period: 200ms }"; fi
    fi
  } > "$work/$name/gateway.yaml"
  "$program" serve -c "$work/$name/gateway.yaml" > "$work/$name/out.log" 2>&1 & pids+=($!); echo "$p $!"
}

run_wrk() {  # port conns
  wrk -t2 -c"$2" -d"${secs}s" --latency -s bench/wrk-chat.lua "http://127.0.0.1:$1" 2>&1 | grep '^RESULT' || echo "RESULT 0 0 0 0 0 0"
}

# "redis us/req" is redis-server's whole CPU (INFO cpu, user + sys) per request, and "shard max" the
# req/s one Redis core would carry at that cost: where one shard tops out for the fleet.
row() { printf '%-16s %3s %5s %10s %9s %9s %8s %10s %10s %10s %14s %13s %10s\n' "$@"; }
row store workers conns "req/s" "p50 ms" "p99 ms" non-2xx "x memory" "redis/req" "redis cpu" "script us/req" "redis us/req" "shard max"
for workers in 1 2; do
  read -r m_port m_pid < <(start_tokengate "memory-$workers" "$workers" memory)
  read -r r_port r_pid < <(start_tokengate "redis-$workers" "$workers" redis)
  read -r q_port q_pid < <(start_tokengate "quota-$workers" "$workers" redis+quota)
  read -r l_port l_pid < <(start_tokengate "leases-$workers" "$workers" redis+leases)
  b_port=$l_port b_pid=$l_pid
  [ -z "$baseline_bin" ] || read -r b_port b_pid < <(start_tokengate "baseline-$workers" "$workers" baseline)
  wait_port "$m_port"; wait_port "$r_port"; wait_port "$q_port"; wait_port "$l_port"; wait_port "$b_port"
  declare -A port_of=([redis]=$r_port [redis+quota]=$q_port [redis+leases]=$l_port [baseline]=$b_port)
  for conns in 64 256; do
   for _ in $(seq "$rounds"); do
    read -r _ m_rps m_p50 m_p99 m_bad _ _ < <(run_wrk "$m_port" "$conns")
    row memory "$workers" "$conns" "$m_rps" "$m_p50" "$m_p99" "$m_bad" "1.00" "-" "-" "-" "-" "-"
    for name in $stores; do
      p=${port_of[$name]}
      redis CONFIG RESETSTAT > /dev/null
      cpu_before=$(redis_cpu)
      read -r _ r_rps r_p50 r_p99 r_bad r_total _ < <(run_wrk "$p" "$conns")
      cpu_after=$(redis_cpu)
      sleep 0.5  # the last settlements land
      calls=$(script_calls); usec=$(script_usec)
      redis_busy=$(python3 -c "print(f'{100*($cpu_after-$cpu_before)/$secs:.0f}%')")
      ratio=$(python3 -c "print(f'{$r_rps/max($m_rps,1):.2f}')")
      per_req=$(python3 -c "print(f'{$calls/max($r_total,1):.2f}')")
      us_req=$(python3 -c "print(f'{$usec/max($r_total,1):.2f}')")
      cpu_req=$(python3 -c "print(f'{1e6*($cpu_after-$cpu_before)/max($r_total,1):.1f}')")
      shard_max=$(python3 -c "print(f'{$r_total/max($cpu_after-$cpu_before,1e-9):.0f}')")
      row "$name" "$workers" "$conns" "$r_rps" "$r_p50" "$r_p99" "$r_bad" "$ratio" "$per_req" "$redis_busy" "$us_req" "$cpu_req" "$shard_max"
      echo "$name $workers $conns $ratio $cpu_req $us_req" >> "$work/rounds.txt"
    done
   done
  done
  kill "$m_pid" "$r_pid" "$q_pid" "$l_pid" "$b_pid" 2>/dev/null || true; sleep 0.3
done
if [ "$rounds" -gt 1 ]; then
  echo "medians over $rounds rounds (store workers conns: x memory, redis us/req, script us/req):"
  python3 - "$work/rounds.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, workers, conns, ratio, cpu, script = line.split()
    runs[(name, workers, conns)].append((float(ratio), float(cpu), float(script)))
for (name, workers, conns), r in runs.items():
    base = runs.get(("baseline", workers, conns))
    # Against the baseline round by round (the two ran seconds apart), then the median: SPEC
    # §18 reads INFO commandstats (script us); INFO cpu's whole process beside it.
    of_base = "" if not base or name == "baseline" else (
        f"; of the baseline's: script {statistics.median(s / max(b[2], 1e-9) for (_, _, s), b in zip(r, base)):.2f},"
        f" redis {statistics.median(c / max(b[1], 1e-9) for (_, c, _), b in zip(r, base)):.2f}")
    print(f"  {name} {workers} {conns}: {statistics.median(x[0] for x in r):.2f}, {statistics.median(x[1] for x in r):.1f},"
          f" {statistics.median(x[2] for x in r):.1f}{of_base} (ratios {' '.join(f'{x[0]:.2f}' for x in r)})")
PY
fi
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; $(date -u +%Y-%m-%d); wrk -t2, ${secs}s per run; redis-server $(redis-server --version | grep -o 'v=[0-9.]*'); logs in $work with BENCH_KEEP=1"
