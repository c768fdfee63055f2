#!/usr/bin/env python3
"""Issue 18's flood: the mock as a GPU (`--max-seqs 8`), offered 5x what it serves, through
tokengate with a fixed global limit and then with `adaptive: {signal: queue, target: 8}`.
Every second: the mock's waiting queue (its own /metrics), the limit's rate (tokengate's
gauge), and for the streams whose first token arrived that second, how many and their TTFT
p99 (from sending to the first SSE event); the 429s answered that second. Prints one table per
config and writes an SVG of the three series.
    python3 bench/flood.py [--seconds 40] [--svg docs/load/flood.svg]
Needs build/release/tokengate (scripts/setup.sh release).
"""
import argparse, asyncio, os, re, socket, subprocess, sys, tempfile, time

BIN = os.path.join(os.path.dirname(__file__), "..", "build", "release", "tokengate")
TOKENS_PER_S, COMPLETION, SEQS = 100, 50, 8          # 0.5 s a request: the GPU serves 16/s
SERVED = SEQS * TOKENS_PER_S / COMPLETION
OFFERED = 5 * SERVED                                  # 80/s
BODY = ('{"model":"llama3-8b","stream":true,"max_tokens":%d,'
        '"messages":[{"role":"user","content":"hello"}]}' % COMPLETION).encode()


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def config(gw, admin, mock, adaptive):
    limit = "{ name: gpu, algorithm: token_bucket, capacity: 20, rate: 80/s"
    limit += ", adaptive: { signal: queue, target: 8, min_rate: 2/s } }" if adaptive else " }"
    return f"""server: {{ listen: 127.0.0.1:{gw}, max_connections: 100000 }}
admin: {{ listen: 127.0.0.1:{admin}, token_env: FLOOD_ADMIN_TOKEN }}
upstreams:
  - {{ name: gpu0, url: "http://127.0.0.1:{mock}", max_connections: 4096, metrics: {{ interval: 500ms }},
      timeouts: {{ first_byte: 600s, stream_idle: 600s }} }}
routes: [ {{ path: /v1/chat/completions, upstreams: [gpu0] }} ]
tenants: [ {{ id: crowd, keys: ["flood-key"] }} ]
global_limits: [ {limit} ]
log: {{ access: "off", level: warn }}
"""


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


async def get(port, path):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = await r.read()
    w.close()
    return data.decode(errors="replace")


CHAT = ('{"model":"llama3-8b","max_tokens":%d,"messages":[{"role":"user","content":"hello"}]}' % COMPLETION).encode()


async def chat(port, key, results):
    """One chat completion (not streamed), read to its end: records (status, seconds)."""
    start = time.monotonic()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
                b"\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                str(len(CHAT)).encode() + b"\r\n\r\n" + CHAT)
        data = await r.read()
        w.close()
        results.append((int(data.split(b" ", 2)[1]), time.monotonic() - start))
    except (OSError, ValueError, IndexError):
        results.append((0, time.monotonic() - start))


async def one(port, sent_at, results):
    """One streamed chat request; records (when answered, status, seconds to the first event)."""
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer flood-key\r\n"
                b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status == 200:
            await r.readuntil(b"\n\n")  # the first SSE event: the model's first output
            first = time.monotonic()
            results.append((first, status, first - sent_at))  # counted in the second it arrived
        else:
            results.append((time.monotonic(), status, None))
        await r.read()  # to the end, as a client that wants the answer
        w.close()
    except (OSError, asyncio.IncompleteReadError, ValueError):
        results.append((time.monotonic(), 0, None))


