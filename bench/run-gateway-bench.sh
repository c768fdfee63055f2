#!/usr/bin/env bash
# tokengate vs nginx, in one run, on this machine. Prints one table with ratios to nginx.
#   bench/run-gateway-bench.sh [seconds per run, default 8]
#   BENCH_SCENARIOS="json 429 sse tls tls-new" and BENCH_WORKERS="1 2" (the defaults) pick the rows
#   ("ui" adds the json rows again with the status page open in Chromium, against none);
#   TOKENGATE_BENCH_BIN=<binary> measures another build (a before/after, run alternately);
#   BENCH_COST="output_estimate: learned" adds keys to tokengate's cost section;
#   BENCH_PROFILE=1 samples tokengate with perf during each row and prints its top 20 symbols
#   below the table (Debian's linux-perf; software clock events, no hardware counters needed).
# Upstreams: nginx serving a fixed chat completion (JSON) and tokengate's mock (SSE).
# Contenders, each with the same number of workers (1, then 2):
#   nginx     reverse proxy, limit_req keyed by the API key, high rate (never rejects), burst, nodelay
#   nginx-429 the same with a low rate: every request past the first few is its 429 path
#   tokengate a realistic config: tenant tokens+requests, ip, route and global limits, unit: cost
#             with the body's cost estimated, access log on (as nginx's)
#   tokengate-429  the same with a low tenant limit
#   tls       the json rows with HTTPS on both listeners (one certificate, TLS 1.3, the same
#             cipher suite: printed below the table), kept-alive connections
#   tls-new   the same, every request on a new connection: req/s is handshakes per second
#   jwt       the json rows with each tenant's caller sending a JWT (ES256, signed by npm's jose;
#             BENCH_JWT_ALG picks another) instead of an API key (auth.jwt, SPEC §21)
# Then SSE time to first byte (bench/ttfb.py): the mock alone, through nginx, through tokengate.
# Each row also gives the proxy's CPU per request (per stream for SSE), user and system.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
source bench/lib.sh tokengate-bench

static_port=$(port); mock_port=$(port)
completion='{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"llama3-8b","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},"finish_reason":"stop"}],"usage":{"prompt_tokens":180,"completion_tokens":12,"total_tokens":192}}'
mkdir -p "$work/static"
cat > "$work/static/nginx.conf" <<CONF
worker_processes 1;
pid $work/static/nginx.pid;
error_log $work/static/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path $work/static; proxy_temp_path $work/static; fastcgi_temp_path $work/static;
  uwsgi_temp_path $work/static; scgi_temp_path $work/static;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$static_port;
    location / { default_type application/json; return 200 '$completion'; }
  }
}
CONF
nginx -c "$work/static/nginx.conf" -g 'daemon off;' & pids+=($!)
"$bin" mock-upstream --port "$mock_port" --tokens-per-s 0 > "$work/mock.log" 2>&1 & pids+=($!)
wait_port "$static_port"; wait_port "$mock_port"
# One certificate for both TLS listeners (ECDSA P-256, as a modern deployment's).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/tls.key" -out "$work/tls.pem" \
  -days 7 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 > /dev/null 2>&1

start_nginx() {  # name workers rate target tls
  local name=$1 p; p=$(port)
  mkdir -p "$work/$name"
  nginx_proxy_config "$work/$name" "$2" "$3" "$p" "$4" "$5" > "$work/$name/nginx.conf"
  nginx -c "$work/$name/nginx.conf" -g 'daemon off;' & pids+=($!); echo "$p $!"
}

