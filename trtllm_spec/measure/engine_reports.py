"""The engine's own numbers as a speculation profile: ``trtllm-bench --report_json`` here, trtllm-serve iteration
stats in ``iteration_stats.py`` (both built by ``engine_common.engine_profile``).

``measure --from-trtllm-bench REPORT.json`` and ``measure --from-trtllm-metrics FILE|URL`` turn what
TensorRT-LLM measured while a bundle was benchmarked or served into the ``speculation_profile.json`` that
``plan --acceptance`` reads (AL at the D the engine ran; per-position rates are not reported), marked with its
source (``profile["source"]``). Pure Python: no torch, no tensorrt_llm.

What the files hold (NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/dataclasses/reporting.py`` @0249976, and
``statistics.py``; ``cpp/include/tensorrt_llm/executor/types.h`` ``SpecDecodingStats``):

- trtllm-bench: ``request_info.{num_requests, avg_output_length}`` (output tokens include the first one) and
  ``decoding_stats.{mode, num_draft_tokens_percentiles, num_accepted_draft_tokens_percentiles,
  draft_acceptance_rate_percentiles, acceptance_length_percentiles}``, each ``{minimum, maximum, average, p50,
  [p90,] p95, p99}`` over requests. Per request r with N_r output tokens and ``decode_iteration`` g_r generation
  steps, trtllm-bench counts ``I_r = g_r + 1`` iterations (the context phase included), accepted
  ``A_r = N_r - I_r`` and drafted ``max_draft_len * I_r``; its AL is ``N_r / I_r``.
  Our AL leaves the context phase's token out (docs/speculation_profile.md): ``AL = (N - R) / (I - R)`` summed
  over requests, which the averages give exactly: ``I = R * (avg N - avg A)``. D = avg drafted / avg I.
- trtllm-serve ``/metrics`` (and ``LLM.get_stats()``, both need ``enable_iter_perf_stats``): a JSON list of
  iteration stats whose ``specDecodingStats`` hold ``numDraftTokens``, ``numAcceptedTokens``,
  ``numRequestsWithDraftTokens``, ``acceptanceLength``; AL = (accepted + requests) / requests summed over
  iterations (the same formula TensorRT-LLM's own tests use).
"""

from __future__ import annotations

from pathlib import Path

from trtllm_spec.core.bundle import Bundle

# decoding_stats.mode is the speculative_config's decoding_type (PyTorch backend), or one of its aliases
from trtllm_spec.core.releases import (
    DECODING_TAGS,
    REPORT_MODES,
    TAG_ALIASES,
    default_release,
    tag_type,
    tag_types,
)
from trtllm_spec.errors import UserError
from trtllm_spec.measure.engine_common import (
    bundle_draft_len,
    engine_profile,
    finite_number,
    options_type,
    sha256_of,
)

BENCH_SOURCE = "trtllm-bench --report_json"
PERCENTILE_KEYS = ("num_draft_tokens_percentiles", "num_accepted_draft_tokens_percentiles",
                   "draft_acceptance_rate_percentiles", "acceptance_length_percentiles")


# ---- trtllm-bench --report_json ----------------------------------------------------------------------

def read_bench_report(path: Path) -> dict:
    """The report as a dict, with the fields we need checked (each missing one named)."""
    from trtllm_spec.core.files import read_structured

    data = read_structured(path, "trtllm-bench report", UserError)
    where = f"trtllm-bench report {path}"
    if not isinstance(data, dict):
        raise UserError(f"{where} must hold a JSON object (trtllm-bench ... throughput --report_json FILE), "
                        f"got {type(data).__name__}")
    if "decoding_stats" not in data:
        known = [k for k in ("engine", "request_info", "performance") if k in data]
        why = ("the run did not speculate (trtllm-bench writes decoding_stats only with a speculative_config)"
               if known else "it is not a trtllm-bench report_json (no engine/request_info/performance either)")
        raise UserError(f"{where} has no 'decoding_stats': {why}; benchmark with the bundle's bench.sh, which passes "
                        "--extra_llm_api_options llm_api_options.yaml and --report_json")
    dec, req = data["decoding_stats"], data.get("request_info")
    if not isinstance(dec, dict):
        raise UserError(f"{where}: 'decoding_stats' must be an object with {', '.join(PERCENTILE_KEYS)}")
    if not isinstance(req, dict):
        raise UserError(f"{where} has no 'request_info' object (num_requests, avg_output_length)")
    missing = [f"request_info.{k}" for k in ("num_requests", "avg_output_length") if not finite_number(req.get(k))]
    for key in ("num_draft_tokens_percentiles", "num_accepted_draft_tokens_percentiles"):
        stats = dec.get(key)
        if not isinstance(stats, dict) or not finite_number(stats.get("average")):
            missing.append(f"decoding_stats.{key}.average")
    if missing:
        raise UserError(f"{where} lacks {', '.join(missing)} (null when the run had no draft tokens: check "
                        "max_draft_len in the options file)")
    _check_percentiles(dec, where)
    return data


