#!/usr/bin/env python3
"""N `bitsplit serve` replicas on 127.0.0.1 behind HAProxy, with one command; and one to stop.

    examples/deploy/loopback.py up -m MODEL.gguf [-n 3] [--port 8080] [--base-port 18101]
        [--delta NAME=FILE[@0,1]] [--lora NAME=FILE[@2]] [--api-key KEY] [--bitsplit PATH]
        [--state DIR] [-- extra serve options...]
    examples/deploy/loopback.py down [--state DIR]
    examples/deploy/loopback.py status [--state DIR]

A variant (--delta/--lora) is loaded on the replicas listed after @ (indices from 0; default:
every replica). HAProxy (Debian's haproxy package) listens on --port and routes by HAProxy's own
mechanisms, configured here (docs/DEPLOY.md says why and what it trades):

  * by model: the request's JSON "model" field (json_query on the buffered body) picks a backend
    holding only the replicas where that model (the base or a variant) is loaded;
  * by conversation: a request with an X-Session-Id header goes to the replica its value hashes to
    (consistent hashing, bounded load: a replica more than 50 % above the average load is skipped),
    so a chat's turns find their prompt cache; without the header, to the least-busy replica;
  * by health: GET /health every 500 ms; a replica answering 503 (loading, draining) or not at all
    is out of rotation at once; a request refused with 503 (draining) or 404 (a model the
    replica lacks), or whose connection failed, is retried on another replica (request bodies up
    to the 256 KiB buffer).

`up` waits until every replica says ready and HAProxy listens, prints the URL, and returns; the
processes keep running (their logs and pids in --state) until `down`, which drains each replica
(SIGTERM: it finishes its requests, then exits) and stops HAProxy.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

DEFAULT_STATE = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/tmp", "bitsplit-loopback")


def parse_variant(kind, spec, n):
    """'NAME=FILE[@0,2]' -> (kind, name, file, [replicas])."""
    placement = list(range(n))
    if "@" in spec:
        spec, where = spec.rsplit("@", 1)
        try:
            placement = sorted({int(i) for i in where.split(",")})
        except ValueError:
            sys.exit(f"--{kind} {spec}@{where}: replicas are indices like 0,2")
        if not placement or placement[0] < 0 or placement[-1] >= n:
            sys.exit(f"--{kind} {spec}@{where}: replicas are 0..{n - 1}")
    if "=" not in spec:
        sys.exit(f"--{kind} takes NAME=FILE[@REPLICAS], not '{spec}'")
    name, path = spec.split("=", 1)
    if not os.path.isfile(path):
        sys.exit(f"--{kind} {name}: no file {path}")
    return kind, name, os.path.abspath(path), placement


def backend(name, servers, sticky):
    """A backend over `servers` [(replica name, port)]: consistent hashing on X-Session-Id
    (sticky) or least connections."""
    lines = [f"backend {name}"]
    if sticky:
        lines += ["    balance hdr(X-Session-Id)", "    hash-type consistent", "    hash-balance-factor 150"]
    else:
        lines += ["    balance leastconn"]
    lines += ["    option httpchk GET /health", "    http-check expect status 200",
              "    default-server check inter 500ms fall 1 rise 1"]
    lines += [f"    server {s} 127.0.0.1:{p}" for s, p in servers]
    return "\n".join(lines) + "\n"


def haproxy_config(port, replicas, models):
    """`replicas` [(name, port)]; `models` {model id: [replica indices]}: one pair of backends per
    model (sticky, least-busy), selected by the request's "model" and X-Session-Id."""
    out = [f"""# Written by examples/deploy/loopback.py; see docs/DEPLOY.md.
global
    maxconn 512
    tune.bufsize 262144

defaults
    mode http
    timeout connect 2s
    timeout client 600s
    timeout server 600s
    timeout http-request 10s
    option http-buffer-request
    retries 3
    retry-on conn-failure empty-response 503 404
    option redispatch 1

frontend openai
    bind 127.0.0.1:{port}
    http-request set-var(txn.model) req.body,json_query('$.model') if {{ method POST }}
    acl has_session req.hdr(X-Session-Id) -m found
"""]
    for i, model in enumerate(models):
        out.append(f"    use_backend m{i}_sticky if {{ var(txn.model) -m str {model} }} has_session\n")
        out.append(f"    use_backend m{i}_any if {{ var(txn.model) -m str {model} }}\n")
    out.append("    use_backend all_sticky if has_session\n    default_backend all_any\n\n")
    out.append(backend("all_sticky", replicas, True) + "\n" + backend("all_any", replicas, False) + "\n")
    for i, (model, where) in enumerate(models.items()):
        servers = [replicas[r] for r in where]
        out.append(f"# model {model}: replicas {', '.join(s for s, _ in servers)}\n")
        out.append(backend(f"m{i}_sticky", servers, True) + "\n" + backend(f"m{i}_any", servers, False) + "\n")
    return "".join(out)


