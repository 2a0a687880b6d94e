#!/usr/bin/env python3
"""Load through the router (not a test): for each replica count, starts the loopback deployment
(examples/deploy/loopback.py: N `bitsplit serve` replicas behind HAProxy), fires REQUESTS streamed
greedy completions of MAX_TOKENS from CONCURRENCY client threads (prompts from
bench/prompts/stories.txt) at the router, and reports generated tokens/s and latency percentiles
(time to first token, end to end). Markdown table on stdout, JSON with --json FILE.

  bench/deploy_load.py build/bitsplit MODEL.bitsplit.gguf [--layouts 1x2,3x1] [--requests 48]
                       [--concurrency 8] [--max-tokens 32] [--json out.json]

A layout RxT is R replicas of T threads each. On a machine with C cores, layouts whose R x T is C
compare replication with one bigger process on the same cores; replicas on one machine share its
cores and memory bandwidth, so this measures the router's and the replicas' overhead, not scale-out.
"""
import argparse
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_client import percentile, streamed_completion  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LOOPBACK = os.path.join(HERE, "..", "examples", "deploy", "loopback.py")

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("model")
ap.add_argument("--layouts", default="1x2,3x1", help="comma-separated REPLICASxTHREADS")
ap.add_argument("--requests", type=int, default=48)
ap.add_argument("--concurrency", type=int, default=8)
ap.add_argument("--max-tokens", type=int, default=32)
ap.add_argument("--parallel", type=int, default=4, help="each replica's --parallel")
ap.add_argument("--prompts", default=os.path.join(HERE, "prompts", "stories.txt"))
ap.add_argument("--json")
args = ap.parse_args()
prompts = [l.strip() for l in open(args.prompts) if l.strip()]


def one_request(url, model, prompt):
    """Streams one completion; returns (ttft, e2e, completion_tokens)."""
    return streamed_completion(url, {"model": model, "prompt": prompt, "max_tokens": args.max_tokens,
                                     "temperature": 0})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


rows = []
for layout in args.layouts.split(","):
    replicas, threads = (int(x) for x in layout.lower().split("x"))
    with tempfile.TemporaryDirectory() as state:
        port = free_port()
        up = subprocess.run([sys.executable, LOOPBACK, "up", "-m", args.model, "--name", "m", "-n", str(replicas),
                             "--port", str(port), "--base-port", "0", "--bitsplit", args.binary, "--state", state,
                             "--", "-t", str(threads), "--parallel", str(args.parallel)],
                            capture_output=True, text=True)
        if up.returncode != 0:
            sys.exit(up.stdout + up.stderr)
        url = f"http://127.0.0.1:{port}"
        try:
            for i in range(replicas * 2):  # warm-up: page in each replica's model
                one_request(url, "m", prompts[0])
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
                results = list(pool.map(lambda i: one_request(url, "m", prompts[i % len(prompts)]), range(args.requests)))
            wall = time.perf_counter() - t0
        finally:
            subprocess.run([sys.executable, LOOPBACK, "down", "--state", state], capture_output=True)
    ttft = [r[0] for r in results]
    e2e = [r[1] for r in results]
    tokens = sum(r[2] for r in results)
    rows.append({"replicas": replicas, "threads": threads, "requests": args.requests, "concurrency": args.concurrency,
                 "tokens_per_s": tokens / wall, "requests_per_s": args.requests / wall,
                 "ttft_p50": percentile(ttft, 50), "ttft_p95": percentile(ttft, 95),
                 "e2e_p50": percentile(e2e, 50), "e2e_p95": percentile(e2e, 95)})

print(f"model {args.model}, {args.requests} streamed greedy requests x {args.max_tokens} tokens from "
      f"{args.concurrency} clients through HAProxy, --parallel {args.parallel} per replica\n")
print("| replicas x threads | tokens/s | requests/s | TTFT p50 / p95 (s) | end-to-end p50 / p95 (s) |")
print("|---|---:|---:|---|---|")
for r in rows:
    print(f"| {r['replicas']} x {r['threads']} | {r['tokens_per_s']:.1f} | {r['requests_per_s']:.2f} | "
          f"{r['ttft_p50']:.3f} / {r['ttft_p95']:.3f} | {r['e2e_p50']:.2f} / {r['e2e_p95']:.2f} |")
if args.json:
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=2)
