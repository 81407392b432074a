"""Fit the step model's host terms to the engine's own step times (``plan --calibrate``, ``tune``): pure math.

The step model (planner/step.py) is linear in its six host terms:

    t_step(b, D) = work(b, D) + e_it (iteration_s + b sequence_s) + [D > 0] e_sp (spec_iteration_s + b spec_sequence_s)
                 + n(D) (draft_step_s + b draft_sequence_s)

with ``work`` the GPU work the roofline prices (zero on a measured step: ``tune`` on an engine the roofline does
not price, where the terms carry everything), e the exposed shares under an overlap scheduler and n(D) the draft
steps (planner/step.draft_steps). A run gives TPOT and, for a speculative run, AL; one iteration takes

    t_step = TPOT x AL          (AL = 1 without speculation)

so each run is one linear equation  t_step - work = sum_k c_k x_k.  The terms are the non-negative least-squares
solution on relative residuals (each equation divided by its step time: a 5% miss weighs the same at any batch).
What the runs identify:

- runs at one batch size identify no per-sequence term: refused (``DesignError``), naming what to run;
- plain runs at two batch sizes fix iteration_s and sequence_s;
- speculative runs at one D (or a block drafter's, whose two speculative terms count once each) fix only the sums
  spec_iteration_s + n(D) draft_step_s and their per-sequence pair: each sum is split in the ratio of the prior's
  two terms (all to the per-iteration one when the prior has neither), and the result says so;
- the per-sequence speculative pair needs a draft length run at two batch sizes (else the prior's values, said
  so), and two such draft lengths to be told apart (else their sum per sequence, split like the pair above);
- a design whose equations cannot separate the chosen terms is refused, and so is one that leaves a term the
  caller requires to the prior (``tune``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trtllm_spec.core.hardware import Hardware
from trtllm_spec.planner.mechanism import DraftCost
from trtllm_spec.planner.search import CostContext, Workload, draft_step, target_step
from trtllm_spec.planner.step import TERMS, coefficients, draft_steps


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


def host_coefficients(hw: Hardware, cost: DraftCost, draft_len: int, batch: int = 1) -> dict[str, float]:
    """d t_step / d term for one iteration at (``batch``, ``draft_len``) (the model is linear in each term)."""
    return coefficients(hw.overheads, cost.sequential, batch, draft_len)


class DesignError(ValueError):
    """The runs cannot identify the terms (one batch size, or a design whose equations are dependent)."""


def _solve(rows: list[list[float]], rhs: list[float]) -> list[float]:
    """Least squares via the normal equations (a few unknowns), Gaussian elimination with pivoting."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * y for r, y in zip(rows, rhs, strict=True))]
         for i in range(n)]
    scale = max((abs(a[i][i]) for i in range(n)), default=1.0) or 1.0
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[piv] = a[piv], a[col]
        if abs(a[col][col]) < 1e-12 * scale:
            raise ValueError("singular")
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def rank(rows: list[list[float]], tol: float = 1e-9) -> int:
    """The numerical rank of a small matrix (rows scaled to unit max), by elimination."""
    m = [[x / (max(abs(v) for v in r) or 1.0) for x in r] for r in rows if any(r)]
    r = 0
    cols = len(rows[0]) if rows else 0
    for c in range(cols):
        piv = max(range(r, len(m)), key=lambda i: abs(m[i][c]), default=None)
        if piv is None or abs(m[piv][c]) < tol:
            continue
        m[r], m[piv] = m[piv], m[r]
        for i in range(len(m)):
            if i != r:
                f = m[i][c] / m[r][c]
                m[i] = [x - f * y for x, y in zip(m[i], m[r], strict=True)]
        r += 1
        if r == len(m):
            break
    return r


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


# merged unknowns: a sum the runs fix where its two terms cannot be told apart
SPEC_SUM = "speculative_s"  # e_sp spec_iteration_s + n draft_step_s
SPEC_SEQ_SUM = "speculative_sequence_s"  # per sequence: e_sp spec_sequence_s + n draft_sequence_s


