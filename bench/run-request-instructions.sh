#!/usr/bin/env bash
# Instructions per request in user space, counted by callgrind: the request path's work without
# this machine's noise (its CPU time per request moves by ±20% between runs; this count by
# well under 1%). One worker, the gateway bench's config (4 limit levels, cost from the body,
# access log on), wrk posting its ~1 KB chat body with 100 keys at 8 connections.
#   bench/run-request-instructions.sh [seconds counted, default 8]
#   BENCH_PATHS="json 429" (the default) picks the rows: answered by the upstream, or refused;
#     "redis" is the json row on the Redis store with leases (the Redis bench's redis+leases
#     row: the tenant's limits decided in a redis-server of its own, the others leased);
#     "nginx" and "nginx-429" count the gateway bench's contender on the same load: nginx
#     proxying to the same upstream with limit_req keyed by the API key (never rejecting, or
#     its 429 path), access log on, one process (master_process off);
#   TOKENGATE_BENCH_BIN=<binary> counts another build (a before/after);
#   BENCH_TOP=N prints each row's N costliest functions (self);
#   BENCH_CACHE=1 also simulates the caches and prints L1 instruction and data misses per
#   request: where a path's time goes beyond its instruction count (its code no longer fits).
# Every thread of the gateway is counted (the access log's writer too), from a warmed-up start.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
source bench/lib.sh tokengate-instructions valgrind redis-server
start_static_completion
redis_port=""

cache=(); [ "${BENCH_CACHE:-}" = 1 ] && cache=(--cache-sim=yes)
printf '%-6s %9s %14s %12s  %s\n' path requests instructions "per request" statuses
for path in ${BENCH_PATHS:-json 429}; do
  gw=$(port); dir="$work/$path"; mkdir -p "$dir"
  case $path in
    nginx) nginx_proxy_config "$dir" 1 1000000r/s "$gw" "$static_port" > "$dir/nginx.conf" ;;
    nginx-429) nginx_proxy_config "$dir" 1 1r/s "$gw" "$static_port" > "$dir/nginx.conf" ;;
  esac
  tight=""; [ "$path" = 429 ] && tight="      - { name: tight, algorithm: token_bucket, capacity: 2, rate: 2/s }"
  [ -f "$dir/nginx.conf" ] || { bench_limits_config "$gw" 1 "$tight"; echo "log: { access: $dir/access.log, level: warn }"
    if [ "$path" = redis ]; then
      if [ -z "$redis_port" ]; then
        redis_port=$(port)
        redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no > "$work/redis.log" 2>&1 & pids+=($!)
        wait_port "$redis_port"
      fi
      echo "store:"
      echo "  backend: redis"
      echo "  redis: { url: \"redis://127.0.0.1:$redis_port/0\", timeout: 2s, pool: 8, on_error: fail_closed }"
      echo "  leases: { fraction: 0.05, min_period: 200ms }"
    fi; } > "$dir/gateway.yaml"
  command=("$bin" serve -c "$dir/gateway.yaml")
  [ -f "$dir/nginx.conf" ] && command=(nginx -c "$dir/nginx.conf" -g 'daemon off; master_process off;')
  valgrind --tool=callgrind "${cache[@]}" --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" \
    "${command[@]}" > "$dir/out.log" 2>&1 & vg=$!; pids+=("$vg")
  for _ in $(seq 600); do (echo > "/dev/tcp/127.0.0.1/$gw") 2>/dev/null && break; sleep 0.1; done
  wrk -t1 -c8 -d3s -s bench/wrk-chat.lua "http://127.0.0.1:$gw" > /dev/null 2>&1  # warm: pools, caches
  callgrind_control -i on "$vg" > /dev/null 2>&1
  wrk -t1 -c8 -d"${secs}s" -s bench/wrk-chat.lua "http://127.0.0.1:$gw" > "$dir/wrk.txt" 2>&1
  callgrind_control -i off "$vg" > /dev/null 2>&1
  callgrind_control -d "$vg" > /dev/null 2>&1
  kill "$vg"; wait "$vg" 2>/dev/null || true
  requests=$(awk '/^RESULT/{print $6}' "$dir/wrk.txt")
  dump=$(ls -t "$dir"/callgrind.out.* | head -1)
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
  if [ -f "$dir/nginx.conf" ]; then  # its combined format: the status is the 9th field
    statuses=$(awk '{print $9}' "$dir/access.log" | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')
  else
    statuses=$(grep -o '"status":[0-9]*' "$dir/access.log" | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}' | sed 's/"status"://g')
  fi
  printf '%-6s %9s %14s %12s  %s\n' "$path" "$requests" "$total" "$((total / requests))" "$statuses"
  if [ ${#cache[@]} -gt 0 ]; then  # PROGRAM TOTALS: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
    callgrind_annotate "$dump" 2>/dev/null | awk -v n="$requests" '/PROGRAM TOTALS/{gsub(",",""); gsub(/\([^)]*\)/,"");
      printf "       L1 misses per request: instructions %d, data %d (read %d, write %d); last level %d\n",
        $4 / n, ($5 + $6) / n, $5 / n, $6 / n, ($7 + $8 + $9) / n}'
  fi
  if [ -n "${BENCH_TOP:-}" ]; then
    callgrind_annotate --threshold=100 "$dump" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n "2,$((BENCH_TOP + 1))p" |
      awk -v n="$requests" '{v=$1; gsub(",","",v); $1=""; $2=""; $3=""; printf "   %7d %s\n", v / n, substr($0, 1, 140)}'
  fi
done
echo "machine: $(nproc) cores; $(date -u +%Y-%m-%d); valgrind $(valgrind --version | sed 's/valgrind-//')"
