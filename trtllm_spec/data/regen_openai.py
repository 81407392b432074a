"""The ``openai`` regeneration backend: any OpenAI-compatible chat-completions server (trtllm-serve, vLLM, SGLang,
llama.cpp) writes the replies.

Several ``server.urls`` share the work (conversation i goes to server i mod n), ``server.concurrency`` requests are
in flight, each with a timeout and ``server.retries`` retries (exponential backoff; 429 and 5xx and connection
errors retry, other 4xx do not). Resumable like the in-process path: the JSONL appends and skips done ids. A
request that still fails is recorded in ``<out>.failed.jsonl`` and retried by the next run; once
``server.max_failures`` failed the run stops, naming the server and its last response.

Before anything is sent every server is checked: ``GET /v1/models`` must answer (and list ``server.model`` when
given, or exactly one model), and the server must count a probe prompt's tokens as the target's tokenizer and
chat template do (``usage.prompt_tokens``); its ``/tokenize`` or ``/extras/tokenize`` endpoint, where it has one,
must return the target tokenizer's ids. Every reply is re-tokenized with the target's tokenizer; replies whose
re-encoding differs from the server's ``usage.completion_tokens`` (beyond its EOS) are counted and reported.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_spec.data.regenerate import RegenReport, read_done, rewrite_clean
from trtllm_spec.errors import UserError

PROBE = [{"role": "user", "content": "Name three colours of the rainbow."}]
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@dataclass
class OpenAIReport(RegenReport):
    failed: int = 0
    truncated: int = 0  # replies cut by max_tokens (kept, as the in-process path keeps them)
    mismatched: int = 0  # replies whose re-encoding differs from the server's token count
    replies: int = 0
    per_server: dict = field(default_factory=dict)


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


def _http(method: str, url: str, body: dict | None, timeout: float) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise RequestFailed(url, f"HTTP {e.code}: {detail}", e.code in RETRY_STATUS) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        raise RequestFailed(url, f"no answer ({getattr(e, 'reason', e)})", True) from None
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


def check_server(url: str, tok, model: str | None, timeout: float) -> str:
    """The model id to request from ``url``, after the checks in the module docstring."""
    from trtllm_spec.data.chat import prompt_ids

    try:
        listing = _http("GET", f"{url}/v1/models", None, min(timeout, 30))
    except RequestFailed as e:
        raise UserError(f"server {url} is not an OpenAI-compatible server answering GET /v1/models ({e.what}); "
                        "start it (e.g. 'trtllm-spec assets serve smollm2-135m --port 8000') or fix the URL") from None
    ids = [m.get("id") for m in listing.get("data") or [] if isinstance(m, dict)]
    if not ids:
        raise UserError(f"server {url}: GET /v1/models lists no model ({json.dumps(listing)[:200]}); not an "
                        "OpenAI-compatible chat server?")
    if model is None and len(ids) > 1:
        raise UserError(f"server {url} serves {len(ids)} models ({', '.join(ids[:5])}); name the target's with "
                        "drafter.training.data.server.model")
    if model is not None and model not in ids:
        raise UserError(f"server {url} does not serve model {model!r} (it lists {', '.join(ids[:5])}); fix "
                        "drafter.training.data.server.model or the URL")
    chosen = model or ids[0]
    for path in ("/tokenize", "/extras/tokenize"):
        try:
            got = _http("POST", f"{url}{path}", {"input": PROBE[0]["content"], "content": PROBE[0]["content"],
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
    probe = _http_chat(url, chosen, PROBE, 1, 0.0, timeout)
    want = len(prompt_ids(tok, PROBE))
    got_n = (probe.get("usage") or {}).get("prompt_tokens")
    if got_n is not None and got_n not in (want, want + 1):  # + a BOS some servers prepend
        raise UserError(f"server {url} (model {chosen}) counts the probe prompt as {got_n} tokens, the target's "
                        f"tokenizer and chat template as {want}: it serves another model or chat template; serve "
                        "the target (same tokenizer and template)")
    return chosen


def _http_chat(url: str, model: str, messages: list[dict], max_tokens: int, temperature: float, timeout: float,
               seed: int | None = None) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    if seed is not None:
        body["seed"] = seed
    out = _http("POST", f"{url}/v1/chat/completions", body, timeout)
    choices = out.get("choices")
    if not choices or not isinstance(choices[0].get("message"), dict):
        raise RequestFailed(url, f"no choices[0].message in {json.dumps(out)[:200]}", False)
    return out


def regenerate_openai(items: list, target_dir: Path, out: Path, server, *, max_new_tokens: int,
                      temperature: float = 0.0, seed: int = 0, chat_template: Path | None = None,
                      progress: Callable[[int, int, int], None] | None = None,
                      log: Callable[[str], None] = lambda _m: None) -> OpenAIReport:
    """Answer every user turn of ``items`` through ``server`` (a RegenServerConfig); see the module docstring."""
    from trtllm_spec.data.chat import load_tokenizer

    if not server.urls:
        raise UserError("drafter.training.data.regen_backend is openai but server.urls is empty; give "
                        "--server-url http://host:port (repeatable) or drafter.training.data.server.urls")
    urls = [base_url(u) for u in server.urls]
    twice = sorted({u for u in urls if urls.count(u) > 1})
    if twice:
        raise UserError(f"server url {twice[0]} is given twice; list each server once")
    tok = load_tokenizer(target_dir, chat_template)
    models = {u: check_server(u, tok, server.model, server.timeout_s) for u in urls}
    out.parent.mkdir(parents=True, exist_ok=True)
    done = read_done(out)
    rewrite_clean(out, done)
    failed_path = out.with_name(out.name + ".failed.jsonl")
    todo = [it for it in items if it.id not in done]
    rep = OpenAIReport(done=0, skipped=len(items) - len(todo), generated_tokens=0, seconds=0.0,
                       per_server={u: 0 for u in urls})
    lock = threading.Lock()
    failures: list[dict] = []
    started = time.perf_counter()

    def one(k: int, it) -> dict:
        url = urls[k % len(urls)]
        conv: list[dict] = []
        counts = []
        for turn in [m["content"] for m in it.messages if m["role"] == "user"]:
            conv.append({"role": "user", "content": turn})
            r = with_retries(lambda conv=conv: _http_chat(url, models[url], conv, max_new_tokens, temperature,
                                                          server.timeout_s, seed), server.retries)
            text = r["choices"][0]["message"].get("content") or ""
            conv.append({"role": "assistant", "content": text})
            counts.append(((r.get("usage") or {}).get("completion_tokens"), r["choices"][0].get("finish_reason"),
                           len(tok(text, add_special_tokens=False).input_ids)))
        return {"rec": {"id": it.id, "source": getattr(it, "source", ""), "messages": conv, "server": url},
                "counts": counts, "url": url}

    with open(out, "a", encoding="utf-8") as f, ThreadPoolExecutor(server.concurrency) as pool:
        pending = {pool.submit(one, k, it): it for k, it in enumerate(todo)}
        last = None
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                it = pending.pop(fut)
                try:
                    res = fut.result()
                except RequestFailed as e:
                    failures.append({"id": it.id, "server": e.url, "error": e.what})
                    last = e
                    continue
                with lock:
                    f.write(json.dumps(res["rec"]) + "\n")
                    f.flush()
                rep.done += 1
                rep.per_server[res["url"]] += 1
                for n_server, reason, n_ours in res["counts"]:
                    rep.replies += 1
                    rep.generated_tokens += n_server if n_server is not None else n_ours
                    rep.truncated += reason == "length"
                    if n_server is not None and n_ours not in (n_server, n_server - 1):
                        rep.mismatched += 1
                if progress:
                    progress(rep.skipped + rep.done, len(items), rep.generated_tokens)
            if len(failures) >= server.max_failures:  # stop: cancel what has not started, keep what is running
                pending = {fut: it for fut, it in pending.items() if not fut.cancel()}
    rep.seconds = time.perf_counter() - started
    rep.failed = len(failures)
    _write_failed(failed_path, failures)
    if rep.mismatched:
        log(f"regenerate: {rep.mismatched} of {rep.replies} replies re-encode to a token count other than the "
            "server's (the server's tokenizer or detokenizer differs from the target's)")
    if rep.truncated:
        log(f"regenerate: {rep.truncated} replies were cut at max_tokens = {max_new_tokens}")
    if len(failures) >= server.max_failures:
        raise UserError(f"stopped after {len(failures)} failed requests (server.max_failures = "
                        f"{server.max_failures}); last: {last}. {rep.done} new conversations were kept, the failed "
                        f"ids are in {failed_path}; fix the server and rerun to resume")
    if failures:
        log(f"regenerate: {len(failures)} requests failed (last: {last}); recorded in {failed_path}, the next run "
            "retries them")
    return rep


def _write_failed(path: Path, failures: list[dict]) -> None:
    """This run's failures (the next run retries them: they are not in the JSONL); none: the file goes."""
    if not failures:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".partial")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in failures), encoding="utf-8")
    tmp.replace(path)
