"""Model and Session: thin wrappers of the C API's bitsplit_model and bitsplit_session.

A generation runs the C call on a worker thread (ctypes releases the GIL while C runs) and hands
its text to the caller's thread through a queue, so the caller's thread stays interruptible:
Ctrl-C (KeyboardInterrupt), closing a stream early, or Session.abort() from another thread all
end in bitsplit_session_abort, which the engine honours within one forward pass."""
from __future__ import annotations

import ctypes
import dataclasses
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Union

from . import _capi
from ._capi import InvalidArgumentError, check, lib

Prompt = Union[str, Sequence[int]]
Speculative = Union[Literal["auto"], bool, int]


@dataclass(frozen=True)
class Stats:
    """One generation's statistics (bitsplit_generation_stats) and why it ended."""

    prompt_tokens: int
    prompt_seconds: float
    generated_tokens: int
    generate_seconds: float
    stopped_at_eos: bool
    speculative: bool  # decoded speculatively (a bit-split model, speculation on)
    checks: int  # target verification passes
    drafted_tokens: int
    accepted_tokens: int
    tokens_per_check: float  # accepted + the target's own token, per check
    reused_tokens: int  # prompt tokens whose K/V came from the session's last generation
    finish_reason: str  # "stop" (end of sequence or a stop string) or "length"
    stopped_at_stop: bool = False  # a stop string ended it (C API 0.6)
    # Where a speculative generation's time went and how deep its drafts were accepted (C API 0.5;
    # zeros and empty when it did not decode speculatively).
    draft_seconds: float = 0.0  # drafting (the draft model's passes and the context lookup)
    verify_seconds: float = 0.0  # the target's verification passes
    lookup_drafted_tokens: int = 0  # drafted nodes that came from the context lookup
    lookup_accepted_tokens: int = 0  # accepted tokens that came from the lookup's chain
    # Index d - 1 for draft depth d: checks whose accepted path reached depth d (the sum is
    # accepted_tokens), and checks whose draft had a node at depth d.
    accepted_per_depth: tuple[int, ...] = ()
    drafted_per_depth: tuple[int, ...] = ()
    # Checks per draft setting ("plain", "chain-4", "tree-16+lookup", ...), in the order first used.
    checks_per_setting: dict[str, int] = field(default_factory=dict)
    # With logprobs=True: each generated token's log-probability (the end-of-sequence token's left
    # out, as the server does), in order; None when not asked for.
    logprobs: tuple[TokenLogprob, ...] | None = None

    @property
    def acceptance_per_depth(self) -> tuple[float, ...]:
        """The acceptance rate at each draft depth: accepted_per_depth / drafted_per_depth."""
        return tuple(a / d if d else 0.0 for a, d in zip(self.accepted_per_depth, self.drafted_per_depth))

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generate_seconds if self.generate_seconds > 0 else 0.0

    @classmethod
    def _from_c(cls, s: _capi.GenerationStats, finish_reason: str, checks_per_setting: dict[str, int]) -> Stats:
        n = max(0, min(s.n_depths, _capi.MAX_DRAFT_DEPTH))
        return cls(prompt_tokens=s.prompt_tokens, prompt_seconds=s.prompt_seconds,
                   generated_tokens=s.generated_tokens, generate_seconds=s.generate_seconds,
                   stopped_at_eos=bool(s.stopped_at_eos), speculative=bool(s.speculative), checks=s.checks,
                   drafted_tokens=s.drafted_tokens, accepted_tokens=s.accepted_tokens,
                   tokens_per_check=s.tokens_per_check, reused_tokens=s.reused_tokens, finish_reason=finish_reason,
                   stopped_at_stop=bool(s.stopped_at_stop),
                   draft_seconds=s.draft_seconds, verify_seconds=s.verify_seconds,
                   lookup_drafted_tokens=s.lookup_drafted_tokens, lookup_accepted_tokens=s.lookup_accepted_tokens,
                   accepted_per_depth=tuple(s.accepted_at_depth[:n]), drafted_per_depth=tuple(s.drafted_at_depth[:n]),
                   checks_per_setting=checks_per_setting)


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability under the model's distribution at its position (the
    log-softmax of the raw logits: temperature 1, no penalties or filters, as `bitsplit serve`
    reports them), and the most probable tokens there as (token id, log-probability) pairs."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def _invalid(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(_capi.ERR_INVALID_ARGUMENT, message)


