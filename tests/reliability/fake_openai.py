"""FakeOpenAI: a fake OpenAI-compatible chat-completions server on 127.0.0.1 for hostile-server tests.

A fake, named as one: it stands for a misbehaving trtllm-serve / vLLM / llama.cpp server, which cannot be made to
misbehave on purpose. Its good replies follow the OpenAI API reference shapes (``GET /v1/models`` list,
``POST /v1/chat/completions`` object or ``text/event-stream`` of ``chat.completion.chunk`` events ending in
``data: [DONE]``); each test replaces one route's reply with a bad one (``Reply``), or with successive ones
(``Reply.bodies``: a ``/metrics`` page whose counters move over a level). Bounded: it serves on its own
thread, only on 127.0.0.1, and stops by itself after ``lifetime_s`` even if a test forgets it; ``with`` stops it at
once. Its address is registered with the reliability network block (``conftest.LOCAL_FAKES``), the only addresses
tests may connect to.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.reliability.conftest import LOCAL_FAKES

MODEL_ID = "fake-model"


@dataclass
class Reply:
    """One route's reply: ``body`` (JSON value, or bytes sent as is) with ``status``; ``declared`` sends a
    Content-Length larger than the body (a body cut short); ``events`` streams these SSE ``data:`` payloads (JSON
    values or raw strings) one per ``interval_s``; ``content_type`` overrides the header."""

    body: object = None
    status: int = 200
    declared: int | None = None
    events: list | None = None
    interval_s: float = 0.0
    content_type: str | None = None
    good_first: int = 0  # the first N requests of the route get the good reply (e.g. the server check's probe)
    delay_s: float = 0.0  # wait this long before answering
    bodies: list | None = None  # successive bodies: the i-th request of the route gets bodies[i], later ones the last


def good_completion(text: str = "Hello there.") -> dict:
    return {"id": "c1", "object": "chat.completion", "model": MODEL_ID,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 3}}


def good_stream(text: str = "Hello there.") -> list:
    pieces = [text[:5], text[5:]]
    return ([{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
            + [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
            + [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
               {"choices": [], "usage": {"completion_tokens": 3}}, "[DONE]"])


@dataclass
class FakeOpenAI:
    """``routes``: ``"GET /v1/models"`` / ``"POST /v1/chat/completions"`` / ``"POST /tokenize"`` ... -> Reply; a
    chat completion with ``"stream": true`` uses the ``"STREAM /v1/chat/completions"`` route. Unlisted routes get
    the good reply (404 for /tokenize, /metrics)."""

    routes: dict[str, Reply] = field(default_factory=dict)
    lifetime_s: float = 60.0
    requests: list[str] = field(default_factory=list)

    def __post_init__(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                fake._serve(self, "GET", None)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                fake._serve(self, "POST", body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        LOCAL_FAKES.add(("127.0.0.1", self.port))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name=f"FakeOpenAI:{self.port}")
        self._thread.start()
        self._stopper = threading.Timer(self.lifetime_s, self.stop)
        self._stopper.daemon = True
        self._stopper.start()

    def _default(self, key: str) -> Reply:
        if key == "GET /v1/models":
            return Reply({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        if key == "POST /v1/chat/completions":
            return Reply(good_completion())
        if key == "STREAM /v1/chat/completions":
            return Reply(events=good_stream())
        return Reply({"error": "not found"}, status=404)

    def _serve(self, h: BaseHTTPRequestHandler, method: str, body: dict | None) -> None:
        key = f"{method} {h.path}"
        if method == "POST" and isinstance(body, dict) and body.get("stream"):
            key = f"STREAM {h.path}"
        self.requests.append(key)
        reply = self.routes.get(key)
        if reply is None or self.requests.count(key) <= reply.good_first:
            reply = self._default(key)
        if reply.bodies:  # e.g. /metrics counters read before and after a level
            body = reply.bodies[min(self.requests.count(key), len(reply.bodies)) - 1]
            reply = Reply(body, status=reply.status, content_type=reply.content_type)
        try:
            if reply.delay_s:
                time.sleep(reply.delay_s)
            if reply.events is not None:
                h.send_response(reply.status)
                h.send_header("Content-Type", reply.content_type or "text/event-stream")
                h.send_header("Connection", "close")
                h.end_headers()
                for ev in reply.events:
                    payload = ev if isinstance(ev, str) else json.dumps(ev)
                    h.wfile.write(f"data: {payload}\n\n".encode())
                    h.wfile.flush()
                    if reply.interval_s:
                        time.sleep(reply.interval_s)
                h.close_connection = True
                return
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            h.send_response(reply.status)
            h.send_header("Content-Type", reply.content_type or "application/json")
            h.send_header("Content-Length", str(reply.declared or len(data)))
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(data)
            h.wfile.flush()
            h.close_connection = True
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its deadline): fine
            h.close_connection = True

    def stop(self) -> None:
        if getattr(self, "_stopped", False):
            return
        self._stopped = True
        self._stopper.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()
        LOCAL_FAKES.discard(("127.0.0.1", self.port))

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
