"""Planner predictions vs published speculative-decoding measurements across batch sizes, side by side.

Run:  .venv/bin/python benchmarks/planner_validation.py            # tables of benchmarks/planner_validation.md
      .venv/bin/python benchmarks/planner_validation.py --fit      # re-fit the parameters on the calibration set
      .venv/bin/python benchmarks/planner_validation.py --fit --keep-overlap  # per-release host costs only
      .venv/bin/python benchmarks/planner_validation.py --loso     # the interval's model term, out of sample
      .venv/bin/python benchmarks/planner_validation.py --json     # raw numbers
      .venv/bin/python benchmarks/planner_validation.py --moe-sensitivity  # MoE costs vs calibration loss and trend
      .venv/bin/python benchmarks/planner_validation.py --framework vLLM [--release 0.9.2]  # one framework / release

The full run (no selection) writes benchmarks/planner_validation.json (the benchmark JSON convention; its ``readme``
row is README's planner row: scripts/render_readme_table.py); the Markdown it prints goes into
benchmarks/planner_validation.md by hand, beside the notes there.

The points were split into a calibration set and a validation set by source *before* any fitting (the split is
the ``split`` field below and never changes with the fit); ``--fit`` searches the free parameters on calibration
points only, per framework *release* (host costs change between releases), and prints the values that are then
recorded as the host-cost profiles of core/host_costs.py (PUBLISHED_HOST_PROFILES; TensorRT-LLM's is the planner's
default for every trtllm_version until a release has its own measurements) and the shared GEMM overlap
(core/hardware.py). A point whose release has no calibration points uses the newest earlier release's profile
(said in the output). Each point feeds its source's measured acceptance length to the planner, so what is compared
is the cost model: step times and the speedup they imply.

Decisions, not only errors (issue 44 item 5): at every batch where a source measured two or more draft lengths
(``picks``), the planner's D (the candidate among D = 0 and the measured D's with the highest predicted speedup that
fits in memory) is right when its measured speedup is within ``PICK_TOLERANCE`` (3%) of the best measured one; a
count per split. Batches with one measured D give the same count for the speculate-or-not decision (D vs 0).

The split rule (planner_points.SPLIT_RULE, applied to every source): a source that reports its own numbers as a
performance bug is held out, never fitted. A release profile fitted on a source the rule moved is not used (its
points are priced by the release rule, ``rule_fits``); the record keeps the statistics of the split as assigned
(with the recorded profiles) beside the split after the rule (``split_rule``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import statistics
import sys

from trtllm_spec.core import host_costs
from trtllm_spec.core.hardware import Hardware, load_hardware
from trtllm_spec.core.host_costs import HOST_TERMS, published_host_profile, release_host_profile
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.planner.acceptance import table
from trtllm_spec.planner.cost import Precision
from trtllm_spec.planner.plan import PlanRequest, build_plans, make_plan
from trtllm_spec.planner.search import (
    CostContext,
    Workload,
    draft_step,
    evaluate,
    max_feasible_batch,
    target_step,
)

# Per-release host costs (core/hardware.py Overheads fields) live in core/host_costs.py PUBLISHED_HOST_PROFILES,
# fitted with --fit on the calibration points of that framework release only; gemm_overlap is shared physics,
# fitted on all calibration points together.
GEMM_OVERLAP = 0.0
# the profile a plan uses when the recipe names no serving engine: TensorRT-LLM's fitted release
DEFAULT_PRIOR = ("TensorRT-LLM", "0.20-1.0rc")
# MoE kernel costs (Overheads.moe_layer_units, per_expert_s), fitted per release only where its calibration points
# include an MoE target (--fit stage 2); a release without one keeps the TensorRT-LLM defaults of core/hardware.py.
MOE_GRID = {"moe_layer_units": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0],
            "per_expert_s": [0.0, 5e-7, 1e-6, 1.5e-6, 2e-6, 3e-6, 4e-6]}


import planner_fit as pf  # noqa: E402
import planner_loso  # noqa: E402
from planner_points import (  # noqa: E402
    EAGLE3_32K,
    EXCLUDED,
    POINTS,
    POINTS_AS_ASSIGNED,
    SPLIT_RULE,
    VLLM_20780_AL,
    Point,
)
from planner_stats import (  # noqa: E402
    all_stats,
    benchmark_json,
    model_log_sd,
    render_picks,
    render_stats,
    render_trends,
)
from planner_terms import decompose  # noqa: E402

from trtllm_spec.errors import UserError  # noqa: E402
from trtllm_spec.planner import interval as iv  # noqa: E402


def voided_profiles(points: list[Point]) -> list[tuple[str, str]]:
    """The recorded release profiles (core/host_costs.PUBLISHED_HOST_PROFILES ``fitted_on``) fitted on a source the
    split rule moved out of the calibration split: under the rule they price nothing (their release's points are
    priced by the release rule, as an unfitted release is). A release that keeps calibration points would need a
    re-fit, not the rule: refused."""
    moved = {p.source_id for p in points if p.moved}
    out = []
    for key, prof in host_costs.PUBLISHED_HOST_PROFILES.items():
        if not any(f.startswith(src) for f in prof.fitted_on for src in moved):
            continue
        if any((q.framework, q.release) == key and q.split == "calibration" for q in points):
            sys.exit(f"{key[0]} {key[1]}: its profile was fitted on a source the split rule holds out and the "
                     "release keeps calibration points: re-fit it (--fit) and record it in core/host_costs.py")
        out.append(key)
    return out


@contextlib.contextmanager
def rule_fits(points: list[Point]):
    """Inside the block only the profiles the split allows price anything (voided_profiles removed)."""
    with contextlib.ExitStack() as stack:
        for key in voided_profiles(points):
            stack.enter_context(planner_loso.without_fit(*key))
        yield


def hardware_for(p: Point, overlap: float, profile: dict[str, float]) -> Hardware:
    hw = p.gpu.model_copy(deep=True) if isinstance(p.gpu, Hardware) else load_hardware(p.gpu)
    data = hw.model_dump()
    data["efficiency"]["gemm_overlap"] = overlap
    data["overheads"].update(profile)
    return Hardware.model_validate(data)


def tree_candidates(p: Point, hw: Hardware, batches: tuple[int, ...]) -> dict[tuple[int, int], dict]:
    """SGLang's EAGLE tree (steps S, topk k, N verified tokens), priced with the planner's own step terms, which
    model chains only: the target verifies N rows per sequence (target_step at draft length N - 1) and the drafter
    runs S steps over k rows per sequence (draft_step at batch B k, draft length S; its catch-up pass then counts
    k (1 + S) rows, an overestimate of a one-layer drafter's small GEMMs)."""
    steps, topk, n_verify = p.tree
    shape = resolve_shape(p.target)
    ctx = CostContext(shape, hw, p.par, Precision(weight=p.weights), Workload(batches, p.isl, p.osl))
    cost = MECHANISMS[p.drafter.type].cost(shape, p.drafter)
    cap = max_feasible_batch(ctx, cost, n_verify - 1)
    out = {}
    for b in batches:
        plain = target_step(ctx, b, 0).total_s
        spec = target_step(ctx, b, n_verify - 1).total_s + draft_step(ctx, cost, b * topk, steps).total_s
        out[(b, 0)] = {"speedup": 1.0, "step_time_s": plain, "feasible": True}
        out[(b, steps)] = {"speedup": p.al[steps] / spec * plain, "step_time_s": spec, "feasible": b <= cap}
    return out


def profile_of(p: Point) -> tuple[dict[str, float], str]:
    """(the Overheads fields of the point's release profile, which profile and how it was chosen)."""
    prof, how = published_host_profile(p.framework, p.release)
    return prof.overhead_fields(), f"{prof.name} ({how})"


PICK_TOLERANCE = 0.03  # a pick is right when its measured speedup is >= (1 - 0.03) x the best measured (issue 44)


def picks(p: Point, cand: dict[tuple[int, int], dict]) -> list[dict]:
    """The planner's D against the measured best at each batch of the source. Candidates: D = 0 (the plain run every
    speedup is relative to: 1.0x measured and predicted) and every D the source measured there; the planner's D is
    the one with the highest predicted speedup among those that fit in memory (model). ``kind``: "draft length" where
    the source measured >= 2 D at the batch, "speculate or not" where it measured one. No candidate fits: no pick."""
    out = []
    for b in sorted({b for b, _d in p.speedup}):
        measured = {0: 1.0} | {d: s for (bb, d), s in p.speedup.items() if bb == b}
        fits = [d for d in measured if cand[(b, d)]["feasible"]]
        best = max(measured, key=measured.get)
        row = {"batch": b, "kind": "draft length" if len(measured) > 2 else "speculate or not",
               "measured_d": sorted(measured), "measured_best_d": best, "measured_best": measured[best]}
        if not fits:
            out.append(row | {"planner_d": None, "right": None, "note": "no candidate fits in memory (model)"})
            continue
        pick = max(fits, key=lambda d: cand[(b, d)]["speedup"])
        ratio = measured[pick] / measured[best]
        out.append(row | {"planner_d": pick, "planner_predicted": round(cand[(b, pick)]["speedup"], 3),
                          "planner_measured": measured[pick], "of_best": round(ratio, 4),
                          "right": ratio >= 1 - PICK_TOLERANCE})
    return out


def interval(comp: dict, x: dict[str, float], batch: int, draft_len: int, predicted: float,
             host_sd: dict[str, float], host_sd_s: dict[str, float], level: float,
             model_sd: float | None = None) -> tuple[float, float, float]:
    """The planner's interval (planner/interval.py) around one predicted speedup, and its host part (log sd): each
    host term's elasticity d ln S / d ln x_k = c0_k x_k / T0 - c1_k x_k / T1 times the release profile's log sd, and
    for a term the profile does not measure (0) its absolute sd (core/host_costs.PER_SEQUENCE_SD_S) times
    d ln S / d x_k; the model's out-of-sample residual sd on top (every point here is priced as an uncalibrated plan
    is)."""
    c0, c1 = comp[(batch, 0)], comp[(batch, draft_len)]
    t0, t1 = pf.step(c0, x), pf.step(c1, x)
    var = 0.0
    for k in HOST_TERMS:
        d = c0["coef"][k] / t0 - c1["coef"][k] / t1
        var += (d * x[k] * host_sd.get(k, 0.0)) ** 2 + (d * host_sd_s.get(k, 0.0)) ** 2
    model = iv.MODEL_LOG_SD if model_sd is None else model_sd
    return (*iv.bounds(predicted, math.sqrt(var + model ** 2), level), math.sqrt(var))


def candidates(p: Point, hw: Hardware) -> dict[tuple[int, int], dict]:
    """(batch, D) -> the planner's candidate (speedup, step_time_s, feasible) at every batch of the point (its
    speedups' and its plain steps') and every D up to the largest it measured."""
    batches = tuple(sorted({b for b, _d in p.speedup} | set(p.base_step_s)))
    if p.tree:
        return tree_candidates(p, hw, batches)
    req = PlanRequest(target=resolve_shape(p.target), hardware=hw, drafter=p.drafter,
                      workload=Workload(batches, p.isl, p.osl), par=p.par, num_gpus=p.num_gpus,
                      precision=Precision(weight=p.weights), acceptance=table(p.al, p.source, measured=True),
                      max_draft_len=max(p.al), compare=False, mechanisms=MECHANISMS)
    ctx = CostContext(req.target, hw, req.par, req.precision, req.workload, req.free_gpu_memory_fraction)
    return {(c.batch_size, c.draft_len): c.as_dict() for c in evaluate(ctx, build_plans(req)[0])}


def components(p: Point, overlap: float = GEMM_OVERLAP, profile: dict[str, float] | None = None) -> dict:
    """The point's steps as work + coefficients of the six host terms (planner_fit.components), on the release
    profile's other fields (MoE kernel costs, overlap)."""
    prof = profile or profile_of(p)[0]
    pairs = sorted({(b, 0) for b, _d in p.speedup} | set(p.speedup) | {(b, 0) for b in p.base_step_s})

    def steps(x: dict[str, float]) -> dict[tuple[int, int], float]:
        cand = candidates(p, hardware_for(p, overlap, prof | x))
        return {k: cand[k]["step_time_s"] for k in pairs}

    return pf.components(pairs, steps)


def release_uncertainty(p: Point) -> tuple[dict[str, float], dict[str, float]]:
    """(log sd per term, absolute sd in seconds per unmeasured term) of the point's release profile."""
    prof = release_host_profile(p.framework, p.release)
    return prof.uncertainty or {}, prof.uncertainty_s or {}


def predict(p: Point, overlap: float = GEMM_OVERLAP, profile: dict[str, float] | None = None,
            level: float = iv.DEFAULT_LEVEL) -> dict:
    prof = profile or profile_of(p)[0]
    hw = hardware_for(p, overlap, prof)
    batches = tuple(sorted({b for b, _d in p.speedup}))
    cand = candidates(p, hw)
    comp = components(p, overlap, prof)
    x = {k: getattr(hw.overheads, k) for k in HOST_TERMS}
    host_sd, host_sd_s = release_uncertainty(p)
    rows = []
    for (b, d), s in sorted(p.speedup.items()):
        pred = cand[(b, d)]["speedup"]
        lo, hi, host = interval(comp, x, b, d, pred, host_sd, host_sd_s, level)
        rows.append({"batch": b, "draft_len": d, "al": p.al[d], "measured": s, "predicted": round(pred, 3),
                     "error": round(pred / s - 1, 3), "fits": cand[(b, d)]["feasible"], "low": round(lo, 3),
                     "high": round(hi, 3), "host_log_sd": round(host, 4)})
    shape = resolve_shape(p.target)
    out = {"point": p.name, "framework": p.framework, "release": p.release, "profile": profile_of(p)[1],
           "split": p.split, "moved": p.moved, "source": p.source, "source_id": p.source_id, "rows": rows,
           "picks": picks(p, cand),
           "drafter": p.drafter.type, "tp": p.par.tp, "target_params": shape.total_params(),
           "base_step_ms": {b: {"measured": round(t * 1e3, 2), "predicted": round(cand[(b, 0)]["step_time_s"] * 1e3, 2)}
                            for b, t in p.base_step_s.items()}}
    if len(batches) > 1:  # the batch trend: sign of (last - first) at the sweep's D
        d = rows[0]["draft_len"]
        first, last = rows[0], rows[-1]
        out["trend"] = {"from": first["batch"], "to": last["batch"], "draft_len": d,
                        "measured": round(last["measured"] - first["measured"], 3),
                        "predicted": round(last["predicted"] - first["predicted"], 3)}
        out["best_d_predicted"] = {b: min((dd for dd in range(0, max(p.al) + 1) if (b, dd) in cand),
                                          key=lambda dd, b=b: -cand[(b, dd)]["speedup"]) for b in batches}
    if len({d for _b, d in p.speedup}) > 1:
        meas = max(p.speedup, key=p.speedup.get)[1]
        pred = max((d for _b, d in p.speedup), key=lambda d: cand[(batches[0], d)]["speedup"])
        out["best_d"] = {"measured": meas, "predicted": pred}
    return out


def loss(results: list[dict]) -> float:
    """Mean squared log error of speedups, plus base-step errors where a source gives the plain step time."""
    errs = [math.log(1 + r["error"]) ** 2 for res in results for r in res["rows"]]
    errs += [math.log(v["predicted"] / v["measured"]) ** 2 for res in results for v in res["base_step_ms"].values()]
    return sum(errs) / len(errs)


def fit_release(pts: list[Point], overlap: float = GEMM_OVERLAP, base: dict[str, float] | None = None
                ) -> pf.ReleaseFit:
    """The six host terms of one framework release, fitted on ``pts`` (its calibration points) by
    benchmarks/planner_fit.py: the columns its points identify, non-negative least squares on relative errors. The
    release profile's other fields (MoE kernel costs, overlap) are held at ``base`` (default: the recorded ones),
    whose host terms give the ratio a fitted sum is split in."""
    base = base or profile_of(pts[0])[0]
    memo: dict[str, dict] = {}

    def comp(p: Point) -> dict:
        if p.name not in memo:
            memo[p.name] = components(p, overlap, base)
        return memo[p.name]

    def n_steps(p: Point, d: int) -> float:
        b = min(bb for bb, dd in p.speedup if dd == d)
        return comp(p)[(b, d)]["coef"]["draft_step_s"]

    cols, notes = pf.columns(pts, base, n_steps)
    return pf.fit(pf.equations(pts, comp), cols, notes, base)


def fit(overlap: float = GEMM_OVERLAP) -> dict[str, dict]:
    """Per framework release, its six host terms on its calibration points only (fit_release); MoE kernel costs and
    the shared GEMM overlap held at their recorded values (issue 54: the structure changed, not the physics)."""
    calib = [p for p in POINTS if p.split == "calibration"]
    out = {}
    for fw in sorted({(p.framework, p.release) for p in calib}):
        pts = [p for p in calib if (p.framework, p.release) == fw]
        f = fit_release(pts, overlap)
        out[f"{fw[0]} {fw[1]}"] = {"terms_s": {k: float(f"{v:.4g}") for k, v in f.terms.items()},
                                   "columns": f.columns, "notes": f.notes, "equations": f.rows,
                                   "loss": round(f.loss, 5), "fitted_on": sorted({p.source_id for p in pts})}
    return out


def by_release(results: list[dict]) -> list[dict]:
    """Error per framework release and split, with the profile each used (its own, or the release rule's)."""
    out = []
    for fw, rel in sorted({(r["framework"], r["release"]) for r in results}):
        mine = [r for r in results if (r["framework"], r["release"]) == (fw, rel)]
        row = {"framework": fw, "release": rel, "profile": mine[0]["profile"]}
        for split in ("calibration", "validation"):
            errs = [x["error"] for r in mine if r["split"] == split for x in r["rows"]]
            row[split] = ({"points": len(errs), "median_abs_error": statistics.median(abs(e) for e in errs),
                           "mean_signed_error": statistics.fmean(errs)} if errs else None)
        out.append(row)
    return out


def render_by_release(results: list[dict]) -> list[str]:
    lines = ["### Error per framework release", "",
             "| framework | release | profile | calibration: points, median abs, mean signed | held-out: points, median "
             "abs, mean signed |", "|---|---|---|---|---|"]
    for r in by_release(results):
        cells = [f"{v['points']}, {v['median_abs_error']:.1%}, {v['mean_signed_error']:+.1%}" if v else "-"
                 for v in (r["calibration"], r["validation"])]
        lines.append(f"| {r['framework']} | {r['release']} | {r['profile']} | {cells[0]} | {cells[1]} |")
    return lines + [""]


def retired_record() -> dict:
    """Issue 54: the profiles fitted on sources the split rule holds out (core/host_costs.RETIRED_HOST_PROFILES),
    judged on the held-out points of their release that no profile was ever fitted on: each such point priced with
    the retired profile (put back for the call, its per-sequence terms 0) beside the release rule that prices it now."""
    from trtllm_spec.core.host_costs import RETIRED_HOST_PROFILES, HostProfile

    out = []
    for (fw, rel), ret in RETIRED_HOST_PROFILES.items():
        pts = [p for p in POINTS if (p.framework, p.release) == (fw, rel) and p.name not in ret["fitted_sweeps"]]
        rule = [predict(p) for p in pts]
        prof = HostProfile(name=f"{fw.lower()}-{rel} (retired)", framework=fw, release=rel, **ret["terms_s"],
                           **ret.get("moe", {}), measured_release=rel, fitted_on=[ret["fitted_on"]], fitted="retired")
        host_costs.PUBLISHED_HOST_PROFILES[(fw, rel)] = prof
        try:
            kept = [predict(p) for p in pts]
        finally:
            host_costs.PUBLISHED_HOST_PROFILES.pop((fw, rel))

        def st(res: list[dict]) -> dict:
            errs = [r["error"] for x in res for r in x["rows"]]
            return {"points": len(errs), "median_abs_error": round(statistics.median(abs(e) for e in errs), 4),
                    "mean_signed_error": round(statistics.fmean(errs), 4)}

        out.append({"release": f"{fw} {rel}", "fitted_on": ret["fitted_on"], "judged_on": [p.name for p in pts],
                    "kept": st(kept), "retired": st(rule), "rule_profile": rule[0]["profile"]})
    return {"rule": "a shipped profile is fitted on the calibration split; neither release has another calibration "
                    "source, so 're-fit without it' has nothing to fit: retired, priced by the release rule",
            "releases": out}


def render_fit_and_retired(extra: dict) -> str:
    lines = ["### Host terms per release (--fit: the six terms, calibration split only)", "",
             "| release | iteration ms | per seq us | spec iteration ms | spec per seq us | draft step ms | draft per seq "
             "us | unknowns the points identify | equations | fitted on |", "|---|---|---|---|---|---|---|---|---|---|"]
    for rel, f in extra["fit"].items():
        t = f["terms_s"]
        lines.append(f"| {rel} | {t['iteration_s'] * 1e3:.3f} | {t['sequence_s'] * 1e6:.1f} | "
                     f"{t['spec_iteration_s'] * 1e3:.3f} | {t['spec_sequence_s'] * 1e6:.1f} | "
                     f"{t['draft_step_s'] * 1e3:.3f} | {t['draft_sequence_s'] * 1e6:.1f} | {'; '.join(f['columns'])} | "
                     f"{f['equations']} | {'; '.join(f['fitted_on'])} |")
    lines += ["", "### Retired profiles (fitted on held-out sources), on the held-out points never fitted", "",
              f"Rule: {extra['retired']['rule']}.", "",
              "| release | fitted on | judged on | with the retired profile: points, median abs, mean signed | by the "
              "release rule (now) |", "|---|---|---|---|---|"]
    for r in extra["retired"]["releases"]:
        k, n = r["kept"], r["retired"]
        lines.append(f"| {r['release']} | {r['fitted_on']} | {'; '.join(r['judged_on'])} | {k['points']}, "
                     f"{k['median_abs_error']:.1%}, {k['mean_signed_error']:+.1%} | {n['median_abs_error']:.1%}, "
                     f"{n['mean_signed_error']:+.1%} ({r['rule_profile']}) |")
    return "\n".join(lines) + "\n"


def split_rule_record(before: list[dict], after: list[dict]) -> dict:
    """The split as assigned (recorded profiles) beside the split after the rule (profiles fitted on moved sources
    voided): which sweeps moved, which profiles stopped pricing, per split the error and the pick counts."""
    def per_split(results: list[dict]) -> dict:
        st = all_stats(results)
        return {split: {k: st[split]["all"].get(k) for k in ("points", "median_abs_error", "mean_signed_error",
                                                              "max_abs_error", "inside_interval")}
                | {"picks": st[split]["picks"]} for split in ("calibration", "validation")}

    return {"rule": SPLIT_RULE, "moved": [{"point": r["point"], "source": r["source_id"], "moved": r["moved"]}
                                          for r in after if r["moved"]],
            "voided_profiles": [f"{f} {r}" for f, r in voided_profiles(POINTS)],
            "before": per_split(before), "after": per_split(after)}


def render_split_rule(rec: dict) -> list[str]:
    lines = [f"Rule: {rec['rule']}.", ""] + [f"- moved: {m['point']} ({m['moved']})" for m in rec["moved"]]
    lines += [f"- profile fitted on a moved source, not used (its points priced by the release rule): {v}"
              for v in rec["voided_profiles"]]
    lines += ["", "| split | | points | median abs error | mean signed error | max abs error | inside the interval | "
              "draft-length picks within 3% | speculate-or-not picks within 3% |", "|---|---|---|---|---|---|---|---|---|"]
    for split in ("calibration", "validation"):
        for when in ("before", "after"):
            s = rec[when][split]
            pk = s["picks"]
            lines.append(f"| {split} | {'as assigned' if when == 'before' else 'after the rule'} | {s['points']} | "
                         + (f"{s['median_abs_error']:.1%} | {s['mean_signed_error']:+.1%} | {s['max_abs_error']:.1%} | "
                            f"{s['inside_interval']:.0%}" if s["points"] else "- | - | - | -")
                         + f" | {pk['draft length']['right']}/{pk['draft length']['settings']} | "
                         f"{pk['speculate or not']['right']}/{pk['speculate or not']['settings']} |")
    return lines


def render(results: list[dict], st: dict, level: float, rule: dict | None = None) -> str:
    lines = ["### Statistics per split, framework and source", ""] + render_stats(st, level) + [""]
    if rule:
        lines += ["### The split rule, applied to every source (issue 44 item 5)", ""] + render_split_rule(rule) + [""]
    lines += render_by_release(results)
    for split in ("calibration", "validation"):
        lines += [f"### {split.capitalize()} set", "", f"| sweep | framework release | batch | D | AL | measured | "
                  f"predicted | {level:.0%} interval | error | fits in memory (model) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for res in (r for r in results if r["split"] == split):
            for r in res["rows"]:
                lines.append(f"| {res['point']} | {res['framework']} {res['release']} | {r['batch']} | {r['draft_len']} "
                             f"| {r['al']:.2f} | {r['measured']:.2f}x | {r['predicted']:.2f}x | {r['low']:.2f}-"
                             f"{r['high']:.2f}x | {r['error']:+.0%} | {'yes' if r['fits'] else 'no'} |")
        lines.append("")
    lines += ["### Decisions: the planner's D against the measured best (within 3%)", ""] + render_picks(results, st)
    lines += ["", "### Trend signs (within a source: batch, D, model size, TP)", ""] + render_trends(st) + [""]
    lines += ["### Best D and base steps", ""]
    for res in results:
        bits = []
        if "best_d_predicted" in res:
            bits.append("predicted best D by batch " + ", ".join(f"{b}:{d}" for b, d in res["best_d_predicted"].items()))
        if "best_d" in res:
            bits.append(f"best D measured {res['best_d']['measured']}, predicted {res['best_d']['predicted']}")
        for b, v in res["base_step_ms"].items():
            bits.append(f"plain step at B={b}: predicted {v['predicted']} ms vs measured {v['measured']} ms")
        if bits:
            lines.append(f"- {res['point']} ({res['split']}): " + "; ".join(bits))
    lines += ["", "### Not priced (decided before any fit)", ""] + [f"- {e['points']}: {e['reason']}" for e in EXCLUDED]
    return "\n".join(lines)


SHORT = {"target_gemm": "GEMM", "attention": "attn", "communication": "comm", "kernel_gaps": "gaps",
         "iteration": "iter", "spec_iteration": "spec_it", "draft_host": "draft_host", "per_sequence": "per_seq",
         "drafting_gpu": "draft_gpu"}


def terms_rows(points: list[Point]) -> list[dict]:
    """Every point's residual broken into the step model's terms (planner_terms.decompose), with its own profile."""
    out = []
    for p in points:
        hw = hardware_for(p, GEMM_OVERLAP, profile_of(p)[0])
        for (b, d), s in sorted(p.speedup.items()):
            r = decompose(p, hw, b, d, s)
            plausible = {k: f for k, f in r["closing_factor"].items() if f is not None and f > 0}
            carrier = min(plausible, key=lambda k: abs(math.log(plausible[k])), default=None)
            out.append({"point": p.name, "split": p.split, "release": f"{p.framework} {p.release}", **r,
                        "carrier": carrier})
    return out


def render_terms(rows: list[dict]) -> str:
    lines = ["| split | sweep | release | B | D | error | plain / spec / implied spec step ms | residual ms | what "
             "speculation adds, ms by term | term whose addition closes the residual with the smallest change (factor; "
             "the others) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        added = ", ".join(f"{SHORT[k]} {b - a:+.2f}" for k, (a, b) in r["terms_ms"].items() if abs(b - a) >= 0.005)
        cf = r["closing_factor"]
        host = "; ".join(f"{SHORT[k]} x{cf[k]:.2f}" if cf[k] is not None else f"{SHORT[k]} -"
                         for k in ("iteration", "spec_iteration", "draft_host", "per_sequence", "drafting_gpu"))
        c = r["carrier"]
        lines.append(f"| {r['split'][:3]} | {r['point']} | {r['release']} | {r['batch']} | {r['draft_len']} | "
                     f"{r['error']:+.1%} | {r['plain_step_ms']:.2f} / {r['spec_step_ms']:.2f} / "
                     f"{r['implied_spec_step_ms']:.2f} | {r['residual_ms']:+.2f} | {added} | **{SHORT.get(c, '-')}** "
                     f"x{cf[c]:.2f} ({host}) |"
                     if c else f"| {r['split'][:3]} | {r['point']} | {r['release']} | {r['batch']} | {r['draft_len']} "
                     f"| {r['error']:+.1%} | - | {r['residual_ms']:+.2f} | {added} | - |")
    return "\n".join(lines)


def issue_example() -> str:
    """The sweep of issue 17: Llama-3.1-8B + EAGLE-3 on one H100, ISL = OSL = 512, AL from vllm #20780."""
    batches = (1, 2, 4, 8, 16, 32, 64, 128)
    req = PlanRequest(mechanisms=MECHANISMS, target=resolve_shape("llama-3.1-8b-instruct"), hardware=load_hardware("h100"),
                      drafter=EAGLE3_32K, workload=Workload(batches, 512, 512),
                      acceptance=table({1: 1.78, **VLLM_20780_AL}, "vllm #20780", measured=True), max_draft_len=7,
                      compare=False)
    plan = make_plan(req)
    sp = {(c["batch_size"], c["draft_len"]): c["speedup"] for c in plan["candidates"]}
    rec = plan["recommendation"]
    lines = ["| batch | " + " | ".join(f"D={d}" for d in range(1, 8)) + " | chosen D |",
             "|---|" + "---|" * 8]
    chosen = {r["batch_size"]: r["draft_len"] for r in rec["by_batch"]}
    for b in batches:
        lines.append(f"| {b} | " + " | ".join(f"{sp[(b, d)]:.2f}x" for d in range(1, 8)) + f" | {chosen.get(b)} |")
    lines.append(f"\nschedule (TensorRT-LLM {rec['trtllm_profile']}): max_draft_len {rec['max_draft_len']}, "
                 f"draft_len_schedule {rec['draft_len_schedule']}; {rec['speculation_limit']['note']}")
    return "\n".join(lines)


def moe_sensitivity(framework: str = "SGLang", release: str = "0.5") -> str:
    """Identifiability, not a fit: over MOE_GRID with the framework's other costs held, the calibration loss of its
    points next to the batch trend that gives on each validation MoE sweep of that framework (never used to
    choose anything)."""
    cal = [p for p in POINTS if p.split == "calibration" and (p.framework, p.release) == (framework, release)]
    if not cal:
        sys.exit(f"{framework} {release} has no calibration points (split rule: planner_points.SPLIT_RULE)")
    val = [p for p in POINTS if p.split == "validation" and (p.framework, p.release) == (framework, release)
           and "trend" in predict(p) and resolve_shape(p.target).moe is not None]
    rows = []
    for vals in itertools.product(*MOE_GRID.values()):
        prof = published_host_profile(framework, release)[0].overhead_fields() | dict(zip(MOE_GRID, vals, strict=True))
        score = loss([predict(p, GEMM_OVERLAP, prof) for p in cal]) * len(cal)
        rows.append((score, vals, [predict(p, GEMM_OVERLAP, prof)["trend"]["predicted"] for p in val]))
    rows.sort()
    best = rows[0][0]
    lines = [f"| moe_layer_units | per_expert_s | {framework} calibration loss | " + " | ".join(
        f"{p.name}: predicted trend" for p in val) + " |", "|---|---|---|" + "---|" * len(val)]
    shown = rows[:6] + [r for r in rows[6:] if any(t > 0 for t in r[2])][:3]
    for score, (units, per_expert), trends in shown:
        lines.append(f"| {units} | {per_expert * 1e6:.1f} us | {score:.4f} ({score / best:.2f}x best) | "
                     + " | ".join(f"{t:+.3f}" for t in trends) + " |")
    return "\n".join(lines)


def selected(points: list[Point], argv: list[str]) -> list[Point]:
    """--framework NAME [--release R]: only that framework's (release's) points, each with its release profile."""
    def arg(flag: str) -> str | None:
        return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None

    fw, rel = arg("--framework"), arg("--release")
    out = [p for p in points if (fw is None or p.framework == fw) and (rel is None or p.release == rel)]
    if not out:
        known = sorted({f"{p.framework} {p.release}" for p in points})
        sys.exit(f"no points for --framework {fw} --release {rel}; known: {', '.join(known)}")
    return out


def out_of_sample() -> list[dict]:
    """Each calibration source priced without itself (benchmarks/planner_loso.py)."""
    return planner_loso.loso(POINTS, predict, lambda rest, overlap: fit_release(rest, overlap).terms, GEMM_OVERLAP,
                             profile_of, DEFAULT_PRIOR)


def main() -> None:
    if "--help" in sys.argv or "-h" in sys.argv:  # the module docstring: the flags and what the full run writes
        print(__doc__)
        return
    if "--moe-sensitivity" in sys.argv:
        print(moe_sensitivity())
        return
    if "--terms" in sys.argv:  # issue 36: each point's residual by term of the step model
        with rule_fits(POINTS):
            print(render_terms(terms_rows(selected(POINTS, sys.argv))))
        return
    if "--loso" in sys.argv:  # the interval's model term: calibration residuals out of sample
        calib = [predict(p) for p in POINTS if p.split == "calibration"]
        print(planner_loso.render(out_of_sample(), model_log_sd(calib), iv.DEFAULT_LEVEL))
        return
    if "--fit" in sys.argv:  # the six host terms per release, on the calibration split only
        print(json.dumps({"gemm_overlap": GEMM_OVERLAP, "frameworks": fit()}, indent=2))
        return
    raw = _arg("--level") or str(iv.DEFAULT_LEVEL)
    try:
        level = iv.check_level(float(raw), "--level")
    except (UserError, ValueError) as exc:
        msg = str(exc) if isinstance(exc, UserError) else f"--level {raw!r} is not a number in (0, 1), e.g. 0.8"
        print(f"error: {msg}", file=sys.stderr)
        sys.exit(2)
    points = selected(POINTS, sys.argv)
    with rule_fits(POINTS):
        results = [predict(p, level=level) for p in points]
    before = [predict(p, level=level) for p in selected(POINTS_AS_ASSIGNED, sys.argv)]  # recorded profiles
    rule = split_rule_record(before, results)
    st = all_stats(results)
    sd = model_log_sd(results) if any(r["split"] == "calibration" for r in results) else float("nan")
    loso = out_of_sample()  # with the recorded profiles (those the planner ships), as an unseen source is priced
    out_sd = planner_loso.calibrated_sd(loso, iv.DEFAULT_LEVEL)
    terms = {"model_log_sd": out_sd, "model_log_sd_in_sample": sd, "loso": planner_loso.summary(loso)}
    extra = {"fit": fit(), "retired": retired_record()}
    if "--json" in sys.argv:
        print(json.dumps({"results": results, "stats": st, **terms, "by_release": by_release(results),
                          "split_rule": rule, **extra}, indent=2, default=str))
        return
    print(render(results, st, level, rule))
    print(render_fit_and_retired(extra))
    print("\n### The interval's model term, out of sample (--loso)\n")
    print(planner_loso.render(loso, sd, iv.DEFAULT_LEVEL))
    print(f"\nplanner/interval.MODEL_LOG_SD = {iv.MODEL_LOG_SD} (out of sample), MODEL_LOG_SD_CALIBRATED = "
          f"{iv.MODEL_LOG_SD_CALIBRATED} (in sample: after plan --calibrate)")
    print("\n### Issue 17's example (H100, Llama-3.1-8B, EAGLE-3, ISL = OSL = 512): predicted speedup per D\n")
    print(issue_example())
    if len(points) == len(POINTS):  # the full run writes the benchmark JSON (README's planner row)
        from pathlib import Path

        command = "PYTHONPATH=$PWD .venv/bin/python benchmarks/planner_validation.py" + \
            (f" --level {level}" if level != iv.DEFAULT_LEVEL else "")
        out = Path(__file__).with_suffix(".json")
        out.write_text(json.dumps(benchmark_json(results, st, level, command, EXCLUDED, terms, rule, extra),
                                  indent=1, default=str) + "\n", encoding="utf-8")


def _arg(flag: str) -> str | None:
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv and sys.argv.index(flag) + 1 < len(sys.argv) else None


if __name__ == "__main__":
    main()
