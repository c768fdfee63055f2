#!/usr/bin/env python3
"""Issue 18's overload: one mock GPU of 8 sequences (16 req/s) and a critical tenant sending
8 req/s; then the same with a sheddable tenant flooding 40 req/s beside it, and
`overload: { queue: 4 }`. Prints the critical requests' latency p50/p99 (to the last byte)
in both runs, and what became of the flood.
    python3 bench/overload.py [--seconds 30]
"""
import argparse, asyncio, os, sys, tempfile

sys.path.insert(0, os.path.dirname(__file__))
from flood import critical_and_flood, free_port, p99  # noqa: E402

QUEUE = int(os.environ.get("OVERLOAD_QUEUE", "2"))
async def run(flood, seconds):
    gw, mock = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="overload-")
    with open(f"{tmp}/gateway.yaml", "w") as f:
        f.write(f"""server: {{ listen: 127.0.0.1:{gw}, max_connections: 100000 }}
admin: {{ enabled: false }}
upstreams: [ {{ name: gpu, url: "http://127.0.0.1:{mock}", metrics: {{ interval: 250ms }}, timeouts: {{ first_byte: 600s }} }} ]
routes: [ {{ path: /v1/chat/completions, upstreams: [gpu] }} ]
tiers: {{ vip: {{ priority: critical }}, free: {{ priority: sheddable }} }}
tenants: [ {{ id: bank, tier: vip, keys: ["k-vip"] }}, {{ id: crowd, tier: free, keys: ["k-free"] }} ]
overload: {{ queue: {QUEUE} }}
log: {{ access: "off", level: warn }}
""")
    mock_args = ["--port", str(mock), "--tokens-per-s", "100", "--max-seqs", "8"]
    return await critical_and_flood(gw, mock_args, f"{tmp}/gateway.yaml", 8, 40 if flood else 0, seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=30)
    args = ap.parse_args()
    print(f"critical 8 req/s to a GPU serving 16/s; {args.seconds} s each; overload: {{ queue: {QUEUE} }}")
    print(f"{'run':>22} {'critical ok':>11} {'p50 s':>6} {'p99 s':>6} {'flood 200':>9} {'flood 503':>9}")
    for flood in (False, True):
        critical, crowd = asyncio.run(run(flood, args.seconds))
        ok = sorted(d for st, d in critical if st == 200)
        name = "with a sheddable flood" if flood else "alone"
        print(f"{name:>22} {len(ok):>11} {ok[len(ok) // 2]:>6.2f} {p99(ok):>6.2f} "
              f"{sum(1 for st, _ in crowd if st == 200):>9} {sum(1 for st, _ in crowd if st == 503):>9}")


if __name__ == "__main__":
    sys.exit(main())