async def run(adaptive, seconds):
    gw, admin, mock = free_port(), free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="flood-")
    with open(f"{tmp}/gateway.yaml", "w") as f:
        f.write(config(gw, admin, mock, adaptive))
    env = dict(os.environ, FLOOD_ADMIN_TOKEN="flood")
    procs = [subprocess.Popen([BIN, "mock-upstream", "--port", str(mock), "--tokens-per-s", str(TOKENS_PER_S),
                               "--max-seqs", str(SEQS)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([BIN, "serve", "-c", f"{tmp}/gateway.yaml"], env=env,
                              stdout=open(f"{tmp}/gateway.log", "w"), stderr=subprocess.STDOUT)]
    await asyncio.sleep(1.0)
    results, samples, tasks = [], [], []
    start = time.monotonic()
    loop_next = start
    next_sample = start + 1
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        while loop_next <= now:  # open loop: arrivals at OFFERED/s whatever the answers
            tasks.append(asyncio.create_task(one(gw, loop_next, results)))
            loop_next += 1 / OFFERED
        if now >= next_sample:
            m = await get(mock, "/metrics")
            g = await get(admin, "/metrics")
            rate = metric(g, 'tokengate_adaptive_rate{limit="gpu"}')
            samples.append((round(now - start), metric(m, "vllm:num_requests_waiting"),
                            metric(m, "vllm:num_requests_running"), rate if rate == rate else 80.0))
            next_sample += 1
        await asyncio.sleep(0.002)
    for t in tasks:  # whatever is still queued after the offered load stops is not waited for
        t.cancel()
    for p in procs:
        p.terminate()
    return samples, [(s - start, st, tt) for s, st, tt in results]


async def offer(port, senders, seconds):
    """Sends chats at fixed rates for `seconds`, each sender a (key, per second, results) that
    chat() fills; then waits (up to 120 s) for the answers."""
    tasks, start = [], time.monotonic()
    due = [start] * len(senders)
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        for i, (key, per_s, results) in enumerate(senders):
            while due[i] <= now:
                tasks.append(asyncio.create_task(chat(port, key, results)))
                due[i] += 1 / per_s
        await asyncio.sleep(0.002)
    await asyncio.wait(tasks, timeout=120)


async def critical_and_flood(gw, mock_args, config_path, critical_per_s, flood_per_s, seconds):
    """Starts `tokengate mock-upstream` with `mock_args` and a gateway on `config_path` (listening
    on `gw`), sends the critical key ("k-vip") and, if `flood_per_s`, the flood's ("k-free")
    beside it; returns each one's (status, seconds)."""
    procs = [subprocess.Popen([BIN, "mock-upstream"] + mock_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([BIN, "serve", "-c", config_path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    await asyncio.sleep(1.0)
    critical, crowd = [], []
    await offer(gw, [("k-vip", critical_per_s, critical)] + ([("k-free", flood_per_s, crowd)] if flood_per_s else []),
                seconds)
    for p in procs:
        p.terminate()
    return critical, crowd


def p99(values):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(0.99 * len(v)))]


def table(name, samples, results):
    rows = []
    print(f"\n{name}: offered {OFFERED:.0f} req/s, the GPU serves {SERVED:.0f}/s")
    print(f"{'t s':>4} {'queue':>6} {'running':>7} {'rate/s':>7} {'first tokens':>12} {'429':>5} {'TTFT p99 s':>10}")
    for t, queue, running, rate in samples:
        window = [r for r in results if t - 1 <= r[0] < t]
        ok = [r[2] for r in window if r[1] == 200 and r[2] is not None]
        refused = sum(1 for r in window if r[1] == 429)
        rows.append((t, queue, running, rate, p99(ok)))
        print(f"{t:>4} {queue:>6.0f} {running:>7.0f} {rate:>7.1f} {len(ok):>12} {refused:>5} {p99(ok):>10.2f}")
    return rows


def svg(fixed, adaptive, path):
    W, H, pad = 720, 170, 56
    def panel(y0, title, series, top, unit):
        out = [f'<text x="{pad}" y="{y0 + 14}" font-size="13" fill="#222">{title}</text>']
        out.append(f'<line x1="{pad}" y1="{y0 + H - 20}" x2="{W - 10}" y2="{y0 + H - 20}" stroke="#999"/>')
        out.append(f'<text x="{pad - 6}" y="{y0 + 30}" font-size="10" text-anchor="end" fill="#555">{top:.3g}{unit}</text>')
        out.append(f'<text x="{pad - 6}" y="{y0 + H - 20}" font-size="10" text-anchor="end" fill="#555">0</text>')
        for label, colour, rows in series:
            pts = []
            for t, v in rows:
                if v != v:
                    continue
                x = pad + (W - pad - 10) * t / max(1, fixed[-1][0])
                y = y0 + H - 20 - (H - 50) * min(v, top) / top
                pts.append(f"{x:.1f},{y:.1f}")
            out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{colour}" stroke-width="2"/>')
        lx = W - 250
        for i, (label, colour, _) in enumerate(series):
            out.append(f'<rect x="{lx}" y="{y0 + 6 + 14 * i}" width="10" height="3" fill="{colour}"/>'
                       f'<text x="{lx + 14}" y="{y0 + 11 + 14 * i}" font-size="11" fill="#222">{label}</text>')
        return out
    q_top = max(10, max(r[1] for r in fixed + adaptive if r[1] == r[1]))
    t_top = max(1, max(r[4] for r in fixed + adaptive if r[4] == r[4]))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{3 * H + 20}" '
             f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    parts += panel(0, "the GPU's waiting queue (vllm:num_requests_waiting)",
                   [("fixed rate 80/s", "#d9534f", [(r[0], r[1]) for r in fixed]),
                    ("adaptive, target 8", "#2a7ae2", [(r[0], r[1]) for r in adaptive])], q_top, "")
    parts += panel(H, "the limit's rate (tokengate_adaptive_rate)",
                   [("fixed rate 80/s", "#d9534f", [(r[0], r[3]) for r in fixed]),
                    ("adaptive", "#2a7ae2", [(r[0], r[3]) for r in adaptive])], 90, "/s")
    parts += panel(2 * H, "TTFT p99 of the first tokens that arrived each second",
                   [("fixed rate 80/s", "#d9534f", [(r[0], r[4]) for r in fixed]),
                    ("adaptive", "#2a7ae2", [(r[0], r[4]) for r in adaptive])], t_top, " s")
    parts.append(f'<text x="{pad}" y="{3 * H + 12}" font-size="11" fill="#555">seconds of the flood: '
                 f'{OFFERED:.0f} req/s offered to a GPU of {SEQS} sequences that serves {SERVED:.0f}/s</text></svg>')
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--svg", default="")
    args = ap.parse_args()
    fixed = table("fixed rate", *asyncio.run(run(False, args.seconds)))
    adaptive = table("adaptive (queue, target 8)", *asyncio.run(run(True, args.seconds)))
    if args.svg:
        svg(fixed, adaptive, args.svg)
        print(f"\nchart: {args.svg}")


if __name__ == "__main__":
    sys.exit(main())
