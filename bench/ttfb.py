#!/usr/bin/env python3
"""Time to first byte of an SSE stream: from the upstream directly, then through each proxy,
one request at a time on a keep-alive connection (the proxy's own latency, not queueing).
Prints p50/p99 of the first byte per target and, for each proxy, the time it adds over the
upstream alone (to the first byte, and at p50 to the first SSE event).
    python3 bench/ttfb.py --upstream PORT --proxy nginx=PORT --proxy tokengate=PORT [--n 300]
"""
import argparse, socket, statistics, time

CONTENT = "Explain token buckets versus leaky buckets for GPU serving. " * 14
BODY = ('{"model":"llama3-8b","max_tokens":64,"stream":true,'
        '"messages":[{"role":"user","content":"' + CONTENT + '"}]}').encode()

def request(key):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer " + key.encode() +
            b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(BODY)).encode() +
            b"\r\n\r\n" + BODY)

def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def exchange(s, payload):
    """One request; (seconds to the first byte, to the first SSE event, status line), None if
    the server had closed the kept-alive connection before answering, or "broken" if it closed
    it mid-response (seen once in a while from nginx right after the load)."""
    start = time.perf_counter()
    s.sendall(payload)
    got, t_byte, t_event = b"", None, None
    while not (b"[DONE]" in got and got.endswith(b"0\r\n\r\n")):
        data = s.recv(65536)
        if not data:
            return "broken" if got else None
        now = time.perf_counter()
        if t_byte is None:
            t_byte = now
        got += data
        if t_event is None and b"\ndata:" in got:
            t_event = now
    return t_byte - start, t_event - start, got.split(b"\r\n", 1)[0]

def measure(name, port, n, key):
    """Seconds to the first response byte and to the first SSE event, per request."""
    s = connect(port)
    first_byte, first_event, reconnects = [], [], {"closed": 0, "broken": 0}
    payload = request(key)
    for i in range(n + 20):  # the first 20 warm up connections and caches
        result = exchange(s, payload)
        if result is None or result == "broken":  # once more, on a new connection
            reconnects["closed" if result is None else "broken"] += 1
            s.close()
            s = connect(port)
            result = exchange(s, payload)
            if result is None or result == "broken":
                raise SystemExit(f"{name} (port {port}) failed a request on a new connection ({result})")
        t_byte, t_event, status_line = result
        if b" 200 " not in status_line:
            raise SystemExit(f"{name} (port {port}) answered {status_line!r}")
        if i >= 20:
            first_byte.append(t_byte)
            first_event.append(t_event)
    s.close()
    return first_byte, first_event, reconnects

def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", type=int, required=True)
    ap.add_argument("--proxy", action="append", default=[], help="name=port")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--key", default="bench-key-1")
    args = ap.parse_args()
    base_byte, base_event, again = measure("upstream", args.upstream, args.n, args.key)
    reconnects = {"upstream": again}
    b50, b99, e50 = statistics.median(base_byte), pct(base_byte, 99), statistics.median(base_event)
    print(f"{'ttfb':<15} {'p50 ms':>9} {'p99 ms':>9} {'added p50':>10} {'added p99':>10} {'event added p50':>16}")
    print(f"{'upstream':<15} {b50*1e3:9.3f} {b99*1e3:9.3f} {'-':>10} {'-':>10} {'-':>16}")
    for spec in args.proxy:
        name, port = spec.split("=")
        byte, event, reconnects[name] = measure(name, int(port), args.n, args.key)
        p50, p99 = statistics.median(byte), pct(byte, 99)
        print(f"{name:<15} {p50*1e3:9.3f} {p99*1e3:9.3f} {(p50-b50)*1e3:10.3f} {(p99-b99)*1e3:10.3f} "
              f"{(statistics.median(event)-e50)*1e3:16.3f}")
    for name, counts in reconnects.items():
        if counts["closed"]:
            print(f"({name}: {counts['closed']} kept-alive connection(s) found closed and opened anew)")
        if counts["broken"]:
            print(f"({name}: {counts['broken']} response(s) cut off mid-stream, not counted; retried anew)")

if __name__ == "__main__":
    main()
