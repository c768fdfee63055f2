#!/usr/bin/env python3
"""Issue 35's routing bench (SPEC §22): three mock GPUs with prefix caches, one of them slow (a
third of the speed, half the batch), behind tokengate with `balance: weighted`, `least_loaded`
and `prefix_affinity`, in turn, offered the same trace: 16 system prompts of about 1,500
tokens, each request one of them with its own user's question, streamed. After a warm-up (every
prompt seen once: a steady state, whose ideal is that every request hits), prints per cache size
and balance the prefix-cache hit rate (requests that met their system prompt in their GPU's
cache, from vLLM's hit counter), TTFT p50/p99 (to the first token event) and generated tokens/s,
and writes the table and an SVG chart.
    python3 bench/prefix_affinity.py [--seconds 40] [--warmup 10] [--rate 24] [--caches 8,12]
        [--weights 1,1,1] [--batch 1] [--max-loads 1.25,2,100] [--only-affinity] [--out docs/load]
Needs build/release/tokengate (scripts/setup.sh release).
"""
import argparse, asyncio, json, os, random, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(__file__))
from flood import BIN, free_port, get, metric  # noqa: E402

PROMPTS, PREFIX_TOKENS, COMPLETION = 16, 1024, 24
# Prompts each GPU's prefix cache holds (--caches): 8, where the fleet's caches (24) barely hold
# the 16 prompts, and 12, where a prompt need not be in every cache but a hashing's uneven
# share (9 of 16 on one GPU, say) still fits.
CACHES = (8, 12)
BATCH = 1  # each GPU's batch × this (--batch): bigger GPUs, for a higher --rate
WEIGHTS = (1, 1, 1)  # the route's weights, for every balance (--weights)
# (name, tokens/s a sequence, batch, prefill tokens/s): two GPUs alike and one slow.
GPUS = (("gpu-a", 300, 8, 12000), ("gpu-b", 300, 8, 12000), ("gpu-slow", 100, 4, 4000))
# prefix_affinity at the default bound, a looser one, and none to speak of (--max-loads).
MAX_LOADS = (1.25, 2.0, 100.0)


def system_prompt(n):
    words = " ".join(f"rule{n}x{i} keeps answers short and cites sources." for i in range(180))
    return f"You are the assistant of team {n}. {words}"


def body(prompt, user):
    return json.dumps({"model": "llama3-8b", "stream": True, "max_tokens": COMPLETION,
                       "messages": [{"role": "system", "content": system_prompt(prompt)},
                                    {"role": "user", "content": f"User {user} asks question {random.random()}"}]}
                      ).encode()


