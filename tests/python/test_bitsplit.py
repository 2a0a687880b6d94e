"""The Python package (python/bitsplit/) on the bundled bible fixtures: its text equals the CLI's,
speculative equals plain, streaming equals not, seeds reproduce, bad inputs raise the right
bitsplit.Error subclass, threads and abort behave, and the OpenAI-shaped results hold the same
text. Expected texts come from `bitsplit run` and from the engine's own plain decoding."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import threading
import weakref

import pytest

from conftest import fixture_model

PROMPT = "And it came to pass, when the king of Israel"
CHATML = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def run_cli(cli, model_path, *args):
    r = subprocess.run([cli, "run", "-m", str(model_path), "-p", PROMPT, *args], check=True, capture_output=True)
    return r.stdout.decode()


# ---- text against the CLI and against itself ----------------------------------------------------

def test_greedy_text_equals_bitsplit_run(model, cli, converted_path):
    text, stats = model.generate(PROMPT, 40, temperature=0)
    assert run_cli(cli, converted_path, "-n", "40", "--temp", "0") == PROMPT + text + "\n"
    assert stats.speculative and stats.checks > 0 and stats.tokens_per_check >= 1
    assert stats.generated_tokens == 40 and stats.finish_reason == "length"


def test_seeded_sampling_equals_bitsplit_run_and_reproduces(model, cli, converted_path):
    options = dict(temperature=0.8, seed=7, speculative=4)
    text, _ = model.generate(PROMPT, 40, **options)
    assert run_cli(cli, converted_path, "-n", "40", "--temp", "0.8", "--seed", "7", "--budget", "4") == \
        PROMPT + text + "\n"
    assert model.generate(PROMPT, 40, **options)[0] == text
    assert model.generate(PROMPT, 40, **{**options, "seed": 8})[0] != text


def test_speculative_equals_plain(model):
    plain, plain_stats = model.generate(PROMPT, 48, temperature=0, speculative=False)
    assert not plain_stats.speculative and plain_stats.checks == 0
    for options in (dict(speculative="auto"), dict(speculative=4, draft="chain"), dict(speculative=16),
                    dict(speculative="auto", lookup=0)):
        text, stats = model.generate(PROMPT, 48, temperature=0, **options)
        assert text == plain, options
        assert stats.speculative


def test_stats_per_depth_draft_and_verify_time(model):
    for options in (dict(speculative="auto"), dict(speculative=4, lookup=0)):
        _, stats = model.generate(PROMPT, 48, temperature=0, **options)
        assert stats.speculative and stats.checks > 0
        assert len(stats.accepted_per_depth) > 0 and len(stats.accepted_per_depth) == len(stats.drafted_per_depth)
        assert sum(stats.accepted_per_depth) == stats.accepted_tokens, options
        assert all(a <= d <= stats.checks for a, d in zip(stats.accepted_per_depth, stats.drafted_per_depth))
        assert all(0.0 <= r <= 1.0 for r in stats.acceptance_per_depth)
        assert stats.draft_seconds >= 0 and stats.verify_seconds >= 0
        assert 0 <= stats.lookup_accepted_tokens <= stats.accepted_tokens
        assert 0 <= stats.lookup_drafted_tokens <= stats.drafted_tokens
        assert stats.checks_per_setting and sum(stats.checks_per_setting.values()) == stats.checks
    assert stats.lookup_drafted_tokens == 0  # lookup=0
    _, plain = model.generate(PROMPT, 8, temperature=0, speculative=False)
    assert plain.accepted_per_depth == () and plain.checks_per_setting == {}
    assert plain.draft_seconds == 0 and plain.verify_seconds == 0


def test_stream_equals_generate(model):
    text, _ = model.generate(PROMPT, 40, temperature=0)
    pieces = list(model.stream(PROMPT, 40, temperature=0))
    assert len(pieces) > 1 and "".join(pieces) == text
    # Sampled text is reproducible for a fixed seed and budget (the online budget follows timings).
    s = model.session(temperature=0.8, seed=3, speculative=6)
    streamed = "".join(s.stream(PROMPT, 30))
    assert s.stats is not None and s.stats.generated_tokens == 30
    assert streamed == model.generate(PROMPT, 30, temperature=0.8, seed=3, speculative=6)[0]


def test_token_ids_as_prompt_and_tokenizer_round_trip(model):
    ids = model.tokenize(PROMPT)
    assert ids[0] == model.bos and all(0 <= t < model.n_vocab for t in ids)
    assert model.detokenize(ids[1:]).strip() == PROMPT
    assert model.generate(ids, 20, temperature=0)[0] == model.generate(PROMPT, 20, temperature=0)[0]
    assert model.tokenize(PROMPT, add_special=False) == ids[1:]
    assert model.tokenize("<s>", add_special=False, parse_special=True) == [model.bos]


def test_stop_strings(model):
    text, _ = model.generate(PROMPT, 40, temperature=0)
    stop = text[10:16]
    cut = text[:text.find(stop)]
    stopped, stats = model.generate(PROMPT, 40, temperature=0, stop=["never there", stop])
    assert stopped == cut and stats.finish_reason == "stop" and stats.generated_tokens < 40
    assert "".join(model.stream(PROMPT, 40, temperature=0, stop=stop)) == cut


def test_step_by_step_equals_plain_greedy(model):
    expected, _ = model.generate(PROMPT, 12, temperature=0, speculative=False)
    with model.session(temperature=0) as s:
        s.feed(model.tokenize(PROMPT))
        assert s.n_past == len(model.tokenize(PROMPT))
        out = []
        for _ in range(12):
            logits = s.logits()
            assert len(logits) == model.n_vocab
            token = s.sample()
            assert logits[token] == max(logits)
            out.append(token)
            s.feed([token])
        assert model.detokenize(out) == expected
        s.reset()
        assert s.n_past == 0


def test_metadata_and_facts(model, plain_model):
    assert model.is_bitsplit and not plain_model.is_bitsplit
    assert model.metadata["general.architecture"] == "llama"
    assert "general.architecture" in model.metadata and "no.such.key" not in model.metadata
    with pytest.raises(KeyError):
        model.metadata["no.such.key"]
    assert model.n_ctx > 0 and model.n_vocab > 0 and model.n_layers > 0 and model.eos is not None
    assert model.chat_template is None


# ---- variants -----------------------------------------------------------------------------------

def test_lora_variant(bitsplit_module, converted_path):
    lora = fixture_model("bible-devil-lora.gguf")
    with bitsplit_module.Model(converted_path) as m:
        base, _ = m.generate("The devil", 32, temperature=0)
        m.add_lora("zero", lora, scale=0.0)
        m.add_lora("devil", lora)
        assert m.variants == ("devil", "zero")  # the C API's registry, in name order
        # registered past the package (straight through the C API): listed all the same
        assert bitsplit_module._lib().bitsplit_model_add_lora(m._ptr(), b"raw", str(lora).encode(), 1.0) == 0
        assert m.variants == ("devil", "raw", "zero")
        m.remove_variant("raw")
        assert m.generate("The devil", 32, temperature=0, variant="zero")[0] == base
        devil, _ = m.generate("The devil", 32, temperature=0, variant="devil")
        assert devil != base
        assert m.generate("The devil", 32, temperature=0, variant="devil", speculative=False)[0] == devil
        m.remove_variant("devil")
        assert m.variants == ("zero",)
        with pytest.raises(bitsplit_module.NotFoundError):
            m.generate("The devil", 4, variant="devil")
        with pytest.raises(bitsplit_module.LoadError, match="not a LoRA adapter"):
            m.add_lora("base", fixture_model("bible-base.gguf"))


# ---- bad inputs ---------------------------------------------------------------------------------

def test_bad_inputs_raise_errors_with_messages(bitsplit_module, model, tmp_path):
    bs = bitsplit_module
    cases = [
        (lambda: bs.Model(tmp_path / "missing.gguf"), bs.LoadError),
        (lambda: bs.Model(fixture_model("bible-2k.model")), bs.LoadError),
        (lambda: model.generate(PROMPT, 4, top_p=2), bs.InvalidArgumentError),
        (lambda: model.generate(PROMPT, 4, temperature=-1), bs.InvalidArgumentError),
        (lambda: model.generate(PROMPT, 4, speculative=65), bs.InvalidArgumentError),
        (lambda: model.generate(PROMPT, 4, draft="bush"), bs.InvalidArgumentError),
        (lambda: model.generate(PROMPT, 4, variant="nope"), bs.NotFoundError),
        (lambda: model.generate(PROMPT, model.n_ctx), bs.ContextOverflowError),
        (lambda: model.generate(PROMPT, -1), bs.InvalidArgumentError),
        (lambda: model.generate([model.n_vocab], 4), bs.InvalidArgumentError),
        (lambda: model.detokenize([model.n_vocab]), bs.InvalidArgumentError),
        (lambda: model.detokenize([-1]), bs.InvalidArgumentError),
        (lambda: model.session().feed([model.n_vocab + 5]), bs.InvalidArgumentError),
        (lambda: model.session().sample(), bs.InvalidArgumentError),
        (lambda: model.session(n_ctx=4).feed(model.tokenize(PROMPT)), bs.ContextOverflowError),
        (lambda: model.apply_chat_template([{"role": "user", "content": "hi"}]), bs.NotFoundError),
        (lambda: model.apply_chat_template("{not json", chat_template=CHATML), bs.InvalidArgumentError),
        (lambda: model.apply_chat_template([{"role": "user", "content": "x"}],
                                           chat_template="{{ raise_exception('no users') }}"), bs.InvalidArgumentError),
        (lambda: model.add_delta("d", tmp_path / "missing.delta.gguf"), bs.LoadError),
        (lambda: model.remove_variant("never-added"), bs.NotFoundError),
    ]
    for call, kind in cases:
        with pytest.raises(kind) as info:
            call()
        assert isinstance(info.value, bs.Error)
        assert info.value.message and info.value.status > 0, (kind, info.value)
    # The interpreter and the model are still fine.
    assert model.generate(PROMPT, 4, temperature=0)[1].generated_tokens == 4


def test_a_closed_model_refuses_calls(bitsplit_module, base_path):
    m = bitsplit_module.Model(base_path)
    s = m.session()
    m.close()
    with pytest.raises(bitsplit_module.InvalidArgumentError, match="closed"):
        m.generate(PROMPT, 4)
    with pytest.raises(bitsplit_module.InvalidArgumentError, match="closed"):
        s.generate(PROMPT, 4)
    m.close()  # twice is fine


def test_progress_can_cancel_a_load(bitsplit_module, base_path):
    seen = []
    bitsplit_module.Model(base_path, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1]
    with pytest.raises(bitsplit_module.CancelledError):
        bitsplit_module.Model(base_path, progress=lambda done, total: False)
    with pytest.raises(ZeroDivisionError):
        bitsplit_module.Model(base_path, progress=lambda done, total: 1 / 0)


# ---- threads, abort, interrupts, lifetime -----------------------------------------------------------

def test_two_threads_generate_at_once_as_alone(model):
    # Sampled jobs use a fixed budget: with the online one, sampled text depends on timings.
    jobs = [dict(prompt=PROMPT, temperature=0), dict(prompt="In the beginning God", temperature=0.8, seed=5, speculative=4),
            dict(prompt="The LORD is my shepherd", temperature=0, speculative=False),
            dict(prompt=PROMPT, temperature=0.9, seed=11, speculative=8)]
    alone = [model.generate(j["prompt"], 48, **{k: v for k, v in j.items() if k != "prompt"})[0] for j in jobs]
    together = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def work(i):
        j = jobs[i]
        start.wait()
        together[i] = model.generate(j["prompt"], 48, **{k: v for k, v in j.items() if k != "prompt"})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


def test_abort_from_another_thread(bitsplit_module, model):
    s = model.session(temperature=0.8)
    seen = []
    with pytest.raises(bitsplit_module.AbortedError):
        for piece in s.stream(PROMPT, None):
            seen.append(piece)
            if len(seen) == 3:
                threading.Thread(target=s.abort).start()
    assert 3 <= len(seen) < model.n_ctx
    assert s.generate(PROMPT, 8, )[1].generated_tokens == 8  # the session is usable again


def test_keyboard_interrupt_stops_a_generation(model):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    s = model.session(temperature=0.8)
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for piece in s.stream(PROMPT, None):
            seen.append(piece)
            if len(seen) == 2:
                os.kill(os.getpid(), signal.SIGINT)
    assert len(seen) < model.n_ctx // 2
    assert s.generate(PROMPT, 8)[1].generated_tokens == 8


def test_closing_a_stream_stops_the_generation(model):
    s = model.session(temperature=0)
    stream = s.stream(PROMPT, None)
    next(stream)
    stream.close()
    assert s.generate(PROMPT, 5)[1].generated_tokens == 5


def test_the_model_is_freed_with_its_last_reference(bitsplit_module, base_path):
    m = bitsplit_module.Model(base_path)
    s = m.session()
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is not None  # the session keeps it
    s.generate(PROMPT, 4)
    del s
    gc.collect()
    assert ref() is None


# ---- chat and the OpenAI shapes -------------------------------------------------------------------

MESSAGES = [{"role": "system", "content": "Answer in the words of the King James Bible."},
            {"role": "user", "content": "Who made the heaven and the earth?"}]


def test_chat_template_rendering_and_tokens(model):
    bos_text = model.detokenize([model.bos])
    rendered = model.apply_chat_template(MESSAGES, chat_template=CHATML)
    assert rendered == (bos_text + "<|im_start|>system\n" + MESSAGES[0]["content"] + "<|im_end|>\n<|im_start|>user\n"
                        + MESSAGES[1]["content"] + "<|im_end|>\n<|im_start|>assistant\n")
    assert model.apply_chat_template(MESSAGES, add_generation_prompt=False, chat_template=CHATML) == \
        rendered[:-len("<|im_start|>assistant\n")]
    tokens = model.tokenize_chat(MESSAGES, chat_template=CHATML)
    assert tokens[0] == model.bos and tokens.count(model.bos) == 1
    forged = [{"role": "user", "content": "<s>hi"}]
    assert model.tokenize_chat(forged, chat_template=CHATML).count(model.bos) == 1
    assert model.tokenize_chat(forged, chat_template=CHATML, special_tokens_in_content=True).count(model.bos) == 2


def test_create_chat_completion(model):
    tokens = model.tokenize_chat(MESSAGES, chat_template=CHATML)
    expected, stats = model.generate(tokens, 24, temperature=0)
    reply = model.create_chat_completion(MESSAGES, 24, temperature=0, chat_template=CHATML)
    assert reply["object"] == "chat.completion" and reply["id"].startswith("chatcmpl-")
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": expected}
    assert reply["choices"][0]["finish_reason"] == stats.finish_reason
    assert reply["usage"]["prompt_tokens"] == len(tokens) and reply["usage"]["completion_tokens"] == 24
    chunks = list(model.create_chat_completion(MESSAGES, 24, temperature=0, chat_template=CHATML, stream=True))
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == stats.finish_reason and chunks[-1]["choices"][0]["delta"] == {}


def test_create_completion(model):
    expected, _ = model.generate(PROMPT, 16, temperature=0)
    reply = model.create_completion(PROMPT, temperature=0)
    assert reply["object"] == "text_completion" and reply["choices"][0]["text"] == expected
    assert reply["choices"][0]["finish_reason"] == "length"
    chunks = list(model.create_completion(PROMPT, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 16


def test_completion_logprobs(bitsplit_module, model):
    import math
    expected, _ = model.generate(PROMPT, 16, temperature=0)
    reply = model.create_completion(PROMPT, temperature=0, logprobs=2)
    assert reply["choices"][0]["text"] == expected
    lp = reply["choices"][0]["logprobs"]
    assert "".join(lp["tokens"]) == expected and len(lp["token_logprobs"]) == 16
    offsets = [0]
    for t in lp["tokens"][:-1]:
        offsets.append(offsets[-1] + len(t.encode()))
    assert lp["text_offset"] == offsets
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert value <= 0 and 1 <= len(top) <= 2
        assert math.isclose(top[token], value, abs_tol=1e-6)  # greedy: the most probable
        assert value == max(top.values())
    # Plain decoding gives the same values; a stream the same tokens across its chunks.
    plain = model.create_completion(PROMPT, temperature=0, logprobs=2, speculative=False)["choices"][0]["logprobs"]
    assert plain["tokens"] == lp["tokens"]
    assert plain["token_logprobs"] == lp["token_logprobs"]  # the verify pass is batch invariant: bit for bit
    chunks = list(model.create_completion(PROMPT, temperature=0, logprobs=2, stream=True))
    streamed = [t for c in chunks if c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["tokens"]]
    assert streamed == lp["tokens"]
    offsets = [o for c in chunks if c["choices"][0]["logprobs"] for o in c["choices"][0]["logprobs"]["text_offset"]]
    assert offsets == lp["text_offset"]
    # Without logprobs: none; sampled: values under the raw logits, whatever the temperature.
    assert model.create_completion(PROMPT, temperature=0)["choices"][0]["logprobs"] is None
    sampled = model.create_completion(PROMPT, temperature=1.5, seed=3, logprobs=0)["choices"][0]["logprobs"]
    assert len(sampled["token_logprobs"]) == 16 and all(v <= 0 for v in sampled["token_logprobs"])
    assert all(top == {} for top in sampled["top_logprobs"])
    for bad in (-1, 21, 1.5):
        with pytest.raises(bitsplit_module.InvalidArgumentError, match="logprobs"):
            model.create_completion(PROMPT, temperature=0, logprobs=bad)
    with pytest.raises(bitsplit_module.InvalidArgumentError, match="top_logprobs"):
        model.create_chat_completion(MESSAGES, 4, chat_template=CHATML, top_logprobs=2)


def test_chat_completion_logprobs(model):
    reply = model.create_chat_completion(MESSAGES, 12, temperature=0, chat_template=CHATML, logprobs=True,
                                         top_logprobs=3)
    content = reply["choices"][0]["logprobs"]["content"]
    text = reply["choices"][0]["message"]["content"]
    assert "".join(c["token"] for c in content) == text
    for c in content:
        assert bytes(c["bytes"]).decode("utf-8", "replace") == c["token"]
        assert len(c["top_logprobs"]) == 3 and c["top_logprobs"][0]["logprob"] == c["logprob"]
    chunks = list(model.create_chat_completion(MESSAGES, 12, temperature=0, chat_template=CHATML, logprobs=True,
                                               stream=True))
    streamed = [c for ch in chunks if ch["choices"][0]["logprobs"] for c in ch["choices"][0]["logprobs"]["content"]]
    assert [c["token"] for c in streamed] == [c["token"] for c in content]
    assert all(c["top_logprobs"] == [] for c in streamed)


def test_chat_completion_equals_the_servers(model, cli, converted_path, tmp_path):
    import json
    import re
    import time
    import urllib.request

    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    proc = subprocess.Popen([cli, "serve", "-m", str(converted_path), "--port", "0", "-t", "2",
                             "--chat-template", str(template)], stderr=subprocess.PIPE, text=True)
    try:
        port, deadline, log = None, time.time() + 60, []
        while port is None and time.time() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        assert port, "".join(log)
        while time.time() < deadline and not (log[-1].startswith("ready:") or not log[-1]):  # the model loaded
            log.append(proc.stderr.readline())
        assert any(line.startswith("ready:") for line in log), "".join(log)
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained

        def post(body):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.read().decode()

        request = {"messages": MESSAGES, "max_tokens": 24, "temperature": 0}
        served = json.loads(post(request))
        ours = model.create_chat_completion(MESSAGES, 24, temperature=0, chat_template=CHATML)
        assert ours["choices"][0]["message"] == served["choices"][0]["message"]
        assert ours["choices"][0]["finish_reason"] == served["choices"][0]["finish_reason"]
        assert ours["usage"]["prompt_tokens"] == served["usage"]["prompt_tokens"]
        events = [json.loads(line[len("data: "):]) for line in post({**request, "stream": True}).splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        served_text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
        chunks = model.create_chat_completion(MESSAGES, 24, temperature=0, chat_template=CHATML, stream=True)
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == served_text
        assert served_text == ours["choices"][0]["message"]["content"]
        # Log-probabilities: the server's tokens and values (both from the target's raw logits).
        served = json.loads(post({**request, "logprobs": True, "top_logprobs": 2}))
        ours = model.create_chat_completion(MESSAGES, 24, temperature=0, chat_template=CHATML, logprobs=True,
                                            top_logprobs=2)
        served_lp = served["choices"][0]["logprobs"]["content"]
        ours_lp = ours["choices"][0]["logprobs"]["content"]
        assert [c["token"] for c in ours_lp] == [c["token"] for c in served_lp]
        assert [c["bytes"] for c in ours_lp] == [c["bytes"] for c in served_lp]
        for a, b in zip(ours_lp, served_lp):
            assert a["logprob"] == b["logprob"]
            assert [t["token"] for t in a["top_logprobs"]] == [t["token"] for t in b["top_logprobs"]]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