def _top_logprobs(logprobs: bool, top_logprobs: int) -> int | None:
    """generate's and stream's logprobs / top_logprobs as _run_items takes them (None: off)."""
    if not isinstance(logprobs, bool):
        raise _invalid(f"logprobs must be True or False, not {logprobs!r} (top_logprobs gives the alternatives)")
    if not logprobs:
        if top_logprobs:
            raise _invalid("top_logprobs needs logprobs=True")
        return None
    return top_logprobs


def _token_array(tokens: Sequence[int]) -> ctypes.Array:
    try:
        return (_capi.c_token * len(tokens))(*tokens)
    except (TypeError, OverflowError) as e:
        raise _invalid(f"tokens must be 32-bit integers: {e}") from e


def _stop_strings(stop: str | Sequence[str] | None) -> list[bytes]:
    """Stop strings as the C API takes them (it matches them: bitsplit_session_set_stop)."""
    if stop is None or isinstance(stop, str):
        stops = [stop] if stop else []
    elif isinstance(stop, (list, tuple)):
        stops = list(stop)
    else:
        raise _invalid(f"stop must be a string or a list of strings, not {type(stop).__name__}")
    if any(not isinstance(s, str) for s in stops):
        raise _invalid("stop must be a string or a list of strings")
    if any("\0" in s for s in stops):
        raise _invalid("a stop string must not contain NUL characters")
    return [s.encode() for s in stops]


class Piece(NamedTuple):
    """A piece of streamed text with the log-probabilities of the tokens that came since the last
    piece (stream(..., logprobs=True)); a last piece may have empty text and carry those of tokens
    whose text a stop string cut off."""

    text: str
    logprobs: tuple[TokenLogprob, ...]


_DONE = object()


class Metadata(Mapping[str, Any]):
    """The model file's metadata, every entry in file order (bitsplit_model_meta_key): strings as
    str, integers as int, floats as float, booleans as bool, arrays as lists (the C API hands each
    value over as JSON, bitsplit_model_meta_json)."""

    def __init__(self, model: Model) -> None:
        self._model = model

    def __getitem__(self, key: str) -> Any:
        import json
        if not isinstance(key, str):
            raise KeyError(key)
        text = lib().bitsplit_model_meta_json(self._model._ptr(), key.encode())
        if text is None:
            raise KeyError(key)
        return json.loads(text.decode("utf-8", "replace"))

    def __iter__(self) -> Iterator[str]:
        handle = self._model._ptr()
        for i in range(lib().bitsplit_model_meta_count(handle)):
            key = lib().bitsplit_model_meta_key(handle, i)
            if key is not None:
                yield key.decode("utf-8", "replace")

    def __len__(self) -> int:
        return lib().bitsplit_model_meta_count(self._model._ptr())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and lib().bitsplit_model_meta_json(self._model._ptr(), key.encode()) is not None


