"""What the load benchmarks (serve_load.py, deploy_load.py) share: one streamed completion timed
from the client's side, and a percentile."""
import json
import time
import urllib.request


def percentile(values, p):
    """The p-th percentile (nearest rank) of the values that are numbers; NaN when none is."""
    s = sorted(v for v in values if v == v)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] if s else float("nan")


def streamed_completion(url, body):
    """POSTs `body` (a completions request; streamed with usage) to URL/v1/completions and reads the
    stream; returns (time to the first text, end to end, completion tokens), in seconds."""
    data = json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=data, headers={"Content-Type": "application/json",
                                                                              "Accept-Encoding": "identity"})
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text") and ttft is None:
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return ttft if ttft is not None else float("nan"), time.perf_counter() - t0, tokens