def http_get(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def up(args, extra):
    state = args.state
    if os.path.exists(os.path.join(state, "pids.json")):
        sys.exit(f"{state} holds a running deployment (run `down` first, or give --state)")
    binary = args.bitsplit or shutil.which("bitsplit")
    if not binary or not os.path.isfile(binary):
        sys.exit("no bitsplit binary: give --bitsplit PATH (e.g. build/bitsplit)")
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.isfile(haproxy):
        sys.exit("haproxy is not installed (apt-get install haproxy)")
    if not os.path.isfile(args.model):
        sys.exit(f"no model file {args.model}")
    n = args.replicas
    variants = [parse_variant("delta", s, n) for s in args.delta] + [parse_variant("lora", s, n) for s in args.lora]
    os.makedirs(state, exist_ok=True)
    base_name = args.name or os.path.basename(args.model)
    models = {base_name: list(range(n))}
    for _, name, _, where in variants:
        models[name] = where
    replicas = [(f"r{i}", args.base_port + i if args.base_port else 0) for i in range(n)]
    pids = {"replicas": [], "haproxy": None}
    procs = []
    for i, (rname, port) in enumerate(replicas):
        cmd = [binary, "serve", "-m", os.path.abspath(args.model), "--port", str(port), "--name", base_name]
        for kind, name, path, where in variants:
            if i in where:
                cmd += [f"--{kind}", f"{name}={path}"]
        for key in args.api_key:
            cmd += ["--api-key", key]
        cmd += extra
        log = open(os.path.join(state, f"{rname}.log"), "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        pids["replicas"].append({"name": rname, "port": port, "pid": proc.pid, "models": [
            m for m, where in models.items() if i in where]})
    with open(os.path.join(state, "pids.json"), "w") as f:
        json.dump(pids, f)
    # --base-port 0: each replica took a free port, which its log says.
    deadline = time.time() + args.timeout
    for r, proc in zip(pids["replicas"], procs):
        while r["port"] == 0:
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(os.path.join(state, f"{r['name']}.log")).read())
            if found:
                r["port"] = int(found.group(1))
            elif proc.poll() is not None or time.time() > deadline:
                log = open(os.path.join(state, f"{r['name']}.log")).read()[-2000:]
                down(args)
                sys.exit(f"replica {r['name']} did not start listening:\n{log}")
            else:
                time.sleep(0.05)
    replicas = [(r["name"], r["port"]) for r in pids["replicas"]]
    config = os.path.join(state, "haproxy.cfg")
    with open(config, "w") as f:
        f.write(haproxy_config(args.port, replicas, models))
    with open(os.path.join(state, "pids.json"), "w") as f:
        json.dump(pids, f)
    # Every replica ready (its /health 200) before the router starts sending to it.
    for r, proc in zip(pids["replicas"], procs):
        while http_get(f"http://127.0.0.1:{r['port']}/health")[0] != 200:
            if time.time() > deadline:
                down(args)
                sys.exit(f"replica {r['name']} did not become ready in {args.timeout} s; see {state}/{r['name']}.log")
            if proc.poll() is not None:
                log = open(os.path.join(state, f"{r['name']}.log")).read()[-2000:]
                down(args)
                sys.exit(f"replica {r['name']} exited while starting:\n{log}")
            time.sleep(0.2)
    check = subprocess.run([haproxy, "-c", "-q", "-f", config], capture_output=True, text=True)
    if check.returncode != 0:
        down(args)
        sys.exit(f"haproxy refused {config}:\n{check.stderr}")
    hlog = open(os.path.join(state, "haproxy.log"), "w")
    proc = subprocess.Popen([haproxy, "-db", "-f", config], stdout=hlog, stderr=subprocess.STDOUT, start_new_session=True)
    pids["haproxy"] = proc.pid
    with open(os.path.join(state, "pids.json"), "w") as f:
        json.dump(pids, f)
    while http_get(f"http://127.0.0.1:{args.port}/health")[0] != 200:
        if time.time() > deadline or proc.poll() is not None:
            down(args)
            sys.exit(f"haproxy did not start; see {state}/haproxy.log")
        time.sleep(0.2)
    print(f"http://127.0.0.1:{args.port}/v1  ({n} replicas: " +
          ", ".join(f"{r['name']} :{r['port']} [{' '.join(r['models'])}]" for r in pids["replicas"]) + ")")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def running(args):
    """The deployment under --state (its pids.json), or None, saying so, when there is none."""
    path = os.path.join(args.state, "pids.json")
    if not os.path.exists(path):
        print(f"nothing running under {args.state}")
        return None
    return json.load(open(path))