class Model:
    """A loaded GGUF model (original, or converted by `bitsplit convert`), with its variants.

    Many sessions and generations may use one model at once, from many threads; generations
    running together share forward passes. mlock=True pins a converted model's planes in RAM
    (LoadError naming the locked-memory limit when the process may not lock that much). The model is freed by close(), on leaving a `with`
    block, or when the last reference (its sessions hold one each) goes."""

    def __init__(self, path: str | os.PathLike[str], *, threads: int | None = None, vram_budget: int | None = None,
                 gpu: bool | None = None, mlock: bool = False,
                 progress: Callable[[int, int], Any] | None = None) -> None:
        self._handle: int | None = None
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self.path = os.fspath(path)
        params = _capi.ModelParams()
        lib().bitsplit_model_params_init(ctypes.byref(params))
        if threads is not None:
            params.n_threads = threads
        if vram_budget is not None:
            if vram_budget <= 0:
                raise _invalid("vram_budget must be a positive number of bytes (None: free memory minus a margin)")
            params.vram_budget = vram_budget
        if gpu is not None:
            params.use_gpu = 1 if gpu else 0
        params.mlock = 1 if mlock else 0
        raised: list[BaseException] = []
        callback = None
        if progress is not None:
            def on_progress(_user, done, total):  # a false return (not None) or an exception cancels
                try:
                    return 1 if progress(done, total) is False else 0
                except BaseException as e:  # noqa: BLE001 - re-raised after the C call
                    raised.append(e)
                    return 1
            callback = _capi.PROGRESS_CALLBACK(on_progress)
            params.progress = ctypes.cast(callback, ctypes.c_void_p)
        handle = ctypes.c_void_p()
        status = lib().bitsplit_model_load(self.path.encode(), ctypes.byref(params), ctypes.byref(handle))
        if raised:
            raise raised[0]
        check(status)
        self._handle = handle.value

    # ---- lifetime ----------------------------------------------------------------------------
    def _ptr(self) -> int:
        if self._handle is None:
            raise _invalid("the model is closed")
        return self._handle

    def close(self) -> None:
        """Frees the model and closes its sessions (refused while one of them generates)."""
        if self._handle is None:
            return
        for s in list(self._sessions):
            s.close()
        lib().bitsplit_model_free(self._handle)
        self._handle = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None and _capi._lib is not None:
            _capi._lib.bitsplit_model_free(self._handle)
            self._handle = None

    # ---- facts -------------------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        """The context the model was trained for (the most prompt + generated tokens)."""
        return lib().bitsplit_model_n_ctx_train(self._ptr())

    @property
    def n_vocab(self) -> int:
        return lib().bitsplit_model_n_vocab(self._ptr())

    @property
    def n_layers(self) -> int:
        return lib().bitsplit_model_n_layers(self._ptr())

    @property
    def is_bitsplit(self) -> bool:
        """Converted by `bitsplit convert`, so decoded speculatively."""
        return bool(lib().bitsplit_model_is_bitsplit(self._ptr()))

    @property
    def locked_bytes(self) -> int:
        """Bytes of the planes locked in RAM by mlock=True (0 without it)."""
        return lib().bitsplit_model_locked_bytes(self._ptr())

    @property
    def bos(self) -> int | None:
        t = lib().bitsplit_model_bos(self._ptr())
        return None if t < 0 else t

    @property
    def eos(self) -> int | None:
        t = lib().bitsplit_model_eos(self._ptr())
        return None if t < 0 else t

    @property
    def metadata(self) -> Metadata:
        return Metadata(self)

    @property
    def chat_template(self) -> str | None:
        t = lib().bitsplit_model_chat_template(self._ptr())
        return None if t is None else t.decode("utf-8", "replace")

    @property
    def name(self) -> str:
        return self.metadata.get("general.name") or os.path.basename(self.path)

    # ---- variants ----------------------------------------------------------------------------
    @property
    def variants(self) -> tuple[str, ...]:
        """The registered variants' names, in the order of their bytes (bitsplit_model_variant_name)."""
        handle = self._ptr()
        names = (lib().bitsplit_model_variant_name(handle, i) for i in range(lib().bitsplit_model_variant_count(handle)))
        return tuple(n.decode("utf-8", "replace") for n in names if n is not None)

    def add_delta(self, name: str, path: str | os.PathLike[str]) -> None:
        """Registers a BitDelta file from `bitsplit delta` (made against this base) as `name`."""
        check(lib().bitsplit_model_add_variant(self._ptr(), name.encode(), os.fspath(path).encode()))

    def add_lora(self, name: str, path: str | os.PathLike[str], scale: float = 1.0) -> None:
        """Registers a LoRA adapter (llama.cpp's GGUF format) as `name`; scale multiplies alpha / rank."""
        check(lib().bitsplit_model_add_lora(self._ptr(), name.encode(), os.fspath(path).encode(), float(scale)))

    def remove_variant(self, name: str) -> None:
        check(lib().bitsplit_model_remove_variant(self._ptr(), name.encode()))

    # ---- tokens ------------------------------------------------------------------------------
    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """The text's tokens; add_special adds BOS where the vocabulary asks for it, parse_special
        turns text such as "<s>" into its special token."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        buf, n = _capi.sized_call(lib().bitsplit_tokenize, self._ptr(), data, len(data), int(add_special),
                                  int(parse_special), item=_capi.c_token, initial=len(data) + 8)
        return list(buf[:n])

    def detokenize_bytes(self, tokens: Sequence[int]) -> bytes:
        arr = _token_array(tokens)
        buf, n = _capi.sized_call(lib().bitsplit_detokenize, self._ptr(), arr, len(arr), initial=8 * len(arr) + 16)
        return bytes(buf[:n])

    def detokenize(self, tokens: Sequence[int]) -> str:
        """The tokens' text (bytes that are not UTF-8 become U+FFFD)."""
        return self.detokenize_bytes(tokens).decode("utf-8", "replace")

    # ---- chat --------------------------------------------------------------------------------
    def _chat_call(self, fn, messages: Any, add_generation_prompt: bool, chat_template: str | None,
                   special_tokens_in_content: bool, item, initial: int):
        import json
        data = (messages if isinstance(messages, str) else json.dumps(messages, ensure_ascii=False)).encode()
        params = _capi.ChatParams()
        lib().bitsplit_chat_params_init(ctypes.byref(params))
        params.chat_template = None if chat_template is None else chat_template.encode()
        params.add_generation_prompt = int(add_generation_prompt)
        params.special_tokens_in_content = int(special_tokens_in_content)
        return _capi.sized_call(fn, self._ptr(), data, len(data), ctypes.byref(params), item=item, initial=initial)

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            chat_template: str | None = None) -> str:
        """The conversation rendered by the model's chat template (or `chat_template`) with the
        engine's template interpreter, as `bitsplit chat` and `bitsplit serve` render it."""
        buf, n = self._chat_call(lib().bitsplit_chat_render, messages, add_generation_prompt, chat_template, False,
                                 ctypes.c_char, 4096)
        return bytes(buf[:n]).decode("utf-8", "replace")

    def tokenize_chat(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                      chat_template: str | None = None, special_tokens_in_content: bool = False) -> list[int]:
        """The conversation's prompt tokens as the server makes them (control-token text inside
        messages stays text unless special_tokens_in_content)."""
        buf, n = self._chat_call(lib().bitsplit_chat_tokenize, messages, add_generation_prompt, chat_template,
                                 special_tokens_in_content, _capi.c_token, 1024)
        return list(buf[:n])

    # ---- generation --------------------------------------------------------------------------
    def session(self, **options: Any) -> Session:
        """A Session on this model; options as Session's."""
        return Session(self, **options)

    def generate(self, prompt: Prompt, max_tokens: int | None = 256, *, stop: str | Sequence[str] | None = None,
                 logprobs: bool = False, top_logprobs: int = 0, **options: Any) -> tuple[str, Stats]:
        """The text generated after `prompt` (a string, tokenized with BOS, or token ids) and its
        Stats. Options: temperature, top_p, top_k, min_p, repeat_penalty, repeat_last_n, seed,
        variant, base_draft, speculative ("auto", False or a budget 1..64), draft ("tree" or
        "chain"), lookup (None: the engine's default; 0..64). None leaves the C API's default.
        max_tokens None: up to the end of the context. logprobs=True: Stats.logprobs holds each
        token's log-probability and its top_logprobs (0..20) most probable alternatives."""
        with Session(self, **options) as s:
            return s.generate(prompt, max_tokens, stop=stop, logprobs=logprobs, top_logprobs=top_logprobs)

    def stream(self, prompt: Prompt, max_tokens: int | None = 256, *, stop: str | Sequence[str] | None = None,
               logprobs: bool = False, top_logprobs: int = 0, **options: Any) -> Iterator[Any]:
        """The generated text piece by piece (options as generate's); with logprobs=True, Piece
        tuples (text, logprobs) instead of strings."""
        s = Session(self, **options)
        try:
            yield from s.stream(prompt, max_tokens, stop=stop, logprobs=logprobs, top_logprobs=top_logprobs)
        finally:
            s.close()

    def create_completion(self, prompt: Prompt, max_tokens: int | None = 16, *, stream: bool = False,
                          stop: str | Sequence[str] | None = None, logprobs: int | None = None, **options: Any):
        """An OpenAI-shaped text completion (a dict; with stream=True an iterator of chunks).
        logprobs N (0..20): each token's log-probability and the N most probable alternatives, in
        the completions format (tokens, token_logprobs, top_logprobs, text_offset)."""
        from ._openai import completion
        return completion(self, prompt, max_tokens, stream, stop, options, chat=False, top_logprobs=logprobs)

    def create_chat_completion(self, messages: Sequence[Mapping[str, Any]], max_tokens: int | None = None, *,
                               stream: bool = False, stop: str | Sequence[str] | None = None,
                               chat_template: str | None = None, logprobs: bool = False,
                               top_logprobs: int | None = None, **options: Any):
        """An OpenAI-shaped chat completion: the messages rendered and tokenized by the engine
        (as `bitsplit serve` does), the reply a dict (with stream=True, an iterator of chunks).
        logprobs=True: each token's log-probability in the chat format (content: token, logprob,
        bytes, top_logprobs), with top_logprobs (0..20) alternatives."""
        from ._openai import completion
        if top_logprobs is not None and not logprobs:
            raise _invalid("top_logprobs needs logprobs=True")
        tokens = self.tokenize_chat(messages, True, chat_template)
        return completion(self, tokens, max_tokens, stream, stop, options, chat=True,
                          top_logprobs=(top_logprobs or 0) if logprobs else None)