def _check_percentiles(dec: dict, where: str) -> None:
    """The one check of an engine's numbers (measure/counters.py) over the report's percentiles: each null or a
    finite number >= 0 (a rate also <= 1: NaN, Infinity or a negative count is a broken report, and would reach
    the profile, JSON has no NaN), and the average request accepts no more draft tokens than it drafted."""
    from trtllm_spec.measure.counters import check_counts

    fix = "the report is broken: rerun the benchmark (bench.sh)"
    for key in PERCENTILE_KEYS:
        stats = dec.get(key)
        if stats is None:
            continue
        if not isinstance(stats, dict):
            raise UserError(f"{where}: decoding_stats.{key} must be an object of percentiles, got {stats!r:.60}")
        said = {f"decoding_stats.{key}.{name}": v for name, v in stats.items() if v is not None}
        check_counts(where, said, rates=said.keys() if key == "draft_acceptance_rate_percentiles" else (), fix=fix)
    accepted, drafted = (f"decoding_stats.{k}_percentiles.average" for k in ("num_accepted_draft_tokens",
                                                                             "num_draft_tokens"))
    check_counts(where, {accepted: dec["num_accepted_draft_tokens_percentiles"]["average"],
                         drafted: dec["num_draft_tokens_percentiles"]["average"]}, at_most=[(accepted, drafted)],
                 fix=fix)


def check_report_belongs(report: dict, where: str, options: dict | None, bundle: Bundle | None) -> None:
    """A trtllm-bench report re-plans a bundle only when it measured that bundle: its mechanism
    (``decoding_stats.mode``) is the bundle options' ``decoding_type``, and its model (``engine.model`` /
    ``model_path``) is one the bundle's manifest names (``target.served`` / ``hf_id`` / ``spec``). What the report
    does not say is not checked."""
    mode = report["decoding_stats"].get("mode")
    ours = options_type(options, bundle)
    # a mode several mechanisms share (DFlash's) belongs to the bundle when its drafter is one of them
    kinds = tag_types(mode) if isinstance(mode, str) else ()
    if ours is not None and mode is not None and ours not in (kinds or (mode,)):
        raise UserError(f"{where} measured decoding mode {mode!r} ({' / '.join(kinds) or 'unknown'}), but the "
                        f"bundle's options speculate with {ours}: the report comes from another bundle; bench this "
                        "bundle (its bench.sh) and use that report")
    if bundle is None:
        return
    names = bundle.model_names()
    engine = report.get("engine") or {}
    said = [str(engine[k]) for k in ("model", "model_path") if engine.get(k) not in (None, "", "None")]
    if said and names and not any(m in names or Path(m).name in names for m in said):
        raise UserError(f"{where} benchmarked model {said[0]!r}, but the bundle serves "
                        f"{bundle.served or (bundle.manifest.get('target') or {}).get('hf_id')!r}: the report comes "
                        "from another model; bench this bundle (its bench.sh) and use that report")


def _mode_type(mode: object, where: str, drafter_type: str | None) -> str:
    """The drafter type a report measured: the bundle's (``drafter_type``), else its mode's; a mode several
    mechanisms share (DFlash's: DFlash and DFlash2) is refused without a bundle, naming them (never guessed)."""
    if drafter_type is not None:
        return drafter_type
    kind = tag_type(mode, f"{where}: decoding_stats.mode", "give --bundle DIR, the bundle that was benchmarked "
                    "(its manifest records which drafter type ran)") if isinstance(mode, str) else None
    if kind is None:
        known = ", ".join([*DECODING_TAGS, *TAG_ALIASES, *REPORT_MODES])
        raise UserError(f"{where}: decoding_stats.mode {mode!r} is not one we plan for; known: {known} "
                        "(give --bundle so the drafter type is taken from its options)")
    return kind


