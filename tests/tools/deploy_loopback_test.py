#!/usr/bin/env python3
"""Three `bitsplit serve` replicas behind HAProxy (examples/deploy/loopback.py), on loopback.

The bundled model with two BitDelta variants: psalms on every replica, devil on r0 and r1 only.
  1. 100 requests from 8 concurrent clients (base, devil, psalms; some streamed) all succeed with
     `bitsplit run`'s greedy text; every devil request was served by r0 or r1 (each replica's
     /metrics counts requests by the model asked for); a conversation (X-Session-Id) stays on
     one replica for all its turns.
  2. Draining r1 (POST /admin/drain) in the middle of 40 requests: none fails; r1 finishes its
     own and exits 0 (it logs "stopped: drained" only on that path), and /health said draining.
  3. SIGKILL of r2 in the middle of 40 requests: every request ends (none hangs), those that fail
     get an error response, at most r2's slots and queue' worth; every request sent a second after
     the kill succeeds.
Skipped (77) without haproxy.

Usage: deploy_loopback_test.py BITSPLIT_BINARY PROJECT_SOURCE_DIR
"""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

if shutil.which("haproxy") is None and not os.path.isfile("/usr/sbin/haproxy"):
    print("haproxy is not installed; skipped")
    sys.exit(77)

BIN, ROOT = os.path.abspath(sys.argv[1]), sys.argv[2]
MODELS = os.path.join(ROOT, "tests", "models")
LOOPBACK = os.path.join(ROOT, "examples", "deploy", "loopback.py")
KEY = "deploy-test-key"
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, headers=None, timeout=60):
    """(status, parsed JSON or text); status None when the connection failed."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, text
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def get(url, timeout=5):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def served_counts(port):
    """{requested model: finished requests} from a replica's /metrics."""
    status, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, (status, text[:200])
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r'bitsplit:requests_by_model_total\{[^}]*requested_model="([^"]*)"\} (\d+)', text)}


def run_text(model_file, prompt, n, variant=None):
    args = [BIN, "run", "-m", model_file, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1"]
    if variant:
        args += ["--delta", f"{variant}={os.path.join(TMP, variant + '.delta.gguf')}", "--variant", variant]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(prompt), r.stdout[:200]
    return r.stdout[len(prompt):-1]


def completion(router, model, prompt, n, stream=False, headers=None):
    """The generated text, or raises with what came back."""
    body = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "stream": stream}
    status, text = post(router, body, headers)
    if status != 200:
        raise RuntimeError(f"{status}: {text[:300]}")
    if not stream:
        return json.loads(text)["choices"][0]["text"]
    pieces = []
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(f"stream error: {event}")
            pieces += [c["text"] for c in event.get("choices", [])]
    check_done = text.rstrip().endswith("data: [DONE]")
    if not check_done:
        raise RuntimeError("stream cut short")
    return "".join(pieces)


PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Blessed is the man", "And it came to pass"]
N = 12

