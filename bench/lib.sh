# Shared by the bench scripts (sourced): setup, a work dir, process cleanup, free ports.
#   source bench/lib.sh <work-dir-name> [extra apt packages...]
secs=${secs:-8}
# The gateway measured is the one users build (the README's: scripts/setup.sh gateway, -O3),
# not the developers' -O2 -g one, which counted 4% more instructions a request (2026-12-07).
scripts/setup.sh gateway nginx-light wrk "${@:2}" > /dev/null
# TOKENGATE_BENCH_BIN: another build to measure (an older commit, for a before/after).
bin=${TOKENGATE_BENCH_BIN:-$PWD/build/gateway/tokengate}
work=$(mktemp -d "/tmp/$1-XXXXXX")
pids=()
# A full run's logs reach gigabytes (access logs, nginx's line per rejection): the work dir
# goes at exit unless BENCH_KEEP=1.
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  [ "${BENCH_KEEP:-}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
ulimit -n 65536 || true

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 did not open" >&2; exit 1; }

# nginx answering every request with one fixed chat completion, whose usage differs from what
# the gateway reserves at first (so requests settle until its learned reservation matches the
# usage; after that, most need no settlement); sets static_port. The Redis benches' upstream.
# Its completion stays within the body's max_tokens (64): a report past it would be clamped and
# counted as a hostile upstream's on every request (SPEC §17), which is not the path measured.
start_static_completion() {
  static_port=$(port)
  local completion='{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"llama3-8b","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox."},"finish_reason":"stop"}],"usage":{"prompt_tokens":180,"completion_tokens":48,"total_tokens":228}}'
  cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work; uwsgi_temp_path $work; scgi_temp_path $work;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$static_port; location / { default_type application/json; return 200 '$completion'; } }
}
CONF
  nginx -c "$work/nginx.conf" -g 'daemon off;' & pids+=($!)
  wait_port "$static_port"
}

# The Redis benches' gateway config up to its store (YAML on stdout): listening on $1 with $2
# workers, 100 tenants with a requests and a cost token bucket (and $3: more tier limit lines),
# a route, an IP and a global limit.
bench_limits_config() {
  echo "server: { listen: 127.0.0.1:$1, threads: $2, max_connections: 100000 }"
  echo "admin: { enabled: false }"
  echo "upstreams: [ { name: backend, url: \"http://127.0.0.1:$static_port\", max_connections: 256 } ]"
  echo "routes:"
  echo "  - { path: /v1/chat/completions, upstreams: [backend], limits: [ { name: route-rps, algorithm: token_bucket, capacity: 1000000, rate: 1000000/s } ] }"
  echo "tiers:"
  echo "  standard:"
  echo "    limits:"
  echo "      - { name: requests, algorithm: token_bucket, capacity: 1000000, rate: 1000000/s }"
  echo "      - { name: tokens, algorithm: token_bucket, capacity: 10000000, rate: 10000000/s, unit: cost }"
  [ -z "${3:-}" ] || echo "$3"
  echo "tenants:"
  for i in $(seq 100); do echo "  - { id: t$i, tier: standard, keys: [ \"bench-key-$i\" ] }"; done
  echo "ip_limits: [ { name: per-ip, algorithm: token_bucket, capacity: 100000000, rate: 100000000/s } ]"
  echo "global_limits: [ { name: gpu, algorithm: leaky_bucket, mode: police, capacity: 1000000000, rate: 1000000000/s, unit: cost } ]"
}

# nginx as the gateway benches' contender (nginx.conf on stdout): a reverse proxy to port $5
# with limit_req keyed by the API key, listening on $4 with $2 workers, its files in $1. Rate
# $3: 1000000r/s never rejects (burst 100000, nodelay); a lower one, with a burst of 5, makes
# every request past the first few its 429 path. $6=1: HTTPS (the benches' certificate in
# $work). Its access log is on, as tokengate's.
nginx_proxy_config() {
  local dir=$1 workers=$2 rate=$3 listen=$4 target=$5 tls=${6:-0} ssl="" burst="burst=100000 nodelay"
  [ "$tls" = 1 ] && ssl="ssl; ssl_certificate $work/tls.pem; ssl_certificate_key $work/tls.key; ssl_protocols TLSv1.2 TLSv1.3"
  [ "$rate" = "1000000r/s" ] || burst="burst=5 nodelay"
  cat <<CONF
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 16384; }
http {
  access_log $dir/access.log;
  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;
  uwsgi_temp_path $dir; scgi_temp_path $dir;
  keepalive_requests 1000000;
  limit_req_zone \$http_authorization zone=keys:10m rate=$rate;
  limit_req_status 429;
  upstream backend { server 127.0.0.1:$target; keepalive 256; }
  server {
    listen 127.0.0.1:$listen $ssl;
    location / {
      limit_req zone=keys $burst;
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_buffering off;
    }
  }
}
CONF
}