@dataclass(frozen=True)
class Design:
    """Which unknowns a set of runs identifies (``design``), and what is left to the prior (``notes``)."""

    columns: list[str]
    notes: list[str]


def design(measurements: list[StepMeasurement], hw: Hardware, cost: DraftCost, require: tuple[str, ...] = ()
           ) -> Design:
    """The unknowns the runs identify (module docstring); raises ``DesignError`` for runs at one batch size, a
    dependent design, or one that leaves a ``require``-d term to the prior (``tune`` needs every term its form
    has)."""
    ov = hw.overheads
    plain_b = {m.batch for m in measurements if m.draft_len == 0}
    spec = [m for m in measurements if m.draft_len > 0]
    steps = {draft_steps(ov, cost.sequential, m.draft_len) for m in spec}
    batches_of: dict[float, set[int]] = {}
    for m in spec:
        batches_of.setdefault(draft_steps(ov, cost.sequential, m.draft_len), set()).add(m.batch)
    swept = [n for n, bs in batches_of.items() if len(bs) >= 2]  # draft lengths run at two batch sizes or more
    if len({m.batch for m in measurements}) < 2:
        b = next(iter({m.batch for m in measurements}), None)
        raise DesignError(f"every run is at batch size (concurrency) {b}: one batch size cannot separate the "
                          "per-sequence costs from the per-iteration ones; run the same plain and speculative "
                          f"settings at a second concurrency as well (e.g. {b} and {max(8, 4 * (b or 1))})")
    cols, notes = ["iteration_s"], []
    if len(plain_b) >= 2:
        cols.append("sequence_s")
    else:
        notes.append(f"the plain runs are at one batch size ({next(iter(plain_b), '-')}): sequence_s is the "
                     "prior's; run the target alone at a second concurrency to fit it")
    if spec:
        cols += ["spec_iteration_s", "draft_step_s"] if len(steps) >= 2 else [SPEC_SUM]
        if len(swept) >= 2:
            cols += ["spec_sequence_s", "draft_sequence_s"]
        elif swept:
            cols.append(SPEC_SEQ_SUM)
        else:
            notes.append("no draft length ran at two batch sizes: spec_sequence_s and draft_sequence_s are the "
                         "prior's; run a speculative setting at a second concurrency to fit them")
    rows = [_row(hw, cost, m, cols) for m in measurements]
    have = ", ".join(f"(c {m.batch}, D {m.draft_len})" for m in measurements)
    if rank(rows) < len(cols):
        raise DesignError(f"the runs {have} cannot separate the terms {', '.join(cols)}: run every draft length at "
                          "both concurrencies (the plain target included), e.g. concurrency {1, 8} x D {0, 1, 3}")
    missing = [k for k in require if k not in cols and not (k in ("spec_iteration_s", "draft_step_s") and SPEC_SUM in
               cols) and not (k in ("spec_sequence_s", "draft_sequence_s") and SPEC_SEQ_SUM in cols)]
    if missing:
        raise DesignError(f"the runs {have} cannot fit {', '.join(missing)}: run the target alone and a speculative "
                          "draft length at two concurrencies each (e.g. concurrency {1, 8} x D {0, 3})")
    return Design(cols, notes)


def _row(hw: Hardware, cost: DraftCost, m: StepMeasurement, cols: list[str]) -> list[float]:
    c = host_coefficients(hw, cost, m.draft_len, m.batch)
    c[SPEC_SUM] = c["spec_iteration_s"] + c["draft_step_s"] if m.draft_len else 0.0
    c[SPEC_SEQ_SUM] = float(m.batch) if m.draft_len else 0.0
    if m.draft_len:  # the merged unknowns count once per iteration (per sequence): the split is by the prior's ratio
        c[SPEC_SUM] = 1.0
    return [c[k] for k in cols]


