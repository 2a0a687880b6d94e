"""Acceptance benchmarking from Python: `bitsplit bench accept`'s measurement (tools/cmd_bench.cpp)
over the C API. Same prompt files (one prompt per line, or JSONL with a category and chat turns),
same setting names (plain, auto, chain-K, tree-B, the last three optionally +lookup), same
quantities per setting and category and over all categories: tokens per check (bonus included),
tokens/s and speedup over plain."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Union

from ._capi import ERR_INVALID_ARGUMENT, InvalidArgumentError
from ._model import Model, Session, Stats

MAX_BUDGET = 64  # spec::kMaxBudget
DEFAULT_LOOKUP = 8  # kDefaultLookup: what "+lookup" adds
OVERALL = "overall"  # the category of the rows over all categories (as the CLI's JSON names it)


def _invalid(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(ERR_INVALID_ARGUMENT, message)


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of a benchmark: a category and either chat turns (role, content) or a text
    (a line of a text file, encoded as it is)."""

    category: str
    turns: tuple[tuple[str, str], ...] = ()
    text: str | None = None


@dataclass(frozen=True)
class AcceptRow:
    """One row of bench_accept: a setting on one category (or OVERALL, all categories together).
    The fields are those of `bitsplit bench accept --json`'s rows."""

    setting: str
    category: str
    prompts: int
    tokens: int  # generated
    seconds: float  # generating (the prompt's prefill not included)
    checks: int  # target passes (plain: one per token)
    accepted_per_check: float  # drafted tokens accepted per check (plain: 0)
    tokens_per_check: float  # accepted + the target's own token, per check (plain: 1.0)
    tokens_per_second: float
    speedup: float | None  # tokens/s over plain's for the same category (and model); None without a plain row
    model: str = "base"  # "base", the variant's name, or NAME/base-draft (the variant drafted by the base's draft)
    # Where a speculative row's time went (plain: all verification) and how deep its drafts were
    # accepted, as the CLI's JSON reports them (C API 0.5 statistics, summed over the row's prompts).
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    draft_ms_per_check: float = 0.0
    verify_ms_per_check: float = 0.0
    # Index d - 1 for draft depth d: checks whose accepted path reached depth d, checks whose draft
    # had a node there (their ratio: the acceptance rate per depth, acceptance_at_depth).
    accepted_at_depth: tuple[int, ...] = ()
    drafted_at_depth: tuple[int, ...] = ()
    lookup_drafted: int = 0  # drafted nodes that came from the context lookup
    lookup_accepted: int = 0  # accepted tokens that came from it

    @property
    def acceptance_at_depth(self) -> tuple[float, ...]:
        return tuple(a / d if d else 0.0 for a, d in zip(self.accepted_at_depth, self.drafted_at_depth))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["accepted_at_depth"], d["drafted_at_depth"] = list(self.accepted_at_depth), list(self.drafted_at_depth)
        return d


class AcceptResult(list):
    """bench_accept's rows (AcceptRow), setting by setting: its categories in order of first
    appearance, then OVERALL. Also: settings, categories, rendering ("text", "chatml" or
    "plain"), greedy_mismatches (greedy generations that differ from the first setting's for the
    same prompt: 0 unless something is wrong) and outputs (setting -> the generated text per
    prompt, in the prompts' order)."""

    settings: list[str]
    categories: list[str]
    rendering: str
    greedy_mismatches: int
    outputs: dict[str, list[str]]

    def row(self, setting: str, category: str = OVERALL, model: str | None = None) -> AcceptRow:
        """The row of `setting` on `category` for `model` (None: the first model measured)."""
        for r in self:
            if r.setting == setting and r.category == category and (model is None or r.model == model):
                return r
        raise KeyError((setting, category, model))

    def as_dicts(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self]


@dataclass(frozen=True)
class _Setting:
    name: str
    kind: str  # "plain", "fixed" or "auto"
    draft: str = "tree"
    budget: int = 0
    lookup: int = 0

    def options(self) -> dict[str, Any]:
        if self.kind == "plain":
            return {"speculative": False}
        return {"speculative": "auto" if self.kind == "auto" else self.budget, "draft": self.draft,
                "lookup": self.lookup}


