"""OpenAI-shaped results of Model.create_completion / create_chat_completion: the same objects
`bitsplit serve` answers /v1/completions and /v1/chat/completions with, log-probabilities
included (the C API's bitsplit_session_generate_logprobs)."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from ._capi import ERR_INVALID_ARGUMENT, MAX_TOP_LOGPROBS, InvalidArgumentError
from ._model import Model, Prompt, Session, TokenLogprob


def _head(kind: str, created: int, rid: str, model: str) -> dict[str, Any]:
    return {"id": rid, "object": kind, "created": created, "model": model}


def _usage(session: Session) -> dict[str, int]:
    s = session.stats
    assert s is not None
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": s.reused_tokens}}


class _Logprobs:
    """Log-probabilities in the server's two formats (engine/serve/logprobs.cpp): completions
    (tokens, token_logprobs, top_logprobs, text_offset; offsets in bytes of generated text, going
    on from chunk to chunk) and chat (content: token, logprob, bytes, top_logprobs)."""

    def __init__(self, model: Model, chat: bool) -> None:
        self.model = model
        self.chat = chat
        self.offset = 0
        self.pieces: dict[int, bytes] = {}

    def _piece(self, token: int) -> bytes:
        if token not in self.pieces:
            self.pieces[token] = self.model.detokenize_bytes([token])
        return self.pieces[token]

    def _text(self, token: int) -> str:
        return self._piece(token).decode("utf-8", "replace")

    def format(self, tokens: list[TokenLogprob]) -> dict[str, Any]:
        if self.chat:
            return {"content": [{"token": self._text(t.token), "logprob": t.logprob,
                                 "bytes": list(self._piece(t.token)),
                                 "top_logprobs": [{"token": self._text(i), "logprob": lp, "bytes": list(self._piece(i))}
                                                  for i, lp in t.top]} for t in tokens]}
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t in tokens:
            out["tokens"].append(self._text(t.token))
            out["token_logprobs"].append(t.logprob)
            top: dict[str, float] = {}
            for i, lp in t.top:
                top.setdefault(self._text(i), lp)  # pieces that print alike: the most probable one's
            out["top_logprobs"].append(top)
            out["text_offset"].append(self.offset)
            self.offset += len(self._piece(t.token))
        return out


def _chunks(model: Model, session: Session, prompt: Prompt, max_tokens: int | None, stop: Any, chat: bool,
            rid: str, created: int, name: str, top_logprobs: int | None) -> Iterator[dict[str, Any]]:
    kind = "chat.completion.chunk" if chat else "text_completion"
    formatter = _Logprobs(model, chat) if top_logprobs is not None else None
    try:
        if chat:
            yield {**_head(kind, created, rid, name),
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None}]}
        left: list[TokenLogprob] = []  # of tokens whose text came with no piece: the last chunk's
        for piece, logprobs in session._run_items(prompt, max_tokens, stop, top_logprobs=top_logprobs):
            if not piece:
                left += logprobs
                continue
            choice: dict[str, Any] = {"index": 0, "logprobs": formatter.format(logprobs) if formatter and logprobs else None,
                                      "finish_reason": None}
            if chat:
                choice["delta"] = {"content": piece}
            else:
                choice["text"] = piece
            yield {**_head(kind, created, rid, name), "choices": [choice]}
        assert session.stats is not None
        last: dict[str, Any] = {"index": 0, "logprobs": formatter.format(left) if formatter and left else None,
                                "finish_reason": session.stats.finish_reason}
        if chat:
            last["delta"] = {}
        else:
            last["text"] = ""
        yield {**_head(kind, created, rid, name), "choices": [last], "usage": _usage(session)}
    finally:
        session.close()


def completion(model: Model, prompt: Prompt, max_tokens: int | None, stream: bool,
               stop: str | Sequence[str] | None, options: dict[str, Any], chat: bool,
               top_logprobs: int | None = None):
    if top_logprobs is not None and (not isinstance(top_logprobs, int) or isinstance(top_logprobs, bool)
                                     or not 0 <= top_logprobs <= MAX_TOP_LOGPROBS):
        raise InvalidArgumentError(ERR_INVALID_ARGUMENT, f"logprobs must be 0..{MAX_TOP_LOGPROBS} alternatives "
                                                         f"per token, not {top_logprobs!r}")
    name = options.get("variant") or model.name
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    session = Session(model, **options)
    if stream:
        return _chunks(model, session, prompt, max_tokens, stop, chat, rid, created, name, top_logprobs)
    with session:
        pieces: list[str] = []
        logprobs: list[TokenLogprob] = []
        for piece, lps in session._run_items(prompt, max_tokens, stop, top_logprobs=top_logprobs):
            pieces.append(piece)
            logprobs += lps
        text, stats = "".join(pieces), session.stats
        assert stats is not None
        choice: dict[str, Any] = {"index": 0, "finish_reason": stats.finish_reason,
                                  "logprobs": _Logprobs(model, chat).format(logprobs) if top_logprobs is not None else None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {**_head("chat.completion" if chat else "text_completion", created, rid, name),
                "choices": [choice], "usage": _usage(session)}