def drafts_per_iteration(report: dict) -> float | None:
    """The max_draft_len a trtllm-bench run drafted with: drafts per request / iterations per request (output
    tokens - accepted drafts; trtllm-bench drafts max_draft_len each iteration). None where the counts are
    missing or inconsistent."""
    req, dec = report.get("request_info") or {}, report.get("decoding_stats") or {}
    drafts = (dec.get("num_draft_tokens_percentiles") or {}).get("average")
    accepted = (dec.get("num_accepted_draft_tokens_percentiles") or {}).get("average")
    osl = req.get("avg_output_length")
    if not all(finite_number(x) for x in (drafts, accepted, osl)) or osl - accepted <= 0:
        return None
    return float(drafts) / (float(osl) - float(accepted))


def bench_section(report: dict, where: str) -> tuple[dict, int]:
    """(profile section, D) from a checked report."""
    req, dec = report["request_info"], report["decoding_stats"]
    r = int(req["num_requests"])
    avg_n = float(req["avg_output_length"])
    avg_a = float(dec["num_accepted_draft_tokens_percentiles"]["average"])
    avg_i = avg_n - avg_a  # trtllm-bench's iterations per request, context phase included
    if r < 1 or avg_i < 1 or avg_a < 0:
        raise UserError(f"{where}: request_info.num_requests = {r}, avg_output_length = {avg_n} and "
                        f"num_accepted_draft_tokens average = {avg_a} are inconsistent (each request needs an "
                        "iteration: output tokens > accepted drafts)")
    d_float = drafts_per_iteration(report)
    d = round(d_float) if d_float is not None else 0
    if d_float is None or d < 1 or abs(d_float - d) > 0.05:
        raise UserError(f"{where}: num_draft_tokens average / iterations = {d_float} is not a draft length "
                        "(trtllm-bench counts max_draft_len drafts per iteration)")
    gen_iters = avg_i - 1.0
    al = 1.0 + avg_a / gen_iters if gen_iters > 0 else 1.0
    if al > 1 + d + 1e-6:
        raise UserError(f"{where}: AL {al:.3f} exceeds 1 + D = {1 + d}; the report is inconsistent")
    reported = dec.get("acceptance_length_percentiles") or {}
    over = {k: v for k, v in reported.items() if finite_number(v) and v > 1 + d + 1e-6}
    if over:
        k, v = next(iter(over.items()))
        raise UserError(f"{where}: decoding_stats.acceptance_length_percentiles.{k} = {v} exceeds 1 + D = {1 + d} "
                        "(AL counts the target's token plus at most D accepted drafts); the report is inconsistent")
    perf = report.get("performance") or {}
    streaming = report.get("streaming_metrics") or {}
    tps_user = streaming.get("token_output_speed_tok_s", perf.get("output_throughput_per_user_tok_s"))
    section = {
        "num_prompts": r, "generated_tokens": round(avg_n * r), "reference_tokens": None,
        "iterations": round(gen_iters * r), "mean_acceptance_length": round(al, 6),
        "conditional_rates": None, "marginal_rates": None, "acceptance_length": {str(d): round(al, 6)},
        "al_histogram": None, "draft_acceptance_rate": round(avg_a / (d * gen_iters), 6) if gen_iters > 0 else None,
        "acceptance_source": BENCH_SOURCE,
        "tokens_per_s_target": None, "tokens_per_s_spec": round(tps_user, 3) if finite_number(tps_user) else None,
        "speedup": None, "identical_outputs": None, "token_agreement": None,
        "engine_reported": {k: dec.get(k) for k in PERCENTILE_KEYS},
        "concurrency": req.get("avg_num_concurrent_requests"),
        "system_output_tokens_per_s": perf.get("system_output_throughput_tok_s"),
    }
    return section, d


