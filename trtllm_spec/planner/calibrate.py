"""Fit the host-cost terms to the engine's own step times (``plan --calibrate``): pure math.

The step model (search.target_step + search.draft_step) is linear in the three host terms:

    t_step(B, D) = t_gpu(B, D) + c_it(D) iteration_s + [D > 0] (spec_iteration_s + n(D) draft_step_s)

with t_gpu everything else the model prices (GEMMs, attention, communication, kernel gaps, sampling),
c_it(D) = 1 - the overlap scheduler's hidden share on that kind of iteration, and n(D) = D for a chain drafter
(one host step per draft token), 1 for a block drafter. A trtllm-bench report gives TPOT (time per output token
after the first) and, for a speculative run, AL; one iteration then takes

    t_step = TPOT x AL          (AL = 1 without speculation)

so each report is one linear equation  t_step - t_gpu = sum_k c_k x_k.  The terms are the non-negative least
squares solution. What the reports identify:

- a plain report fixes iteration_s;
- speculative reports at one D fix the sum S(D) = spec_iteration_s + n(D) draft_step_s only: it is split in the
  ratio of the prior profile's two terms at that D (and the result says so);
- speculative reports at two or more D identify both terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trtllm_spec.core.hardware import Hardware
from trtllm_spec.planner.mechanism import DraftCost
from trtllm_spec.planner.search import CostContext, Workload, draft_step, target_step

TERMS = ("iteration_s", "spec_iteration_s", "draft_step_s")


@dataclass(frozen=True)
class StepMeasurement:
    """One engine run: TPOT at batch B and draft length D (0 = no speculation) with the run's AL."""

    batch: int
    draft_len: int
    acceptance_length: float
    isl: int
    osl: int
    tpot_s: float
    source: str

    @property
    def step_s(self) -> float:
        return self.tpot_s * self.acceptance_length


@dataclass(frozen=True)
class HostFit:
    terms: dict[str, float]  # seconds
    identified: list[str]  # what the measurements determine
    split_note: str | None  # how an unidentified pair was split
    rows: list[dict]  # per measurement: measured and modelled TPOT before and after


def _with_terms(hw: Hardware, terms: dict[str, float]) -> Hardware:
    return hw.model_copy(update={"overheads": hw.overheads.model_copy(update=terms)})


def modelled_step_s(ctx: CostContext, cost: DraftCost, m: StepMeasurement, hw: Hardware) -> float:
    """The step model's iteration time for the measurement's batch, D and lengths, on ``hw``."""
    c = replace(ctx, hw=hw, workload=Workload((m.batch,), m.isl, m.osl))
    return target_step(c, m.batch, m.draft_len).total_s + draft_step(c, cost, m.batch, m.draft_len).total_s


def host_coefficients(hw: Hardware, cost: DraftCost, draft_len: int) -> dict[str, float]:
    """d t_step / d term for one iteration at ``draft_len`` (the model is linear in each term)."""
    spec = draft_len > 0
    hidden = hw.overheads.overlap_hides if (not spec or hw.overheads.overlap_with_speculation) else 0.0
    return {"iteration_s": 1.0 - hidden, "spec_iteration_s": (1.0 - hidden) if spec else 0.0,
            "draft_step_s": (draft_len if cost.sequential else 1.0) if spec else 0.0}


