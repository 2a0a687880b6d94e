#!/usr/bin/env python3
"""`bitsplit serve` under a mixed hostile and normal load on loopback, for SOAK_SECONDS (default 45).

One server (--parallel 2 --queue 4, an API key, --max-body 1M) is driven at once by:
  normal clients   2 threads of keyed greedy completions (8 tokens), streamed and not, which must
                   all answer 200 with the text the server gave before the load, each within
                   LATENCY_BOUND seconds; and /health, which must answer within HEALTH_BOUND seconds;
  hostile clients  slowloris heads (a byte a second), idle connections, header floods, chunked
                   bodies over --max-body (keyed) and without a key, JSON nested 20,000 deep,
                   garbage request lines, conflicting framing, streams dropped mid-way and streams
                   never read, each in a loop of its own.
The server's RSS must stay within RSS_BOUND_MIB of what it was after the warm-up. Prints the
load held and the faults survived (the figures in docs/PERFORMANCE.md). SOAK_MODEL=FILE serves
that model (a converted real one, say) instead of converting the fixture. Exits 77 (skipped)
without the fixture model. Usage: serve_soak_test.py BITSPLIT_BINARY SOURCE_DIR
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

from serve_testing import ServeProcess

BIN, SRC = sys.argv[1], sys.argv[2]
BASE = os.path.join(SRC, "tests", "models", "bible-base.gguf")
if not os.path.exists(BASE):
    print("skipped: tests/models/bible-base.gguf is missing")
    sys.exit(77)

SECONDS = float(os.environ.get("SOAK_SECONDS", "45"))
LATENCY_BOUND = 30.0   # a normal request, however loaded the two cores are
HEALTH_BOUND = 5.0
RSS_BOUND_MIB = 150
KEY = "soak-key"
failures = []
counts = {}
lock = threading.Lock()


def count(what, n=1):
    with lock:
        counts[what] = counts.get(what, 0) + n


def check(cond, what):
    if not cond:
        with lock:
            failures.append(what)
        print("FAIL:", what, flush=True)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def exchange(port, data, timeout=10):
    """Sends data, shuts the sending side, reads until the server closes; the reply's bytes."""
    try:
        s = connect(port, timeout)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        s.close()
        return got
    except OSError:
        return b""


def status(reply):
    m = re.match(rb"HTTP/1\.1 (\d{3})", reply)
    return int(m.group(1)) if m else 0


def request(port, method, path, body=None, headers=None, timeout=60):
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    data = body.encode() if isinstance(body, str) else (body or b"")
    if body is not None:
        head += f"Content-Length: {len(data)}\r\n"
    return exchange(port, head.encode() + b"\r\n" + data, timeout)


KEYED = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}


def completion(port, prompt, stream):
    body = json.dumps({"prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": stream})
    reply = request(port, "POST", "/v1/completions", body, KEYED, timeout=LATENCY_BOUND + 30)
    if status(reply) != 200:
        return status(reply), None
    payload = reply.split(b"\r\n\r\n", 1)[1]
    if not stream:
        return 200, json.loads(payload)["choices"][0]["text"]
    text = ""
    for line in payload.split(b"\n"):  # chunked framing lines interleave; data lines carry the events
        line = line.strip()
        if line.startswith(b"data: {"):
            text += json.loads(line[6:])["choices"][0]["text"]
    return 200, text


def until(deadline, fn):
    def loop():
        while time.time() < deadline:
            try:
                fn()
            except OSError:
                count("hostile client errors (server closed on it)")
    return loop