start_tokengate() {  # name workers tenant_capacity target tls [admin port] [jwks file]
  local name=$1 workers=$2 capacity=$3 target=$4 tls=$5 admin=${6:-} jwks=${7:-} p ssl=""; p=$(port)
  [ "$tls" = 1 ] && ssl=", tls: { cert: $work/tls.pem, key: $work/tls.key }"
  mkdir -p "$work/$name"
  {
    echo "server: { listen: 127.0.0.1:$p, threads: $workers, max_connections: 100000$ssl }"
    if [ -n "$admin" ]; then echo "admin: { listen: 127.0.0.1:$admin, token_env: TG_BENCH_ADMIN_TOKEN }"
    else echo "admin: { enabled: false }"; fi
    echo "upstreams: [ { name: backend, url: \"http://127.0.0.1:$target\", max_connections: 256 } ]"
    echo "routes:"
    echo "  - path: /v1/chat/completions"
    echo "    upstreams: [backend]"
    echo "    limits: [ { name: route-rps, algorithm: token_bucket, capacity: 1000000, rate: 1000000/s } ]"
    echo "models: { llama3-8b: { cost_factor: 1.0 }, \"*\": { cost_factor: 1.0 } }"
    [ -z "${BENCH_COST:-}" ] || echo "cost: { $BENCH_COST }"
    echo "tiers:"
    echo "  standard:"
    echo "    limits:"
    echo "      - { name: requests, algorithm: token_bucket, capacity: $capacity, rate: $capacity/s }"
    echo "      - { name: tokens, algorithm: token_bucket, capacity: $((capacity * 10)), rate: $((capacity * 10))/s, unit: cost }"
    echo "tenants:"
    for i in $(seq 100); do echo "  - { id: t$i, tier: standard, keys: [ \"bench-key-$i\" ] }"; done
    echo "ip_limits: [ { name: per-ip, algorithm: token_bucket, capacity: 100000000, rate: 100000000/s } ]"
    echo "global_limits: [ { name: gpu, algorithm: leaky_bucket, mode: police, capacity: 1000000000, rate: 1000000000/s, unit: cost } ]"
    echo "log: { access: $work/$name/access.log, level: warn }"
    [ -z "$jwks" ] || echo "auth: { jwt: { jwks_file: $jwks, issuer: \"https://idp.example.com/\", audiences: [tokengate], tenant_claim: org } }"
  } > "$work/$name/gateway.yaml"
  "$bin" serve -c "$work/$name/gateway.yaml" > "$work/$name/out.log" 2>&1 & pids+=($!); echo "$p $!"
}

# The jwt rows' tokens: npm's jose signs one for each of the 100 tenants.
if [[ " ${BENCH_SCENARIOS:-} " == *" jwt "* ]]; then
  jose_dir=$PWD/build/release/jose
  [ -d "$jose_dir/node_modules/jose" ] ||
    (mkdir -p "$jose_dir" && cd "$jose_dir" && npm install --no-audit --no-fund --silent jose@6.2.17 > /dev/null)
  mkdir -p "$work/jwt"
  BENCH_TENANTS=100 node tests/sdk/jwt.mjs "$jose_dir/node_modules/jose" "$work/jwt" https://idp.example.com/ tokengate > /dev/null
fi

scheme=http; close=0; keys_file=""
run_wrk() {  # port conns stream
  BENCH_STREAM=$3 BENCH_CLOSE=$close BENCH_KEYS_FILE=$keys_file wrk -t2 -c"$2" -d"${secs}s" --latency -s bench/wrk-chat.lua "$scheme://127.0.0.1:$1" 2>&1 | grep '^RESULT' || echo "RESULT 0 0 0 0 0 0"
}
# CPU time (user, system; clock ticks) of the proxy's processes: where a gap comes from.
cpu_ticks() { local u=0 k=0 a b p; for p in "$@"; do read -r a b < <(awk '{print $14, $15}' "/proc/$p/stat"); u=$((u + a)); k=$((k + b)); done; echo "$u $k"; }
tick_us=$((1000000 / $(getconf CLK_TCK)))
measure() {  # port conns stream pids... -> req/s p50 p99 non-2xx user-us/req sys-us/req
  local port=$1 conns=$2 stream=$3 u0 k0 u1 k1 rps p50 p99 bad n; shift 3
  read -r u0 k0 < <(cpu_ticks "$@")
  read -r _ rps p50 p99 bad n _ < <(run_wrk "$port" "$conns" "$stream")
  read -r u1 k1 < <(cpu_ticks "$@")
  python3 -c "n=max($n,1); print($rps, $p50, $p99, $bad, f'{($u1-$u0)*$tick_us/n:.1f}', f'{($k1-$k0)*$tick_us/n:.1f}')"
}