def profile_from_bench_report(path: Path, *, options: dict | None = None, draft_len: int | None = None,
                              temperature: float = 0.0, bundle: Bundle | None = None,
                              profile: str | None = None) -> dict:
    """The speculation profile of one trtllm-bench report (one category, ``all``)."""
    where = f"trtllm-bench report {path}"
    report = read_bench_report(path)
    check_report_belongs(report, where, options, bundle)
    section, d = bench_section(report, where)
    ran_d = _check_draft_len(d, options, draft_len, section.get("concurrency"), where, profile or default_release())
    if ran_d != d:  # a schedule lowered D at this concurrency: the AL belongs to the scheduled D
        if section["mean_acceptance_length"] > 1 + ran_d + 1e-6:
            raise UserError(f"{where}: AL {section['mean_acceptance_length']:.3f} exceeds 1 + --draft-len {ran_d}")
        accepted = section["generated_tokens"] - section["iterations"] - section["num_prompts"]
        section["acceptance_length"] = {str(ran_d): section["mean_acceptance_length"]}
        section["draft_acceptance_rate"] = round(accepted / (ran_d * section["iterations"]), 6)
    engine = report.get("engine") or {}
    spec_type = options_type(options, bundle)
    kind = _mode_type(report["decoding_stats"].get("mode"), where, spec_type)
    source = {"kind": BENCH_SOURCE, "file": str(path.resolve()), "sha256": sha256_of(path),
              "mode": report["decoding_stats"].get("mode"), "trtllm_version": engine.get("version"),
              "backend": engine.get("backend"), "machine": report.get("machine"),
              "world_info": report.get("world_info"),
              "conversion": "AL = 1 + avg accepted / (avg output - avg accepted - 1): trtllm-bench's iterations "
                            "include the context phase, ours do not"}
    return engine_profile(section, ran_d, kind, source, temperature=temperature, dtype=engine.get("dtype") or "engine",
                    target={"spec": engine.get("model"), "path": engine.get("model_path"),
                            "hf_id": engine.get("model")},
                    suite={"suite": "trtllm-bench dataset", "items": section["num_prompts"],
                           "dataset": report.get("dataset")},
                    bundle=bundle, max_new_tokens=report["request_info"].get("avg_output_length"))


# ---- shared with iteration_stats: measure/engine_common.py ------------------------------------------

def _check_draft_len(reported: int, options: dict | None, draft_len: int | None, concurrency, where: str,
                     profile: str) -> int:
    """The D the engine ran: the report's, checked against the bundle's max_draft_len and schedule."""
    if options is not None:
        bundle_d = bundle_draft_len(options)
        if bundle_d is not None and bundle_d != reported:
            raise UserError(f"{where} ran max_draft_len {reported}, the bundle's options say {bundle_d}: the "
                            "report comes from another options file")
        schedule = (options.get("speculative_config") or {}).get("draft_len_schedule") or {}
        if draft_len is None and schedule and finite_number(concurrency):
            from trtllm_spec.planner.schedule import draft_len_at

            sched = {int(k): int(v) for k, v in schedule.items()}
            scheduled = draft_len_at(sched, reported, profile, max(1, round(concurrency)))
            if scheduled != reported:
                raise UserError(f"{where} ran at concurrency {concurrency:.1f}, where the bundle's draft_len_schedule "
                                f"(TensorRT-LLM {profile} rules) gives D = {scheduled}, not {reported}: the AL mixes "
                                "draft lengths; use the report at concurrency 1 (report_c1.json) or give --draft-len")
    if draft_len is not None and not 1 <= draft_len <= reported:
        raise UserError(f"--draft-len {draft_len} must be in 1..{reported} (the max_draft_len the engine ran)")
    return draft_len or reported


# ---- the command -------------------------------------------------------------------------------------

def profile_from_engine(*, bench_report: Path | None, metrics: str | None, bundle: Bundle | None,
                        draft_len: int | None, temperature: float) -> tuple[dict, list[Path]]:
    """(profile, input files to hash) for ``measure --from-trtllm-bench`` / ``--from-trtllm-metrics``;
    ``bundle``: the bundle's record (core.bundle.read_bundle), whose speculative options and release the report
    is checked against."""
    if (bench_report is None) == (metrics is None):
        raise UserError("give one of --from-trtllm-bench REPORT.json and --from-trtllm-metrics FILE|URL")
    if draft_len is not None and draft_len < 1:
        raise UserError(f"--draft-len {draft_len}: must be at least 1")
    options = bundle.speculative_options(absolute_paths=True) if bundle else None
    profile = bundle.profile if bundle else default_release()
    files = [bundle.path / bundle.speculative_file] if bundle else []
    if bench_report is not None:
        prof = profile_from_bench_report(bench_report, options=options, draft_len=draft_len,
                                         temperature=temperature, bundle=bundle, profile=profile)
        files.append(bench_report)
    else:
        from trtllm_spec.measure.iteration_stats import profile_from_iteration_stats

        prof = profile_from_iteration_stats(metrics, options=options, draft_len=draft_len, temperature=temperature,
                                            bundle=bundle)
        if not metrics.startswith(("http://", "https://")):
            files.append(Path(metrics))
    from trtllm_spec.measure.profile import validate_profile

    validate_profile(prof, f"profile from {prof['source']['kind']}")
    return prof, files
