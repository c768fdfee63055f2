#!/usr/bin/env bash
# Installs, builds, and runs the gateway on gateway.example.yaml in front of the built-in mock
# upstream (127.0.0.1:8000). Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the gateway needs, and only its binary: the tests' set-up is scripts/test.sh's.
scripts/setup.sh gateway
bin=build/gateway/tokengate
# A GPU of 8 sequences: past them requests queue, and the gateway's adaptive limit follows.
"$bin" mock-upstream --port 8000 --max-seqs 8 &
mock=$!
trap 'kill $mock 2>/dev/null || true' EXIT
echo "gateway on http://127.0.0.1:8080 — try the curl in README.md"
"$bin" serve -c gateway.example.yaml
