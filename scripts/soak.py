#!/usr/bin/env python3
"""Soak test: mixed JSON/SSE traffic through the real gateway and mock upstream, with clients
that disconnect mid-request and upstreams that fail, for a bounded time. Afterwards every
concurrency slot must be free, every admitted request settled exactly once (by the metrics),
and the gateway's RSS flat after warm-up.

    python3 scripts/soak.py [--seconds 180] [--binary build/release/tokengate]
Exit 0 when every check holds. Traffic goes to 127.0.0.1 only.
"""
import argparse, json, os, random, re, shutil, socket, subprocess, sys, tempfile, threading, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"port {port} did not open")

def http(port, method, path, body=b"", headers=None, read_until_close=False, timeout=30):
    """One request on its own connection; returns (status, body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout)
    hdrs = {"Host": "x", "Content-Length": str(len(body)), "Connection": "close"}
    hdrs.update(headers or {})
    s.sendall(f"{method} {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()).encode() + b"\r\n" + body)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
    s.close()
    status = int(data[9:12]) if data[:5] == b"HTTP/" else 0
    return status, data.split(b"\r\n\r\n", 1)[-1]

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"): return int(line.split()[1])
    return 0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--binary", default="build/release/tokengate")
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tokengate-soak-")
    gw_port, admin_port, mock_port = free_port(), free_port(), free_port()
    tenants = [f"t{i}" for i in range(8)]
    cfg = f"""server: {{ listen: 127.0.0.1:{gw_port}, threads: 2 }}
admin: {{ listen: 127.0.0.1:{admin_port}, token_env: SOAK_ADMIN_TOKEN }}
upstreams: [ {{ name: mock, url: "http://127.0.0.1:{mock_port}", timeouts: {{ first_byte: 5s, stream_idle: 5s }} }} ]
routes: [ {{ path: /v1/chat/completions, upstreams: [mock] }} ]
tiers:
  t:
    limits:
      - {{ name: tokens, algorithm: token_bucket, capacity: 5000, rate: 2000/s, unit: cost }}
      - {{ name: inflight, algorithm: concurrency, max: 6 }}
      - {{ name: inflight-cost, algorithm: concurrency, max: 400, unit: cost }}
tenants:
""" + "".join(f'  - {{ id: {t}, tier: t, keys: ["key-{t}"] }}\n' for t in tenants) + f"""
global_limits: [ {{ name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 200, rate: 400/s, max_wait: 2s, fair: true }} ]
log: {{ access: {work}/access.log, level: warn }}
"""
    open(f"{work}/gateway.yaml", "w").write(cfg)
    env = dict(os.environ, SOAK_ADMIN_TOKEN="soak")
    mock = subprocess.Popen([args.binary, "mock-upstream", "--port", str(mock_port), "--tokens-per-s", "400"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gw = subprocess.Popen([args.binary, "serve", "-c", f"{work}/gateway.yaml"], env=env,
                          stdout=subprocess.DEVNULL, stderr=open(f"{work}/gateway.err", "w"))
    passed = False
    try:
        wait_port(mock_port); wait_port(gw_port)
        stop = time.time() + args.seconds
        counts = {}
        lock = threading.Lock()

        def client(seed):
            rnd = random.Random(seed)
            while time.time() < stop:
                t = rnd.choice(tenants)
                stream = rnd.random() < 0.4
                body = json.dumps({"model": "m", "max_tokens": rnd.choice([8, 32, 64]), "stream": stream,
                                   "messages": [{"role": "user", "content": "hello " * rnd.randint(1, 200)}]}).encode()
                headers = {"Authorization": f"Bearer key-{t}", "Content-Type": "application/json"}
                kind = rnd.random()
                try:
                    if kind < 0.08:  # the upstream fails
                        headers["x-mock-status"] = rnd.choice(["500", "503"])
                        outcome = http(gw_port, "POST", "/v1/chat/completions", body, headers)[0]
                    elif kind < 0.20:  # the client leaves early
                        headers["x-mock-delay-ms"] = str(rnd.randint(0, 200))
                        s = socket.create_connection(("127.0.0.1", gw_port), 10)
                        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" +
                                  "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode() +
                                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                        time.sleep(rnd.random() * 0.15)
                        s.close()
                        outcome = "left"
                    else:
                        outcome = http(gw_port, "POST", "/v1/chat/completions", body, headers)[0]
                except OSError as e:
                    outcome = f"error:{type(e).__name__}"
                with lock:
                    counts[outcome] = counts.get(outcome, 0) + 1

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
        for th in threads: th.start()
        samples = []
        start = time.time()
        while time.time() < stop:
            time.sleep(5)
            samples.append((round(time.time() - start), rss_kib(gw.pid)))
        for th in threads: th.join(timeout=30)
        time.sleep(3)  # let the last settlements land

        metrics = http(admin_port, "GET", "/metrics")[1].decode()
        def total(name):
            return sum(float(v) for v in re.findall(rf"^{name}{{[^}}]*}} ([0-9.e+]+)$", metrics, re.M))
        admitted, settled = total("tokengate_admitted_total"), total("tokengate_settled_total")
        reserved, charged = total("tokengate_cost_reserved_total"), total("tokengate_cost_settled_total")
        failures = []
        for t in tenants:
            state = json.loads(http(admin_port, "GET", f"/admin/tenants/{t}", headers={"Authorization": "Bearer soak"})[1])
            for limit in state["limits"]:
                if limit["algorithm"] == "concurrency" and abs(limit["remaining"] - limit["capacity"]) > 1e-6:
                    failures.append(f"{t}: {limit['name']} still holds {limit['capacity'] - limit['remaining']} after traffic stopped")
        if admitted != settled:
            failures.append(f"admitted {admitted:.0f} but settled {settled:.0f}")
        warm = [r for s, r in samples if s >= min(30, args.seconds // 3)]
        growth = (warm[-1] - warm[0]) / warm[0] if len(warm) >= 2 else 0
        if growth > 0.10:
            failures.append(f"RSS grew {growth:.0%} after warm-up: {samples}")
        print(f"outcomes: {dict(sorted(counts.items(), key=str))}")
        print(f"admitted {admitted:.0f}, settled {settled:.0f}; cost reserved {reserved:.0f}, charged after settlement {charged:.0f} "
              f"(refunded {reserved - charged:.0f})")
        print(f"gateway RSS (s, KiB): {samples}")
        for f in failures: print("FAIL:", f)
        print(f"soak: {'1 passed, 0 failed' if not failures else '0 passed, 1 failed'}")
        if failures: print(f"logs kept in {work}")
        passed = not failures
        return 1 if failures else 0
    finally:
        gw.terminate(); mock.terminate()
        try:
            print(f"gateway exit code after SIGTERM: {gw.wait(timeout=40)}")
        except subprocess.TimeoutExpired:
            gw.kill(); print("FAIL: the gateway did not drain within 40 s"); return 1
        mock.wait()
        if passed: shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
