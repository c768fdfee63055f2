#!/usr/bin/env bash
# Regenerates docs/status-page.png: the gateway in front of the mock upstream, eight tenants
# sending at different rates (free-tier past its request limit, batch-eval near its token
# limit) for SECONDS (default 240), then, the traffic still running, Chromium loads /ui
# (tests/ui/status_page.mjs) and saves the page. Needs scripts/setup.sh's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-240}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
bin=$work/tokengate  # a copy: a rebuild meanwhile does not pull it from under the run
cp build/release/tokengate "$bin"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mock=$(port) gw=$(port) admin=$(port)
tenants=(search-prod chat-app batch-eval free-tier acme-corp research internal-tools trial-42)
{
    echo "server: { listen: 127.0.0.1:$gw }"
    echo "admin: { listen: 127.0.0.1:$admin, token_env: TG_SCREENSHOT_TOKEN }"
    echo "upstreams: [ { name: vllm-a, url: \"http://127.0.0.1:$mock\" } ]"
    echo "routes: [ { path: /v1/chat/completions, upstreams: [vllm-a] } ]"
    echo "tiers:"
    echo "  standard:"
    echo "    limits:"
    echo "      - { name: requests, algorithm: token_bucket, capacity: 20, rate: 4/s }"
    echo "      - { name: tokens, algorithm: token_bucket, capacity: 400, rate: 60/s, unit: cost }"
    echo "      - { name: daily, algorithm: quota, period: day, limit: 2000000, unit: tokens }"
    echo "global_limits: [ { name: gpu, algorithm: leaky_bucket, capacity: 2000, rate: 400/s, unit: cost } ]"
    echo "tenants:"
    for t in "${tenants[@]}"; do echo "  - { id: $t, tier: standard, keys: [\"key-$t\"] }"; done
} > "$work/gateway.yaml"
export TG_SCREENSHOT_TOKEN=screenshot-token
"$bin" mock-upstream --port "$mock" --tokens-per-s 400 > "$work/mock.log" 2>&1 &
"$bin" serve -c "$work/gateway.yaml" > "$work/gateway.log" 2>&1 &
for _ in $(seq 50); do curl -s -o /dev/null "127.0.0.1:$admin/healthz" && break; sleep 0.1; done
send() {  # tenant, requests a second, max_tokens: until the picture is taken, and a little after
    local end=$((SECONDS + seconds + 30)) gap; gap=$(python3 -c "print(1/$2)")
    while [ $SECONDS -lt $end ]; do
        curl -s -o /dev/null "127.0.0.1:$gw/v1/chat/completions" -H "Authorization: Bearer key-$1" \
            -d "{\"model\":\"llama3-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"summarise the report\"}],\"max_tokens\":$3}" &
        sleep "$gap"
    done
}
send search-prod 3 40 & send chat-app 5 60 & send batch-eval 2 300 & send free-tier 9 20 &
send acme-corp 1 80 & send research 0.5 120 & send internal-tools 0.2 30 &
sleep "$seconds"
npm_dir=$PWD/build/release/playwright
[ -d "$npm_dir/node_modules/playwright-core" ] ||
    (mkdir -p "$npm_dir" && cd "$npm_dir" && npm install --no-audit --no-fund --silent playwright-core@1.65.1)
cat > "$work/ui.json" <<JSON
{"admin": "http://127.0.0.1:$admin", "gateway": "http://127.0.0.1:$gw", "token": "$TG_SCREENSHOT_TOKEN",
 "key": "key-trial-42", "tenant": "trial-42", "requests": 3, "settle_ms": 1500,
 "screenshot": "$PWD/docs/status-page.png", "chromium": "/usr/bin/chromium"}
JSON
node tests/ui/status_page.mjs "$npm_dir/node_modules/playwright-core" "$work/ui.json"
