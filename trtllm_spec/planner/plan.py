"""Assemble a plan: the search, the five guidelines, the recommendation and the schedule, as plan.json data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trtllm_spec import __version__
from trtllm_spec.core.artifacts import PLAN_SCHEMA
from trtllm_spec.core.hardware import Hardware
from trtllm_spec.core.releases import default_release
from trtllm_spec.core.shape import ModelShape
from trtllm_spec.core.trtllm_gates import engine_schedule
from trtllm_spec.planner import guidelines as gl
from trtllm_spec.planner.acceptance import AcceptanceModel
from trtllm_spec.planner.cost import Parallelism, Precision, kv_bytes_per_token_per_gpu
from trtllm_spec.planner.feasibility import infeasible_note, memory_budget
from trtllm_spec.planner.interval import DEFAULT_LEVEL
from trtllm_spec.planner.limits import limit_note, speculation_limit
from trtllm_spec.planner.robustness import robustness
from trtllm_spec.planner.schedule import check_schedule, render_schedule
from trtllm_spec.planner.search import (
    Candidate,
    CostContext,
    MechanismModel,
    MechanismPlan,
    Workload,
    best_by_batch,
    evaluate,
    pareto_frontier,
)
from trtllm_spec.planner.step import term_sources


@dataclass
class PlanRequest:
    target: ModelShape
    hardware: Hardware
    drafter: object  # a recipe drafter config (Eagle3Drafter, ...)
    workload: Workload
    par: Parallelism = Parallelism()
    num_gpus: int = 1
    precision: Precision = Precision()
    acceptance: AcceptanceModel | None = None
    max_draft_len: int = 8
    fixed_draft_len: int | None = None
    compare: bool = True
    free_gpu_memory_fraction: float = 0.9
    # the release whose rules apply (schedule keys, gates): unless told, what ``auto`` picks (core/releases.py)
    trtllm_profile: str = field(default_factory=default_release)
    max_batch_size: int | None = None
    latency_target_ms: float | None = None
    target_id: str = ""
    # the drafting mechanisms by name (drafters.registry.MECHANISMS): passed in, so the planner imports none
    mechanisms: Mapping[str, MechanismModel] = field(default_factory=dict)
    # the host-cost profile the hardware's overheads come from (core/host_costs.HostProfile.summary())
    host_costs: dict | None = None
    # measured acceptance of the other mechanisms guideline 5 compares (the rest use their defaults)
    compare_acceptance: Mapping[str, AcceptanceModel] = field(default_factory=dict)
    # the speedup interval (planner/interval.py): its level, each host term's log sd, and before a calibration's
    # (the release profile's) to report how much the calibration narrowed it
    interval_level: float = DEFAULT_LEVEL
    host_log_sd: Mapping[str, float] | None = None
    prior_host_log_sd: Mapping[str, float] | None = None
    prior_host_costs: Mapping[str, float] | None = None  # the release profile's Overheads fields (before calibration)
    # the absolute sd (seconds) of host terms the profile leaves at 0 unmeasured (per-sequence terms of a prior
    # without a batch sweep: core/host_costs.PER_SEQUENCE_SD_S), now and before a calibration
    host_sd_s: Mapping[str, float] | None = None
    prior_host_sd_s: Mapping[str, float] | None = None
    # the target's pass from AIConfigurator's kernel tables (planner.work: aiconfigurator): (batch, D) -> seconds by
    # kind, and what priced it; None: the roofline
    target_work: dict | None = None
    work_source: dict | None = None
    # the engine's captured CUDA-graph batch sizes (the bundle's cuda_graph_config.batch_sizes): GEMMs run padded
    graph_batch_sizes: tuple[int, ...] = ()

    def mechanism(self, name: str) -> MechanismModel:
        if name not in self.mechanisms:
            from trtllm_spec.errors import UserError

            raise UserError(f"unknown drafter type {name!r}; valid: {', '.join(self.mechanisms)}")
        return self.mechanisms[name]


def mechanism_plan(req: PlanRequest, name: str, cfg, acceptance: AcceptanceModel | None) -> MechanismPlan:
    mech = req.mechanism(name)
    only = mech.only_draft_len(cfg)
    own_max = mech.max_draft_len(req.target, cfg)
    d_max = only or (min(req.max_draft_len, own_max) if own_max else req.max_draft_len)
    return MechanismPlan(mech, cfg, acceptance or mech.default_acceptance(req.target, cfg),
                         mech.cost(req.target, cfg), d_max, only)


def build_plans(req: PlanRequest) -> tuple[list[MechanismPlan], list[str]]:
    """The recipe's mechanism first, then (with ``compare``) every other mechanism that can serve the target."""
    main_name = req.drafter.type
    reason = req.mechanism(main_name).unavailable_reason(req.target, req.drafter)
    if reason:
        from trtllm_spec.errors import UserError

        raise UserError(f"drafter {main_name}: {reason}")
    plans = [mechanism_plan(req, main_name, req.drafter, req.acceptance)]
    skipped: list[str] = []
    if req.compare:
        for name, mech in req.mechanisms.items():
            if name == main_name:
                continue
            cfg = mech.default_config()
            if cfg is None:
                skipped.append(f"{name}: needs a model to compare (set drafter.model)")
                continue
            why = mech.unavailable_reason(req.target, cfg)
            if why:
                skipped.append(f"{name}: {why}")
                continue
            plans.append(mechanism_plan(req, name, cfg, req.compare_acceptance.get(name)))
    return plans, skipped


