"""Leave-one-source-out residuals of the calibration split (benchmarks/planner_validation.py --loso).

The interval's model term (planner/interval.MODEL_LOG_SD) must say how far the planner is from a measurement it was
not fitted on. The calibration split's own residuals cannot: every one of its points helped choose the host costs
that price it. Here each calibration source is priced as the planner would price a source it has never seen:

- its framework release keeps other calibration sources: that release's host costs are re-fitted on them alone
  (the same six-term fit as ``--fit``; MoE kernel costs and the shared GEMM overlap held at their recorded values);
- it was its release's only calibration source: the release has no fit left, so it is priced by the release rule
  (core/host_costs.release_host_profile) from the framework's other fitted releases, as an unfitted release is;
- its framework has no other fitted release (issue 54: vLLM and SGLang keep one each once the profiles fitted on
  held-out sources are retired): it is priced by the planner's default prior, TensorRT-LLM's fitted profile -- the
  host costs of another engine, what a plan for an engine without a profile would be (the MoE kernel costs and
  overlap of its own release kept).

The held-out split is never used. ``MODEL_LOG_SD`` is the smallest model term (on a 0.005 grid) for which the
planner's own intervals at the default level (the host part from each point's release profile, the model term
added in quadrature) hold at least that share of these out-of-sample residuals: the interval is calibrated out of
sample, not on the points that chose the host costs. The in-sample residual sd is printed beside it (the term after
``plan --calibrate``, planner/interval.MODEL_LOG_SD_CALIBRATED).
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Iterator

from trtllm_spec.core import host_costs


@contextlib.contextmanager
def without_fit(framework: str, release: str) -> Iterator[None]:
    """The framework release's fitted host profile removed for the block (the release rule prices it)."""
    key = (framework, release)
    saved = host_costs.PUBLISHED_HOST_PROFILES.pop(key)
    try:
        yield
    finally:
        host_costs.PUBLISHED_HOST_PROFILES[key] = saved


def robust_log_sd(rows: list[dict]) -> float:
    return 1.4826 * statistics.median(abs(math.log(1 + r["error"])) for r in rows)


def loso(points: list, predict, refit, overlap: float, profile_of, default: tuple[str, str]) -> list[dict]:
    """One result per calibration source: its points predicted without that source in any fit. ``refit(rest,
    overlap)`` -> the six host terms fitted on ``rest`` (planner_validation.fit_release); ``default``: the
    (framework, release) whose profile prices a source whose framework has no other fitted release left."""
    calib = [p for p in points if p.split == "calibration"]
    sources = sorted({p.source.split(" (")[0].split(":")[0] for p in calib})
    out = []
    for source in sources:
        held = [p for p in calib if p.source.split(" (")[0].split(":")[0] == source]
        for rel in sorted({(p.framework, p.release) for p in held}):
            pts = [p for p in held if (p.framework, p.release) == rel]
            rest = [p for p in calib if (p.framework, p.release) == rel and p not in held]
            if rest:
                recorded = profile_of(rest[0])[0]
                how = f"re-fitted on {len(rest)} other calibration sweep(s) of {rel[0]} {rel[1]}"
                results = [predict(p, overlap, recorded | refit(rest, overlap)) for p in pts]
            elif any(f == rel[0] and r != rel[1] for f, r in host_costs.PUBLISHED_HOST_PROFILES):
                with without_fit(*rel):
                    how = f"release rule ({profile_of(pts[0])[1]})"
                    results = [predict(p, overlap) for p in pts]
            else:  # nothing of its framework is left: an engine the planner has no profile of
                prof = host_costs.PUBLISHED_HOST_PROFILES[default]
                how = (f"no other fitted {rel[0]} release: the planner's default prior, {prof.name} (another "
                       "engine's host costs)")
                results = [predict(p, overlap, profile_of(p)[0] | prof.terms()) for p in pts]
            for res in results:
                res["loso"] = how
            out.extend(results)
    return out


def _rows(results: list[dict]) -> list[dict]:
    return [r for res in results for r in res["rows"]]


def coverage(results: list[dict], level: float, model_sd: float) -> float:
    """The share of rows inside the planner's interval at ``level`` with model term ``model_sd``."""
    from trtllm_spec.planner.interval import z_of

    z = z_of(level)
    rows = _rows(results)
    return sum(abs(math.log(1 + r["error"])) <= z * math.hypot(r["host_log_sd"], model_sd) for r in rows) / len(rows)


def calibrated_sd(results: list[dict], level: float) -> float:
    """The smallest model term (0.005 grid, at most 1.0) whose intervals hold ``level`` of the rows."""
    for step in range(201):
        if coverage(results, level, step * 0.005) >= level:
            return round(step * 0.005, 3)
    return 1.0


def summary(results: list[dict]) -> dict:
    """Per calibration sweep: how it was priced without itself, its errors (the benchmark JSON's ``loso``)."""
    return {"sweeps": [{"sweep": res["point"], "priced_by": res["loso"], "points": len(res["rows"]),
                        "median_abs_error": round(statistics.median(abs(r["error"]) for r in res["rows"]), 4),
                        "mean_signed_error": round(statistics.fmean(r["error"] for r in res["rows"]), 4)}
                       for res in results],
            "points": len(_rows(results)), "robust_log_sd": round(robust_log_sd(_rows(results)), 4)}


def render(results: list[dict], in_sample_sd: float, level: float) -> str:
    from trtllm_spec.planner.interval import MODEL_LOG_SD

    lines = ["| calibration sweep | priced without itself by | points | median abs error | mean signed error |",
             "|---|---|---|---|---|"]
    for s in summary(results)["sweeps"]:
        lines.append(f"| {s['sweep']} | {s['priced_by']} | {s['points']} | {s['median_abs_error']:.1%} | "
                     f"{s['mean_signed_error']:+.1%} |")
    sd = calibrated_sd(results, level)
    lines += ["", f"Out of sample ({len(_rows(results))} points): robust residual log sd "
              f"{robust_log_sd(_rows(results)):.3f}; the model term that puts {level:.0%} of them inside their "
              f"{level:.0%} interval: **{sd:.3f}** (recorded: planner/interval.MODEL_LOG_SD = {MODEL_LOG_SD}; "
              f"inside with it: {coverage(results, level, MODEL_LOG_SD):.0%}). In sample (the fit's own points): "
              f"{in_sample_sd:.3f}."]
    return "\n".join(lines)