def _parse_setting(text: str) -> _Setting:
    if not isinstance(text, str):
        raise _invalid(f"a setting must be a name such as 'plain', 'auto', 'chain-4' or 'tree-16', not {text!r}")
    if text.endswith("+lookup") and text != "plain+lookup":
        s = _parse_setting(text[:-len("+lookup")])
        return _Setting(text, s.kind, s.draft, s.budget, DEFAULT_LOOKUP)
    if text == "plain":
        return _Setting("plain", "plain")
    if text == "auto":
        return _Setting("auto", "auto")
    m = re.fullmatch(r"(chain|tree)-(\d+)", text)
    if m:
        budget = int(m.group(2))
        if not 1 <= budget <= MAX_BUDGET:
            raise _invalid(f"'{text}': the budget after '{m.group(1)}-' must be a whole number 1..{MAX_BUDGET}")
        return _Setting(text, "fixed", m.group(1), budget)
    raise _invalid(f"'{text}' is not a setting; use plain, auto, chain-K or tree-B, the last three optionally "
                   "with +lookup (e.g. plain, auto+lookup, chain-4, tree-16)")


def _parse_jsonl_prompt(line: str, where: str) -> BenchPrompt:
    try:
        j = json.loads(line)
    except ValueError:
        j = None
    if not isinstance(j, dict):
        raise _invalid(f"{where}: not a JSON object")
    category = j.get("category")
    if not isinstance(category, str) or not category:
        raise _invalid(f'{where}: "category" must be a non-empty string')
    turns = j.get("turns")
    if not isinstance(turns, list) or not turns:
        raise _invalid(f'{where}: "turns" must be a non-empty array of {{"role", "content"}}')
    out = []
    for t in turns:
        if not isinstance(t, dict) or not isinstance(t.get("role"), str) or not isinstance(t.get("content"), str):
            raise _invalid(f'{where}: each turn must be {{"role": "...", "content": "..."}}')
        if t["role"] not in ("system", "user", "assistant"):
            raise _invalid(f"{where}: role '{t['role']}' is not system, user or assistant")
        out.append((t["role"], t["content"]))
    if out[-1][0] != "user":
        raise _invalid(f"{where}: the last turn must be the user's")
    return BenchPrompt(category, tuple(out))


