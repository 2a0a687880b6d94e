#!/usr/bin/env python3
"""Load benchmark for `bitsplit serve` (not a test): for each --parallel value, starts the
server on the model, fires REQUESTS completions from CONCURRENCY client threads (greedy,
MAX_TOKENS each, prompts from bench/prompts/stories.txt), and reports throughput (requests/s,
generated tokens/s) and latency percentiles (time to first token from streamed requests,
end-to-end). Markdown table on stdout, JSON with --json FILE.

  bench/serve_load.py build/bitsplit MODEL.bitsplit.gguf [--parallel 1,2,4] [--requests 32]
                      [--concurrency 8] [--max-tokens 64] [--threads 2] [--plain] [--json out.json]
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_client import percentile, streamed_completion  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("model")
ap.add_argument("--parallel", default="1,2,4")
ap.add_argument("--requests", type=int, default=32)
ap.add_argument("--concurrency", type=int, default=8)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts", "stories.txt"))
ap.add_argument("--plain", action="store_true", help="requests ask for plain decoding (no speculation)")
ap.add_argument("--serve-args", default="", help="more `bitsplit serve` options, e.g. \"--spec-max-sequences 0\"")
ap.add_argument("--json")
args = ap.parse_args()
prompts = [l.strip() for l in open(args.prompts) if l.strip()]


def one_request(url, prompt):
    """Streams one completion; returns (ttft, e2e, completion_tokens)."""
    return streamed_completion(url, {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0,
                                     "bitsplit": {"speculative": not args.plain}})


rows = []
for parallel in [int(p) for p in args.parallel.split(",")]:
    proc = subprocess.Popen([args.binary, "serve", "-m", args.model, "--port", "0", "--parallel", str(parallel),
                             "-t", str(args.threads), *args.serve_args.split()], stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = port or (int(m.group(1)) if m else None)
        if line.startswith("ready:"):
            break
    if port is None:
        sys.exit("the server did not start")
    url = f"http://127.0.0.1:{port}"
    one_request(url, prompts[0])  # warm-up: page in the model
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda i: one_request(url, prompts[i % len(prompts)]), range(args.requests)))
    wall = time.perf_counter() - t0
    metrics = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    def counter(name):
        m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)", metrics, re.M)
        return float(m.group(1)) if m else float("nan")
    passes = counter("bitsplit:forward_passes_total")
    per_pass = counter("bitsplit:forward_pass_sequences_total") / passes if passes else float("nan")
    proc.terminate()
    proc.wait(timeout=30)
    ttft = [r[0] for r in results]
    e2e = [r[1] for r in results]
    tokens = sum(r[2] for r in results)
    rows.append({"parallel": parallel, "requests": args.requests, "concurrency": args.concurrency,
                 "requests_per_s": args.requests / wall, "tokens_per_s": tokens / wall,
                 "ttft_p50": percentile(ttft, 50), "ttft_p90": percentile(ttft, 90), "ttft_p99": percentile(ttft, 99),
                 "e2e_p50": percentile(e2e, 50), "e2e_p90": percentile(e2e, 90), "e2e_p99": percentile(e2e, 99),
                 "sequences_per_pass": per_pass})

print(f"model {args.model}, {args.requests} requests x {args.max_tokens} tokens from {args.concurrency} clients, "
      f"{args.threads} threads\n")
print("| --parallel | requests/s | tokens/s | TTFT p50 / p90 / p99 (s) | end-to-end p50 / p90 / p99 (s) | sequences per pass |")
print("|---:|---:|---:|---|---|---:|")
for r in rows:
    print(f"| {r['parallel']} | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.1f} | "
          f"{r['ttft_p50']:.3f} / {r['ttft_p90']:.3f} / {r['ttft_p99']:.3f} | "
          f"{r['e2e_p50']:.2f} / {r['e2e_p90']:.2f} / {r['e2e_p99']:.2f} | {r['sequences_per_pass']:.2f} |")
if args.json:
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=2)
