#!/usr/bin/env python3
"""Issue 18's priority classes inside a shaping queue: a global `mode: shape` limit releasing
10 req/s (capacity 40, max_wait 4 s) in front of the mock; a critical tenant sends 3 req/s,
alone, then beside a flood of 30 req/s from another tenant: once with both tenants standard
(one FIFO queue), once with the flood's tier sheddable. Prints the critical requests' latency
p50/p99 (to the last byte) and their 429s, and what became of the flood.
    python3 bench/priority_queue.py [--seconds 30]
"""
import argparse, asyncio, os, sys, tempfile

sys.path.insert(0, os.path.dirname(__file__))
from flood import critical_and_flood, free_port, p99  # noqa: E402


async def run(flood, ranked, seconds):
    gw, mock = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="priority-")
    # Ranked: the flood's tier is sheddable, the critical tenant's critical. Otherwise no
    # tiers: both standard, one FIFO queue.
    tiers = ("tiers: { vip: { priority: critical }, free: { priority: sheddable } }\n" if ranked else "")
    tier = lambda name: f", tier: {name}" if ranked else ""  # noqa: E731
    with open(f"{tmp}/gateway.yaml", "w") as f:
        f.write(f"""server: {{ listen: 127.0.0.1:{gw}, max_connections: 100000 }}
admin: {{ enabled: false }}
upstreams: [ {{ name: gpu, url: "http://127.0.0.1:{mock}" }} ]
routes: [ {{ path: /v1/chat/completions, upstreams: [gpu] }} ]
{tiers}tenants: [ {{ id: bank{tier("vip")}, keys: ["k-vip"] }}, {{ id: crowd{tier("free")}, keys: ["k-free"] }} ]
global_limits:
  - {{ name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 40, rate: 10/s, max_wait: 4s }}
log: {{ access: "off", level: warn }}
""")
    mock_args = ["--port", str(mock), "--tokens-per-s", "100000"]
    return await critical_and_flood(gw, mock_args, f"{tmp}/gateway.yaml", 3, 30 if flood else 0, seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=30)
    args = ap.parse_args()
    print(f"a shaping queue releasing 10 req/s (capacity 40, max_wait 4 s); critical 3 req/s; {args.seconds} s each")
    print(f"{'run':>34} {'critical 200':>12} {'429':>4} {'p50 s':>6} {'p99 s':>6} {'flood 200':>9} {'flood 429':>9}")
    for name, flood, ranked in (("alone", False, True), ("beside a flood, one FIFO class", True, False),
                                ("beside a sheddable flood", True, True)):
        critical, crowd = asyncio.run(run(flood, ranked, args.seconds))
        ok = sorted(d for st, d in critical if st == 200)
        print(f"{name:>34} {len(ok):>12} {sum(1 for st, _ in critical if st == 429):>4} "
              f"{ok[len(ok) // 2] if ok else float('nan'):>6.2f} {p99(ok):>6.2f} "
              f"{sum(1 for st, _ in crowd if st == 200):>9} {sum(1 for st, _ in crowd if st == 429):>9}")


if __name__ == "__main__":
    sys.exit(main())
