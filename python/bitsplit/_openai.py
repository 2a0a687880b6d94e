"""OpenAI-shaped results of Model.create_completion / create_chat_completion: the same objects
`bitsplit serve` answers /v1/completions and /v1/chat/completions with (no logprobs yet: the C
API does not report them)."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from ._model import Model, Prompt, Session


def _head(kind: str, created: int, rid: str, model: str) -> dict[str, Any]:
    return {"id": rid, "object": kind, "created": created, "model": model}


def _usage(session: Session) -> dict[str, int]:
    s = session.stats
    assert s is not None
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": s.reused_tokens}}


def _chunks(model: Model, session: Session, prompt: Prompt, max_tokens: int | None, stop: Any, chat: bool,
            rid: str, created: int, name: str) -> Iterator[dict[str, Any]]:
    kind = "chat.completion.chunk" if chat else "text_completion"
    try:
        if chat:
            yield {**_head(kind, created, rid, name),
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None}]}
        for piece in session.stream(prompt, max_tokens, stop=stop):
            choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": None}
            if chat:
                choice["delta"] = {"content": piece}
            else:
                choice["text"] = piece
            yield {**_head(kind, created, rid, name), "choices": [choice]}
        assert session.stats is not None
        last: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": session.stats.finish_reason}
        if chat:
            last["delta"] = {}
        else:
            last["text"] = ""
        yield {**_head(kind, created, rid, name), "choices": [last], "usage": _usage(session)}
    finally:
        session.close()


def completion(model: Model, prompt: Prompt, max_tokens: int | None, stream: bool,
               stop: str | Sequence[str] | None, options: dict[str, Any], chat: bool):
    name = options.get("variant") or model.name
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    session = Session(model, **options)
    if stream:
        return _chunks(model, session, prompt, max_tokens, stop, chat, rid, created, name)
    with session:
        text, stats = session.generate(prompt, max_tokens, stop=stop)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": stats.finish_reason}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {**_head("chat.completion" if chat else "text_completion", created, rid, name),
                "choices": [choice], "usage": _usage(session)}
