"""The HTTP side of an OpenAI-compatible chat-completions server (trtllm-serve, vLLM, SGLang, llama.cpp), shared by
the openai regeneration backend (data/regen_openai.py) and ``measure --engine openai`` (measure/served.py).

Standard library only (``urllib.request``, the client the regeneration backend has always used): no new dependency,
and one place that maps HTTP failures to ``RequestFailed`` (retryable or not). ``stream_chat`` reads a streamed
(``"stream": true``) response line by line as the server-sent events arrive (``data: {...}`` ... ``data: [DONE]``),
timing each one on arrival.

``check_server`` runs before anything is sent: ``GET /v1/models`` must answer (and list the requested model when
one is named, or exactly one model), and the server must count a probe prompt's tokens as the target's tokenizer
and chat template do (``usage.prompt_tokens``); its ``/tokenize`` or ``/extras/tokenize`` endpoint, where it has
one, must return the target tokenizer's ids.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

from trtllm_spec.errors import UserError

PROBE = [{"role": "user", "content": "Name three colours of the rainbow."}]
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class RequestFailed(Exception):
    def __init__(self, url: str, what: str, retry: bool):
        super().__init__(f"{url}: {what}")
        self.url, self.what, self.retry = url, what, retry


def base_url(url: str) -> str:
    """``http://host:port`` from ``http://host:port``, ``.../v1`` or ``.../v1/``; anything else is refused."""
    u = url.strip().rstrip("/")
    if not u.startswith(("http://", "https://")):
        raise UserError(f"server url {url!r}: give http://host:port (or https://...), e.g. http://127.0.0.1:8000")
    return u[: -len("/v1")] if u.endswith("/v1") else u


def _open(method: str, url: str, body: dict | None, timeout: float):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (http(s) only: base_url checks)
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise RequestFailed(url, f"HTTP {e.code}: {detail}", e.code in RETRY_STATUS) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        raise RequestFailed(url, f"no answer ({getattr(e, 'reason', e)})", True) from None


def get_text(url: str, timeout: float) -> str:
    """The body of ``GET url`` as text (e.g. a /metrics page)."""
    try:
        with _open("GET", url, None, timeout) as r:
            return r.read().decode("utf-8", "replace")
    except (TimeoutError, ConnectionError, OSError) as e:
        raise RequestFailed(url, f"no answer ({e})", True) from None


def http_json(method: str, url: str, body: dict | None, timeout: float) -> dict:
    try:
        with _open(method, url, body, timeout) as r:
            text = r.read()
    except (TimeoutError, ConnectionError, OSError) as e:
        raise RequestFailed(url, f"no answer ({e})", True) from None
    try:
        out = json.loads(text)
    except ValueError:
        raise RequestFailed(url, f"not JSON: {text[:200]!r}", False) from None
    if not isinstance(out, dict):
        raise RequestFailed(url, f"not a JSON object: {text[:200]!r}", False)
    return out


def with_retries(fn: Callable[[], dict], retries: int, base_delay: float = 0.5) -> dict:
    for attempt in range(retries + 1):
        try:
            return fn()
        except RequestFailed as e:
            if not e.retry or attempt == retries:
                raise
            time.sleep(min(30.0, base_delay * 2 ** attempt) * (1 + random.random() / 4))
    raise AssertionError("unreachable")


def chat_body(model: str, messages: list[dict], max_tokens: int, temperature: float, seed: int | None = None) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    if seed is not None:
        body["seed"] = seed
    return body


def http_chat(url: str, model: str, messages: list[dict], max_tokens: int, temperature: float, timeout: float,
              seed: int | None = None) -> dict:
    out = http_json("POST", f"{url}/v1/chat/completions", chat_body(model, messages, max_tokens, temperature, seed),
                    timeout)
    choices = out.get("choices")
    if not choices or not isinstance(choices[0].get("message"), dict):
        raise RequestFailed(url, f"no choices[0].message in {json.dumps(out)[:200]}", False)
    return out