with tempfile.TemporaryDirectory() as TMP:
    conv = os.path.join(TMP, "base.bitsplit.gguf")
    r = subprocess.run([BIN, "convert", os.path.join(MODELS, "bible-base.gguf"), conv, "-t", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for v in ("devil", "psalms"):
        r = subprocess.run([BIN, "delta", "--base", os.path.join(MODELS, "bible-base.gguf"), "--finetuned",
                            os.path.join(MODELS, f"bible-{v}.gguf"), "-o", os.path.join(TMP, v + ".delta.gguf")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    want = {(m, p): run_text(conv, p, N, None if m == "bible" else m) for m in ("bible", "devil", "psalms") for p in PROMPTS}

    state = os.path.join(TMP, "deploy")
    port = free_port()
    router = f"http://127.0.0.1:{port}/v1/completions"
    up = subprocess.run([sys.executable, LOOPBACK, "up", "-m", conv, "--name", "bible", "-n", "3", "--port", str(port),
                         "--base-port", "0", "--bitsplit", BIN, "--state", state, "--api-key", KEY, "--timeout", "120",
                         "--delta", f"devil={os.path.join(TMP, 'devil.delta.gguf')}@0,1",
                         "--delta", f"psalms={os.path.join(TMP, 'psalms.delta.gguf')}",
                         "--", "-t", "1", "--parallel", "2", "--queue", "8"],
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    print(up.stdout.strip())
    replicas = json.load(open(os.path.join(state, "pids.json")))["replicas"]
    ports = [r["port"] for r in replicas]
    try:
        # 1. 100 requests, 8 clients: every text is run's; devil only on r0/r1.
        jobs = [(["bible", "devil", "psalms"][i % 3], PROMPTS[i % len(PROMPTS)], i % 4 == 0) for i in range(100)]
        before = [served_counts(p) for p in ports]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(completion, router, m, p, N, s) for m, p, s in jobs]
            got = []
            for f in futures:
                try:
                    got.append(f.result(timeout=300))
                except Exception as e:  # noqa: BLE001 - reported below
                    got.append(e)
        bad = [(j, g) for j, g in zip(jobs, got) if isinstance(g, Exception) or g != want[(j[0], j[1])]]
        check(not bad, f"100 requests from 8 clients through the router: all succeed with run's text ({len(bad)} did not: {bad[:3]})")
        after = [served_counts(p) for p in ports]
        devil = [after[i].get("devil", 0) - before[i].get("devil", 0) for i in range(3)]
        served = [sum(after[i].values()) - sum(before[i].values()) for i in range(3)]
        check(devil[2] == 0 and sum(devil) == sum(1 for j in jobs if j[0] == "devil"),
              f"every devil request served where devil is loaded (r0, r1, r2: {devil})")
        check(all(s > 0 for s in served), f"the load spread over the replicas: {served}")

        # A conversation: its turns (same X-Session-Id) all on one replica.
        where = []
        for turn in range(4):
            before = [served_counts(p).get("bible", 0) for p in ports]
            completion(router, "bible", " ".join(PROMPTS[:turn + 1]), 6, headers={"X-Session-Id": "conversation-42"})
            after = [served_counts(p).get("bible", 0) for p in ports]
            where.append([i for i in range(3) if after[i] > before[i]])
        check(all(w == where[0] and len(w) == 1 for w in where), f"a conversation's 4 turns on one replica: {where}")

        # 2. Drain r1 in the middle of a run.
        jobs = [(["bible", "devil", "psalms"][i % 3], PROMPTS[i % len(PROMPTS)], i % 5 == 0) for i in range(40)]
        health_during = []
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(completion, router, m, p, N, s) for m, p, s in jobs]
            while sum(f.done() for f in futures) < 8:
                time.sleep(0.02)
            status, text = post(f"http://127.0.0.1:{ports[1]}/admin/drain", {})
            check(status == 202, f"POST /admin/drain with the key: 202 ({status} {text[:100]})")
            health_during.append(get(f"http://127.0.0.1:{ports[1]}/health")[0])
            got = []
            for f in futures:
                try:
                    got.append(f.result(timeout=300))
                except Exception as e:  # noqa: BLE001
                    got.append(e)
        bad = [(j, g) for j, g in zip(jobs, got) if isinstance(g, Exception) or g != want[(j[0], j[1])]]
        check(not bad, f"draining r1 mid-run: every request succeeds with run's text ({len(bad)} did not: {bad[:3]})")
        check(health_during[0] in (503, None), f"r1's /health while draining: {health_during}")
        deadline = time.time() + 60
        while time.time() < deadline and get(f"http://127.0.0.1:{ports[1]}/health")[0] is not None:
            time.sleep(0.1)
        log = open(os.path.join(state, "r1.log")).read()
        check("stopped: drained (POST /admin/drain)" in log, "r1 finished its requests and exited 0 after the drain")
        status, _ = post(f"http://127.0.0.1:{ports[0]}/admin/drain", {}, headers={"Authorization": "Bearer wrong"})
        check(status == 401, f"POST /admin/drain with a wrong key: 401 ({status})")

        # 3. SIGKILL r2 in the middle of a run (devil is now only on r0: use the base and psalms).
        jobs = [(["bible", "psalms"][i % 2], PROMPTS[i % len(PROMPTS)], i % 5 == 0) for i in range(40)]
        kill_time = None
        started = {}
        def timed(i, m, p, s):
            started[i] = time.time()
            return completion(router, m, p, N, s)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(timed, i, m, p, s) for i, (m, p, s) in enumerate(jobs)]
            while sum(f.done() for f in futures) < 8:
                time.sleep(0.02)
            os.kill(replicas[2]["pid"], signal.SIGKILL)
            kill_time = time.time()
            got = []
            for f in futures:
                try:
                    got.append(f.result(timeout=120))
                except concurrent.futures.TimeoutError:
                    got.append(TimeoutError("hung"))
                except Exception as e:  # noqa: BLE001
                    got.append(e)
        hung = [g for g in got if isinstance(g, TimeoutError)]
        failed = [(i, g) for i, g in enumerate(got) if isinstance(g, Exception)]
        wrong = [(jobs[i], g) for i, g in enumerate(got) if not isinstance(g, Exception) and g != want[(jobs[i][0], jobs[i][1])]]
        late_failed = [i for i, _ in failed if started.get(i, 0) > kill_time + 1.0]
        check(not hung, f"killing r2 mid-run: no request hangs ({len(hung)} did)")
        check(not wrong, f"killing r2 mid-run: every answer that came is run's text ({wrong[:2]})")
        check(len(failed) <= 2 + 8, f"killing r2 mid-run: at most r2's slots and queue fail ({len(failed)}: {failed[:3]})")
        check(not late_failed, f"every request sent a second after the kill succeeds ({len(late_failed)} failed)")
    finally:
        down = subprocess.run([sys.executable, LOOPBACK, "down", "--state", state, "--timeout", "60"],
                              capture_output=True, text=True, timeout=120)
        print(down.stdout.strip(), down.stderr.strip())
    check(down.returncode == 0, "loopback.py down stops what is left")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