def down(args):
    pids = running(args)
    if pids is None:
        return 0
    # Replicas first (each drains: finishes its requests, then exits), then the router.
    for r in pids["replicas"]:
        if alive(r["pid"]):
            os.kill(r["pid"], signal.SIGTERM)
    deadline = time.time() + args.timeout
    for r in pids["replicas"]:
        while alive(r["pid"]) and time.time() < deadline:
            reap(r["pid"])
            time.sleep(0.1)
        if alive(r["pid"]):
            os.kill(r["pid"], signal.SIGKILL)
    if pids.get("haproxy") and alive(pids["haproxy"]):
        os.kill(pids["haproxy"], signal.SIGTERM)
        reap(pids["haproxy"])
    os.remove(os.path.join(args.state, "pids.json"))
    print(f"stopped {len(pids['replicas'])} replicas and haproxy")
    return 0


def reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def status(args):
    pids = running(args)
    if pids is None:
        return 1
    for r in pids["replicas"]:
        code, body = http_get(f"http://127.0.0.1:{r['port']}/health")
        print(f"{r['name']} :{r['port']} pid {r['pid']} {'alive' if alive(r['pid']) else 'gone'} "
              f"health {code} {body.strip()} models {' '.join(r['models'])}")
    print(f"haproxy pid {pids.get('haproxy')} {'alive' if pids.get('haproxy') and alive(pids['haproxy']) else 'gone'}")
    return 0


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    u = sub.add_parser("up", help="start the replicas and the router")
    u.add_argument("-m", "--model", required=True)
    u.add_argument("-n", "--replicas", type=int, default=3)
    u.add_argument("--port", type=int, default=8080, help="the router's port")
    u.add_argument("--base-port", type=int, default=18101, help="replica i listens on BASE_PORT + i (0: each on a free port)")
    u.add_argument("--name", help="the base model's id (default: the file name)")
    u.add_argument("--delta", action="append", default=[], metavar="NAME=FILE[@REPLICAS]")
    u.add_argument("--lora", action="append", default=[], metavar="NAME=FILE[@REPLICAS]")
    u.add_argument("--api-key", action="append", default=[])
    u.add_argument("--bitsplit", help="the bitsplit binary (default: on PATH)")
    for s in (u, sub.add_parser("down", help="drain and stop the replicas, then the router"),
              sub.add_parser("status", help="each replica's health")):
        s.add_argument("--state", default=DEFAULT_STATE, help="where the config, logs and pids go")
        s.add_argument("--timeout", type=float, default=180, help="seconds to wait for start or stop")
    args = p.parse_args(argv)
    if args.command == "up":
        if args.replicas < 1:
            sys.exit("-n must be at least 1")
        up(args, extra)
        return 0
    return down(args) if args.command == "down" else status(args)


if __name__ == "__main__":
    sys.exit(main())