def _solve(rows: list[list[float]], rhs: list[float]) -> list[float]:
    """Least squares via the normal equations (at most 3 unknowns), Gaussian elimination with pivoting."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * y for r, y in zip(rows, rhs, strict=True))]
         for i in range(n)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[piv] = a[piv], a[col]
        if abs(a[col][col]) < 1e-30:
            raise ValueError("singular")
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def nonneg_least_squares(rows: list[list[float]], rhs: list[float]) -> list[float]:
    """min ||A x - y|| with x >= 0 for a few unknowns: solve, pin the most negative at 0, repeat."""
    free = list(range(len(rows[0])))
    x = [0.0] * len(rows[0])
    while free:
        sol = _solve([[r[i] for i in free] for r in rows], rhs)
        worst = min(range(len(free)), key=lambda i: sol[i])
        if sol[worst] >= 0:
            for i, v in zip(free, sol, strict=True):
                x[i] = v
            return x
        free.pop(worst)
    return x


def _columns(draft_lens: set[int], sequential: bool) -> list[str]:
    """The unknowns the measurements identify: the pair is one combined unknown at a single D (or a block
    drafter, where both terms count once per iteration)."""
    spec = {d for d in draft_lens if d > 0}
    if not spec:
        return ["iteration_s"]
    if len(spec) == 1 or not sequential:
        return ["iteration_s", "speculative_s"]
    return list(TERMS)


def split_speculative(total_s: float, prior: dict[str, float], n_steps: float, c_spec: float = 1.0
                      ) -> tuple[float, float]:
    """S = c_spec spec_iteration_s + n draft_step_s (c_spec: the exposed share of the per-iteration term under an
    overlap scheduler), split in the prior's ratio at n steps (all to the per-iteration term when the prior has
    neither)."""
    a, b = prior["spec_iteration_s"], prior["draft_step_s"] * n_steps
    scale = c_spec * a + b
    if scale <= 0:
        return total_s / max(c_spec, 1e-9), 0.0
    k = total_s / scale
    return k * a, k * b / n_steps


def fit_host_costs(ctx: CostContext, cost: DraftCost, measurements: list[StepMeasurement],
                   prior: dict[str, float]) -> HostFit:
    """The host terms that make the step model reproduce every measured step time (least squares, >= 0)."""
    zero = _with_terms(ctx.hw, dict.fromkeys(TERMS, 0.0))
    cols = _columns({m.draft_len for m in measurements}, cost.sequential)
    rows, rhs = [], []
    for m in measurements:
        coef = host_coefficients(ctx.hw, cost, m.draft_len)
        coef["speculative_s"] = 1.0 if m.draft_len else 0.0
        rows.append([coef[c] for c in cols])
        rhs.append(m.step_s - modelled_step_s(ctx, cost, m, zero))
    x = dict(zip(cols, nonneg_least_squares(rows, rhs), strict=True))
    terms, note = {"iteration_s": x["iteration_s"]}, None
    if "speculative_s" in x:
        d = next(m.draft_len for m in measurements if m.draft_len)
        n = d if cost.sequential else 1
        c_spec = host_coefficients(ctx.hw, cost, d)["spec_iteration_s"]
        terms["spec_iteration_s"], terms["draft_step_s"] = split_speculative(x["speculative_s"], prior, n, c_spec)
        note = (f"the reports run one draft length (D = {d}): they fix spec_iteration_s + {n} x draft_step_s = "
                f"{x['speculative_s'] * 1e3:.3f} ms, split in the prior profile's ratio; bench a second D to "
                "separate them")
    elif "spec_iteration_s" not in x:
        terms |= {k: prior[k] for k in ("spec_iteration_s", "draft_step_s")}
    else:
        terms |= {k: x[k] for k in ("spec_iteration_s", "draft_step_s")}
    identified = ["iteration_s"] + (["spec_iteration_s + n draft_step_s"] if note else
                                    ["spec_iteration_s", "draft_step_s"] if "spec_iteration_s" in x else [])
    return HostFit(terms, identified, note, fit_rows(ctx, cost, measurements, prior, terms))


def fit_rows(ctx: CostContext, cost: DraftCost, measurements: list[StepMeasurement], prior: dict[str, float],
             fitted: dict[str, float]) -> list[dict]:
    """Measured TPOT beside the model's with the prior and with the fitted terms."""
    before, after = _with_terms(ctx.hw, prior), _with_terms(ctx.hw, fitted)
    out = []
    for m in measurements:
        t0, t1 = modelled_step_s(ctx, cost, m, before), modelled_step_s(ctx, cost, m, after)
        out.append({"source": m.source, "batch_size": m.batch, "draft_len": m.draft_len,
                    "acceptance_length": round(m.acceptance_length, 6), "measured_tpot_s": m.tpot_s,
                    "prior_tpot_s": t0 / m.acceptance_length, "fitted_tpot_s": t1 / m.acceptance_length,
                    "fitted_error": t1 / m.acceptance_length / m.tpot_s - 1.0 if m.tpot_s > 0 else math.nan})
    return out