def plan_context(req: PlanRequest) -> CostContext:
    """The cost context of a request: its GPU and host terms, captured CUDA-graph sizes and fitted prefill."""
    return CostContext(req.target, req.hardware, req.par, req.precision, req.workload, req.free_gpu_memory_fraction,
                       tuple(req.graph_batch_sizes), (req.host_costs or {}).get("prefill"), req.target_work)


SPEEDUP_KINDS = {
    "speedup": "decode (TPOT) speedup: tokens/s per user after the first token, at D over D = 0 at the same batch; "
               "what the step model predicts, and what the pick maximises",
    "server_speedup": "server throughput speedup: tokens/s a server delivers to that many users in a closed loop, "
                      "time to first token (the drafter's prefill included) counted, at D over D = 0",
    "ttft_s": "time to first token: fitted on the engine's runs where measured (tune), else one prompt's prefill by "
              "the roofline (a lower bound above batch 1)",
}


def make_plan(req: PlanRequest) -> dict:
    ctx = plan_context(req)
    plans, skipped = build_plans(req)
    cands = evaluate(ctx, plans)
    main = plans[0]
    rec = recommend(req, ctx, main, cands)
    unc = add_intervals(req, ctx, main, cands, rec)
    guides = [gl.g1_compute_bound(ctx, main, cands), gl.g2_attention(ctx, main), gl.g3_tiles(ctx, main),
              gl.g4_low_latency(ctx, main), gl.g5_mechanism(ctx, plans, cands)]
    return {
        "schema": PLAN_SCHEMA,
        "trtllm_spec_version": __version__,
        "target": target_summary(req),
        "hardware": req.hardware.model_dump(mode="json"),
        "parallelism": {"tp": req.par.tp, "pp": req.par.pp, "ep": req.par.ep, "num_gpus": req.num_gpus},
        "precision": {"weights": req.precision.weight, "kv_cache": req.precision.kv},
        "workload": {"batch_sizes": list(req.workload.batch_sizes), "isl": req.workload.isl,
                     "osl": req.workload.osl, "mean_context": req.workload.mean_context,
                     "latency_target_ms": req.latency_target_ms},
        "drafter": {"type": main.mechanism.name, "title": main.mechanism.title,
                    "config": req.drafter.model_dump(mode="json"), "acceptance": main.acceptance.to_json(),
                    "acceptance_kind": main.mechanism.acceptance_kind,
                    "rho": main.cost.drafter_layers / req.target.num_layers, "max_draft_len": main.max_draft_len},
        "guidelines": [g.as_dict() for g in guides],
        "candidates": [c.as_dict() | interval_of(unc, c) for c in cands],
        "recommendation": rec,
        "frontier": [{k: v for k, v in c.as_dict().items() if k != "breakdown"} for c in pareto_frontier(cands)],
        "assumptions": assumptions(req, plans, skipped),
        "host_costs": req.host_costs or {"name": "the GPU's overheads", "terms_s": host_terms(req.hardware)},
        "uncertainty": unc["record"],
        "robustness": robustness(ctx, main, cands, rec, lambda c2, cands2: recommend(req, c2, main, cands2)),
        "step_terms": term_sources(req.hardware.overheads, req.host_costs, bool(req.prior_host_log_sd),
                                   req.graph_batch_sizes, req.work_source),
        "speedup_kinds": SPEEDUP_KINDS,
    }


