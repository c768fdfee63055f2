#!/usr/bin/env bash
# Tries the container image, not only writes it: builds docker/Dockerfile with Debian's podman
# on a base image made by debootstrap (no registry needed), runs the mock upstream and the
# gateway (gateway.example.yaml) in two containers on the host network, expects 200s then a
# 429 for the demo key, and stops the gateway with SIGTERM, which must drain and exit 0.
# Run it whenever docker/ or the build changes; it compiles from scratch (about 6 min here),
# so CI does not run it.
# usage: scripts/container-demo.sh [--keep]   (--keep leaves the images for the next run)
set -euo pipefail
cd "$(dirname "$0")/.."

keep=${1:-}
scripts/setup.sh none podman debootstrap runc
podman=(podman --runtime runc --cgroup-manager cgroupfs)
work=$(mktemp -d)
cleanup() {
    cleanup_containers
    rm -rf "$work"
}
trap cleanup EXIT
cleanup_containers() {  # one at a time: a name that is not there would stop the rest
    for name in tg-demo-gateway tg-demo-mock; do "${podman[@]}" rm -f "$name" > /dev/null 2>&1 || true; done
}
cleanup_containers  # left by an interrupted run

# The Dockerfile's two bases, from one minimal bookworm tree.
if ! "${podman[@]}" image exists localhost/debian:bookworm; then
    echo "=== debootstrap --variant=minbase bookworm"
    debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian > "$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log"; exit 1; }
    tar -C "$work/rootfs" -c . | "${podman[@]}" import - localhost/debian:bookworm
    rm -rf "$work/rootfs"
fi
"${podman[@]}" tag localhost/debian:bookworm localhost/debian:bookworm-slim

echo "=== podman build"
start=$(date +%s)
"${podman[@]}" build --pull=never --network host -f docker/Dockerfile -t localhost/tokengate:demo .
echo "built in $(($(date +%s) - start)) s"

# Free loopback ports for the mock, the gateway and its admin listener.
read -r mock_port gateway_port admin_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
sed -e "s/127.0.0.1:8080/127.0.0.1:$gateway_port/; s/127.0.0.1:9090/127.0.0.1:$admin_port/" \
    -e "s|http://127.0.0.1:8000|http://127.0.0.1:$mock_port|; s|/tmp/tokengate-example.state|/tmp/tokengate.state|" \
    gateway.example.yaml > "$work/gateway.yaml"
chmod 644 "$work/gateway.yaml"

# Limits the containers may only lower: podman's defaults ask for more than a process may raise
# itself to here ("error setting rlimit ...: operation not permitted").
files=$(ulimit -n)
limits=(--ulimit "nofile=$files:$files" --ulimit nproc=4096:4096)

echo "=== two containers: the mock on :$mock_port, the gateway on :$gateway_port"
"${podman[@]}" run -d --network host "${limits[@]}" --name tg-demo-mock localhost/tokengate:demo \
    mock-upstream --host 127.0.0.1 --port "$mock_port" > /dev/null
"${podman[@]}" run -d --network host "${limits[@]}" --name tg-demo-gateway \
    -v "$work/gateway.yaml:/etc/tokengate/gateway.yaml:ro" localhost/tokengate:demo > /dev/null
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$gateway_port/" && break
    sleep 0.1
done

codes=""
for _ in 1 2 3 4 5 6; do
    codes+="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$gateway_port/v1/chat/completions" \
        -H 'Authorization: Bearer tg-demo-key' -H 'Content-Type: application/json' \
        -d '{"model":"llama3-8b","messages":[{"role":"user","content":"Hello"}],"max_tokens":16}') "
done
echo "six quick requests: $codes"
if [ "$codes" != "200 200 200 200 200 429 " ]; then
    "${podman[@]}" logs tg-demo-gateway | tail -20
    echo "expected five 200s, then a 429" >&2
    exit 1
fi

echo "=== SIGTERM"
"${podman[@]}" stop -t 40 tg-demo-gateway > /dev/null
status=$("${podman[@]}" inspect -f '{{.State.ExitCode}}' tg-demo-gateway)
"${podman[@]}" logs tg-demo-gateway 2>&1 | grep -iE "drain|stopp" | tail -3 || true
if [ "$status" != 0 ]; then
    echo "the gateway exited $status after SIGTERM, not 0" >&2
    exit 1
fi
echo "drained, exit 0"
[ "$keep" = --keep ] || "${podman[@]}" rmi -f localhost/tokengate:demo > /dev/null
