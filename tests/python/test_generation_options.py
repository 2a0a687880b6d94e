"""What the package takes from C API 0.6, on the bundled bible fixtures: log-probabilities from
generate and stream (equal to create_completion's), stop strings matched by the library, mlock
(locked, or a LoadError naming the locked-memory limit), variant names and every metadata entry
from the library, a variant drafting with the base's draft; and, against independent programs:
seeded sampled text equals the C example's (examples/stream.c), a delta file given as the model
is a LoadError saying what it is."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cli_path, fixture_model

PROMPT = "And it came to pass, when the king of Israel"


# ---- log-probabilities -----------------------------------------------------------------------------

def test_generate_and_stream_logprobs_equal_create_completions(model):
    reply = model.create_completion(PROMPT, 16, temperature=0, logprobs=3)
    expected = reply["choices"][0]["logprobs"]
    text, stats = model.generate(PROMPT, 16, temperature=0, logprobs=True, top_logprobs=3)
    assert text == reply["choices"][0]["text"]
    assert stats.logprobs is not None and len(stats.logprobs) == stats.generated_tokens == 16
    assert [model.detokenize([t.token]) for t in stats.logprobs] == expected["tokens"]
    assert [t.logprob for t in stats.logprobs] == expected["token_logprobs"]  # bit for bit: the same raw logits
    for t, top in zip(stats.logprobs, expected["top_logprobs"]):
        assert len(t.top) == 3 and t.top[0] == (t.token, t.logprob)  # greedy: the most probable
        assert {model.detokenize([i]): lp for i, lp in t.top} == top
    # A stream: Piece tuples whose texts join to the text and whose values are generate's, in order.
    pieces = list(model.stream(PROMPT, 16, temperature=0, logprobs=True, top_logprobs=3))
    assert all(type(p).__name__ == "Piece" for p in pieces)
    assert "".join(p.text for p in pieces) == text
    assert tuple(t for p in pieces for t in p.logprobs) == stats.logprobs
    # Sampled: the values of the raw logits whatever the temperature, as create_completion reports them.
    options = dict(temperature=1.3, seed=5, speculative=4)
    sampled = model.create_completion(PROMPT, 12, logprobs=0, **options)["choices"][0]["logprobs"]
    _, s = model.generate(PROMPT, 12, logprobs=True, **options)
    assert [t.logprob for t in s.logprobs] == sampled["token_logprobs"] and all(t.top == () for t in s.logprobs)
    # Not asked: none; bad values: errors.
    assert model.generate(PROMPT, 4, temperature=0)[1].logprobs is None
    assert all(isinstance(p, str) for p in model.stream(PROMPT, 4, temperature=0))
    import bitsplit
    for kwargs, match in ((dict(logprobs=True, top_logprobs=21), "0..20"), (dict(top_logprobs=2), "logprobs=True"),
                          (dict(logprobs=2), "True or False")):
        with pytest.raises(bitsplit.InvalidArgumentError, match=match):
            model.generate(PROMPT, 4, **kwargs)


def test_logprobs_of_tokens_a_stop_string_cut_come_last(model):
    text, _ = model.generate(PROMPT, 40, temperature=0)
    stop = text[12:17]
    pieces = list(model.stream(PROMPT, 40, temperature=0, stop=stop, logprobs=True))
    s = model.generate(PROMPT, 40, temperature=0, stop=stop, logprobs=True)[1]
    assert "".join(p.text for p in pieces) == text[:text.find(stop)]
    assert s.stopped_at_stop and s.finish_reason == "stop"
    # Every generated token has its value: those of the tokens the stop string hid in the last piece.
    assert sum(len(p.logprobs) for p in pieces) == len(s.logprobs) == s.generated_tokens
    assert pieces[-1].text == "" and pieces[-1].logprobs


# ---- stop strings in the library -------------------------------------------------------------------

def test_stop_strings_are_the_librarys(bitsplit_module, model):
    text, _ = model.generate(PROMPT, 40, temperature=0)
    stop = text[10:16]
    with model.session(temperature=0) as s:
        cut, stats = s.generate(PROMPT, 40, stop=stop)
        assert cut == text[:text.find(stop)] and stats.stopped_at_stop
        # The next generation of the session has none unless given again.
        again, stats = s.generate(PROMPT, 40)
        assert again == text and not stats.stopped_at_stop and stats.finish_reason == "length"
        # A stop string that begins at the very end and never completes: the whole text comes out.
        assert s.generate(PROMPT, 40, stop=text[-3:] + "\u0001")[0] == text
    for bad in (3, ["a", None], ["x\0y"]):
        with pytest.raises(bitsplit_module.InvalidArgumentError, match="stop"):
            model.generate(PROMPT, 4, stop=bad)


# ---- mlock ---------------------------------------------------------------------------------------------

def test_mlock_locks_the_planes_or_names_the_limit(bitsplit_module, converted_path, base_path):
    try:
        with bitsplit_module.Model(converted_path, mlock=True) as m:
            assert m.locked_bytes > 0
            assert m.generate(PROMPT, 4, temperature=0)[1].generated_tokens == 4
    except bitsplit_module.LoadError as e:  # this process may not lock that much
        assert "the locked-memory limit is" in str(e) and "--mlock" not in str(e)
    with bitsplit_module.Model(converted_path) as m:
        assert m.locked_bytes == 0
    with pytest.raises(bitsplit_module.InvalidArgumentError, match="bitsplit convert"):
        bitsplit_module.Model(base_path, mlock=True)  # no planes to lock


def test_mlock_under_a_small_limit_is_a_load_error_naming_it(converted_path):
    """In a child process whose locked-memory limit is 64 KiB (as root, with CAP_IPC_LOCK taken out
    of the bounding set so the limit applies, as the CLI's test does)."""
    code = ("import resource, sys, bitsplit\n"
            "resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))\n"
            "try:\n"
            "    bitsplit.Model(sys.argv[1], mlock=True)\n"
            "except bitsplit.LoadError as e:\n"
            "    print('LoadError', e.status, e)\n"
            "    sys.exit(3)\n")
    command = [sys.executable, "-c", code, str(converted_path)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: cannot drop CAP_IPC_LOCK")
        command = ["setpriv", "--bounding-set=-ipc_lock", *command]
    r = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if r.stderr.startswith("setpriv:"):
        pytest.skip(f"cannot drop CAP_IPC_LOCK here: {r.stderr}")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.startswith("LoadError 2 mlock: cannot lock the model's planes in RAM")
    assert "the locked-memory limit is 64.00 KiB" in r.stdout and "or load without mlock" in r.stdout


# ---- variants and metadata from the library ---------------------------------------------------------

def test_metadata_is_every_entry_of_the_file(model):
    md = model.metadata
    keys = list(md)
    assert len(keys) == len(md) > 10 and len(set(keys)) == len(keys)
    assert {"general.architecture", "tokenizer.ggml.model", "llama.block_count"} <= set(keys)
    assert md["llama.block_count"] == model.n_layers
    assert md["general.architecture"] == "llama"
    assert md["llama.context_length"] == model.n_ctx  # an integer, typed
    assert isinstance(md["llama.attention.layer_norm_rms_epsilon"], float)
    assert len(md["tokenizer.ggml.tokens"]) == model.n_vocab  # an array
    assert dict(md.items())["general.architecture"] == "llama"
    with pytest.raises(KeyError):
        md["no.such.key"]


def test_a_variant_drafting_with_the_base_draft_gives_its_own_text(bitsplit_module, converted_path):
    lora = fixture_model("bible-devil-lora.gguf")
    with bitsplit_module.Model(converted_path) as m:
        m.add_lora("devil", lora)
        own, own_stats = m.generate("The devil", 32, temperature=0, variant="devil", speculative=4)
        based, based_stats = m.generate("The devil", 32, temperature=0, variant="devil", speculative=4,
                                        base_draft=True)
        assert based == own == m.generate("The devil", 32, temperature=0, variant="devil", speculative=False)[0]
        assert own_stats.speculative and based_stats.speculative
        with pytest.raises(bitsplit_module.InvalidArgumentError, match="variant"):
            m.generate("The devil", 4, base_draft=True)  # the base drafts itself


# ---- against independent programs -------------------------------------------------------------------

def stream_example() -> str:
    given = os.environ.get("BITSPLIT_STREAM_EXAMPLE")
    path = Path(given) if given else ROOT / "build" / "examples" / "stream"
    if not path.exists():
        pytest.skip(f"no C example binary at {path} (set BITSPLIT_STREAM_EXAMPLE to a built examples/stream)")
    return str(path)


def test_seeded_sampled_text_equals_the_c_examples(model, converted_path):
    example = stream_example()
    for temperature, seed, budget in (("0.8", 7, 4), ("1.1", 3, 2)):
        r = subprocess.run([example, str(converted_path), PROMPT, "40", temperature, str(seed), str(budget)],
                           capture_output=True, text=True, check=True, timeout=300)
        text, stats = model.generate(PROMPT, 40, temperature=float(temperature), seed=seed, speculative=budget)
        assert r.stdout == PROMPT + text + "\n"
        assert f"{stats.generated_tokens} tokens" in r.stderr


def test_a_delta_file_given_as_the_model_is_a_load_error(bitsplit_module, base_path, tmp_path):
    cli = cli_path()
    if cli is None:
        pytest.skip("no bitsplit CLI to make the delta with")
    delta = tmp_path / "devil.delta.gguf"
    subprocess.run([cli, "delta", "--base", str(base_path), "--finetuned", str(fixture_model("bible-devil.gguf")),
                    "-o", str(delta), "-t", "2"], check=True, capture_output=True, timeout=300)
    with pytest.raises(bitsplit_module.LoadError) as info:
        bitsplit_module.Model(delta)
    assert info.value.status == 2
    assert str(delta) in info.value.message and "delta" in info.value.message
    assert "not a model" in info.value.message and "variant" in info.value.message
    with bitsplit_module.Model(base_path) as m:  # what the message says to do works
        m.add_delta("devil", delta)
        assert m.variants == ("devil",)
