"""The HTTP side of an OpenAI-compatible chat-completions server (trtllm-serve, vLLM, SGLang, llama.cpp), shared by
the openai regeneration backend (data/regen_openai.py) and ``measure served`` (measure/served.py).

Standard library only (``urllib.request``, the client the regeneration backend has always used): no new dependency,
and one place that maps HTTP failures to ``RequestFailed`` (retryable or not). ``stream_chat`` reads a streamed
(``"stream": true``) response line by line as the server-sent events arrive (``data: {...}`` ... ``data: [DONE]``),
timing each one on arrival.

Every reply is validated by the typed models of ``data/openai_reply`` (a wrong shape: one line naming the server,
the field and what came), and every request runs under one ``Deadline``: ``timeout`` is the request's wall-clock
limit, not a limit per socket read. A URL is parsed before use (``base_url``).

``check_server`` runs before anything is sent: ``GET /v1/models`` must answer (and list the requested model when
one is named, or exactly one model), and the server must count a probe prompt's tokens as the target's tokenizer
and chat template do (``usage.prompt_tokens``); its ``/tokenize`` or ``/extras/tokenize`` endpoint, where it has
one, must return the target tokenizer's ids. It returns which checks ran: a server that reports neither is
recorded as unchecked, never as checked.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from trtllm_spec.data.openai_reply import BadReply, ChatChunk, ChatCompletion, ModelsList, Tokenized, parse
from trtllm_spec.errors import UserError

PROBE = [{"role": "user", "content": "Name three colours of the rainbow."}]
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class RequestFailed(Exception):
    def __init__(self, url: str, what: str, retry: bool, status: int | None = None):
        what = " ".join(str(what).split())  # a server's body may hold newlines: the message stays one line
        super().__init__(f"{url}: {what}")
        self.url, self.what, self.retry = url, what, retry
        self.status = status  # the HTTP status it answered with, when it answered one

    @property
    def answer(self) -> str:
        """``answered HTTP 500: ...`` when the server answered with an error status, else ``did not answer (...)``."""
        return f"answered {self.what}" if self.status is not None else f"did not answer ({self.what})"


def base_url(url: str) -> str:
    """``http://host:port`` from ``http://host:port``, ``.../v1`` or ``.../v1/``; anything else (another scheme, no
    host, a port that is not a number in 1..65535, a broken IPv6 ``[...]`` host, a query) is refused."""
    u = str(url).strip().rstrip("/")
    fix = "give http://host:port (or https://...), e.g. http://127.0.0.1:8000"
    if not u.startswith(("http://", "https://")):
        raise UserError(f"server url {url!r}: {fix}")
    try:
        parts = urllib.parse.urlsplit(u)
        port, host = parts.port, parts.hostname
    except ValueError as exc:  # a non-numeric or out-of-range port, an unclosed '[' of an IPv6 host
        raise UserError(f"server url {url!r}: {exc}; {fix}") from None
    if not host or any(c.isspace() or ord(c) < 32 for c in u):
        raise UserError(f"server url {url!r} has no host (or contains spaces or control characters); {fix}")
    if port == 0 or parts.query or parts.fragment or "@" in parts.netloc:
        raise UserError(f"server url {url!r}: only scheme, host, port and an optional /v1 are allowed; {fix}")
    return u[: -len("/v1")] if u.endswith("/v1") else u


class Deadline:
    """One request's wall-clock limit: connect, send and every read together must end within ``seconds``.

    A socket timeout bounds one read only, so a server that trickles an event every half second is never cut by it;
    here a timer shuts the request's socket down when the deadline passes (the blocked read returns at once) and
    ``expired`` tells the reader why it ended. Use ``with Deadline(s) as d:`` and ``d.watch(response)``."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.end = time.monotonic() + self.seconds
        self.expired = False
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def check(self, url: str) -> None:
        if self.expired or self.remaining() <= 0:
            self.expired = True
            raise self.failure(url)

    def failure(self, url: str) -> RequestFailed:
        return RequestFailed(url, f"no complete answer within {self.seconds:g} s (one deadline for the whole "
                             "request, not per read; raise --timeout / --request-timeout if the server is just slow)", True)

    def watch(self, response) -> None:
        sock = _socket_of(response)
        if sock is None:
            return
        self._timer = threading.Timer(self.remaining(), self._cut, (sock,))
        self._timer.daemon = True
        self._timer.start()

    def _cut(self, sock) -> None:
        self.expired = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _socket_of(response):
    """The socket under a urllib response (http.client keeps it in its buffered reader), or None."""
    raw = getattr(getattr(response, "fp", None), "raw", None)
    return getattr(raw, "_sock", None)