def add_intervals(req: PlanRequest, ctx: CostContext, main: MechanismPlan, cands: list[Candidate], rec: dict
                  ) -> dict:
    """The speedup interval of every candidate of the recipe's mechanism and of each planned row
    (planner/interval.py), the note on where it changes the decision, and how much a calibration narrowed it."""
    from trtllm_spec.planner import interval as iv

    level = iv.check_level(req.interval_level)
    host_sd = dict(req.host_log_sd) if req.host_log_sd else dict.fromkeys(iv.TERMS, HOST_SD_DEFAULT)
    # a calibration fitted the host terms on the engine's own reports: the model's in-sample residual; else the
    # out-of-sample one (planner/interval.py)
    model_sd = iv.MODEL_LOG_SD_CALIBRATED if req.prior_host_log_sd else \
        iv.MODEL_LOG_SD_SILICON if req.work_source else iv.MODEL_LOG_SD
    host_sd_s = dict(req.host_sd_s or {})
    bands = iv.annotate(ctx, main, cands, host_sd, level, model_sd, host_sd_s)
    for r in rec["by_batch"]:
        lo, hi, _sd = bands.get((r["batch_size"], r["draft_len"]), (r["speedup"], r["speedup"], 0.0))
        r["speedup_low"], r["speedup_high"] = round(lo, 4), round(hi, 4)
    fits = {(c.batch_size, c.draft_len) for c in cands if c.mechanism == main.mechanism.name and c.feasible}
    best_spec = {}  # where plain decoding is planned: the best speculative D's interval at that batch
    for r in rec["by_batch"]:
        if r["draft_len"] == 0:
            alts = [(c.speedup, bands[(c.batch_size, c.draft_len)]) for c in cands
                    if c.mechanism == main.mechanism.name and c.batch_size == r["batch_size"] and c.draft_len > 0
                    and c.feasible and (c.batch_size, c.draft_len) in bands]
            if alts:
                best_spec[r["batch_size"]] = max(alts, key=lambda t: t[0])[1][1]
    rec["uncertainty_note"] = iv.decision_note([r for r in rec["by_batch"]
                                                if (r["batch_size"], r["draft_len"]) in fits], level, best_spec)

    def median_width(b: dict, pool: list[Candidate] | None = None) -> float | None:
        w = [(hi - lo) / c.speedup for c in (pool or cands) if (c.mechanism, c.draft_len > 0) ==
             (main.mechanism.name, True) and (c.batch_size, c.draft_len) in b
             for lo, hi, _ in [b[(c.batch_size, c.draft_len)]]]
        return round(sorted(w)[len(w) // 2], 4) if w else None

    record = {"level": level, "z": round(iv.z_of(level), 4), "model_log_sd": model_sd,
              "host_log_sd": {k: round(v, 4) for k, v in host_sd.items()},
              "host_sd_s": {k: v for k, v in host_sd_s.items()},
              "how": "speedup x exp(+-z sd), sd^2 = sum over host terms (elasticity of ln speedup to the term x its "
                     "log sd)^2 + model_log_sd^2 (the model's residual on published measurements: out of sample, "
                     "leave one source out, for a release profile; in sample after a calibration on the engine's "
                     "own reports; benchmarks/planner_validation.py --loso); planner/interval.py",
              "rule": (req.host_costs or {}).get("rule"),
              "median_relative_width": median_width(bands), "note": rec["uncertainty_note"]}
    if req.prior_host_log_sd:  # the plan as it was before the calibration: the release's terms and uncertainty
        from dataclasses import replace

        prior_ctx = ctx
        if req.prior_host_costs:
            ov = ctx.hw.overheads.model_copy(update=dict(req.prior_host_costs))
            prior_ctx = replace(ctx, hw=ctx.hw.model_copy(update={"overheads": ov}))
        prior_cands = evaluate(prior_ctx, [main])
        before = median_width(iv.annotate(prior_ctx, main, prior_cands, dict(req.prior_host_log_sd), level,
                                          iv.MODEL_LOG_SD, dict(req.prior_host_sd_s or {})),
                              prior_cands)
        after = record["median_relative_width"]
        record["calibration"] = {"prior_host_log_sd": {k: round(v, 4) for k, v in req.prior_host_log_sd.items()},
                                 "median_relative_width_before": before, "median_relative_width_after": after,
                                 "narrowed_by": round(1 - after / before, 4) if before and after is not None else None}
    return {"bands": bands, "record": record}


HOST_SD_DEFAULT = 0.25  # core/host_costs.HOST_TERM_LOG_SD: a hardware file's own overheads count as fitted ones


def interval_of(unc: dict, c: Candidate) -> dict:
    band = unc["bands"].get((c.batch_size, c.draft_len))
    return {"speedup_interval": [round(band[0], 4), round(band[1], 4)]} if band else {}


def host_terms(hw: Hardware) -> dict[str, float]:
    from trtllm_spec.core.host_costs import HOST_TERMS

    return {k: getattr(hw.overheads, k) for k in HOST_TERMS}


def one_draft_len(draft_by_batch: dict[int, int], d: int) -> tuple[int, int | None, int | None]:
    """For a mechanism that runs at D = ``d`` or not at all: (max_draft_len, max_concurrency, first batch off).
    Speculation runs at ``d`` from the smallest batch up to the last batch of the first run where it pays and is
    switched off above it (TensorRT-LLM ``max_concurrency``), so no draft_len_schedule is ever needed."""
    batches = sorted(draft_by_batch)
    if not batches or draft_by_batch[batches[0]] == 0:
        return 0, None, batches[0] if batches else None
    run = [b for i, b in enumerate(batches) if all(draft_by_batch[x] for x in batches[: i + 1])]
    if len(run) == len(batches):
        return d, None, None
    return d, run[-1], batches[len(run)]


def _one_draft_len_rule(cands: list[Candidate], main: MechanismPlan, d: int, cut: int | None, off: int | None
                        ) -> str:
    head = f"TensorRT-LLM runs {main.mechanism.title} only at D = {main.only_draft_len} (no draft_len_schedule): "
    if off is None:
        return head + f"D = {d} at every planned batch size"
    spec = _candidate(cands, main, off, main.only_draft_len)
    why = ("plain decoding is predicted faster" if spec.feasible else
           f"{off} sequences with the drafter's KV cache do not fit (plain decoding does)")
    if cut is None:
        return head + f"at batch {off}, the smallest planned, {why}: no speculation"
    return head + f"D = {d} up to batch {cut}; at batch {off} {why}, so max_concurrency: {cut} turns speculation " \
        f"off above {cut}"


def recommend(req: PlanRequest, ctx: CostContext, main: MechanismPlan, cands: list[Candidate]) -> dict:
    best = best_by_batch(cands, main.mechanism.name, req.fixed_draft_len or main.only_draft_len)
    draft_by_batch = {b: c.draft_len for b, c in best.items()}
    if req.fixed_draft_len is not None and draft_by_batch:  # the recipe fixed D: honour it at the smallest batch
        draft_by_batch[min(draft_by_batch)] = req.fixed_draft_len
    infeasible = [b for b in req.workload.batch_sizes if b not in best]
    max_batch = req.max_batch_size or max(req.workload.batch_sizes)
    max_concurrency, rule = None, None
    applies, switches_off, why = engine_schedule(main.mechanism, req.trtllm_profile)
    if main.only_draft_len and applies and switches_off:
        max_d, max_concurrency, off = one_draft_len(draft_by_batch, main.only_draft_len)
        rule = _one_draft_len_rule(cands, main, max_d, max_concurrency, off)
        schedule = None
        best = {b: _candidate(cands, main, b, max_d if max_concurrency is None or b <= max_concurrency else 0)
                for b in best}
    elif not applies:  # the engine runs one D at every batch size: plan (and report) exactly that curve
        max_d = draft_by_batch[min(draft_by_batch)] if draft_by_batch else 0
        schedule = None
        best, rule = _single_draft_len(cands, main, best, max_d, why)
    else:
        if not switches_off and draft_by_batch and draft_by_batch[min(draft_by_batch)] > 0:
            draft_by_batch = {b: max(d, 1) for b, d in draft_by_batch.items()}  # the engine's floor
            best = {b: _candidate(cands, main, b, draft_by_batch[b], best[b]) for b in best}
            rule = why
        max_d, schedule = render_schedule(draft_by_batch, req.trtllm_profile, max_batch)
    if main.only_draft_len and req.max_draft_len < main.only_draft_len:  # named, never silently exceeded (the
        note = f"the planner's default max_draft_len {req.max_draft_len} does not limit it (D is drafter.block_size)"
        rule = f"{rule}; {note}" if rule else note  # recipe refuses a max_draft_len it set below the block)
    check_schedule(schedule, max_d, req.trtllm_profile)
    rows = [{"batch_size": b, "draft_len": c.draft_len, "speedup": round(c.speedup, 4),
             "server_speedup": round(c.server_speedup, 4), "ttft_s": c.ttft_s,
             "acceptance_length": round(c.acceptance_length, 4), "tpot_s": c.tpot_s,
             "tokens_per_s_per_user": c.tokens_per_s_per_user, "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu}
            for b, c in sorted(best.items())]
    out = {
        "mechanism": main.mechanism.name,
        "max_draft_len": max_d,
        "draft_len_schedule": {str(k): v for k, v in schedule.items()} if schedule else None,
        "max_concurrency": max_concurrency,
        "draft_len_rule": rule,
        "trtllm_profile": req.trtllm_profile,
        "speculation_recommended": max_d > 0,
        "by_batch": rows,
        "infeasible_batch_sizes": infeasible,
        "largest_feasible_batch": {str(d): next(c.max_batch_size for c in cands if c.mechanism ==
                                                main.mechanism.name and c.draft_len == d)
                                   for d in sorted({0, max_d})},
    }
    if req.latency_target_ms:
        meets = [r for r in rows if r["tpot_s"] * 1e3 <= req.latency_target_ms]
        out["latency_target"] = {"tpot_ms": req.latency_target_ms,
                                 "largest_batch_meeting_it": max((r["batch_size"] for r in meets), default=None)}
    limit = speculation_limit(ctx, main)
    out["speculation_limit"] = limit | {"note": limit_note(limit, (applies, switches_off, why))}
    out["speculation_pays_up_to"] = limit["pays_up_to"]
    if infeasible:
        out["memory"] = memory_budget(ctx) | {"note": infeasible_note(ctx, infeasible)}
    if not best:
        out["note"] = "nothing to plan: " + out["memory"]["note"]
    elif max_d == 0:
        out["note"] = ("speculation does not pay at any planned batch size with this acceptance and cost; "
                       "serve without a speculative_config, or improve the drafter and re-measure")
    return out


def _candidate(cands: list[Candidate], main: MechanismPlan, batch: int, draft_len: int,
               default: Candidate | None = None) -> Candidate:
    found = next((c for c in cands if c.mechanism == main.mechanism.name and c.batch_size == batch
                  and c.draft_len == draft_len), default)
    if found is None:
        raise LookupError(f"no candidate for {main.mechanism.name} at batch {batch}, D = {draft_len}")
    return found


def _single_draft_len(cands: list[Candidate], main: MechanismPlan, best: dict[int, Candidate], d: int, why: str
                      ) -> tuple[dict[int, Candidate], str]:
    """The engine applies no schedule: D = ``d`` (the best D at the smallest batch) at every batch size, the curve
    it predicts, where it stops paying, and the alternatives the engine does offer."""
    rows = {b: _candidate(cands, main, b, d, c) for b, c in best.items()}
    if d == 0:
        return rows, why + ": speculation does not pay at the smallest planned batch, so none is planned"
    text = f"{why}: D = {d} at every batch size"
    no_fit = sorted(b for b, c in rows.items() if not c.feasible)
    if no_fit:
        text += ("; at batch " + ", ".join(map(str, no_fit)) + " the drafter's KV cache does not fit (plain decoding "
                 "does): cap max_batch_size below it, or serve those batches from a deployment without speculation")
    losing = sorted(b for b, c in rows.items() if c.speedup < 1.0 and c.feasible)
    if not losing:
        return rows, text + ("" if no_fit else " (predicted to pay at each planned one)")
    cross = losing[0]
    smaller = {b: max((c for c in cands if c.mechanism == main.mechanism.name and c.batch_size == b
                       and 0 < c.draft_len < d and c.feasible), key=lambda c: c.speedup, default=None)
               for b in losing}
    alt = [f"D = {c.draft_len} at batch {b} ({c.speedup:.2f}x)" for b, c in smaller.items()
           if c is not None and c.speedup > rows[b].speedup]
    return rows, (text + f"; from batch {cross} it is predicted slower than plain decoding ("
                  + ", ".join(f"batch {b}: {rows[b].speedup:.2f}x" for b in losing) + "). Alternatives: a smaller "
                  "max_draft_len" + (f" ({'; '.join(alt)})" if alt else "") + ", or a separate deployment without "
                  f"speculative_config for batches of {cross} and more")


def target_summary(req: PlanRequest) -> dict:
    s, par = req.target, req.par
    return {
        "name": s.name, "id": req.target_id or s.name, "source": s.source, "model_type": s.model_type,
        "num_layers": s.num_layers, "hidden_size": s.hidden_size, "num_heads": s.num_heads,
        "num_kv_heads": s.num_kv_heads, "head_dim": s.head_dim, "vocab_size": s.vocab_size,
        "group_size": s.group_size(par.tp), "group_size_model": s.group_size(1),
        "params": s.total_params(), "active_params_per_token": s.active_params_per_token(),
        "kv_bytes_per_token_per_gpu": kv_bytes_per_token_per_gpu(s, req.precision, par, req.workload.mean_context),
        "moe": s.moe.model_dump() if s.moe else None, "mla": s.mla.model_dump() if s.mla else None,
        "mtp_layers": s.mtp_layers, "sliding_window": s.sliding_window, "num_sliding_layers": s.num_sliding_layers,
    }


def assumptions(req: PlanRequest, plans: list[MechanismPlan], skipped: list[str]) -> list[str]:
    hw = req.hardware
    out = [
        f"decode context = isl + osl/2 = {req.workload.mean_context} tokens (mean over the generation)",
        f"achievable fractions: GEMM {hw.efficiency.gemm}, attention {hw.efficiency.attention}, memory "
        f"{hw.efficiency.memory}, interconnect {hw.efficiency.interconnect}"
        + (" (GEMM from the probed curve)" if hw.gemm_flops_by_m else
           f"; small-M GEMM overlap {hw.efficiency.gemm_overlap} (0: weight stream plus tensor-core work, 1: "
           f"roofline max), {hw.sm_count} SMs for wave quantisation")
        + (" (attention KV rate probed)" if hw.attention_kv_bytes_per_s else ""),
        f"overheads: {hw.overheads.iteration_s * 1e3:.3f} ms per iteration"
        + (f" ({hw.overheads.overlap_hides:.0%} hidden by the overlap scheduler on plain decoding"
           + (" and speculation)" if hw.overheads.overlap_with_speculation else ")")
           if hw.overheads.overlap_hides else "")
        + f", {hw.overheads.spec_iteration_s * 1e3:.3f} ms per speculative iteration, "
        f"{hw.overheads.per_layer_s * 1e6:.1f} us per layer per forward, {hw.overheads.draft_step_s * 1e6:.1f} us per "
        f"draft step (host-cost profile: {(req.host_costs or {}).get('name', 'the GPU file')})"
        + (f"; per sequence: {hw.overheads.sequence_s * 1e3:.3f} ms per iteration, "
           f"{hw.overheads.spec_sequence_s * 1e3:.3f} ms per speculative iteration, "
           f"{hw.overheads.draft_sequence_s * 1e3:.3f} ms per draft step"
           if any(getattr(hw.overheads, k) for k in ("sequence_s", "spec_sequence_s", "draft_sequence_s")) else
           "; no per-sequence host terms (the profile has none: 0; calibrate at two batch sizes)")
        + ("; the step is the engine's measured one (the fitted terms carry the GPU work)"
           if hw.overheads.measured_step else ""),
        f"attention tile = {hw.attention_tile_rows} query rows per KV head",
    ]
    for mp in plans:
        how = "measured" if mp.acceptance.measured else "assumed"
        out.append(f"{mp.mechanism.name} acceptance ({how}): {mp.acceptance.source}")
    out += [f"not compared: {s}" for s in skipped]
    return out
