"""bitsplit.bench_accept and load_prompts on the bundled bible fixtures: the rows' structure
(per setting x category, then "overall"), their sanity (plain: tokens per check 1.0, speedup 1;
speculative: more than one token per check; greedy speculative text equals plain's), the same
counts as `bitsplit bench accept --json`, the prompt file formats and their errors, and the
example scripts that use it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, fixture_model

SETTINGS = ("plain", "auto", "chain-2", "tree-8+lookup")


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bible_prompts(bitsplit_module):
    return bitsplit_module.load_prompts(ROOT / "bench" / "prompts" / "bible.txt")[:3]


@pytest.fixture(scope="module")
def rows(bitsplit_module, model, bible_prompts):
    return bitsplit_module.bench_accept(model, bible_prompts, SETTINGS, max_tokens=16)


def test_rows_structure(bitsplit_module, rows, bible_prompts):
    bs = bitsplit_module
    assert rows.settings == list(SETTINGS)
    assert rows.categories == ["all"] and rows.rendering == "text"
    assert [(r.setting, r.category) for r in rows] == [(s, c) for s in SETTINGS for c in ("all", bs.OVERALL)]
    for r in rows:
        assert isinstance(r, bs.AcceptRow)
        d = r.as_dict()
        assert {"setting", "category", "prompts", "tokens", "seconds", "checks", "tokens_per_check",
                "accepted_per_check", "tokens_per_second", "speedup", "model"} <= set(d)
        assert r.prompts == len(bible_prompts) and r.model == "base"
        assert 0 < r.tokens <= 16 * len(bible_prompts)
        assert r.seconds > 0 and r.tokens_per_second == pytest.approx(r.tokens / r.seconds)
        assert r.speedup == pytest.approx(r.tokens_per_second / rows.row("plain", r.category).tokens_per_second)
    assert rows.row("auto") is rows[3]
    with pytest.raises(KeyError):
        rows.row("tree-4")
    assert len(rows.as_dicts()) == len(rows)


def test_rows_sanity(rows):
    plain = rows.row("plain")
    assert plain.tokens_per_check == 1.0 and plain.accepted_per_check == 0.0 and plain.checks == plain.tokens
    assert plain.speedup == pytest.approx(1.0)
    for s in SETTINGS[1:]:
        r = rows.row(s)
        assert 1.0 <= r.tokens_per_check <= 1 + 64 + 8
        assert r.checks <= r.tokens
        assert r.tokens_per_check == pytest.approx(1.0 + r.accepted_per_check)
    assert rows.row("chain-2").tokens_per_check > 1.0  # the bible draft accepts on its own text
    assert rows.row("chain-2").tokens_per_check <= 3.0


def test_speculative_greedy_text_equals_plain(rows, model, bible_prompts):
    assert rows.greedy_mismatches == 0
    for s in SETTINGS[1:]:
        assert rows.outputs[s] == rows.outputs["plain"]
    # and plain's text is generate()'s with speculation off
    assert rows.outputs["plain"][0] == model.generate(bible_prompts[0].text, 16, temperature=0,
                                                      speculative=False)[0]


def test_counts_equal_bench_accept_cli(bitsplit_module, model, cli, converted_path, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(line + "\n" for line in
                               (ROOT / "bench" / "prompts" / "bible.txt").read_text().splitlines()[:2]))
    settings = ["plain", "chain-2", "tree-4"]
    out = subprocess.run([cli, "bench", "accept", "-m", str(converted_path), "--prompts", str(prompts),
                          "--settings", ",".join(settings), "-n", "12", "--json"], check=True, capture_output=True)
    expected = {r["setting"]: r for r in json.loads(out.stdout)["summary"]["overall"]}
    got = bitsplit_module.bench_accept(model, prompts, settings, max_tokens=12)
    for s in settings:
        r = got.row(s)
        for key in ("prompts", "tokens", "checks"):
            assert getattr(r, key) == expected[s][key], (s, key)
        for key in ("tokens_per_check", "accepted_per_check"):
            assert getattr(r, key) == pytest.approx(expected[s][key]), (s, key)
        # Where the drafts were accepted: the same counts per depth and from the lookup.
        for key in ("accepted_at_depth", "drafted_at_depth", "lookup_drafted", "lookup_accepted"):
            assert r.as_dict()[key] == expected[s][key], (s, key)
        assert sum(r.accepted_at_depth) == round(r.accepted_per_check * r.checks)
        assert r.verify_ms_per_check > 0 and r.verify_seconds > 0
        if s == "plain":
            assert r.accepted_at_depth == () and r.draft_seconds == 0 and r.draft_ms_per_check == 0
        else:
            assert len(r.accepted_at_depth) >= 1 and r.draft_seconds > 0
            if s == "chain-2":
                assert len(r.drafted_at_depth) == 2 and r.drafted_at_depth[0] == r.checks  # a chain of two
            assert r.draft_ms_per_check == pytest.approx(r.draft_seconds * 1e3 / r.checks)
            assert all(0 <= a <= 1 for a in r.acceptance_at_depth)


def test_variant_rows_with_the_base_draft_equal_the_clis(bitsplit_module, converted_path, cli, tmp_path):
    """As `bench accept --lora NAME=FILE`: rows for the variant with its own draft and with the plain
    base's draft (no plain row of its own; speedup over the variant's plain row)."""
    lora = fixture_model("bible-devil-lora.gguf")
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(line + "\n" for line in
                               (ROOT / "bench" / "prompts" / "bible.txt").read_text().splitlines()[:2]))
    settings = ["plain", "chain-2", "tree-4"]
    out = subprocess.run([cli, "bench", "accept", "-m", str(converted_path), "--prompts", str(prompts),
                          "--settings", ",".join(settings), "-n", "12", "--lora", f"devil={lora}", "--json"],
                         check=True, capture_output=True)
    expected = {(r["model"], r["setting"]): r for r in json.loads(out.stdout)["summary"]["overall"]}
    with bitsplit_module.Model(converted_path) as m:
        m.add_lora("devil", lora)
        rows = bitsplit_module.bench_accept(m, prompts, settings, max_tokens=12, variant="devil")
        assert [(r.model, r.setting) for r in rows if r.category == "overall"] == [
            ("devil", "plain"), ("devil", "chain-2"), ("devil/base-draft", "chain-2"), ("devil", "tree-4"),
            ("devil/base-draft", "tree-4")]
        assert rows.greedy_mismatches == 0
        for r in (r for r in rows if r.category == "overall"):
            e = expected[(r.model, r.setting)]
            for key in ("prompts", "tokens", "checks", "accepted_at_depth", "drafted_at_depth"):
                assert r.as_dict()[key] == e[key], (r.model, r.setting, key)
            if r.model.endswith("/base-draft"):
                plain = rows.row("plain", model="devil")
                assert r.speedup == pytest.approx(r.tokens_per_second / plain.tokens_per_second)
        # The base's draft accepts less of the variant's text than the variant's own draft.
        assert rows.row("tree-4", model="devil/base-draft").accepted_per_check != \
            rows.row("tree-4", model="devil").accepted_per_check
        only = bitsplit_module.bench_accept(m, prompts, ["chain-2"], max_tokens=6, variant="devil",
                                            base_draft_rows=False, warm_up=False)
        assert {r.model for r in only} == {"devil"}


def test_jsonl_categories_and_no_plain(bitsplit_module, model, tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        {"category": "qa", "turns": [{"role": "user", "content": "Who begat Enos?"}]},
        {"category": "story", "turns": [{"role": "system", "content": "Speak as a prophet."},
                                        {"role": "user", "content": "And the LORD said"}]},
        {"category": "qa", "turns": [{"role": "user", "content": "Where is Eden?"}]},
    ])
    prompts = bitsplit_module.load_prompts(path)
    assert [p.category for p in prompts] == ["qa", "story", "qa"]
    assert prompts[1].turns == (("system", "Speak as a prophet."), ("user", "And the LORD said"))
    progress = []
    rows = bitsplit_module.bench_accept(model, path, ["tree-4"], max_tokens=6, lookup=4, warm_up=False,
                                        fresh_controller=True, progress=lambda d, t: progress.append((d, t)))
    assert rows.rendering == "plain"  # the bible vocabulary has no <|im_start|>
    assert rows.settings == ["tree-4+lookup"] and rows.categories == ["qa", "story"]
    assert [(r.category, r.prompts) for r in rows] == [("qa", 2), ("story", 1), ("overall", 3)]
    assert all(r.speedup is None for r in rows)
    assert progress == [(1, 3), (2, 3), (3, 3)]
    # dicts and strings work as prompts too
    rows = bitsplit_module.bench_accept(model, ["In the beginning", {"category": "x", "turns": [
        {"role": "user", "content": "Amen"}]}], ("plain",), max_tokens=4)
    assert rows.categories == ["all", "x"]


def test_bad_inputs(bitsplit_module, model, plain_model, tmp_path):
    bs = bitsplit_module
    for settings, match in ((["tree-0"], "1..64"), (["chain-65"], "1..64"), (["fast"], "not a setting"),
                            (["plain", "plain"], "twice"), ([], "empty"), (["plain+lookup"], "not a setting")):
        with pytest.raises(bs.InvalidArgumentError, match=match):
            bs.bench_accept(model, ["In the beginning"], settings)
    with pytest.raises(bs.InvalidArgumentError, match="not a bit-split model"):
        bs.bench_accept(plain_model, ["In the beginning"], ["plain", "auto"])
    assert bs.bench_accept(plain_model, ["In the beginning"], ["plain"], max_tokens=2).row("plain").tokens == 2
    with pytest.raises(bs.InvalidArgumentError, match="max_tokens"):
        bs.bench_accept(model, ["In the beginning"], max_tokens=0)
    with pytest.raises(bs.NotFoundError):
        bs.bench_accept(model, ["In the beginning"], variant="nobody")
    for line, match in (("[1]", "not a JSON object"), ('{"turns": []}', "category"),
                        ('{"category": "a", "turns": []}', "turns"),
                        ('{"category": "a", "turns": [{"role": "bot", "content": "x"}]}', "role 'bot'"),
                        ('{"category": "a", "turns": [{"role": "assistant", "content": "x"}]}', "user's")):
        path = tmp_path / "bad.jsonl"
        path.write_text("\n" + line + "\n")
        with pytest.raises(bs.InvalidArgumentError, match=match) as e:
            bs.load_prompts(path)
        assert "bad.jsonl:2" in str(e.value)
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(bs.InvalidArgumentError, match="no prompts"):
        bs.load_prompts(tmp_path / "empty.txt")
    with pytest.raises(FileNotFoundError):
        bs.load_prompts(tmp_path / "missing.jsonl")


# ---- the examples -------------------------------------------------------------------------------

def run_example(name, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "python"), env.get("PYTHONPATH")) if p)
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([sys.executable, str(ROOT / "examples" / "python" / name), *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_acceptance_plot_example(bitsplit_module, converted_path, tmp_path):
    png = tmp_path / "accept.png"
    r = run_example("acceptance_plot.py", str(converted_path), "--prompts",
                    str(ROOT / "bench" / "prompts" / "bible.txt"), "--limit", "2", "-n", "8",
                    "--settings", "plain,chain-2,tree-4", "-o", str(png))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert r.returncode == 2 and "matplotlib" in r.stderr and not png.exists()
        return
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "chain-2" in r.stdout


def test_variants_example(bitsplit_module, converted_path, cli):
    lora = fixture_model("bible-devil-lora.gguf")
    r = run_example("variants.py", str(converted_path), "--lora", f"devil={lora}", "-n", "12",
                    "--cli", cli, "--delta-from", str(fixture_model("bible-devil.gguf")),
                    "--delta-base", str(fixture_model("bible-base.gguf")))
    assert r.returncode == 0, r.stderr
    assert "[base]" in r.stdout and "[devil]" in r.stdout and "[devil-delta]" in r.stdout
