"""trtllm-serve's iteration stats (``/metrics``, ``LLM.get_stats()``) as a speculation profile: the second of the
engine's own reports ``measure --from-trtllm-metrics`` reads (the first, trtllm-bench's report, is in
``engine_reports.py``, with the shared profile builder). Fields: ``specDecodingStats`` ``numDraftTokens``,
``numAcceptedTokens``, ``numRequestsWithDraftTokens``, ``acceptanceLength`` (``cpp/include/tensorrt_llm/executor/
types.h`` ``SpecDecodingStats``); AL = (accepted + requests) / requests summed over iterations."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

from trtllm_spec.core.bundle import Bundle
from trtllm_spec.errors import UserError
from trtllm_spec.measure.counters import check_counts
from trtllm_spec.measure.engine_common import (
    bundle_draft_len,
    engine_profile,
    options_type,
    sha256_of,
)

METRICS_SOURCE = "trtllm-serve /metrics (iteration stats)"
COUNTS = ("numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens")  # specDecodingStats, in this order
METRICS_TIMEOUT_S = 10.0


def read_iteration_stats(source: str, timeout: float = METRICS_TIMEOUT_S) -> tuple[list, dict]:
    """(iteration stats, where they came from) from a JSON file or an http(s) URL (trtllm-serve ``/metrics``)."""
    if source.startswith(("http://", "https://")):
        from trtllm_spec.data.openai_http import RequestFailed, base_url, get_text

        base_url(source.split("/metrics")[0])  # a bad port or IPv6 host: one line naming the URL
        try:  # one deadline for the request; a body cut short or a broken connection is a RequestFailed
            text = get_text(source, timeout)
        except RequestFailed as exc:
            raise UserError(f"metrics endpoint {source} {exc.answer}; start the bundle's serve.sh "
                            "(trtllm-serve with enable_iter_perf_stats: true) and give its /metrics URL") from None
        origin = {"url": source}
        where = f"metrics endpoint {source}"
    else:
        path = Path(source)
        from trtllm_spec.core.files import read_text

        text = read_text(path, "iteration stats file", UserError)
        origin = {"file": str(path.resolve()), "sha256": sha256_of(path)}
        where = f"iteration stats file {path}"
    try:
        data = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        # LLM.get_stats() dumps and some collectors write one JSON object per line
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise UserError(f"{where} is not JSON or JSON lines ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise UserError(f"{where} holds no iteration stats (a JSON list of objects with specDecodingStats); "
                        "serve with enable_iter_perf_stats: true and send requests before reading /metrics")
    return data, origin


def iteration_totals(stats: Iterable, where: str, required: bool = True) -> dict | None:
    """Drafted, accepted and request-iterations summed over the iterations that speculated (None when none did
    and not ``required``)."""
    drafted = accepted = requests = iterations = 0
    per_iter_max = reported_al = 0.0
    for i, entry in enumerate(stats):
        data = json.loads(entry) if isinstance(entry, str | bytes) else entry
        if not isinstance(data, dict):
            raise UserError(f"{where}: entry {i} is not an iteration-stats object")
        spec = data.get("specDecodingStats")
        if not isinstance(spec, dict):
            continue
        counts = {f"specDecodingStats.{k}": spec.get(k, 0) for k in COUNTS}
        al_said = spec.get("acceptanceLength")
        said = {**counts, **({"specDecodingStats.acceptanceLength": al_said} if al_said is not None else {})}
        check_counts(f"{where}: entry {i}", said, whole=counts.keys(),
                     at_most=[("specDecodingStats.numAcceptedTokens", "specDecodingStats.numDraftTokens")],
                     steps=("specDecodingStats.numRequestsWithDraftTokens", "specDecodingStats.numDraftTokens"))
        n_d, n_a, n_r = (int(v) for v in counts.values())
        if n_r == 0 or n_d == 0:
            continue
        reported_al = max(reported_al, float(al_said or 0))
        drafted, accepted, requests, iterations = drafted + n_d, accepted + n_a, requests + n_r, iterations + 1
        per_iter_max = max(per_iter_max, n_d / n_r)
    if requests == 0:
        if not required:
            return None
        raise UserError(f"{where} has no iteration with specDecodingStats draft tokens: the server needs "
                        "enable_iter_perf_stats: true (the bundle's options set it) and a speculative_config, and "
                        "requests must have run")
    return {"num_draft_tokens": drafted, "num_accepted_tokens": accepted, "num_requests_with_draft_tokens": requests,
            "iterations": iterations, "max_drafts_per_request": per_iter_max, "max_reported_al": reported_al}


def profile_from_iteration_stats(source: str, *, options: dict | None = None, draft_len: int | None = None,
                                 temperature: float = 0.0, bundle: Bundle | None = None,
                                 timeout: float = METRICS_TIMEOUT_S) -> dict:
    stats, origin = read_iteration_stats(source, timeout)
    where = f"iteration stats {source}"
    t = iteration_totals(stats, where)
    d = draft_len or (bundle_draft_len(options) if options else None) or math.ceil(t["max_drafts_per_request"] - 1e-9)
    if d < 1:
        raise UserError(f"{where}: cannot tell the draft length; give --draft-len D or --bundle DIR")
    req, acc = t["num_requests_with_draft_tokens"], t["num_accepted_tokens"]
    al = (acc + req) / req
    if al > 1 + d + 1e-6:
        raise UserError(f"{where}: AL {al:.3f} exceeds 1 + D = {1 + d}; give the D the server ran (--draft-len)")
    if t["max_reported_al"] > 1 + d + 1e-6:
        raise UserError(f"{where}: an iteration reports acceptanceLength {t['max_reported_al']:g}, above 1 + D = "
                        f"{1 + d}; the stats come from another draft length (give the D the server ran: --draft-len)")
    section = {
        "num_prompts": req, "generated_tokens": acc + req, "reference_tokens": None, "iterations": req,
        "mean_acceptance_length": round(al, 6), "conditional_rates": None, "marginal_rates": None,
        "acceptance_length": {str(d): round(al, 6)}, "al_histogram": None,
        "draft_acceptance_rate": round(acc / t["num_draft_tokens"], 6), "acceptance_source": METRICS_SOURCE,
        "tokens_per_s_target": None, "tokens_per_s_spec": None, "speedup": None, "identical_outputs": None,
        "token_agreement": None, "engine_reported": t,
    }
    from trtllm_spec.core.recipe import DEFAULT_DRAFTER

    ours = options_type(options, bundle)
    kind = ours or DEFAULT_DRAFTER
    src = {"kind": METRICS_SOURCE, **origin, "iterations": t["iterations"],
           "note": "num_prompts counts request-iterations (one per request per speculative step)"}
    if ours is None:
        src["drafter_type_assumed"] = f"{DEFAULT_DRAFTER} (no --bundle given; the planner uses the recipe's drafter)"
    return engine_profile(section, d, kind, src, temperature=temperature, dtype="engine",
                    target={"spec": None, "path": None, "hf_id": None},
                    suite={"suite": "served requests", "items": None}, bundle=bundle, max_new_tokens=None)


