"""The ``openai`` regeneration backend: any OpenAI-compatible chat-completions server (trtllm-serve, vLLM, SGLang,
llama.cpp) writes the replies.

Several ``server.urls`` share the work (conversation i goes to server i mod n), ``server.concurrency`` requests are
in flight, each with a timeout and ``server.retries`` retries (exponential backoff; 429 and 5xx and connection
errors retry, other 4xx do not). Resumable like the in-process path: the JSONL appends and skips done ids. A
request that still fails is recorded in ``<out>.failed.jsonl`` and retried by the next run; once
``server.max_failures`` failed the run stops, naming the server and its last response.

Before anything is sent every server is checked (``data/openai_http.check_server``: it answers ``GET /v1/models``,
serves the model and counts tokens as the target does). Every reply is re-tokenized with the target's tokenizer;
replies whose re-encoding differs from the server's ``usage.completion_tokens`` (beyond its EOS) are counted and
reported.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_spec.data.openai_http import RequestFailed, base_url, check_server, http_chat, with_retries
from trtllm_spec.data.regenerate import RegenReport, check_output_file, read_done, rewrite_clean
from trtllm_spec.errors import UserError


@dataclass
class OpenAIReport(RegenReport):
    failed: int = 0
    first_error: str | None = None  # the first failed request: its server and what came
    failed_path: Path | None = None  # where the failed ids are kept for the rerun
    truncated: int = 0  # replies cut by max_tokens (kept, as the in-process path keeps them)
    mismatched: int = 0  # replies whose re-encoding differs from the server's token count
    replies: int = 0
    per_server: dict = field(default_factory=dict)


def regenerate_openai(items: list, target_dir: Path, out: Path, server, *, max_new_tokens: int,
                      temperature: float = 0.0, seed: int = 0, chat_template: Path | None = None,
                      progress: Callable[[int, int, int], None] | None = None,
                      log: Callable[[str], None] = lambda _m: None,
                      template_kwargs: dict | None = None) -> OpenAIReport:
    """Answer every user turn of ``items`` through ``server`` (a RegenServerConfig); see the module docstring."""
    from trtllm_spec.data.chat import load_tokenizer

    if not server.urls:
        raise UserError("drafter.training.data.regen_backend is openai but server.urls is empty; give "
                        "--server-url http://host:port (repeatable) or drafter.training.data.server.urls")
    urls = [base_url(u) for u in server.urls]
    twice = sorted({u for u in urls if urls.count(u) > 1})
    if twice:
        raise UserError(f"server url {twice[0]} is given twice; list each server once")
    check_output_file(out, "--out")  # before anything is sent
    tok = load_tokenizer(target_dir, chat_template)
    found = {u: check_server(u, tok, server.model, server.timeout_s, "drafter.training.data.server.model")
             for u in urls}
    models = {u: c.model for u, c in found.items()}
    for u, c in found.items():
        if c.note:
            log(f"regenerate: server {u}: {c.note}")
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
            r = with_retries(lambda conv=conv: http_chat(url, models[url], conv, max_new_tokens, temperature,
                                                          server.timeout_s, seed, template_kwargs),
                             server.retries)
            text = r.choices[0].message.content or ""
            conv.append({"role": "assistant", "content": text})
            counts.append((r.usage.completion_tokens if r.usage is not None else None, r.choices[0].finish_reason,
                           len(tok(text, add_special_tokens=False).input_ids)))
        mode = {"chat_template_kwargs": dict(template_kwargs)} if template_kwargs else {}
        return {"rec": {"id": it.id, "source": getattr(it, "source", ""), "messages": conv, "server": url, **mode},
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
    rep.first_error = f"{failures[0]['server']}: {failures[0]['error']}" if failures else None
    rep.failed_path = failed_path if failures else None
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