# what a broken connection or a body cut short raises: OSError (refused, reset, timed out) or http.client's own
# (IncompleteRead, RemoteDisconnected, a malformed status line or header)
BROKEN = (TimeoutError, ConnectionError, OSError, http.client.HTTPException)


@contextlib.contextmanager
def _request(method: str, url: str, body: dict | None, timeout: float) -> Iterator:
    """The open response to ``method url`` under one Deadline of ``timeout`` seconds; every failure is a
    RequestFailed naming ``url`` (retryable or not)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with Deadline(timeout) as deadline:
        try:
            r = urllib.request.urlopen(req, timeout=max(0.001, deadline.remaining()))  # noqa: S310 (base_url)
        except urllib.error.HTTPError as e:
            try:
                detail = e.read()[:300].decode("utf-8", "replace")
            except BROKEN:
                detail = "(the error body was cut short)"
            raise RequestFailed(url, f"HTTP {e.code}: {detail}", e.code in RETRY_STATUS, e.code) from None
        except (urllib.error.URLError, *BROKEN, ValueError) as e:
            if deadline.expired or isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError):
                raise deadline.failure(url) from None
            raise RequestFailed(url, f"no answer ({getattr(e, 'reason', e)})", True) from None
        deadline.watch(r)
        try:
            with r:
                yield r, deadline
        except BROKEN as e:
            if deadline.expired:
                raise deadline.failure(url) from None
            what = (f"the body was cut short after {len(e.partial)} bytes ({e.expected} more expected)"
                    if isinstance(e, http.client.IncompleteRead) else f"the connection broke ({type(e).__name__}: {e})")
            raise RequestFailed(url, what, True) from None


def get_text(url: str, timeout: float) -> str:
    """The body of ``GET url`` as text (e.g. a /metrics page)."""
    with _request("GET", url, None, timeout) as (r, deadline):
        text = r.read()
        if deadline.expired:  # the deadline shut the socket: what was read is a fragment
            raise deadline.failure(url)
        return text.decode("utf-8", "replace")


def http_json(method: str, url: str, body: dict | None, timeout: float):
    """The decoded JSON body of ``method url`` (a JSON object; anything else is a non-retryable RequestFailed)."""
    with _request(method, url, body, timeout) as (r, deadline):
        text = r.read()
        if deadline.expired:  # the deadline shut the socket: what was read is a fragment
            raise deadline.failure(url)
    try:
        out = json.loads(text)
    except ValueError:
        raise RequestFailed(url, f"not JSON: {text[:200]!r}", False) from None
    if not isinstance(out, dict):
        raise RequestFailed(url, f"not a JSON object: {text[:200]!r}", False)
    return out


def typed(model, data, url: str, what: str):
    """``data`` as the reply model ``model`` (openai_reply); a wrong shape is a non-retryable RequestFailed naming
    the field and what came."""
    try:
        return parse(model, data, what)
    except BadReply as e:
        raise RequestFailed(url, e.what, False) from None


def with_retries(fn: Callable[[], ChatCompletion], retries: int, base_delay: float = 0.5):
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
              seed: int | None = None, template_kwargs: dict | None = None) -> ChatCompletion:
    """``template_kwargs``: the request mode's chat-template arguments (``chat_template_kwargs`` in the body)."""
    target = f"{url}/v1/chat/completions"
    body = chat_body(model, messages, max_tokens, temperature, seed)
    if template_kwargs:
        body["chat_template_kwargs"] = dict(template_kwargs)
    out = http_json("POST", target, body, timeout)
    return typed(ChatCompletion, out, target, "chat completion")


