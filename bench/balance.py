#!/usr/bin/env python3
"""Issue 18's balancing: two mocks as GPUs of 8 sequences, one twice as fast (32 req/s
against 16), offered 40 req/s (83% of the 48 they serve together) through tokengate with
`balance: weighted` (equal weights) and then `least_loaded`. Prints request latency p50/p99
(to the last byte), each GPU's share, and how far apart their waiting queues were.
    python3 bench/balance.py [--seconds 30]
"""
import argparse, asyncio, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(__file__))
from flood import BIN, chat, free_port, get, metric, p99  # noqa: E402

OFFERED = 40.0
async def run(balance, seconds):
    gw, fast, slow = free_port(), free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="balance-")
    with open(f"{tmp}/gateway.yaml", "w") as f:
        f.write(f"""server: {{ listen: 127.0.0.1:{gw}, max_connections: 100000 }}
admin: {{ enabled: false }}
upstreams:
  - {{ name: fast, url: "http://127.0.0.1:{fast}", metrics: {{ interval: 250ms }}, timeouts: {{ first_byte: 600s }} }}
  - {{ name: slow, url: "http://127.0.0.1:{slow}", metrics: {{ interval: 250ms }}, timeouts: {{ first_byte: 600s }} }}
routes: [ {{ path: /v1/chat/completions, upstreams: [fast, slow], balance: {balance} }} ]
tenants: [ {{ id: t, keys: ["k"] }} ]
log: {{ access: "off", level: warn }}
""")
    procs = [subprocess.Popen([BIN, "mock-upstream", "--port", str(p), "--tokens-per-s", str(tps), "--max-seqs", "8"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for p, tps in ((fast, 200), (slow, 100))]
    procs.append(subprocess.Popen([BIN, "serve", "-c", f"{tmp}/gateway.yaml"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    await asyncio.sleep(1.0)
    results, gaps, tasks = [], [], []
    start = time.monotonic()
    nxt, sample = start, start + 0.5
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        while nxt <= now:
            tasks.append(asyncio.create_task(chat(gw, "k", results)))
            nxt += 1 / OFFERED
        if now >= sample:
            qf = metric(await get(fast, "/metrics"), "vllm:num_requests_waiting")
            qs = metric(await get(slow, "/metrics"), "vllm:num_requests_waiting")
            gaps.append(abs(qf - qs))
            sample += 0.5
        await asyncio.sleep(0.002)
    await asyncio.wait(tasks, timeout=120)
    served = [metric(await get(p, "/metrics"), "mock_requests_total") for p in (fast, slow)]
    for p in procs:
        p.terminate()
    return results, gaps, served


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=30)
    args = ap.parse_args()
    print(f"offered {OFFERED:.0f} req/s to GPUs serving 32/s (fast) and 16/s (slow); {args.seconds} s each")
    print(f"{'balance':>13} {'requests':>8} {'p50 s':>7} {'p99 s':>7} {'fast share':>10} {'queue gap mean':>14} {'max':>5}")
    for balance in ("weighted", "least_loaded"):
        results, gaps, served = asyncio.run(run(balance, args.seconds))
        ok = sorted(d for st, d in results if st == 200)
        p50 = ok[len(ok) // 2] if ok else float("nan")
        print(f"{balance:>13} {len(ok):>8} {p50:>7.2f} {p99(ok):>7.2f} {served[0] / max(1, sum(served)):>10.2f} "
              f"{sum(gaps) / max(1, len(gaps)):>14.1f} {max(gaps):>5.0f}")


if __name__ == "__main__":
    sys.exit(main())