# The status page in a real Chromium (tests/ui/status_page.mjs), polling every second.
export TG_BENCH_ADMIN_TOKEN=bench-admin-token
open_ui() {  # admin_port gateway_port hold_ms
  local npm_dir=$PWD/build/release/playwright
  [ -d "$npm_dir/node_modules/playwright-core" ] ||
    (mkdir -p "$npm_dir" && cd "$npm_dir" && npm install --no-audit --no-fund --silent playwright-core@1.65.1 > /dev/null)
  cat > "$work/ui-$1.json" <<JSON
{"admin": "http://127.0.0.1:$1", "gateway": "http://127.0.0.1:$2", "token": "$TG_BENCH_ADMIN_TOKEN",
 "key": "bench-key-1", "requests": 0, "hold_ms": $3, "chromium": "/usr/bin/chromium"}
JSON
  node tests/ui/status_page.mjs "$npm_dir/node_modules/playwright-core" "$work/ui-$1.json"
}

# BENCH_PROFILE=1: a flat profile of tokengate over each of its rows (self time, by symbol).
[ "${BENCH_PROFILE:-}" != 1 ] || scripts/setup.sh none linux-perf > /dev/null
perf_pid=""
profile_start() {  # pid label
  [ "${BENCH_PROFILE:-}" = 1 ] || return 0
  perf record -q -F 2000 -p "$1" -o "$work/perf-$2.data" > /dev/null 2>&1 & perf_pid=$!
  profile_label=$2
}
profile_stop() {
  [ -n "$perf_pid" ] || return 0
  kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; perf_pid=""
  { echo "tokengate $profile_label: top 20 symbols (self, % of samples)"
    perf report -q -i "$work/perf-$profile_label.data" --no-children --sort symbol --stdio 2>/dev/null |
      grep -v '^$' | sed -E 's/[[:space:]]+(-[[:space:]]+)*$//' | sed -n 1,20p; echo; } >> "$work/profiles.txt"
}

