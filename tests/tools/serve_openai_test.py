#!/usr/bin/env python3
"""`bitsplit serve` end to end with the official `openai` Python client (PyPI), on loopback.

Checks: completions and chat, streamed and not, give the greedy text `bitsplit run` gives;
two variants in concurrent requests each equal their own `run --variant`; a burst of 64
concurrent requests with --parallel 4 all complete and equal sequential runs; a client that
disconnects mid-stream frees its slot (metrics); bad requests get their status; an API key
guards every route but /health. Exits 77 (skipped) when the openai package or the fixture
models are missing. Usage: serve_openai_test.py BITSPLIT_BINARY SOURCE_DIR
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from serve_testing import ServeProcess

try:
    import openai
except ImportError:
    print("skipped: the openai package is not installed (pip install openai)")
    sys.exit(77)

BIN, SRC = sys.argv[1], sys.argv[2]
MODELS = os.path.join(SRC, "tests", "models")
BASE = os.path.join(MODELS, "bible-base.gguf")
if not os.path.exists(BASE):
    print("skipped: tests/models/bible-base.gguf is missing")
    sys.exit(77)

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def cli(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)


def run_text(model, prompt, n, variant=None, parse_special=False):
    """The greedy continuation `bitsplit run` prints after the prompt."""
    args = ["run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2"]
    if variant:
        args += ["--delta", f"{variant}={os.path.join(TMP, variant + '.delta.gguf')}", "--variant", variant]
    if parse_special:
        args.append("--parse-special")
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(prompt), r.stdout[:200]
    return r.stdout[len(prompt):-1]  # run ends the text with a newline


class Server(ServeProcess):
    def __init__(self, *args):
        super().__init__(BIN, *args)

    def stop(self):
        if not super().stop():
            failures.append("the server did not stop on SIGTERM")


with tempfile.TemporaryDirectory() as TMP:
    conv = os.path.join(TMP, "base.bitsplit.gguf")
    assert cli("convert", BASE, conv, "-t", "2").returncode == 0
    for v in ("devil", "psalms"):
        r = cli("delta", "--base", BASE, "--finetuned", os.path.join(MODELS, f"bible-{v}.gguf"), "-o",
                os.path.join(TMP, v + ".delta.gguf"))
        assert r.returncode == 0, r.stderr
    template = os.path.join(TMP, "chatml.jinja")
    with open(template, "w") as f:
        f.write(CHATML)

    server = Server("-m", conv, "--parallel", "4", "--chat-template", template,
                    "--delta", f"devil={os.path.join(TMP, 'devil.delta.gguf')}",
                    "--delta", f"psalms={os.path.join(TMP, 'psalms.delta.gguf')}")
    try:
        # identity: Debian's python3-brotli is older than the brotli API httpx's decoder calls, and the
        # server once (cpp-httplib) compressed for clients that accept br; it no longer compresses.
        plain = {"Accept-Encoding": "identity"}
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120,
                               default_headers=plain)
        ids = [m.id for m in client.models.list().data]
        check(ids == ["base.bitsplit.gguf", "devil", "psalms"], f"/v1/models lists the base and variants: {ids}")

        prompt = "And God said"
        want = run_text(conv, prompt, 24)
        c = client.completions.create(model="base.bitsplit.gguf", prompt=prompt, max_tokens=24, temperature=0)
        check(c.choices[0].text == want, f"completion == run: {c.choices[0].text!r} vs {want!r}")
        check(c.usage.completion_tokens <= 24 and c.usage.prompt_tokens > 0, f"usage {c.usage}")
        streamed = "".join(ch.choices[0].text for ch in client.completions.create(
            model="base.bitsplit.gguf", prompt=prompt, max_tokens=24, temperature=0, stream=True) if ch.choices)
        check(streamed == want, f"streamed completion == run: {streamed!r} vs {want!r}")

        messages = [{"role": "system", "content": "You are the KJV."}, {"role": "user", "content": "In the beginning"}]
        rendered = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"
        want_chat = run_text(conv, rendered, 20, parse_special=True)
        r = client.chat.completions.create(model="base.bitsplit.gguf", messages=messages, max_tokens=20, temperature=0)
        check(r.choices[0].message.content == want_chat, f"chat == run: {r.choices[0].message.content!r} vs {want_chat!r}")
        check(r.choices[0].message.role == "assistant", "chat role")
        chunks = list(client.chat.completions.create(model="base.bitsplit.gguf", messages=messages, max_tokens=20,
                                                     temperature=0, stream=True, stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        check(text == want_chat, f"streamed chat == run: {text!r} vs {want_chat!r}")
        check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0, "include_usage gives a usage chunk")

        # Log-probabilities: a greedy token is its position's most probable; speculative decoding
        # reports what plain decoding does; streamed chunks carry the same entries.
        def completion_lp(**extra):
            return client.completions.create(model="base.bitsplit.gguf", prompt=prompt, max_tokens=24, temperature=0,
                                             logprobs=3, **extra)
        lp = completion_lp()
        L = lp.choices[0].logprobs
        n = lp.usage.completion_tokens - (1 if lp.choices[0].finish_reason == "stop" else 0)
        check(lp.choices[0].text == want and "".join(L.tokens) == want, f"logprobs tokens spell the text: {L.tokens}")
        check(len(L.tokens) == len(L.token_logprobs) == len(L.top_logprobs) == len(L.text_offset) == n,
              f"one entry per generated token ({n})")
        # Each offset is where its token's text starts (the fixture's text is ASCII: bytes = chars).
        check(L.text_offset == [sum(len(t) for t in L.tokens[:i]) for i in range(len(L.tokens))],
              f"text offsets {L.text_offset}")
        for lp_t, top in zip(L.token_logprobs, L.top_logprobs):
            check(0 < len(top) <= 3 and lp_t <= 0 and abs(max(top.values()) - lp_t) < 1e-6,
                  f"greedy picks the most probable: {lp_t} vs {top}")
        plain_lp = completion_lp(extra_body={"bitsplit": {"speculative": False}}).choices[0].logprobs
        check(plain_lp.tokens == L.tokens and plain_lp.token_logprobs == L.token_logprobs,
              "speculative decoding reports plain decoding's log-probabilities")
        streamed_lp = [ch.choices[0].logprobs for ch in completion_lp(stream=True) if ch.choices and ch.choices[0].logprobs]
        check(sum((s.tokens for s in streamed_lp), []) == L.tokens and
              sum((s.token_logprobs for s in streamed_lp), []) == L.token_logprobs and
              sum((s.text_offset for s in streamed_lp), []) == L.text_offset, "streamed logprobs == not streamed")
        # With a stop string the tokens it held back still get their entries (in the last chunk).
        stop_at = want[len(want) // 2:len(want) // 2 + 3]
        stopped = completion_lp(stop=[stop_at]).choices[0].logprobs
        streamed_stop = [ch.choices[0].logprobs for ch in completion_lp(stop=[stop_at], stream=True)
                         if ch.choices and ch.choices[0].logprobs]
        check(sum((s.tokens for s in streamed_stop), []) == stopped.tokens,
              f"streamed logprobs with a stop string == not streamed ({stop_at!r})")
        r = client.chat.completions.create(model="base.bitsplit.gguf", messages=messages, max_tokens=20, temperature=0,
                                           logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        check("".join(c.token for c in content) == want_chat, "chat logprobs spell the reply")
        check(all(len(c.top_logprobs) == 2 and abs(c.top_logprobs[0].logprob - c.logprob) < 1e-6 and
                  bytes(c.bytes).decode("utf-8", "replace") == c.token for c in content), "chat logprobs entries")
        check(client.chat.completions.create(model="base.bitsplit.gguf", messages=messages, max_tokens=4,
                                             temperature=0).choices[0].logprobs is None, "no logprobs unless asked")

        # Two variants at once, each as its own run --variant.
        want_v = {v: run_text(conv, prompt, 24, variant=v) for v in ("devil", "psalms")}
        check(want_v["devil"] != want_v["psalms"], "the variants differ (else the test proves nothing)")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futs = {pool.submit(client.completions.create, model=v, prompt=prompt, max_tokens=24, temperature=0): v
                    for v in ("devil", "psalms", "devil", "psalms")}
            for f, v in futs.items():
                got = f.result().choices[0].text
                check(got == want_v[v], f"variant {v} == run --variant: {got!r} vs {want_v[v]!r}")

        # A burst of 64 with --parallel 4: all complete and equal sequential runs.
        prompts = [f"And {w} said" for w in ("God", "Moses", "Aaron", "the LORD", "Jesus", "Peter", "Paul", "David",
                                             "Saul", "Samuel", "Joseph", "Jacob", "Isaac", "Abraham", "Noah", "Adam")]
        want_burst = {p: run_text(conv, p, 12) for p in prompts}
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            futs = [(p, pool.submit(client.completions.create, model="base.bitsplit.gguf", prompt=p, max_tokens=12,
                                    temperature=0)) for p in prompts * 4]
            got = [(p, f.result().choices[0].text) for p, f in futs]
        bad = [(p, t) for p, t in got if t != want_burst[p]]
        check(len(got) == 64 and not bad, f"burst of 64: {len(bad)} differ from run: {bad[:2]}")

        # A client that goes away mid-stream frees its slot.
        req = urllib.request.Request(server.url + "/v1/completions", method="POST",
                                     data=json.dumps({"prompt": prompt, "max_tokens": 200, "temperature": 0,
                                                      "stream": True, "bitsplit": {"speculative": False}}).encode(),
                                     headers={"Content-Type": "application/json"})
        resp = urllib.request.urlopen(req, timeout=60)
        resp.readline()
        resp.close()
        deadline = time.time() + 20
        running = None
        while time.time() < deadline:
            _, metrics, _ = server.http("GET", "/metrics")
            running = re.search(r'^vllm:num_requests_running\{[^}]*\} (\d+)', metrics, re.M)
            if running and running.group(1) == "0":
                break
            time.sleep(0.1)
        check(running is not None and running.group(1) == "0", "the disconnected stream's slot is free")
        for name in ("vllm:num_requests_waiting", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                     "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                     "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                     "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos",
                     "vllm:kv_cache_usage_perc", "vllm:lora_requests_info"):
            check(name in metrics, f"/metrics has {name}")

        # Bad requests: status and an OpenAI error object; the server keeps serving.
        for path, body, status in [
            ("/v1/completions", "not json", 400), ("/v1/completions", "{}", 400),
            ("/v1/completions", '{"prompt": "x", "temperature": "hot"}', 400),
            ("/v1/completions", '{"prompt": "x", "model": "nope"}', 404),
            ("/v1/completions", '{"prompt": "x", "max_tokens": 100000}', 400),
            ("/v1/completions", '{"prompt": "x", "max_tokens": -1}', 400),
            ("/v1/completions", '{"prompt": [1, 999999999], "max_tokens": 2}', 400),
            ("/v1/chat/completions", '{"messages": []}', 400),
            ("/v1/completions", '{"prompt": "' + "x" * (9 << 20) + '"}', 413),
            # Nested past the parser's limit: refused while parsing, not a crash.
            ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x", "x": ' + "[" * 20000 +
             "]" * 20000 + "}]}", 400),
            # More text than the context can hold whatever its tokens: refused before tokenizing.
            ("/v1/completions", '{"prompt": "' + "And God said " * 40000 + '"}', 400),
            ("/v1/nothing", "{}", 404)]:
            got, text, _ = server.http("POST", path, body, {"Content-Type": "application/json"})
            ok = got == status
            try:
                ok = ok and "message" in json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                ok = False
            check(ok, f"POST {path} {body[:40]!r}: {got} {text[:120]!r}, expected {status} with an error object")
        # A body that is not sent as JSON (what a web page can post without a CORS preflight): 415.
        for ctype in ("text/plain", "application/x-www-form-urlencoded"):
            got, text, _ = server.http("POST", "/v1/completions", '{"prompt": "x"}', {"Content-Type": ctype})
            check(got == 415 and "application/json" in json.loads(text)["error"]["message"], f"{ctype}: {got} {text[:120]!r}")
        check(server.http("GET", "/v1/completions")[0] == 405, "GET on a POST route: 405")
        check(server.http("GET", "/health")[0] == 200, "still healthy after the bad requests")
        # The chat page: served from the binary with a policy that lets it load nothing else.
        got, page, headers = server.http("GET", "/")
        check(got == 200 and page.lstrip().lower().startswith("<!doctype html") and
              headers.get("Content-Type", "").startswith("text/html") and
              "default-src 'self'" in headers.get("Content-Security-Policy", ""), f"GET /: {got} {headers}")
        # The `bitsplit` extension says how speculation went: per depth, times, the final setting.
        got, text, _ = server.http("POST", "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "And God said"}], "max_tokens": 16, "temperature": 0,
             "bitsplit": {"budget": 4}}),  # fixed: the online controller may have settled on plain by now
            {"Content-Type": "application/json"})
        ext = json.loads(text).get("bitsplit", {}) if got == 200 else {}
        check(ext.get("speculative") is True and sum(ext.get("accepted_per_depth", [-1])) == ext.get("accepted_tokens")
              and len(ext.get("drafted_per_depth", [])) >= len(ext.get("accepted_per_depth", [])) > 0
              and ext.get("draft_seconds", -1) >= 0 and ext.get("verify_seconds", -1) >= 0
              and isinstance(ext.get("final_setting"), str), f"the bitsplit extension: {got} {ext}")
        # A prompt of token ids is taken as given (its usage counts exactly those ids).
        got, text, _ = server.http("POST", "/v1/completions", json.dumps({"prompt": [1, 2, 3], "max_tokens": 3,
                                                                          "temperature": 0}),
                                   {"Content-Type": "application/json"})
        check(got == 200 and json.loads(text)["usage"]["prompt_tokens"] == 3, f"a token-id prompt: {got} {text[:200]!r}")
    finally:
        server.stop()

    # An API key guards everything but /health; each key is a tenant of the prompt cache.
    keyed = Server("-m", conv, "--api-key", "sekrit", "--api-key", "other", "--parallel", "1", "--prompt-cache", "4")
    try:
        check(keyed.http("GET", "/health")[0] == 200, "/health needs no key")
        check(keyed.http("GET", "/")[0] == 200, "the page needs no key (it holds no data and asks for one)")
        check(keyed.http("GET", "/v1/models")[0] == 401, "/v1/models without a key: 401")
        check(keyed.http("GET", "/metrics")[0] == 401, "/metrics without a key: 401")
        check(keyed.http("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401, "a wrong key: 401")
        good = openai.OpenAI(base_url=keyed.url + "/v1", api_key="sekrit", max_retries=0,
                             default_headers={"Accept-Encoding": "identity"})
        check(good.completions.create(model="base.bitsplit.gguf", prompt="And God", max_tokens=4, temperature=0).choices[0].text != "", "with the key")
        # The same long prompt under the other key reuses nothing of the first key's cache; under
        # the first key again it does.
        long_prompt = "And God said, Let there be light: and there was light. And God saw the light"
        first = good.completions.create(model="base.bitsplit.gguf", prompt=long_prompt, max_tokens=2, temperature=0)
        other = openai.OpenAI(base_url=keyed.url + "/v1", api_key="other", max_retries=0,
                              default_headers={"Accept-Encoding": "identity"})
        cached = lambda c: (c.usage.prompt_tokens_details.cached_tokens if c.usage.prompt_tokens_details else 0) or 0
        across = other.completions.create(model="base.bitsplit.gguf", prompt=long_prompt, max_tokens=2, temperature=0)
        again = good.completions.create(model="base.bitsplit.gguf", prompt=long_prompt, max_tokens=2, temperature=0)
        check(cached(across) == 0, f"another key's request reuses nothing: cached_tokens {cached(across)}")
        check(cached(again) > 0, f"the same key's next request reuses its cache: cached_tokens {cached(again)}")
        check(first.choices[0].text == across.choices[0].text == again.choices[0].text, "same text under each key")
    finally:
        keyed.stop()

    # --no-webui: no page.
    nopage = Server("-m", conv, "--no-webui")
    try:
        check(nopage.http("GET", "/")[0] == 404, "--no-webui: GET / is 404")
    finally:
        nopage.stop()

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all serve checks passed")
