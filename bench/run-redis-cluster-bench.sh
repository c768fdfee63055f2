#!/usr/bin/env bash
# Where one Redis shard tops out, and how a Redis Cluster scales with its masters (SPEC §18).
#   bench/run-redis-cluster-bench.sh [seconds per run, default 8]
# The config of run-redis-bench.sh (100 tenants, five limits; route, IP and global limits
# leased, settlements batched) on a Redis Cluster of 1, 2 and 3 masters (slots split evenly,
# made with CLUSTER ADDSLOTSRANGE and MEET: redis-cli --cluster create wants 3 at least), each a
# redis-server of its own. For each master: its CPU (INFO cpu, user + sys) per request the
# gateway served. "busiest us/req" is the most loaded master's; "fleet max" the req/s the
# cluster carries before that master's one core is full (1e6 / busiest us/req): how the fleet's
# ceiling grows with shards. The gateway, wrk, nginx and every redis-server share this
# machine's cores, so req/s itself cannot grow here; the per-master CPU is what scales.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
source bench/lib.sh tokengate-cluster-bench redis-server redis-tools

start_static_completion

node_ports=()
start_cluster() {  # masters
  local n=$1 i dir bus0=
  node_ports=()
  for i in $(seq 0 $((n - 1))); do
    local p bus; p=$(port); bus=$(port); dir="$work/cluster-$n/node-$i"; mkdir -p "$dir"
    [ "$i" = 0 ] && bus0=$bus
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-port "$bus" > "$dir/redis.log" 2>&1 &
    pids+=($!); cluster_pids+=($!); node_ports+=("$p")
  done
  for p in "${node_ports[@]}"; do wait_port "$p"; done
  local per=$((16384 / n))
  for i in $(seq 0 $((n - 1))); do
    local first=$((i * per)) last=$(((i + 1) * per - 1))
    [ "$i" = $((n - 1)) ] && last=16383
    redis-cli -p "${node_ports[$i]}" CLUSTER ADDSLOTSRANGE "$first" "$last" > /dev/null
    [ "$i" = 0 ] || redis-cli -p "${node_ports[$i]}" CLUSTER MEET 127.0.0.1 "${node_ports[0]}" "$bus0" > /dev/null
  done
  for _ in $(seq 200); do
    local ok=0
    for p in "${node_ports[@]}"; do
      redis-cli -p "$p" CLUSTER INFO | grep -q 'cluster_state:ok' && ok=$((ok + 1))
    done
    [ "$ok" = "$n" ] && return 0
    sleep 0.1
  done
  echo "the cluster of $n did not come up" >&2; exit 1
}
node_cpu() { redis-cli -p "$1" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/{n+=$2} END{print n+0}'; }
node_calls() { redis-cli -p "$1" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_eval(sha)?:/{n+=$3} END{print n+0}'; }

start_tokengate() {  # name store [nodes]
  local name=$1 store=$2 nodes=${3:-} p; p=$(port)
  mkdir -p "$work/$name"
  {
    bench_limits_config "$p" 2
    echo "log: { access: $work/$name/access.log, level: warn }"
    if [ "$store" = cluster ]; then
      echo "store:"
      echo "  backend: redis"
      echo "  leases: { fraction: 0.05, min_period: 200ms }"
      echo "  redis: { mode: cluster, nodes: [ $nodes ], timeout: 250ms, pool: 8, on_error: fail_closed }"
    fi
  } > "$work/$name/gateway.yaml"
  "$bin" serve -c "$work/$name/gateway.yaml" > "$work/$name/out.log" 2>&1 & pids+=($!); echo "$p $!"
}

run_wrk() {  # port conns
  wrk -t2 -c"$2" -d"${secs}s" --latency -s bench/wrk-chat.lua "http://127.0.0.1:$1" 2>&1 | grep '^RESULT' || echo "RESULT 0 0 0 0 0 0"
}

row() { printf '%-10s %6s %5s %10s %9s %8s %10s %10s %12s %15s %14s %11s\n' "$@"; }
row store masters conns "req/s" "p99 ms" non-2xx "x memory" "redis/req" "us/req all" "per master us" "busiest us/req" "fleet max"
read -r m_port m_pid < <(start_tokengate memory memory)
wait_port "$m_port"
declare -A memory_rps
for conns in 64 256; do
  read -r _ m_rps _ m_p99 m_bad _ _ < <(run_wrk "$m_port" "$conns")
  memory_rps[$conns]=$m_rps
  row memory - "$conns" "$m_rps" "$m_p99" "$m_bad" "1.00" - - - - -
done
kill "$m_pid" 2>/dev/null || true
for masters in 1 2 3; do
  cluster_pids=()
  start_cluster "$masters"
  nodes=$(printf '"127.0.0.1:%s", ' "${node_ports[@]}"); nodes=${nodes%, }
  read -r c_port c_pid < <(start_tokengate "cluster-$masters" cluster "$nodes")
  wait_port "$c_port"
  sleep 1  # the slot map, and a connection to every master
  for conns in 64 256; do
    declare -a before=() calls_before=()
    for p in "${node_ports[@]}"; do before+=("$(node_cpu "$p")"); calls_before+=("$(node_calls "$p")"); done
    read -r _ r_rps _ r_p99 r_bad r_total _ < <(run_wrk "$c_port" "$conns")
    sleep 0.5  # the last settlements land
    cpus=() calls=0
    for i in "${!node_ports[@]}"; do
      cpus+=("$(python3 -c "print($(node_cpu "${node_ports[$i]}") - ${before[$i]})")")
      calls=$((calls + $(node_calls "${node_ports[$i]}") - ${calls_before[$i]}))
    done
    read -r all per busiest fleet < <(python3 - "$r_total" "${cpus[@]}" <<'PY'
import sys
total = max(float(sys.argv[1]), 1)
cpus = [float(c) for c in sys.argv[2:]]
per = [1e6 * c / total for c in cpus]
print(f"{sum(per):.1f}", "/".join(f"{p:.1f}" for p in per), f"{max(per):.1f}", f"{1e6 / max(max(per), 1e-9):.0f}")
PY
    )
    ratio=$(python3 -c "print(f'{$r_rps/max(${memory_rps[$conns]},1):.2f}')")
    per_req=$(python3 -c "print(f'{$calls/max($r_total,1):.2f}')")
    row cluster "$masters" "$conns" "$r_rps" "$r_p99" "$r_bad" "$ratio" "$per_req" "$all" "$per" "$busiest" "$fleet"
  done
  kill "$c_pid" "${cluster_pids[@]}" 2>/dev/null || true; sleep 0.3
done
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; $(date -u +%Y-%m-%d); wrk -t2, ${secs}s per run; redis-server $(redis-server --version | grep -o 'v=[0-9.]*'); logs in $work with BENCH_KEEP=1"