def load_prompts(path: str | os.PathLike[str]) -> list[BenchPrompt]:
    """The prompts of a `bench accept` prompt file: by the extension .jsonl, one JSON object per
    line, {"category": "qa", "turns": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
    (the last turn the user's; blank lines skipped); else one prompt per line (category "all").
    bench/prompts/ has the project's sets."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if not path.endswith(".jsonl"):
        prompts = [BenchPrompt("all", text=line) for line in lines if line]
        if not prompts:
            raise _invalid(f"{path} has no prompts (one per line)")
        return prompts
    prompts = [_parse_jsonl_prompt(line, f"{path}:{n}") for n, line in enumerate(lines, 1) if line.strip(" \t\r")]
    if not prompts:
        raise _invalid(f"{path} has no prompts (one JSON object per line)")
    return prompts


PromptLike = Union[BenchPrompt, str, Mapping[str, Any]]


def _as_prompt(p: PromptLike) -> BenchPrompt:
    if isinstance(p, BenchPrompt):
        return p
    if isinstance(p, str):
        return BenchPrompt("all", text=p)
    if isinstance(p, Mapping):
        return _parse_jsonl_prompt(json.dumps(dict(p)), "a prompt")
    raise _invalid(f"a prompt must be a BenchPrompt, a string or a {{'category', 'turns'}} dict, not {p!r}")


def _special_token(model: Model, text: str) -> int | None:
    ids = model.tokenize(text, add_special=False, parse_special=True)
    return ids[0] if len(ids) == 1 else None


def _render(model: Model, prompts: Sequence[BenchPrompt], ignore_eos: bool) -> tuple[list[list[int]], str, int | None]:
    """Each prompt's tokens as `bench accept` feeds them (bench_prompts.cpp), the rendering and the
    token that ends generation: turns as ChatML when the vocabulary has <|im_start|> and <|im_end|>
    (generation stops at <|im_end|> unless ignore_eos), else joined with blank lines."""
    chat = [p for p in prompts if p.text is None]
    im_start, im_end = _special_token(model, "<|im_start|>"), _special_token(model, "<|im_end|>")
    chatml = bool(chat) and im_start is not None and im_end is not None
    rendering = ("chatml" if chatml else "plain") if chat else "text"
    tokens = []
    for p in prompts:
        if p.text is not None:
            ids = model.tokenize(p.text)
        elif chatml:
            rendered = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in p.turns)
            ids = model.tokenize(rendered + "<|im_start|>assistant\n", parse_special=True)
        else:
            ids = model.tokenize("\n\n".join(content for _, content in p.turns))
        if not ids:
            raise _invalid(f"a prompt of category {p.category!r} encodes to no tokens")
        tokens.append(ids)
    return tokens, rendering, (im_end if chatml and not ignore_eos else None)


def _add_per_depth(total: list[int], more: Sequence[int]) -> None:
    """Adds per-depth counts elementwise, growing `total` to the deeper of the two."""
    total.extend([0] * (len(more) - len(total)))
    for i, n in enumerate(more):
        total[i] += n


@dataclass
class _Cell:
    prompts: int = 0
    tokens: int = 0
    seconds: float = 0.0
    checks: int = 0
    accepted: int = 0
    emitted: float = 0.0  # tokens_per_check x checks, summed
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    lookup_drafted: int = 0
    lookup_accepted: int = 0
    accepted_at_depth: list[int] = field(default_factory=list)
    drafted_at_depth: list[int] = field(default_factory=list)

    def add(self, o: _Cell) -> None:
        self.prompts += o.prompts
        self.tokens += o.tokens
        self.seconds += o.seconds
        self.checks += o.checks
        self.accepted += o.accepted
        self.emitted += o.emitted
        self.draft_seconds += o.draft_seconds
        self.verify_seconds += o.verify_seconds
        self.lookup_drafted += o.lookup_drafted
        self.lookup_accepted += o.lookup_accepted
        _add_per_depth(self.accepted_at_depth, o.accepted_at_depth)
        _add_per_depth(self.drafted_at_depth, o.drafted_at_depth)

    def add_generation(self, st: Stats) -> None:
        self.prompts += 1
        self.tokens += st.generated_tokens
        self.seconds += st.generate_seconds
        self.checks += st.checks
        self.accepted += st.accepted_tokens
        self.emitted += st.tokens_per_check * st.checks
        self.draft_seconds += st.draft_seconds
        self.verify_seconds += st.verify_seconds
        self.lookup_drafted += st.lookup_drafted_tokens
        self.lookup_accepted += st.lookup_accepted_tokens
        _add_per_depth(self.accepted_at_depth, st.accepted_per_depth)
        _add_per_depth(self.drafted_at_depth, st.drafted_per_depth)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _row(s: _Setting, category: str, c: _Cell, reference_tps: float | None, model: str) -> AcceptRow:
    """A row as the CLI's cell_json makes it: a plain row is one target pass per token, no draft."""
    plain = s.kind == "plain"
    checks = c.tokens if plain else c.checks
    per_check = 1e3 / max(1, checks)
    speedup = c.tokens_per_second / reference_tps if reference_tps else None
    return AcceptRow(setting=s.name, category=category, prompts=c.prompts, tokens=c.tokens, seconds=c.seconds,
                     checks=checks, accepted_per_check=0.0 if plain or not checks else c.accepted / checks,
                     tokens_per_check=(1.0 if checks else 0.0) if plain else (c.emitted / checks if checks else 0.0),
                     tokens_per_second=c.tokens_per_second, speedup=speedup, model=model,
                     draft_seconds=0.0 if plain else c.draft_seconds,
                     verify_seconds=c.seconds if plain else c.verify_seconds,
                     draft_ms_per_check=0.0 if plain else c.draft_seconds * per_check,
                     verify_ms_per_check=(c.seconds if plain else c.verify_seconds) * per_check,
                     accepted_at_depth=tuple(c.accepted_at_depth), drafted_at_depth=tuple(c.drafted_at_depth),
                     lookup_drafted=c.lookup_drafted, lookup_accepted=c.lookup_accepted)


@dataclass(frozen=True)
class _Decoded:
    """What rows decode (the CLI's Decoded): the base, or a variant with its own draft, or with the
    plain base's draft (NAME/base-draft, which has no plain row: that is the variant's own)."""

    name: str
    variant: str | None = None
    base_draft: bool = False
    plain_name: str = "base"  # the model whose plain row is this one's reference

    def has_row(self, s: _Setting) -> bool:
        return not (s.kind == "plain" and self.base_draft)


