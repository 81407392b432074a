"""FAKE speculative OpenAI-compatible servers for ``trtllm-spec tune`` tests, and synthetic tune runs with KNOWN terms.

``FakeSpecServer`` is a fake, named as one: it stands for a vLLM server running a drafter at D (a real vLLM runs in
the slow tier; a GPU engine cannot run here). It follows the documented shapes (OpenAI ``GET /v1/models``, streamed
``POST /v1/chat/completions`` ``chat.completion.chunk`` events with a final ``usage``; vLLM's ``/metrics``
``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
``..._num_accepted_tokens_per_pos_total{position="i"}``). Its step takes the KNOWN step model's time at the
number of requests in flight, each step yields the accepted drafts + 1 tokens per request (a fixed pattern: every
step accepts ``accept[i % len(accept)]`` of the D drafts). Bounded: 127.0.0.1 only, its own threads, stops by
itself after ``lifetime_s``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# the step model's terms (seconds): per step, per sequence, per speculative step, per sequence per speculative step,
# per draft token, per sequence per draft token (planner/step.py on a measured step); TTFT terms likewise
KNOWN = {"iteration_s": 0.060, "sequence_s": 0.006, "spec_iteration_s": 0.010, "spec_sequence_s": 0.004,
         "draft_step_s": 0.008, "draft_sequence_s": 0.003}
KNOWN_TTFT = {"ttft_s": 0.30, "ttft_sequence_s": 0.05, "spec_ttft_s": 0.10, "spec_ttft_sequence_s": 0.02}


def step_s(c: int, d: int, terms: dict | None = None) -> float:
    t = terms or KNOWN
    return (t["iteration_s"] + c * t["sequence_s"] + (t["spec_iteration_s"] + c * t["spec_sequence_s"] if d else 0.0)
            + d * (t["draft_step_s"] + c * t["draft_sequence_s"]))


def ttft_s(c: int, d: int, terms: dict | None = None) -> float:
    t = terms or KNOWN_TTFT
    return t["ttft_s"] + c * t["ttft_sequence_s"] + (t["spec_ttft_s"] + c * t["spec_ttft_sequence_s"] if d else 0.0)


def chain_al(d: int, rates=(0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)) -> tuple[float, list[float]]:
    """AL(D) and the per-position accepted counts per draft of a chain with these conditional rates."""
    marg, m = [], 1.0
    for i in range(d):
        m *= rates[i]
        marg.append(m)
    return 1.0 + sum(marg), marg


def synthetic_runs(concurrency=(1, 2, 4, 8, 16), draft_lens=(0, 1, 2, 3, 4, 5), rounds=3, osl=48,
                   noise: dict | None = None) -> list[dict]:
    """Runs as stages/tune.run_cell records them, for an engine that follows KNOWN exactly (``noise``: {(round, c,
    key): factor} multiplies that run's tokens/s and divides its TPOT, e.g. a disturbed plain run)."""
    runs = []
    for rnd in range(rounds):
        for c in concurrency:
            for d in draft_lens:
                al, marg = chain_al(d)
                tpot = step_s(c, d) / al
                ttft = ttft_s(c, d)
                tok_s = c * osl / (ttft + (osl - 1) * tpot)
                f = (noise or {}).get((rnd, c, d), 1.0)
                drafts = 1000
                runs.append({"chunk": "all", "round": rnd, "concurrency": c, "key": d, "requests": 3 * c,
                             "output_tokens": 3 * c * osl, "wall_s": 1.0, "achieved_concurrency": c,
                             "tokens_per_s": tok_s * f, "tpot_ms": tpot * 1e3 / f, "ttft_ms": ttft * 1e3,
                             "al": al if d else None, "num_drafts": drafts if d else 0,
                             "accepted_per_pos": [round(drafts * m) for m in marg]})
    return runs


class FakeSpecServer:
    """A FAKE OpenAI-compatible server that drafts at D with the KNOWN step and TTFT times, scaled by ``scale``
    (tests keep it short). ``die_after``: the server stops answering after that many chat requests (a server that
    dies mid-sweep); ``slow``: (n, factor): the n-th chat request streams ``factor`` times longer (a cell whose tail
    drains with one request in flight)."""

    def __init__(self, draft_len: int, scale: float = 0.05, accept=(1, 0), lifetime_s: float = 120.0,
                 die_after: int | None = None, slow: tuple[int, float] = (0, 1.0), model: str = "target", port: int = 0):
        self.d, self.scale, self.accept = draft_len, scale, accept
        self.model, self.die_after, self.slow = model, die_after, slow
        self.lock = threading.Lock()
        self.active = 0
        self.chats = 0
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * max(draft_len, 1)}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path == "/v1/models":
                    fake._json(self, {"object": "list", "data": [{"id": fake.model, "object": "model",
                                                                  "owned_by": "vllm"}]})
                elif self.path == "/metrics" and fake.d:
                    fake._text(self, fake.metrics())
                else:
                    fake._json(self, {"error": "not found"}, 404)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path != "/v1/chat/completions":
                    fake._json(self, {"error": "not found"}, 404)
                    return
                fake._chat(self, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self._stopper = threading.Timer(lifetime_s, self.stop)
        self._stopper.daemon = True
        self._stopper.start()

    def metrics(self) -> str:
        c = self.counters
        lines = [f"vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {c['drafts']}",
                 f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {c['draft_tokens']}",
                 f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {c['accepted']}"]
        lines += [f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",position=\"{i}\"}} {n}"
                  for i, n in enumerate(c["per_pos"][:self.d])]
        return "\n".join(lines) + "\n"

    def _json(self, h, data, status=200):
        raw = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(raw)
        h.close_connection = True

    def _text(self, h, text):
        raw = text.encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(raw)))
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(raw)
        h.close_connection = True

    def _chat(self, h, body):
        with self.lock:
            self.chats += 1
            n_chat = self.chats
        if self.die_after is not None and n_chat > self.die_after:
            h.close_connection = True
            h.connection.close()  # the server is gone: the connection drops
            return
        max_tokens = int(body.get("max_tokens") or 16)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        slow = self.slow[1] if n_chat == self.slow[0] else 1.0
        with self.lock:
            self.active += 1
        try:
            with self.lock:
                c = self.active
            time.sleep(ttft_s(c, self.d) * self.scale * slow)
            self._event(h, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]})
            made, step = 1, 0
            while made < max_tokens:
                with self.lock:
                    c = self.active
                time.sleep(step_s(c, self.d) * self.scale * slow)
                acc = min(self.accept[step % len(self.accept)], self.d)
                k = min(acc + 1, max_tokens - made)
                if self.d:
                    with self.lock:
                        self.counters["drafts"] += 1
                        self.counters["draft_tokens"] += self.d
                        self.counters["accepted"] += acc
                        for i in range(acc):
                            self.counters["per_pos"][i] += 1
                self._event(h, {"choices": [{"index": 0, "delta": {"content": " b" * k}}]})
                made += k
                step += 1
            self._event(h, {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            self._event(h, {"choices": [], "usage": {"completion_tokens": made, "prompt_tokens": 5}})
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self.lock:
                self.active -= 1
            h.close_connection = True

    @staticmethod
    def _event(h, payload):
        h.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        h.wfile.flush()

    def stop(self):
        if getattr(self, "_stopped", False):
            return
        self._stopped = True
        self._stopper.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