def _session_params(model: Model, variant: str | None, temperature: float | None, top_k: int | None,
                    top_p: float | None, min_p: float | None, repeat_penalty: float | None,
                    repeat_last_n: int | None, seed: int | None, speculative: Speculative, draft: str,
                    lookup: int | None, n_ctx: int | None, reuse_prefix: bool,
                    base_draft: bool) -> _capi.SessionParams:
    p = _capi.SessionParams()
    lib().bitsplit_session_params_init(ctypes.byref(p))
    p.variant = None if variant is None else variant.encode()
    for field, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("min_p", min_p),
                         ("repeat_penalty", repeat_penalty), ("repeat_last_n", repeat_last_n), ("seed", seed),
                         ("n_ctx", n_ctx)):
        if value is not None:
            setattr(p, field, value)
    if speculative is True or speculative == "auto":
        p.speculative, p.budget = 1, 0
    elif speculative is False:
        p.speculative = 0
    elif isinstance(speculative, int):
        p.speculative, p.budget = 1, speculative
        if speculative == 0:
            raise _invalid("speculative must be 'auto', False or a budget of 1..64 drafted tokens per check")
    else:
        raise _invalid(f"speculative must be 'auto', False or a budget of 1..64, not {speculative!r}")
    if draft not in ("tree", "chain"):
        raise _invalid(f"draft must be 'tree' or 'chain', not {draft!r}")
    p.draft_chain = 1 if draft == "chain" else 0
    if lookup is not None:
        p.lookup = lookup
    p.reuse_prefix = 1 if reuse_prefix else 0
    p.base_draft = 1 if base_draft else 0
    return p