def _parse_settings(settings: str | Sequence[str], lookup: int) -> list[_Setting]:
    parsed = [_parse_setting(s) for s in ([settings] if isinstance(settings, str) else settings)]
    if not parsed:
        raise _invalid("settings is empty")
    if not isinstance(lookup, int) or not 0 <= lookup <= MAX_BUDGET:
        raise _invalid(f"lookup must be 0..{MAX_BUDGET}, not {lookup!r}")
    if lookup > 0:
        parsed = [s if s.kind == "plain" else
                  _Setting(s.name if s.lookup else s.name + "+lookup", s.kind, s.draft, s.budget, lookup)
                  for s in parsed]
    names = [s.name for s in parsed]
    for n in names:
        if names.count(n) > 1:
            raise _invalid(f"settings: '{n}' is listed twice")
    return parsed


def _decoded(variant: str | None, base_draft_rows: bool) -> list[_Decoded]:
    if variant is None:
        return [_Decoded("base")]
    rows = [_Decoded(variant, variant, False, variant)]
    if base_draft_rows:
        rows.append(_Decoded(variant + "/base-draft", variant, True, variant))
    return rows


def bench_accept(model: Model, prompts: str | os.PathLike[str] | Iterable[PromptLike],
                 settings: Sequence[str] = ("plain", "auto"), max_tokens: int = 32, *, temperature: float = 0.0,
                 seed: int = 1, variant: str | None = None, base_draft_rows: bool = True, lookup: int = 0,
                 ignore_eos: bool = False, fresh_controller: bool = False, warm_up: bool = True,
                 progress: Callable[[int, int], Any] | None = None) -> AcceptResult:
    """Runs `bitsplit bench accept`'s measurement on `model` (converted by `bitsplit convert` for
    any setting but plain) and returns its rows (AcceptResult, a list of AcceptRow).

    prompts: a prompt file (load_prompts) or a list of BenchPrompt, strings (category "all") or
    {"category", "turns"} dicts. settings: "plain" (the target without a draft: the reference for
    speedups), "auto" (the online choice, generate()'s speculative="auto"), "chain-K", "tree-B"
    (a fixed budget of K or B drafted tokens, 1..64), the last three optionally ending "+lookup"
    (context lookup of 8 tokens). lookup > 0: context lookup of that many tokens in every
    speculative row (renamed "+lookup"), as the CLI's --lookup. Each prompt is run by every
    setting in turn (settings alternate prompt by prompt), from a fresh cache; an auto row's
    controller carries what it learned from prompt to prompt unless fresh_controller. warm_up: an
    untimed short generation first. progress(done, total) after each generation.
    variant: measure a registered variant (add_delta / add_lora) instead of the base: as the CLI
    does for --delta / --lora, rows for the variant with its own draft (model NAME) and, unless
    base_draft_rows=False, with the plain base's draft (model NAME/base-draft: its speculative
    settings only, their speedup over the variant's plain row).
    """
    parsed = _parse_settings(settings, lookup)
    if any(s.kind != "plain" for s in parsed) and not model.is_bitsplit:
        raise _invalid(f"{model.path} is not a bit-split model; run `bitsplit convert` on it first "
                       "(only the plain setting runs on it)")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _invalid(f"max_tokens must be a positive integer, not {max_tokens!r}")
    plist = load_prompts(prompts) if isinstance(prompts, (str, os.PathLike)) else [_as_prompt(p) for p in prompts]
    if not plist:
        raise _invalid("no prompts")
    tokens, rendering, stop_token = _render(model, plist, ignore_eos)
    categories: list[str] = []
    for p in plist:
        if p.category not in categories:
            categories.append(p.category)
    decoded = _decoded(variant, base_draft_rows)
    run = _Runner(model, parsed, decoded, dict(temperature=temperature, seed=seed), stop_token)
    try:
        if warm_up:
            run.warm_up(tokens[0], min(max_tokens, 8))
        cells, outputs, mismatches = run.measure(plist, tokens, categories, max_tokens, temperature == 0,
                                                 fresh_controller, progress)
    finally:
        run.close()

    result = AcceptResult()
    for si, s in enumerate(parsed):
        for m, d in enumerate(decoded):
            if not d.has_row(s):
                continue
            result.extend(_rows_of(s, d, si, m, parsed, decoded, categories, cells))
    result.settings = [s.name for s in parsed]
    result.categories = categories
    result.rendering = rendering
    result.greedy_mismatches = mismatches
    result.outputs = outputs
    return result


