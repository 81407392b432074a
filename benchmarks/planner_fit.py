"""The six host terms of the step model fitted per framework release on calibration points only (issue 54):
benchmarks/planner_validation.py --fit, --loso and benchmarks/planner_vs_aic.py.

The step model (trtllm_spec/planner/step.py) is linear in its six host terms x:

    T(b, D) = work(b, D) + c(b, D) . x

``work`` is the GPU work (the roofline's, or -- in planner_vs_aic's silicon source -- AIConfigurator's kernel
tables for the target's pass plus the roofline's drafter), ``c`` how many times each term counts (step.coefficients;
read here by finite differences on the planner's own step, so trees, overlap and the per-sequence parts are exactly
what the planner prices). A published point gives either a speedup S at (b, D) with acceptance AL, or a plain step
time T0(b). Both are linear equations in x:

    AL T0 = S T1   ->  (AL c0 - S c1) . x = S w1 - AL w0          (divided by S T1: a relative speedup error)
    T0 = measured  ->  c0 . x = T_meas - w0                       (divided by T_meas: a relative step error)

solved by non-negative least squares (planner/calibrate.nonneg_least_squares), re-weighted twice with the current
T1. What a release's calibration points identify (the rules of planner/calibrate.design, applied to published
sweeps; every rule reads the calibration points only):

- ``iteration_s``: always;
- per-sequence terms: only where one sweep (same model, GPU and source) runs the same D at two batch sizes or more
  (a batch difference between two sources is confounded with their models: it identifies nothing); then
  ``sequence_s`` and the speculative per-sequence sum (spec_sequence_s + n draft_sequence_s, split in the prior's
  ratio, all to spec_sequence_s when the prior has neither); otherwise all three stay 0 and the profile says so --
  the plan's interval carries them with ``PER_SEQUENCE_SD_S`` (core/host_costs.py);
- ``spec_iteration_s`` and ``draft_step_s`` apart only where the release's points run two draft lengths or more;
  else their sum at the release's D (split in the prior's ratio).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from trtllm_spec.core.host_costs import HOST_TERMS, PER_SEQUENCE_TERMS
from trtllm_spec.planner.calibrate import nonneg_least_squares, rank

UNIT = 1e-3  # the finite-difference step: the model is linear in every term, so any value is exact


@dataclass(frozen=True)
class Column:
    """One unknown: a direction in the six-term space (a term alone, or a sum split in the prior's ratio)."""

    name: str
    vector: dict[str, float]


@dataclass(frozen=True)
class ReleaseFit:
    terms: dict[str, float]
    columns: list[str]
    notes: list[str]
    rows: int
    loss: float  # mean squared log error of the rows it was fitted on


def _sweeps_varying_batch(points: list) -> list:
    """The sweeps (one source, model and GPU each) that run one D at two batch sizes or more."""
    out = []
    for p in points:
        by_d: dict[int, set[int]] = {}
        for b, d in p.speedup:
            by_d.setdefault(d, set()).add(b)
        if any(len(bs) >= 2 for bs in by_d.values()) or len(p.base_step_s) >= 2:
            out.append(p)
    return out


def _split(prior: dict[str, float], a: str, b: str, n_steps: float) -> dict[str, float]:
    """The direction of a sum a + n b whose parts keep the prior's ratio (all on ``a`` when the prior has neither)."""
    pa, pb = prior.get(a, 0.0), prior.get(b, 0.0) * n_steps
    if pa + pb <= 0:
        return {a: 1.0}
    s = pa + pb
    return {a: pa / s, b: (pb / s) / n_steps}


def columns(points: list, prior: dict[str, float], draft_steps: Callable[[object, int], float]
            ) -> tuple[list[Column], list[str]]:
    """The unknowns a release's calibration points identify (module docstring), in the order they are given up
    when the equations cannot separate them all (the last first, held at the prior's value: the speculative terms
    decide the speedup, the per-sequence ones matter least at the batch sizes published), and what is left to 0 /
    the prior's ratio, in words."""
    notes = []
    cols = []
    ds = sorted({d for p in points for _b, d in p.speedup if d})
    varying = _sweeps_varying_batch(points)
    n_ref = draft_steps(points[0], ds[0]) if ds else 1.0
    if len(ds) >= 2:
        cols += [Column("spec_iteration_s", {"spec_iteration_s": 1.0}), Column("draft_step_s", {"draft_step_s": 1.0})]
    elif ds:
        cols.append(Column("spec_iteration_s + n draft_step_s",
                           _split(prior, "spec_iteration_s", "draft_step_s", n_ref)))
        notes.append(f"one draft length (D = {ds[0]}): spec_iteration_s + {n_ref:g} draft_step_s is fitted, split in "
                     "the prior's ratio")
    cols.append(Column("iteration_s", {"iteration_s": 1.0}))
    if varying:
        cols.append(Column("sequence_s", {"sequence_s": 1.0}))
        if ds:
            cols.append(Column("spec_sequence_s + n draft_sequence_s",
                               _split(prior, "spec_sequence_s", "draft_sequence_s", n_ref)))
        notes.append("per-sequence terms from " + ", ".join(p.name for p in varying)
                     + " (one sweep at several batch sizes); the speculative pair as a sum, split in the prior's ratio")
    else:
        notes.append("no calibration sweep varies the batch size: sequence_s, spec_sequence_s and draft_sequence_s "
                     "are not identified and stay 0 (the plan's interval carries them: PER_SEQUENCE_SD_S)")
    return cols, notes


def equations(points: list, comp: Callable[[object], dict]) -> list[dict]:
    """Every speedup and plain step of ``points`` with the step components it compares:
    ``comp(p)`` -> {(b, d): {"work": s, "coef": {term: c}}} (planner_fit.components)."""
    eqs = []
    for p in points:
        c = comp(p)
        for (b, d), s in p.speedup.items():
            eqs.append({"kind": "speedup", "s": s, "al": p.al[d], "c0": c[(b, 0)], "c1": c[(b, d)]})
        for b, t in p.base_step_s.items():
            eqs.append({"kind": "plain", "t": t, "c0": c[(b, 0)]})
    return eqs


def _row(e: dict, cols: list[Column], fixed: dict[str, float]) -> tuple[list[float], float]:
    """One equation over ``cols`` with the ``fixed`` terms moved to the right-hand side (unweighted)."""
    def proj(c: dict, col: Column) -> float:
        return sum(c["coef"][k] * v for k, v in col.vector.items())

    if e["kind"] == "speedup":
        s, al, c0, c1 = e["s"], e["al"], e["c0"], e["c1"]
        return ([al * proj(c0, col) - s * proj(c1, col) for col in cols],
                s * step(c1, fixed) - al * step(c0, fixed))
    return [proj(e["c0"], col) for col in cols], e["t"] - step(e["c0"], fixed)


def _terms(cols: list[Column], theta: list[float], fixed: dict[str, float]) -> dict[str, float]:
    out = dict(fixed)
    for col, th in zip(cols, theta, strict=True):
        for k, v in col.vector.items():
            out[k] += th * v
    return out


def step(c: dict, x: dict[str, float]) -> float:
    return c["work"] + sum(c["coef"][k] * x.get(k, 0.0) for k in HOST_TERMS)


def log_errors(eqs: list[dict], x: dict[str, float]) -> list[float]:
    out = []
    for e in eqs:
        if e["kind"] == "speedup":
            out.append(math.log(e["al"] * step(e["c0"], x) / step(e["c1"], x) / e["s"]))
        else:
            out.append(math.log(step(e["c0"], x) / e["t"]))
    return out


def fit(eqs: list[dict], cols: list[Column], notes: list[str], prior: dict[str, float]) -> ReleaseFit:
    """Non-negative least squares on relative residuals, re-weighted twice with the current step times. Columns the
    equations cannot separate are given up from the end of ``cols`` (their terms held at the prior's values, said
    in the notes); terms in no column are 0."""
    notes = list(notes)
    cols = list(cols)
    held: list[Column] = []
    zero = dict.fromkeys(HOST_TERMS, 0.0)
    while cols and rank([_row(e, cols, zero)[0] for e in eqs]) < len(cols):
        held.insert(0, cols.pop())
    fixed = dict(zero)
    for col in held:
        for k in col.vector:
            fixed[k] = prior.get(k, 0.0)
    if held:
        notes.append(f"{len(eqs)} equation(s) cannot separate " + ", ".join(c.name for c in held)
                     + " from the rest: held at the prior's value")
    x = dict(fixed)
    for _ in range(3):
        rows, rhs = [], []
        for e in eqs:
            a, y = _row(e, cols, fixed)
            w = 1.0 / (e["s"] * step(e["c1"], x) if e["kind"] == "speedup" else e["t"])
            rows.append([v * w for v in a])
            rhs.append(y * w)
        theta = nonneg_least_squares(rows, rhs) if cols else []
        x = _terms(cols, theta, fixed)
    errs = log_errors(eqs, x)
    return ReleaseFit(x, [c.name for c in cols], notes, len(eqs), sum(v * v for v in errs) / len(errs))


def components(pairs: list[tuple[int, int]], step_of: Callable[[dict[str, float]], dict[tuple[int, int], float]]
               ) -> dict[tuple[int, int], dict]:
    """{(b, d): {"work", "coef"}} from a function that prices every pair with given host terms (the planner's own
    step): work = the step with every host term 0, coef_k = the step's growth per second of term k."""
    zero = dict.fromkeys(HOST_TERMS, 0.0)
    base = step_of(zero)
    out = {k: {"work": base[k], "coef": {}} for k in pairs}
    for term in HOST_TERMS:
        t = step_of(zero | {term: UNIT})
        for k in pairs:
            out[k]["coef"][term] = (t[k] - base[k]) / UNIT
    return out


def per_sequence_fitted(fits: dict[str, ReleaseFit]) -> dict[str, float]:
    """The largest fitted value of each per-sequence term over the releases whose points identify it."""
    out = dict.fromkeys(PER_SEQUENCE_TERMS, 0.0)
    for f in fits.values():
        if "sequence_s" in f.columns:
            for k in PER_SEQUENCE_TERMS:
                out[k] = max(out[k], f.terms[k])
    return out