def stream_chat(url: str, body: dict, timeout: float) -> Iterator[tuple[float, dict]]:
    """``(perf_counter() at arrival, event)`` for every ``data:`` event of a streamed chat completion, until
    ``data: [DONE]`` (not yielded). ``body`` gets ``"stream": true`` and asks for the usage chunk."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    target = f"{url}/v1/chat/completions"
    with _open("POST", target, body, timeout) as r:
        kind = r.headers.get("Content-Type", "")
        if "text/event-stream" not in kind:
            raise RequestFailed(target, f"answered {kind or 'no Content-Type'}, not a text/event-stream: not a "
                                "streaming chat-completions endpoint", False)
        try:
            for raw in r:
                t = time.perf_counter()
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue  # blank separators, ': ping' comments, 'event:' names
                payload = line[len("data:"):].strip()
                if payload == "[DONE]":
                    return
                try:
                    event = json.loads(payload)
                except ValueError:
                    raise RequestFailed(target, f"streamed a non-JSON event: {payload[:200]!r}", False) from None
                if isinstance(event, dict) and "error" in event:
                    raise RequestFailed(target, f"streamed an error: {json.dumps(event['error'])[:200]}", False)
                if isinstance(event, dict):
                    yield t, event
        except (TimeoutError, ConnectionError, OSError) as e:
            raise RequestFailed(target, f"stream broke off ({e})", True) from None
    raise RequestFailed(target, "the stream ended without 'data: [DONE]'", True)


def check_server(url: str, tok, model: str | None, timeout: float, model_hint: str) -> str:
    """The model id to request from ``url``, after the checks in the module docstring; ``model_hint`` names the
    option or field that chooses the model (for the messages)."""
    from trtllm_spec.data.chat import prompt_ids

    try:
        listing = http_json("GET", f"{url}/v1/models", None, min(timeout, 30))
    except RequestFailed as e:
        raise UserError(f"server {url} is not an OpenAI-compatible server answering GET /v1/models ({e.what}); "
                        "start it (e.g. 'trtllm-spec assets serve smollm2-135m --port 8000') or fix the URL") from None
    ids = [m.get("id") for m in listing.get("data") or [] if isinstance(m, dict)]
    if not ids:
        raise UserError(f"server {url}: GET /v1/models lists no model ({json.dumps(listing)[:200]}); not an "
                        "OpenAI-compatible chat server?")
    if model is None and len(ids) > 1:
        raise UserError(f"server {url} serves {len(ids)} models ({', '.join(ids[:5])}); name the target's with "
                        f"{model_hint}")
    if model is not None and model not in ids:
        raise UserError(f"server {url} does not serve model {model!r} (it lists {', '.join(ids[:5])}); fix "
                        f"{model_hint} or the URL")
    chosen = model or ids[0]
    for path in ("/tokenize", "/extras/tokenize"):
        try:
            got = http_json("POST", f"{url}{path}", {"input": PROBE[0]["content"], "content": PROBE[0]["content"],
                                                     "add_special": False, "model": chosen}, min(timeout, 30))
        except RequestFailed:
            continue
        toks = got.get("tokens")
        if isinstance(toks, list) and all(isinstance(t, int) for t in toks):
            want = tok(PROBE[0]["content"], add_special_tokens=False).input_ids
            if toks != want:
                raise UserError(f"server {url} serves another vocabulary than the target: {path} of "
                                f"{PROBE[0]['content']!r} gives {toks[:8]}, the target's tokenizer {want[:8]}; "
                                "serve the target itself")
            break
    try:
        probe = http_chat(url, chosen, PROBE, 1, 0.0, timeout)
    except RequestFailed as e:
        raise UserError(f"server {url} (model {chosen}) did not answer a one-token chat completion ({e.what}); "
                        "it must serve POST /v1/chat/completions") from None
    want = len(prompt_ids(tok, PROBE))
    got_n = (probe.get("usage") or {}).get("prompt_tokens")
    if got_n is not None and got_n not in (want, want + 1):  # + a BOS some servers prepend
        raise UserError(f"server {url} (model {chosen}) counts the probe prompt as {got_n} tokens, the target's "
                        f"tokenizer and chat template as {want}: it serves another model or chat template; serve "
                        "the target (same tokenizer and template)")
    return chosen