class Session:
    """A bitsplit_session: one sequence's decoding options (variant, sampling, speculation), its
    kept KV cache, and the step-by-step API (feed, logits, sample). One thread at a time uses a
    session; abort() may come from any thread."""

    def __init__(self, model: Model, *, variant: str | None = None, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, min_p: float | None = None,
                 repeat_penalty: float | None = None, repeat_last_n: int | None = None, seed: int | None = None,
                 speculative: Speculative = "auto", draft: str = "tree", lookup: int | None = None,
                 n_ctx: int | None = None, reuse_prefix: bool = True, base_draft: bool = False) -> None:
        self._handle: int | None = None
        self.model = model  # keeps the model alive as long as the session
        params = _session_params(model, variant, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                                 seed, speculative, draft, lookup, n_ctx, reuse_prefix, base_draft)
        handle = ctypes.c_void_p()
        try:
            check(lib().bitsplit_session_create(model._ptr(), ctypes.byref(params), ctypes.byref(handle)))
        except TypeError as e:  # a value ctypes cannot put in the field
            raise _invalid(str(e)) from e
        self._handle = handle.value
        self._busy = threading.Lock()
        self._last: Stats | None = None
        model._sessions.add(self)

    def _ptr(self) -> int:
        if self._handle is None:
            raise _invalid("the session is closed")
        return self._handle

    def close(self) -> None:
        if self._handle is None:
            return
        if not self._busy.acquire(blocking=False):
            raise _invalid("the session is generating: abort it (or let it finish) before closing it")
        try:
            lib().bitsplit_session_free(self._handle)
            self._handle = None
        finally:
            self._busy.release()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None and _capi._lib is not None:
            _capi._lib.bitsplit_session_free(self._handle)
            self._handle = None

    def abort(self) -> None:
        """Stops a running generation within one forward pass (it raises AbortedError); safe from
        any thread, and a no-op when nothing runs."""
        if self._handle is not None:
            lib().bitsplit_session_abort(self._handle)

    @property
    def stats(self) -> Stats | None:
        """The last generation's statistics."""
        return self._last

    # ---- whole generations ---------------------------------------------------------------------
    def _prompt_tokens(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, (str, bytes)):
            return self.model.tokenize(prompt)
        return list(prompt)

    def _run(self, prompt: Prompt, max_tokens: int | None, stop: str | Sequence[str] | None, *,
             stop_token: int | None = None, token_ids: list[int] | None = None) -> Iterator[str]:
        """Yields the generated text's pieces; sets self._last at the end. stop_token: the
        generation ends after that token (its text is not yielded); token_ids: receives the
        generated token ids (used by bench_accept)."""
        for piece, _ in self._run_items(prompt, max_tokens, stop, stop_token=stop_token, token_ids=token_ids):
            yield piece

    def _run_items(self, prompt: Prompt, max_tokens: int | None, stop: str | Sequence[str] | None, *,
                   stop_token: int | None = None, token_ids: list[int] | None = None,
                   top_logprobs: int | None = None) -> Iterator[tuple[str, list[TokenLogprob]]]:
        """_run's pieces, each with the log-probabilities of the tokens since the last piece (with
        top_logprobs not None; the end-of-sequence token's are left out, as the server does); a
        last ("", [...]) carries those of tokens whose text was not yielded (a stop string). The
        C API matches the stop strings; this only moves text from its worker thread to the caller."""
        tokens = self._prompt_tokens(prompt)
        if max_tokens is None:
            max_tokens = max(self.model.n_ctx - len(tokens), 0)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            raise _invalid(f"max_tokens must be a non-negative integer, not {max_tokens!r}")
        if max_tokens > 2**31 - 1:
            raise _capi.ContextOverflowError(_capi.ERR_CONTEXT_OVERFLOW,
                                             f"max_tokens {max_tokens} exceeds the context of {self.model.n_ctx}")
        if top_logprobs is not None and (not isinstance(top_logprobs, int) or isinstance(top_logprobs, bool)
                                         or not 0 <= top_logprobs <= _capi.MAX_TOP_LOGPROBS):
            raise _invalid(f"logprobs must be 0..{_capi.MAX_TOP_LOGPROBS} alternatives per token, not {top_logprobs!r}")
        stops = _capi.string_array(_stop_strings(stop))
        arr = _token_array(tokens)
        handle = self._ptr()
        if not self._busy.acquire(blocking=False):
            raise _invalid("the session is already generating (a session is used by one thread at a time)")
        try:
            check(lib().bitsplit_session_set_stop(handle, stops, len(stops)))
        except BaseException:
            self._busy.release()
            raise
        eos = self.model.eos
        pieces: queue.SimpleQueue = queue.SimpleQueue()
        state = {"closed": False, "token_stop": False, "status": _capi.OK, "error": ""}
        fresh: list[TokenLogprob] = []  # log-probabilities not yet handed out with a piece

        def on_logprob(_user, token, logprob, top_tokens, top_values, n_top):
            if token != eos:
                fresh.append(TokenLogprob(token, logprob, tuple((top_tokens[i], top_values[i]) for i in range(n_top))))

        def on_token(_user, token, text, length):
            if state["closed"] or (state["token_stop"] and token >= 0):
                return 1
            if token >= 0 and token_ids is not None:
                token_ids.append(token)
            if stop_token is not None and token == stop_token:
                state["token_stop"] = True  # the leftover text (token -1) still comes
                return 1
            piece = ctypes.string_at(text, length).decode("utf-8", "replace") if length else ""
            if piece:
                pieces.put((piece, fresh[:]))
                fresh.clear()
            return 0

        callback = _capi.TOKEN_CALLBACK(on_token)
        logprob_callback = _capi.LOGPROB_CALLBACK(on_logprob) if top_logprobs is not None else _capi.LOGPROB_CALLBACK()
        stats = _capi.GenerationStats()
        stats.size = ctypes.sizeof(stats)

        def work():
            try:
                status = lib().bitsplit_session_generate_logprobs(handle, arr, len(arr), max_tokens, top_logprobs or 0,
                                                                  logprob_callback, callback, None, ctypes.byref(stats))
                state["status"] = status
                if status != _capi.OK:
                    state["error"] = _capi.last_error()  # the worker's own thread-local message
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                state["status"], state["error"] = _capi.ERR_INTERNAL, f"internal error: {e}"
            finally:
                pieces.put(_DONE)

        worker = threading.Thread(target=work, name="bitsplit-generate", daemon=True)
        worker.start()
        finished = False
        try:
            while True:
                try:
                    item = pieces.get(timeout=0.05)  # a timeout keeps the wait interruptible (Ctrl-C)
                except queue.Empty:
                    continue
                if item is _DONE:
                    break
                yield item
            finished = True
        finally:
            if not finished:  # KeyboardInterrupt, or the consumer closed the stream
                state["closed"] = True
                lib().bitsplit_session_abort(handle)
            worker.join()
            self._busy.release()
        if state["status"] != _capi.OK:
            raise _capi.error(state["status"], state["error"])
        if fresh:
            yield "", fresh[:]
        reason = "stop" if state["token_stop"] or stats.stopped_at_stop or stats.stopped_at_eos else "length"
        self._last = Stats._from_c(stats, reason, self._checks_per_setting(handle))

    @staticmethod
    def _checks_per_setting(handle: int) -> dict[str, int]:
        out: dict[str, int] = {}
        name, checks = ctypes.c_char_p(), ctypes.c_int64()
        index = 0
        while lib().bitsplit_session_setting_checks(handle, index, ctypes.byref(name), ctypes.byref(checks)) == _capi.OK:
            out[(name.value or b"").decode("utf-8", "replace")] = checks.value
            index += 1
        return out

    def generate(self, prompt: Prompt, max_tokens: int | None = 256, *, stop: str | Sequence[str] | None = None,
                 logprobs: bool = False, top_logprobs: int = 0) -> tuple[str, Stats]:
        """Generates after `prompt` (a new sequence; with reuse_prefix the part of the prompt that
        repeats the last prompt + output is not run again); returns the text and Stats (with
        logprobs=True, Stats.logprobs: each token's log-probability and top_logprobs alternatives)."""
        texts: list[str] = []
        values: list[TokenLogprob] = []
        for piece, lps in self._run_items(prompt, max_tokens, stop, top_logprobs=_top_logprobs(logprobs, top_logprobs)):
            texts.append(piece)
            values += lps
        assert self._last is not None
        if logprobs:
            self._last = dataclasses.replace(self._last, logprobs=tuple(values))
        return "".join(texts), self._last

    def stream(self, prompt: Prompt, max_tokens: int | None = 256, *, stop: str | Sequence[str] | None = None,
               logprobs: bool = False, top_logprobs: int = 0) -> Iterator[Any]:
        """The generated text piece by piece (strings; with logprobs=True, Piece tuples of the text
        and its tokens' log-probabilities); closing the iterator early stops the generation.
        Session.stats holds the statistics once it is exhausted."""
        top = _top_logprobs(logprobs, top_logprobs)
        if top is None:
            return self._run(prompt, max_tokens, stop)
        return self._pieces(prompt, max_tokens, stop, top)

    def _pieces(self, prompt: Prompt, max_tokens: int | None, stop: str | Sequence[str] | None,
                top_logprobs: int | None) -> Iterator[Piece]:
        values: list[TokenLogprob] = []
        for piece, lps in self._run_items(prompt, max_tokens, stop, top_logprobs=top_logprobs):
            values += lps
            yield Piece(piece, tuple(lps))
        if self._last is not None:
            self._last = dataclasses.replace(self._last, logprobs=tuple(values))

    # ---- step by step -------------------------------------------------------------------------
    def feed(self, tokens: Sequence[int]) -> None:
        """Appends tokens to the step-by-step sequence and runs them through the model (plain
        decoding of the target)."""
        arr = _token_array(tokens)
        check(lib().bitsplit_session_feed(self._ptr(), arr, len(arr)))

    def logits(self):
        """The logits after the last fed token: a numpy float32 array when numpy is installed,
        else a memoryview of floats (a copy either way)."""
        ptr = ctypes.POINTER(ctypes.c_float)()
        n = ctypes.c_int32()
        check(lib().bitsplit_session_logits(self._ptr(), ctypes.byref(ptr), ctypes.byref(n)))
        data = (ctypes.c_float * n.value).from_address(ctypes.addressof(ptr.contents))
        try:
            import numpy
        except ImportError:
            return memoryview(bytearray(data)).cast("f")
        return numpy.array(data, dtype=numpy.float32)

    def sample(self) -> int:
        """Samples the next token from the current logits (not fed: feed it to continue)."""
        token = _capi.c_token()
        check(lib().bitsplit_session_sample(self._ptr(), ctypes.byref(token)))
        return token.value

    def reset(self) -> None:
        """Empties the step-by-step sequence and drops the KV cache kept from the last generation."""
        lib().bitsplit_session_reset(self._ptr())

    @property
    def n_past(self) -> int:
        return lib().bitsplit_session_n_past(self._ptr())