row='%-15s %3s %5s %10s %9s %9s %8s %9s %9s %8s %8s\n'
printf "$row" config workers conns "req/s" "p50 ms" "p99 ms" non-2xx "x nginx" "p99 x" "user us" "sys us"
for workers in ${BENCH_WORKERS:-1 2}; do
  for scenario in ${BENCH_SCENARIOS:-json 429 sse tls tls-new}; do
    target=$static_port; stream=0; ng_rate="1000000r/s"; tg_cap=1000000; tls=0; scheme=http; close=0
    jwks=""; keys_file=""; [ "$scenario" = jwt ] && { jwks=$work/jwt/jwks.json; keys_file=$work/jwt/bench-tokens.txt; }
    [ "$scenario" = sse ] && { target=$mock_port; stream=1; }
    [ "$scenario" = 429 ] && { ng_rate="1r/s"; tg_cap=2; }
    [ "${scenario#tls}" != "$scenario" ] && { tls=1; scheme=https; }
    [ "$scenario" = tls-new ] && close=1
    admin_port=""; [ "$scenario" = ui ] && admin_port=$(port)
    read -r ng_port ng_pid < <(start_nginx "nginx-$scenario-$workers" "$workers" "$ng_rate" "$target" "$tls")
    read -r tg_port tg_pid < <(start_tokengate "tg-$scenario-$workers" "$workers" "$tg_cap" "$target" "$tls" "$admin_port" "$jwks")
    wait_port "$ng_port"; wait_port "$tg_port"
    for _ in $(seq 40); do  # nginx's workers are forked just after it listens
      mapfile -t ng_workers < <(pgrep -P "$ng_pid"); [ "${#ng_workers[@]}" -ge "$workers" ] && break; sleep 0.05
    done
    if [ "$tls" = 1 ]; then  # what each negotiated (the same lines each time: kept once)
      for who in "nginx $ng_port" "tokengate $tg_port"; do
        set -- $who
        echo "$1: $(openssl s_client -connect "127.0.0.1:$2" < /dev/null 2>/dev/null | grep -m1 '^New,')" >> "$work/ciphers.txt"
      done
    fi
    for conns in 64 256; do
      read -r n_rps n_p50 n_p99 n_bad n_user n_sys < <(measure "$ng_port" "$conns" "$stream" "${ng_workers[@]}")
      profile_start "$tg_pid" "$scenario-$workers-$conns"
      read -r t_rps t_p50 t_p99 t_bad t_user t_sys < <(measure "$tg_port" "$conns" "$stream" "$tg_pid")
      profile_stop
      ratio=$(python3 -c "print(f'{$t_rps/max($n_rps,1):.2f}')"); p99r=$(python3 -c "print(f'{$t_p99/max($n_p99,0.001):.2f}')")
      printf "$row" "nginx-$scenario" "$workers" "$conns" "$n_rps" "$n_p50" "$n_p99" "$n_bad" "1.00" "1.00" "$n_user" "$n_sys"
      if [ "$scenario" = ui ]; then  # the same gateway again, now with the status page open
        printf "$row" "tokengate-no-ui" "$workers" "$conns" "$t_rps" "$t_p50" "$t_p99" "$t_bad" "$ratio" "$p99r" "$t_user" "$t_sys"
        open_ui "$admin_port" "$tg_port" "$((secs * 1000 + 4000))" > "$work/ui-$workers-$conns.json" &
        ui_pid=$!; sleep 3  # Chromium started, the page loaded and polling
        read -r u_rps u_p50 u_p99 u_bad u_user u_sys < <(measure "$tg_port" "$conns" "$stream" "$tg_pid")
        wait "$ui_pid" || echo "the status page failed: $(cat "$work/ui-$workers-$conns.json")" >&2
        ratio=$(python3 -c "print(f'{$u_rps/max($n_rps,1):.2f}')"); p99r=$(python3 -c "print(f'{$u_p99/max($n_p99,0.001):.2f}')")
        printf "$row" "tokengate-ui" "$workers" "$conns" "$u_rps" "$u_p50" "$u_p99" "$u_bad" "$ratio" "$p99r" "$u_user" "$u_sys"
        polls=$(python3 -c "import json; print(json.load(open('$work/ui-$workers-$conns.json'))['checks']['polls'])")
        echo "$workers worker(s), $conns conns: /ui open ($polls polls of /admin/status) $(python3 -c \
          "print(f'{$u_rps/max($t_rps,1):.3f}')")x the req/s with none, p99 $(python3 -c "print(f'{$u_p99/max($t_p99,0.001):.2f}')")x" \
          >> "$work/ui-ratios.txt"
      else
        printf "$row" "tokengate-$scenario" "$workers" "$conns" "$t_rps" "$t_p50" "$t_p99" "$t_bad" "$ratio" "$p99r" "$t_user" "$t_sys"
      fi
    done
    if [ "$scenario" = sse ]; then  # time to first byte, one stream at a time, after the load
      python3 bench/ttfb.py --upstream "$mock_port" --proxy "nginx=$ng_port" --proxy "tokengate=$tg_port" \
        --n 300 > "$work/ttfb-$workers.txt" 2>&1 || true
    fi
    kill "$ng_pid" "$tg_pid" 2>/dev/null || true; sleep 0.3
  done
done
if [ -f "$work/ui-ratios.txt" ]; then echo; echo "The status page's cost to the data plane:"; cat "$work/ui-ratios.txt"; fi
if [ -f "$work/ciphers.txt" ]; then echo; echo "TLS as negotiated (openssl s_client):"; sort -u "$work/ciphers.txt"; fi
if [ -f "$work/profiles.txt" ]; then echo; echo "(sampled rows: perf costs tokengate some CPU)"; cat "$work/profiles.txt"; fi
for workers in ${BENCH_WORKERS:-1 2}; do
  [ -f "$work/ttfb-$workers.txt" ] || continue
  echo; echo "SSE time to first byte, $workers worker(s):"; cat "$work/ttfb-$workers.txt"
done
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; $(date -u +%Y-%m-%d); wrk -t2, ${secs}s per run; logs in $work with BENCH_KEEP=1"
