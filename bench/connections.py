#!/usr/bin/env python3
"""Gateway memory under many connections (loopback only):
  1. N idle keep-alive client connections, each after one request (default 10,000);
  2. M concurrent slow SSE streams relayed from a slow upstream (default 5,000).
Prints the gateway's RSS before and with the connections held, and the cost per connection.
With --tls the listener speaks HTTPS (a certificate made here with openssl) and the idle
connections are TLS ones, each after its handshake and one request.
    python3 bench/connections.py [--idle 10000] [--streams 5000] [--tls] [--binary build/release/tokengate]
"""
import argparse, json, os, selectors, shutil, socket, ssl, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError: time.sleep(0.05)
    sys.exit(f"port {port} did not open")

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

def open_many(port, n, request, until):
    """Opens n connections, sends `request` on each, reads until `until` appears on each."""
    sel = selectors.DefaultSelector()
    socks, pending = [], {}
    for i in range(n):
        s = socket.socket(); s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s); pending[s] = b""
        sel.register(s, selectors.EVENT_WRITE)
        if i % 500 == 499:  # let the accept queue drain
            drive(sel, pending, request, until, 0.05)
    drive(sel, pending, request, until, 60)
    done = sum(1 for s in socks if pending.get(s) is None)
    return socks, done

def drive(sel, pending, request, until, seconds):
    end = time.time() + seconds
    while time.time() < end and any(v is not None for v in pending.values()):
        for key, events in sel.select(timeout=0.1):
            s = key.fileobj
            if events & selectors.EVENT_WRITE:
                try: s.send(request)
                except OSError: pass
                sel.modify(s, selectors.EVENT_READ)
            elif events & selectors.EVENT_READ:
                try: data = s.recv(65536)
                except OSError: data = b""
                pending[s] += data
                if until in pending[s] or not data:
                    pending[s] = None; sel.unregister(s)

def open_many_tls(port, n, request, until, cafile):
    """As open_many, over TLS: one blocking handshake and request at a time (the gateway's
    memory is what is measured, not how fast this client is)."""
    ctx = ssl.create_default_context(cafile=cafile)
    socks, done = [], 0
    for _ in range(n):
        try:
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), 10), server_hostname="localhost")
            s.sendall(request)
            data = b""
            while until not in data:
                chunk = s.recv(65536)
                if not chunk: break
                data += chunk
            socks.append(s); done += until in data
        except OSError:
            pass
    return socks, done

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--streams", type=int, default=5000)
    ap.add_argument("--binary", default="build/release/tokengate")
    ap.add_argument("--tls", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tokengate-conns-")
    gw, admin, mock = free_port(), free_port(), free_port()
    tls = ""
    if args.tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", f"{work}/tls.key", "-out", f"{work}/tls.pem", "-days", "7", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
        tls = f", tls: {{ cert: {work}/tls.pem, key: {work}/tls.key }}"
    open(f"{work}/gateway.yaml", "w").write(f"""server: {{ listen: 127.0.0.1:{gw}, threads: 2, max_connections: 50000, timeouts: {{ header: 60s, idle: 300s }}{tls} }}
admin: {{ listen: 127.0.0.1:{admin} }}
upstreams: [ {{ name: mock, url: "http://127.0.0.1:{mock}", max_connections: 20000, timeouts: {{ first_byte: 300s, stream_idle: 300s }} }} ]
routes: [ {{ path: /v1/chat/completions, upstreams: [mock] }}, {{ path: /v1/models, upstreams: [mock] }} ]
tenants: [ {{ id: acme, keys: ["k"] }} ]
log: {{ access: off }}
""")
    m = subprocess.Popen([args.binary, "mock-upstream", "--port", str(mock), "--tokens-per-s", "0.2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    g = subprocess.Popen([args.binary, "serve", "-c", f"{work}/gateway.yaml"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(mock); wait_port(gw)
        base = rss_kib(g.pid)
        get = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n"
        if args.tls:
            idle, ok = open_many_tls(gw, args.idle, get, b"mock-model", f"{work}/tls.pem")
        else:
            idle, ok = open_many(gw, args.idle, get, b"mock-model")
        time.sleep(1)
        held = rss_kib(g.pid)
        kind = "idle TLS keep-alive" if args.tls else "idle keep-alive"
        print(f"{kind}: {ok}/{args.idle} answered and held; gateway RSS {base/1024:.1f} -> {held/1024:.1f} MiB "
              f"({(held - base) * 1024 / max(ok, 1):.0f} B per connection)")
        for s in idle: s.close()
        if args.tls: return  # the streams below are the plain run's
        time.sleep(2)
        base2 = rss_kib(g.pid)
        body = json.dumps({"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
        post = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        streams, ok = open_many(gw, args.streams, post, b"\"The\"")
        time.sleep(1)
        held2 = rss_kib(g.pid)
        print(f"slow SSE streams: {ok}/{args.streams} streaming at once; gateway RSS {base2/1024:.1f} -> {held2/1024:.1f} MiB "
              f"({(held2 - base2) / max(ok, 1):.1f} KiB per stream)")
        for s in streams: s.close()
    finally:
        g.terminate(); m.terminate(); g.wait(); m.wait()
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