def _rows_of(s: _Setting, d: _Decoded, si: int, m: int, parsed: list[_Setting], decoded: list[_Decoded],
             categories: list[str], cells: list[list[list[_Cell]]]) -> list[AcceptRow]:
    """Setting s on model d: a row per category, then OVERALL; speedups over the plain row of the
    model d names as its reference."""
    plain_index = next((i for i, x in enumerate(parsed) if x.kind == "plain"), None)
    pm = next(i for i, x in enumerate(decoded) if x.name == d.plain_name)
    rows = []
    overall, ref_overall = _Cell(), _Cell()
    for ci, cat in enumerate(categories):
        ref = cells[plain_index][pm][ci].tokens_per_second if plain_index is not None else None
        rows.append(_row(s, cat, cells[si][m][ci], ref, d.name))
        overall.add(cells[si][m][ci])
        if plain_index is not None:
            ref_overall.add(cells[plain_index][pm][ci])
    rows.append(_row(s, OVERALL, overall, ref_overall.tokens_per_second if plain_index is not None else None, d.name))
    return rows


class _Runner:
    """The generations of bench_accept: a session per (setting, model), kept across prompts so an
    auto row's controller carries what it learned (the CLI's controller memory)."""

    def __init__(self, model: Model, settings: list[_Setting], decoded: list[_Decoded], sampling: dict[str, Any],
                 stop_token: int | None) -> None:
        self.model, self.settings, self.decoded = model, settings, decoded
        self.sampling, self.stop_token = sampling, stop_token
        self.sessions: dict[tuple[int, int], Session] = {}

    def run(self, si: int, m: int, prompt: list[int], n: int) -> tuple[str, list[int], Stats]:
        key = (si, m)
        if key not in self.sessions:
            d = self.decoded[m]
            self.sessions[key] = Session(self.model, **self.sampling, variant=d.variant, base_draft=d.base_draft,
                                         reuse_prefix=False, **self.settings[si].options())
        ids: list[int] = []
        session = self.sessions[key]
        text = "".join(session._run(prompt, n, None, stop_token=self.stop_token, token_ids=ids))
        assert session.stats is not None
        return text, ids, session.stats

    def forget(self, key: tuple[int, int] | None = None) -> None:
        for k in ([key] if key is not None else list(self.sessions)):
            session = self.sessions.pop(k, None)
            if session is not None:
                session.close()

    close = forget

    def warm_up(self, prompt: list[int], n: int) -> None:
        """Pages the weights in, untimed: the first plain and the first speculative setting on each
        model; then the controllers start from nothing, as the CLI's."""
        for m, d in enumerate(self.decoded):
            for plain in (True, False):
                si = next((i for i, s in enumerate(self.settings) if (s.kind == "plain") == plain), None)
                if si is not None and d.has_row(self.settings[si]):
                    self.run(si, m, prompt, n)
        self.forget()

    def measure(self, plist: list[BenchPrompt], tokens: list[list[int]], categories: list[str], max_tokens: int,
                greedy: bool, fresh_controller: bool, progress: Callable[[int, int], Any] | None):
        """Every row on every prompt, rows alternating prompt by prompt; cells[setting][model][category],
        the first model's text per setting, and the greedy generations that differ from their model's
        first row."""
        cells = [[[_Cell() for _ in categories] for _ in self.decoded] for _ in self.settings]
        outputs: dict[str, list[str]] = {s.name: [] for s in self.settings}
        mismatches = 0
        rows = [(si, m) for si, s in enumerate(self.settings) for m, d in enumerate(self.decoded) if d.has_row(s)]
        done, total = 0, len(rows) * len(plist)
        for p, prompt in zip(plist, tokens):
            reference: dict[str, list[int]] = {}  # per model's plain_name: the first row's output
            for si, m in rows:
                text, ids, st = self.run(si, m, prompt, max_tokens)
                if fresh_controller:
                    self.forget((si, m))
                cells[si][m][categories.index(p.category)].add_generation(st)
                if m == 0:
                    outputs[self.settings[si].name].append(text)
                ref = reference.setdefault(self.decoded[m].plain_name, ids)
                if greedy and ids != ref:
                    mismatches += 1
                done += 1
                if progress is not None:
                    progress(done, total)
        return cells, outputs, mismatches
