"""What an OpenAI-compatible server may send back, as typed models: every field this package reads from a server
is validated here, once, and a reply of the wrong shape becomes one line naming the field and what came.

Only the fields we read are declared (servers add many others: they are kept and ignored); a field we read that has
the wrong type (``choices`` a string, ``delta`` a string, ``usage`` a list, ``content`` a number, ``data`` of
``/v1/models`` not a list) is refused. Strict types: ``"5"`` is not a token count, ``true`` is not a number.
Shapes from the OpenAI API reference (chat completions, chat completion chunk, models list); llama.cpp's
``timings`` and ``/tokenize`` ``tokens`` as its server documents them (tools/server/README.md).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Reply(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ModelEntry(_Reply):
    id: str
    owned_by: object = None  # vLLM "vllm", trtllm-serve "tensorrt_llm", SGLang "sglang"; read only when a string


class ModelsList(_Reply):
    data: list[ModelEntry] = Field(default_factory=list)


class Usage(_Reply):
    prompt_tokens: int | None = Field(None, ge=0)
    completion_tokens: int | None = Field(None, ge=0)


class Message(_Reply):
    content: str | None = None


class Choice(_Reply):
    message: Message
    finish_reason: str | None = None


class ChatCompletion(_Reply):
    choices: list[Choice] = Field(min_length=1)
    usage: Usage | None = None


class Delta(_Reply):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class ChunkChoice(_Reply):
    delta: Delta | None = None
    finish_reason: str | None = None


class Timings(_Reply):
    """llama.cpp's per-request timings (only the speculative-decoding counters are read)."""

    draft_n: int | None = Field(None, ge=0)
    draft_n_accepted: int | None = Field(None, ge=0)


class ChatChunk(_Reply):
    choices: list[ChunkChoice] | None = None
    usage: Usage | None = None
    timings: Timings | None = None


class Tokenized(_Reply):
    tokens: list[int]


R = TypeVar("R", bound=_Reply)


class BadReply(ValueError):
    """A reply of the wrong shape: ``what`` names the field and what came."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def parse(model: type[R], data: Any, where: str) -> R:
    """``data`` (a decoded JSON value) as ``model``; BadReply naming the first wrong field and its value."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.get("loc", ())).lstrip(".")
        got = err.get("input")
        shown = json.dumps(got)[:80] if _jsonable(got) else repr(got)[:80]
        field = loc or "the reply"
        raise BadReply(f"{where}: {field}: {err.get('msg', 'invalid')} (got {shown})") from None


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
