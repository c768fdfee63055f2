# Shared by the bench scripts (sourced): setup, a work dir, process cleanup, free ports.
#   source bench/lib.sh <work-dir-name> [extra apt packages...]
secs=${secs:-8}
scripts/setup.sh release nginx-light wrk "${@:2}" > /dev/null
# TOKENGATE_BENCH_BIN: another build to measure (an older commit, for a before/after).
bin=${TOKENGATE_BENCH_BIN:-$PWD/build/release/tokengate}
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