def split_speculative(total_s: float, prior: dict[str, float], n_steps: float, c_spec: float = 1.0,
                      terms: tuple[str, str] = ("spec_iteration_s", "draft_step_s")) -> tuple[float, float]:
    """S = c_spec a + n b (c_spec: the exposed share of the per-iteration term under an overlap scheduler), split in
    the prior's ratio of ``terms`` (a, b) at n steps (all to the per-iteration term when the prior has neither)."""
    a, b = prior.get(terms[0], 0.0), prior.get(terms[1], 0.0) * n_steps
    scale = c_spec * a + b
    if scale <= 0:
        return total_s / max(c_spec, 1e-9), 0.0
    k = total_s / scale
    return k * a, k * b / n_steps


def fit_host_costs(ctx: CostContext, cost: DraftCost, measurements: list[StepMeasurement],
                   prior: dict[str, float], require: tuple[str, ...] = ()) -> HostFit:
    """The host terms that make the step model reproduce every measured step time (least squares on relative
    residuals, terms >= 0). Raises ``DesignError`` when the runs cannot identify them (or a ``require``-d one)."""
    dsg = design(measurements, ctx.hw, cost, require)
    cols = dsg.columns
    fitted = set(cols) | ({"spec_iteration_s", "draft_step_s"} if SPEC_SUM in cols else set()) \
        | ({"spec_sequence_s", "draft_sequence_s"} if SPEC_SEQ_SUM in cols else set())
    # the terms the runs do not identify keep the prior's values: the equations are what is left beside them
    zero = _with_terms(ctx.hw, {k: 0.0 if k in fitted else prior.get(k, 0.0) for k in TERMS})
    rows, rhs = [], []
    for m in measurements:
        w = 1.0 / m.step_s if m.step_s > 0 else 1.0
        rows.append([x * w for x in _row(ctx.hw, cost, m, cols)])
        rhs.append((m.step_s - modelled_step_s(ctx, cost, m, zero)) * w)
    x = dict(zip(cols, nonneg_least_squares(rows, rhs), strict=True))
    terms = {k: x.get(k, prior.get(k, 0.0)) for k in TERMS}
    notes = list(dsg.notes)
    spec_d = sorted({m.draft_len for m in measurements if m.draft_len})
    if spec_d:
        d = spec_d[0]
        n = draft_steps(ctx.hw.overheads, cost.sequential, d)
        c_spec = host_coefficients(ctx.hw, cost, d)["spec_iteration_s"]
        if SPEC_SUM in x:
            terms["spec_iteration_s"], terms["draft_step_s"] = split_speculative(x[SPEC_SUM], prior, n, c_spec)
            notes.append(f"the runs fix spec_iteration_s + {n:g} x draft_step_s = {x[SPEC_SUM] * 1e3:.3f} ms only "
                         f"({'one draft length, D = ' + str(d) if len(spec_d) == 1 else 'a block drafter counts both once'}"
                         "): split in the prior's ratio; run a second D to separate them")
        if SPEC_SEQ_SUM in x:
            terms["spec_sequence_s"], terms["draft_sequence_s"] = split_speculative(
                x[SPEC_SEQ_SUM], prior, n, c_spec, ("spec_sequence_s", "draft_sequence_s"))
            notes.append(f"the runs fix spec_sequence_s + {n:g} x draft_sequence_s = {x[SPEC_SEQ_SUM] * 1e3:.3f} ms "
                         "per sequence only: split in the prior's ratio")
    else:
        notes.append("no speculative run: the speculative terms are the prior's")
    identified = [k for k in cols if k in TERMS] + (["spec_iteration_s + n draft_step_s"] if SPEC_SUM in x else []) \
        + (["spec_sequence_s + n draft_sequence_s"] if SPEC_SEQ_SUM in x else [])
    return HostFit(terms, identified, "; ".join(notes) or None, fit_rows(ctx, cost, measurements, prior, terms))


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