def stream_chat(url: str, body: dict, timeout: float) -> Iterator[tuple[float, ChatChunk]]:
    """``(perf_counter() at arrival, event)`` for every ``data:`` event of a streamed chat completion, until
    ``data: [DONE]`` (not yielded), all within one Deadline of ``timeout`` seconds. ``body`` gets
    ``"stream": true`` and asks for the usage chunk."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    target = f"{url}/v1/chat/completions"
    with _request("POST", target, body, timeout) as (r, deadline):
        kind = r.headers.get("Content-Type", "")
        if "text/event-stream" not in kind:
            raise RequestFailed(target, f"answered {kind or 'no Content-Type'}, not a text/event-stream: not a "
                                "streaming chat-completions endpoint", False)
        for raw in r:
            t = time.perf_counter()
            deadline.check(target)
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
            yield t, typed(ChatChunk, event, target, "streamed chunk")
        if deadline.expired:
            raise deadline.failure(target)
    raise RequestFailed(target, "the stream ended without 'data: [DONE]'", True)


@dataclass
class ServerCheck:
    """What ``check_server`` found: the model id to request and the checks that ran (``token_checked``: the
    server's own token ids or counts were compared with the target's)."""

    model: str
    checks: list[str]
    token_checked: bool
    owned_by: str | None = None  # the model's ``owned_by`` in /v1/models: names the engine

    @property
    def note(self) -> str | None:
        return None if self.token_checked else (
            "not checked that the server serves the target: it has no /tokenize and reports no usage.prompt_tokens "
            f"(only that GET /v1/models lists {self.model!r})")


def check_server(url: str, tok, model: str | None, timeout: float, model_hint: str) -> ServerCheck:
    """The model id to request from ``url`` and the checks that ran (the module docstring); ``model_hint`` names
    the option or field that chooses the model (for the messages)."""
    from trtllm_spec.data.chat import prompt_ids

    try:
        listing = typed(ModelsList, http_json("GET", f"{url}/v1/models", None, min(timeout, 30)), url,
                        "GET /v1/models")
    except RequestFailed as e:
        raise UserError(f"server {url} is not an OpenAI-compatible server answering GET /v1/models ({e.what}); "
                        "start it (e.g. 'trtllm-spec assets serve smollm2-135m --port 8000') or fix the URL") from None
    ids = [m.id for m in listing.data]
    if not ids:
        raise UserError(f"server {url}: GET /v1/models lists no model ({json.dumps(listing.model_dump())[:200]}); "
                        "not an OpenAI-compatible chat server?")
    if model is None and len(ids) > 1:
        raise UserError(f"server {url} serves {len(ids)} models ({', '.join(ids[:5])}); name the target's with "
                        f"{model_hint}")
    if model is not None and model not in ids:
        raise UserError(f"server {url} does not serve model {model!r} (it lists {', '.join(ids[:5])}); fix "
                        f"{model_hint} or the URL")
    chosen = model or ids[0]
    checks = [f"GET /v1/models lists {chosen!r}"]
    for path in ("/tokenize", "/extras/tokenize"):
        try:
            got = http_json("POST", f"{url}{path}", {"input": PROBE[0]["content"], "content": PROBE[0]["content"],
                                                     "add_special": False, "model": chosen}, min(timeout, 30))
            toks = typed(Tokenized, got, url, path).tokens
        except RequestFailed:
            continue  # no such endpoint (or not this kind): the token-count probe below still checks
        want = tok(PROBE[0]["content"], add_special_tokens=False).input_ids
        if toks != want:
            raise UserError(f"server {url} serves another vocabulary than the target: {path} of "
                            f"{PROBE[0]['content']!r} gives {toks[:8]}, the target's tokenizer {want[:8]}; "
                            "serve the target itself")
        checks.append(f"{path} ids equal the target's")
        break
    try:
        probe = http_chat(url, chosen, PROBE, 1, 0.0, timeout)
    except RequestFailed as e:
        raise UserError(f"server {url} (model {chosen}) did not answer a one-token chat completion ({e.what}); "
                        "it must serve POST /v1/chat/completions") from None
    want = len(prompt_ids(tok, PROBE))
    got_n = probe.usage.prompt_tokens if probe.usage is not None else None
    if got_n is not None and got_n not in (want, want + 1):  # + a BOS some servers prepend
        raise UserError(f"server {url} (model {chosen}) counts the probe prompt as {got_n} tokens, the target's "
                        f"tokenizer and chat template as {want}: it serves another model or chat template; serve "
                        "the target (same tokenizer and template)")
    if got_n is not None:
        checks.append("probe prompt token count equals the target's")
    owner = next((m.owned_by for m in listing.data if m.id == chosen), None)
    return ServerCheck(chosen, checks, token_checked=len(checks) > 1,
                       owned_by=owner[:80] if isinstance(owner, str) and owner else None)