async def one(port, payload, results):
    """One streamed chat: records (status, seconds to the first token event, completion tokens, sent at)."""
    start = time.monotonic()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                str(len(payload)).encode() + b"\r\n\r\n" + payload)
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        ttft, got = None, b""
        while True:
            data = await r.read(65536)
            if not data:
                break
            got += data
            if ttft is None and b'"content":"' in got and b'"content":""' not in got[-200:]:
                ttft = time.monotonic() - start
        w.close()
        results.append((status, ttft if ttft is not None else time.monotonic() - start, got.count(b'"content":"') - 1,
                        start))
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
        results.append((0, time.monotonic() - start, 0, start))


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def run(balance, max_load, seconds, rate, warmup, cache):
    gw = free_port()
    ports = [free_port() for _ in GPUS]
    tmp = tempfile.mkdtemp(prefix="affinity-")
    ups = "\n".join(f'  - {{ name: {name}, url: "http://127.0.0.1:{port}", max_connections: 4096, '
                    f'metrics: {{ interval: 250ms }}, timeouts: {{ first_byte: 600s, stream_idle: 600s }} }}'
                    for (name, *_), port in zip(GPUS, ports))
    names = ", ".join(f"{{ name: {name}, weight: {w} }}" for (name, *_), w in zip(GPUS, WEIGHTS))
    with open(f"{tmp}/gateway.yaml", "w") as f:
        f.write(f"""server: {{ listen: 127.0.0.1:{gw}, max_connections: 100000 }}
admin: {{ enabled: false }}
upstreams:
{ups}
routes:
  - {{ path: /v1/chat/completions, upstreams: [{names}], balance: {balance},
      {f'affinity: {{ prefix_tokens: 256, max_load: {max_load} }},' if max_load else ''} }}
tenants: [ {{ id: t, keys: ["k"] }} ]
log: {{ access: "off", level: warn }}
""")
    procs = [subprocess.Popen([BIN, "mock-upstream", "--port", str(port), "--tokens-per-s", str(tps),
                               "--max-seqs", str(seqs * BATCH), "--prefix-cache", str(cache), "--cached-ttft", "5",
                               "--prefill-tokens-per-s", str(prefill), "--prefix-tokens", str(PREFIX_TOKENS)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for (_, tps, seqs, prefill), port in zip(GPUS, ports)]
    procs.append(subprocess.Popen([BIN, "serve", "-c", f"{tmp}/gateway.yaml"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    await asyncio.sleep(1.0)
    random.seed(2026)
    results, tasks, warm = [], [], []
    start = time.monotonic()
    nxt = start
    users = 0
    while time.monotonic() - start < warmup + seconds:
        now = time.monotonic()
        if warmup and not warm and now - start >= warmup:
            warm = [await get(p, "/metrics") for p in ports]
        while nxt <= now:
            users += 1
            tasks.append(asyncio.create_task(one(gw, body(random.randrange(PROMPTS), users), results)))
            nxt += random.expovariate(rate)
        await asyncio.sleep(0.002)
    await asyncio.wait(tasks, timeout=300)
    wall = time.monotonic() - start - warmup
    pages = [await get(p, "/metrics") for p in ports]
    for p in procs:
        p.terminate()

    def counted(name):  # each GPU's counter since the warm-up
        return [metric(t, name) - (metric(w, name) if w else 0) for t, w in zip(pages, warm or [None] * len(pages))]

    hits, queries = sum(counted("vllm:prefix_cache_hits_total")), sum(counted("vllm:prefix_cache_queries_total"))
    served = counted("mock_requests_total")
    ok = [r for r in results if r[0] == 200 and r[3] >= start + warmup]
    # A hit adds the prefix's PREFIX_TOKENS to vLLM's hit counter: hits / PREFIX_TOKENS requests
    # met their prompt in the cache. The ideal: each prompt misses once, on the one GPU it goes to
    # (after a warm-up, when every prompt has been seen: all of them hit).
    hit_requests = hits / PREFIX_TOKENS
    ideal = 1.0 if warm else (len(ok) - PROMPTS) / max(1, len(ok))
    label = f"{balance} {max_load:g}" if max_load else balance
    return {"balance": label, "kind": balance, "cache": cache,
            "requests": sum(1 for r in results if r[3] >= start + warmup), "ok": len(ok),
            "hit_rate": hit_requests / max(1.0, sum(served)),
            "token_hit_rate": hits / max(1.0, queries), "ideal": ideal, "ttft_p50": percentile([r[1] for r in ok], 0.5),
            "ttft_p99": percentile([r[1] for r in ok], 0.99),
            "tokens_per_s": sum(r[2] for r in ok) / wall, "shares": [s / max(1.0, sum(served)) for s in served]}


def svg(rows):
    h, pad = 320, 50
    w = pad + 3 * (40 + 56 * len(rows))
    colors = {"weighted": "#8da0cb", "least_loaded": "#fc8d62", "prefix_affinity": "#66c2a5"}
    panels = (("prefix-cache hit rate", "hit_rate", 1.0, "{:.0%}"),
              ("TTFT p50 (s)", "ttft_p50", None, "{:.2f}"), ("TTFT p99 (s)", "ttft_p99", None, "{:.2f}"))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="12"><rect width="100%" height="100%" fill="white"/>']
    panel_w = (w - pad) / len(panels)
    for k, (title, key, top, fmt) in enumerate(panels):
        x0 = pad / 2 + k * panel_w
        top = top or max(r[key] for r in rows) * 1.15
        out.append(f'<text x="{x0 + panel_w / 2}" y="20" text-anchor="middle" font-weight="bold">{title}</text>')
        bar_w = (panel_w - 40) / len(rows)
        for i, r in enumerate(rows):
            bh = (h - 90) * r[key] / top
            x = x0 + 20 + i * bar_w
            out.append(f'<rect x="{x + 4}" y="{h - 50 - bh}" width="{bar_w - 8}" height="{bh}" '
                       f'fill="{colors[r["kind"]]}" fill-opacity="{1.0 if r["balance"] == r["kind"] or r["balance"].endswith(" 1.25") else 0.6}"/>')
            out.append(f'<text x="{x + bar_w / 2}" y="{h - 55 - bh}" text-anchor="middle">{fmt.format(r[key])}</text>')
            out.append(f'<text x="{x + bar_w / 2}" y="{h - 35}" text-anchor="middle" font-size="10">'
                       f'{r["balance"].replace("_", " ").replace("prefix affinity", "affinity")}</text>')
            out.append(f'<text x="{x + bar_w / 2}" y="{h - 22}" text-anchor="middle" font-size="10">'
                       f'cache {r["cache"]}</text>')
    out.append("</svg>")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--rate", type=float, default=24.0)
    ap.add_argument("--warmup", type=int, default=10, help="seconds before counting: the steady state's hit rate")
    ap.add_argument("--caches", default=",".join(map(str, CACHES)))
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--max-loads", default=",".join(f"{m:g}" for m in MAX_LOADS))
    ap.add_argument("--weights", default=",".join(map(str, WEIGHTS)))
    ap.add_argument("--only-affinity", action="store_true")
    ap.add_argument("--out", default=None, help="a directory for prefix_affinity.txt and .svg")
    args = ap.parse_args()
    globals()["BATCH"] = args.batch
    caches = [int(c) for c in args.caches.split(",")]
    globals()["WEIGHTS"] = tuple(int(w) for w in args.weights.split(","))
    lines = [f"{PROMPTS} system prompts of ~1,500 tokens, a new user each request, {args.rate:g} req/s, counted for "
             f"{args.seconds} s after a {args.warmup} s warm-up; GPUs "
             + ", ".join(f"{n} ({t} tok/s, {s * BATCH} seqs, prefill {p}/s)" for n, t, s, p in GPUS)
             + f"; weights {args.weights}",
             f"{'cache':>5} {'balance (max_load)':>20} {'requests':>8} {'hit rate':>8} {'ideal':>6} {'TTFT p50':>9} {'TTFT p99':>9} "
             f"{'tokens/s':>8}  shares (a, b, slow)"]
    rows = []
    balances = [] if args.only_affinity else [("weighted", None), ("least_loaded", None)]
    balances += [("prefix_affinity", float(m)) for m in args.max_loads.split(",")]
    for cache, (balance, max_load) in [(c, b) for c in caches for b in balances]:
        r = asyncio.run(run(balance, max_load, args.seconds, args.rate, args.warmup, cache))
        rows.append(r)
        lines.append(f"{cache:>5} {r['balance']:>20} {r['requests']:>8} {r['hit_rate']:>8.1%} {r['ideal']:>6.1%} "
                     f"{r['ttft_p50']:>8.3f}s {r['ttft_p99']:>8.3f}s {r['tokens_per_s']:>8.0f}  "
                     + ", ".join(f"{s:.2f}" for s in r["shares"]))
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(os.path.join(args.out, "prefix_affinity.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(args.out, "prefix_affinity.svg"), "w") as f:
            f.write(svg(rows))


if __name__ == "__main__":
    main()