def hostile(port, deadline):
    def slowloris():
        s = connect(port, 30)
        count("slowloris connections")
        try:
            for b in b"POST /v1/completions HTTP/1.1\r\nX-Slow: " + b"y" * 100:
                if time.time() > deadline:
                    break
                s.send(bytes([b]))
                time.sleep(1)
        except OSError:
            count("slowloris cut at the deadline")
        s.close()

    def idle():
        s = connect(port, 30)
        count("idle connections")
        try:
            if s.recv(1) == b"":
                count("idle connections closed by the server")
        except OSError:
            pass
        s.close()

    def header_flood():
        head = "GET /v1/models HTTP/1.1\r\n" + "".join(f"X-{i}: y\r\n" for i in range(5000)) + "\r\n"
        count(f"header flood (5000 headers): {status(exchange(port, head.encode()))}")

    def chunked(keyed):
        def run():
            auth = f"Authorization: Bearer {KEY}\r\n" if keyed else ""
            s = connect(port, 30)
            s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
                       "Transfer-Encoding: chunked\r\n\r\n").encode())
            chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
            sent = 0
            try:
                while sent < (16 << 20):
                    s.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass
            got = b""
            try:
                got = s.recv(4096)
            except OSError:
                pass
            count(f"chunked 16 MiB body {'with' if keyed else 'without'} key: {status(got)} after "
                  f"{sent >> 20} MiB sent")
            s.close()
        return run

    def deep_json():
        body = '{"messages": [{"role": "user", "content": "x", "x": ' + "[" * 20000 + "]" * 20000 + "}]}"
        count(f"JSON nested 20000 deep: {status(request(port, 'POST', '/v1/chat/completions', body, KEYED))}")

    def garbage():
        bad_line = status(exchange(port, b"GARBAGE / / /\r\n\r\n"))
        count(f"garbage request line: {bad_line}")
        conflict = status(exchange(port, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n"
                                         b"Transfer-Encoding: chunked\r\n\r\n{}"))
        count(f"conflicting framing: {conflict}")

    def dropped_stream():
        body = json.dumps({"prompt": "And God", "max_tokens": 64, "temperature": 0, "stream": True}).encode()
        s = connect(port, 30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        s.recv(100)
        s.close()
        count("streams dropped mid-way")

    def unread_stream():
        body = json.dumps({"prompt": "And God", "max_tokens": 64, "temperature": 0, "stream": True}).encode()
        s = connect(port, 30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(5)
        s.close()
        count("streams never read (5 s)")

    loops = [slowloris] * 30 + [idle] * 30 + [header_flood, chunked(True), chunked(False), deep_json, garbage,
                                              dropped_stream, unread_stream]
    return [threading.Thread(target=until(deadline, f), daemon=True) for f in loops]


with tempfile.TemporaryDirectory() as tmp:
    conv = os.environ.get("SOAK_MODEL", "")
    if not conv:
        conv = os.path.join(tmp, "base.bitsplit.gguf")
        r = subprocess.run([BIN, "convert", BASE, conv, "-t", "2"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    server = ServeProcess(BIN, "-m", conv, "--parallel", "2", "--queue", "4", "--api-key", KEY, "--max-body", "1M")
    proc, port = server.proc, server.port

    prompts = ["And God said", "In the beginning", "The LORD is", "Blessed are"]
    want = {}
    for p in prompts:  # warm-up, and the answers the load must not change
        code, text = completion(port, p, False)
        assert code == 200, code
        want[p] = text
    rss_start = rss_mib(proc.pid)
    rss_peak = rss_start

    deadline = time.time() + SECONDS
    latencies = []

    def normal(i):
        n = 0
        while time.time() < deadline:
            p = prompts[(i + n) % len(prompts)]
            t = time.time()
            code, text = completion(port, p, stream=(n % 2 == 1))
            dt = time.time() - t
            with lock:
                latencies.append(dt)
            check(code == 200 and text == want[p], f"normal request {p!r}: {code} {text!r} (want {want[p]!r})")
            check(dt < LATENCY_BOUND, f"normal request took {dt:.1f} s (bound {LATENCY_BOUND} s)")
            n += 1

    def health():
        worst = 0.0
        while time.time() < deadline:
            t = time.time()
            code = status(request(port, "GET", "/health", timeout=HEALTH_BOUND + 5))
            dt = time.time() - t
            worst = max(worst, dt)
            check(code == 200 and dt < HEALTH_BOUND, f"/health: {code} in {dt:.1f} s (bound {HEALTH_BOUND} s)")
            count("health checks")
            time.sleep(0.5)
        count(f"worst /health ms: {int(worst * 1000)}", 0)

    threads = hostile(port, deadline) + [threading.Thread(target=normal, args=(i,)) for i in range(2)] + \
        [threading.Thread(target=health)]
    for t in threads:
        t.start()
    while time.time() < deadline:
        rss_peak = max(rss_peak, rss_mib(proc.pid))
        time.sleep(0.5)
    for t in threads:
        t.join(timeout=LATENCY_BOUND + 40)
    rss_end = rss_mib(proc.pid)
    metrics = request(port, "GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"}).decode(errors="replace")
    check(proc.poll() is None, "the server is still running")
    check(server.stop(), "the server stops on SIGTERM")

    lat = sorted(latencies)
    print(f"soak: {SECONDS:.0f} s; normal requests {len(lat)} (p50 {lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s); "
          f"RSS start {rss_start:.0f} MiB, peak {rss_peak:.0f} MiB, end {rss_end:.0f} MiB")
    for k in sorted(counts):
        print(f"  {k}: {counts[k]}" if counts[k] else f"  {k}")
    for name in ("connections_total", "timeouts_total", "bad_requests_total", "connections_refused_total", "busy_total"):
        m = re.search(r"^bitsplit:http_" + name + r"\{[^}]*\} (\d+)", metrics, re.M)
        print(f"  server http_{name}: {m.group(1) if m else '?'}")
    check(len(lat) >= 4, f"only {len(lat)} normal requests finished")
    check(rss_peak - rss_start < RSS_BOUND_MIB, f"RSS grew {rss_peak - rss_start:.0f} MiB (bound {RSS_BOUND_MIB})")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("soak passed")
