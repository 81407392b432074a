"""``trtllm-spec tune``'s math: measured cells -> the step model fitted on a few of them -> the whole grid predicted
with intervals -> D per concurrency with a margin the measured noise sets. Pure functions over run records; the
runs themselves are stages/tune.py's.

A **run** is one server measured at one concurrency in one round (a dict: ``chunk``, ``round``, ``concurrency``,
``key`` = D or "schedule", ``tokens_per_s``, ``tpot_ms``, ``ttft_ms`` (request means), ``output_tokens``,
``requests``, ``al`` (the engine's own acceptance length), ``num_drafts`` and ``accepted_per_pos`` (its per-position
counters over the run)). Plain and speculative servers are measured in turn within a round, so every speculative
run has the plain run of its own round and chunk beside it; a **cell** (concurrency, D) holds the ratios to it:

    speedup      = server tokens/s at D / plain, same round   (what a user reads; time to first token included)
    tpot_speedup = plain TPOT / TPOT at D, same round          (decode only: what the step model predicts)

and their medians over rounds. Ratios cancel the drift of the machine between chunks; absolute step times do not,
so the step time a fit sees is chunk-normalised: step(c, D) = median plain TPOT at c x AL(c, D) / tpot_speedup.

The model is planner/step.py's on a measured step (the engine's kernels are inside the terms):

    step(c, D) = iteration_s + c sequence_s + [D > 0] (spec_iteration_s + c spec_sequence_s)
               + D (draft_step_s + c draft_sequence_s)
    TTFT(c, D) = ttft_s + c ttft_sequence_s + [D > 0] (spec_ttft_s + c spec_ttft_sequence_s)

fitted by planner/calibrate.fit_host_costs on the calibration cells only; AL(D) from the engine's per-position
counters at the largest calibrated D (a chain's prefix: AL(D') = 1 + sum_{i < D'} accepted_i / drafts); the
predictions come from planner/search.evaluate, the planner's own search, so tune and plan price alike.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

PLAIN = 0
SCHEDULE = "schedule"
MAX_MARGIN = 0.05  # a pick is never called right further than 5% from the best (issue 53)
MIN_MARGIN = 0.01
BOOTSTRAP = 200  # resamples of the rounds for the prediction intervals
LEVEL = 0.8  # the intervals' coverage


# ---- cells -------------------------------------------------------------------------------------------------

@dataclass
class Cell:
    """One (concurrency, key) measured over rounds, against the plain run of each round."""

    concurrency: int
    key: int | str
    speedups: list[float] = field(default_factory=list)  # per round: server tok/s ratio
    tpot_speedups: list[float] = field(default_factory=list)  # per round: plain TPOT / TPOT
    ttft_ratios: list[float] = field(default_factory=list)  # per round: TTFT / plain TTFT
    runs: list[dict] = field(default_factory=list)

    @property
    def draft_len(self) -> int | None:
        return self.key if isinstance(self.key, int) else None

    @property
    def speedup(self) -> float:
        return statistics.median(self.speedups)

    @property
    def tpot_speedup(self) -> float:
        return statistics.median(self.tpot_speedups)

    def spread(self, values: str = "speedups") -> tuple[float, float]:
        v = getattr(self, values)
        return min(v), max(v)

    @property
    def half_range(self) -> float:
        """Half the spread over rounds, relative to the median: the cell's noise."""
        lo, hi = self.spread()
        return (hi - lo) / 2 / self.speedup if self.speedup > 0 else math.inf

    @property
    def acceptance_length(self) -> float:
        """Pooled over the cell's runs: 1 + accepted / drafts (1 without speculation)."""
        drafts = sum(r.get("num_drafts") or 0 for r in self.runs)
        accepted = sum(sum(r.get("accepted_per_pos") or []) for r in self.runs)
        if drafts:
            return 1.0 + accepted / drafts
        als = [r["al"] for r in self.runs if r.get("al")]
        return statistics.median(als) if als else 1.0

    @property
    def osl(self) -> float:
        return sum(r["output_tokens"] for r in self.runs) / max(1, sum(r["requests"] for r in self.runs))


def group(runs: Iterable[dict]) -> dict[tuple[int, int | str], Cell]:
    """Cells from runs: each run against the plain run of its own (chunk, round, concurrency)."""
    by: dict[tuple, dict] = {}
    for r in runs:
        by.setdefault((r["chunk"], r["round"], r["concurrency"]), {})[r["key"]] = r
    cells: dict[tuple[int, int | str], Cell] = {}
    for (_chunk, _rnd, c), rs in by.items():
        plain = rs.get(PLAIN)
        if plain is None:
            continue
        for key, r in rs.items():
            cell = cells.setdefault((c, key), Cell(c, key))
            cell.runs.append(r)
            cell.speedups.append(r["tokens_per_s"] / plain["tokens_per_s"])
            cell.tpot_speedups.append(plain["tpot_ms"] / r["tpot_ms"])
            cell.ttft_ratios.append(r["ttft_ms"] / plain["ttft_ms"] if plain["ttft_ms"] else 1.0)
    return cells


def plain_medians(runs: Iterable[dict]) -> dict[int, dict[str, float]]:
    """Per concurrency, the median plain TPOT and TTFT (ms) over every plain run (all chunks and rounds)."""
    by: dict[int, list[dict]] = {}
    for r in runs:
        if r["key"] == PLAIN:
            by.setdefault(r["concurrency"], []).append(r)
    return {c: {"tpot_ms": statistics.median(r["tpot_ms"] for r in rs),
                "ttft_ms": statistics.median(r["ttft_ms"] for r in rs),
                "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs)} for c, rs in by.items()}


# ---- noise ---------------------------------------------------------------------------------------------------

def outlier_rounds(runs: Sequence[dict], floor: float = 0.10) -> list[dict]:
    """Plain runs that depart from the other rounds of their (chunk, concurrency) beyond the measured spread: the
    deviation from the median of the others above max(``floor``, 3 x the median deviation of all plain runs).
    Each is {chunk, round, concurrency, tokens_per_s, others_median, deviation, threshold}."""
    plain: dict[tuple, list[dict]] = {}
    for r in runs:
        if r["key"] == PLAIN:
            plain.setdefault((r["chunk"], r["concurrency"]), []).append(r)
    devs: list[tuple[dict, float, float]] = []
    for rs in plain.values():
        if len(rs) < 3:
            continue
        for r in rs:
            others = statistics.median(x["tokens_per_s"] for x in rs if x is not r)
            devs.append((r, others, abs(r["tokens_per_s"] / others - 1.0)))
    if not devs:
        return []
    threshold = max(floor, 3.0 * statistics.median(d for _, _, d in devs))
    return [{"chunk": r["chunk"], "round": r["round"], "concurrency": r["concurrency"],
             "tokens_per_s": r["tokens_per_s"], "others_median": round(o, 3), "deviation": round(d, 4),
             "threshold": round(threshold, 4)} for r, o, d in devs if d > threshold]


def noise_margin(cells: Iterable[Cell]) -> float:
    """The pick margin from the measured noise: the median relative half-range over rounds of the speculative
    cells' server speedups, within [1%, 5%]."""
    spreads = [c.half_range for c in cells if c.key != PLAIN and len(c.speedups) > 1 and math.isfinite(c.half_range)]
    if not spreads:
        return MAX_MARGIN
    return min(MAX_MARGIN, max(MIN_MARGIN, statistics.median(spreads)))


def noise_floor(cells: dict, runs: Sequence[dict]) -> dict[str, float | None]:
    """What reproducing every measured step exactly would score: the ratio of the medians (each server's median
    TPOT and tokens/s over all its runs, the plain one's over all chunks) against the medians of the same-round
    ratios, median |error| over the speculative cells (the drift between chunks and rounds the ratios cancel)."""
    pm = plain_medians(runs)
    tpot, server = [], []
    for (c, key), cell in cells.items():
        if key in (PLAIN, SCHEDULE) or c not in pm:
            continue
        t = statistics.median(r["tpot_ms"] for r in cell.runs)
        s = statistics.median(r["tokens_per_s"] for r in cell.runs)
        tpot.append(abs(pm[c]["tpot_ms"] / t / cell.tpot_speedup - 1.0))
        server.append(abs(s / pm[c]["tokens_per_s"] / cell.speedup - 1.0))
    return {"tpot": statistics.median(tpot) if tpot else None, "server": statistics.median(server) if server else None}


# ---- acceptance ----------------------------------------------------------------------------------------------

def acceptance_from(cells: Iterable[Cell], source: str):
    """The chain acceptance model from the engine's per-position counters over ``cells`` (pooled): conditional
    rate a_i = accepted_i / accepted_{i-1} (accepted_{-1} = drafts); None when no run carries them."""
    from trtllm_spec.planner.acceptance import chain

    drafts, per_pos = 0, []
    for cell in cells:
        for r in cell.runs:
            pos = r.get("accepted_per_pos") or []
            if not r.get("num_drafts") or not pos:
                continue
            drafts += r["num_drafts"]
            per_pos += [0] * (len(pos) - len(per_pos))
            per_pos = [a + b for a, b in zip(per_pos, pos + [0] * (len(per_pos) - len(pos)), strict=True)]
    if not drafts:
        return None
    rates, prev = [], float(drafts)
    for n in per_pos:
        rates.append(n / prev if prev > 0 else 0.0)
        prev = float(n)
    return chain(rates, source, measured=True)


# ---- the fit ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TtftFit:
    terms: dict[str, float]  # seconds: ttft_s, ttft_sequence_s, spec_ttft_s, spec_ttft_sequence_s

    def at(self, c: int, d: int) -> float:
        t = self.terms
        return t["ttft_s"] + c * t["ttft_sequence_s"] + (t["spec_ttft_s"] + c * t["spec_ttft_sequence_s"] if d else 0.0)


def step_points(cells: dict, runs: Sequence[dict], cal: Sequence[tuple[int, int]], rng: random.Random | None = None
                ) -> tuple[list, list[tuple[int, int, float]]]:
    """(StepMeasurement per calibration cell, (c, D, TTFT s) per calibration cell), chunk-normalised (module
    docstring). With ``rng``, each cell's rounds (and the plain runs) are resampled with replacement: one bootstrap
    replicate."""
    from trtllm_spec.planner.calibrate import StepMeasurement

    def pick(values: list) -> list:
        return [rng.choice(values) for _ in values] if rng else values

    plain: dict[int, list[dict]] = {}
    for r in runs:
        if r["key"] == PLAIN:
            plain.setdefault(r["concurrency"], []).append(r)
    steps, ttfts = [], []
    for c, d in cal:
        ps = pick(plain[c])
        tpot0 = statistics.median(r["tpot_ms"] for r in ps) * 1e-3
        ttft0 = statistics.median(r["ttft_ms"] for r in ps) * 1e-3
        cell = cells[(c, d)]
        if d == PLAIN:
            ratio, tr, al = 1.0, 1.0, 1.0
        else:
            idx = pick(list(range(len(cell.tpot_speedups))))
            ratio = statistics.median(cell.tpot_speedups[i] for i in idx)
            tr = statistics.median(cell.ttft_ratios[i] for i in idx)
            al = cell.acceptance_length
        tpot = tpot0 / ratio
        steps.append(StepMeasurement(batch=c, draft_len=d, acceptance_length=al, isl=1, osl=max(1, round(cell.osl)),
                                     tpot_s=tpot, source=f"c{c} D{d}"))
        ttfts.append((c, d, ttft0 * tr))
    return steps, ttfts


def fit_ttft(points: Sequence[tuple[int, int, float]]) -> TtftFit:
    """TTFT(c, D) (module docstring) by non-negative least squares on relative residuals; the speculative pair only
    where a speculative cell was measured, the per-sequence terms only where two concurrencies were."""
    from trtllm_spec.planner.calibrate import nonneg_least_squares

    names = ["ttft_s", "ttft_sequence_s", "spec_ttft_s", "spec_ttft_sequence_s"]
    cs = {c for c, _d, _t in points}
    use = [True, len(cs) > 1, any(d for _c, d, _t in points),
           len({c for c, d, _t in points if d}) > 1]
    cols = [n for n, u in zip(names, use, strict=True) if u]
    rows, rhs = [], []
    for c, d, t in points:
        row = {"ttft_s": 1.0, "ttft_sequence_s": c, "spec_ttft_s": 1.0 if d else 0.0,
               "spec_ttft_sequence_s": c if d else 0.0}
        w = 1.0 / t if t > 0 else 1.0
        rows.append([row[n] * w for n in cols])
        rhs.append(t * w)
    x = dict(zip(cols, nonneg_least_squares(rows, rhs), strict=True))
    return TtftFit({n: x.get(n, 0.0) for n in names})


@dataclass
class Fit:
    host: object  # planner/calibrate.HostFit
    ttft: TtftFit
    acceptance: object  # planner/acceptance.AcceptanceModel


def fit(cells: dict, runs: Sequence[dict], cal: Sequence[tuple[int, int]], ctx, cost, acceptance,
        rng: random.Random | None = None) -> Fit:
    """The six step terms and the four TTFT terms on the calibration cells ``cal`` (measured step: ``ctx`` has
    ``Overheads.measured_step``). Raises planner/calibrate.DesignError when the cells cannot identify the form."""
    from trtllm_spec.planner.calibrate import fit_host_costs

    steps, ttfts = step_points(cells, runs, cal, rng)
    ds = {d for _c, d in cal if d}
    need = ("iteration_s", "sequence_s", "draft_step_s", "draft_sequence_s") if len(ds) >= 2 else (
        "iteration_s", "sequence_s")
    # the prior only splits what one D cannot: form F, the speculative cost per draft token (the re-analysis of the
    # loop record: a D-independent speculative cost misses the self-draft group by 32%, per draft token by 9%)
    prior = {"iteration_s": 0.0, "sequence_s": 0.0, "spec_iteration_s": 0.0, "spec_sequence_s": 0.0,
             "draft_step_s": 1e-12, "draft_sequence_s": 1e-12}
    host = fit_host_costs(ctx, cost, steps, prior, require=need)
    return Fit(host, fit_ttft(ttfts), acceptance)


def form_of(cal: Sequence[tuple[int, int]]) -> str:
    ds = {d for _c, d in cal if d}
    return "H (six terms: per step, per speculative step, per draft token, each per sequence)" if len(ds) >= 2 else (
        "F (per step and per draft token, each per sequence; the speculative constant folds into them)")


# ---- predictions -----------------------------------------------------------------------------------------------

def predict(f: Fit, ctx, mech_plan, concurrencies: Sequence[int], osl: float) -> dict[tuple[int, int], dict]:
    """(c, D) -> {tpot_speedup, speedup (server), step_s, tpot_s, ttft_s, acceptance_length} from the planner's
    own search on the fitted terms (planner/search.evaluate)."""
    from dataclasses import replace

    from trtllm_spec.planner.search import Workload, evaluate

    hw = ctx.hw.model_copy(update={"overheads": ctx.hw.overheads.model_copy(update=f.host.terms)})
    c2 = replace(ctx, hw=hw, workload=Workload(tuple(concurrencies), 1, max(1, round(osl))), prefill=f.ttft.terms)
    mp = replace(mech_plan, acceptance=f.acceptance)
    out = {}
    for cand in evaluate(c2, [mp]):
        out[(cand.batch_size, cand.draft_len)] = {
            "tpot_speedup": cand.speedup, "speedup": cand.server_speedup, "step_s": cand.step_time_s,
            "tpot_s": cand.tpot_s, "ttft_s": cand.ttft_s, "acceptance_length": cand.acceptance_length,
            "candidate": cand}
    return out


def intervals(cells: dict, runs: Sequence[dict], cal, ctx, cost, mech_plan, acceptance, concurrencies, osl,
              n: int = BOOTSTRAP, level: float = LEVEL, seed: int = 0) -> dict[tuple[int, int], dict]:
    """(c, D) -> {speedup: (lo, hi), tpot_speedup: (lo, hi)}: the central ``level`` of the predictions refitted on
    ``n`` resamples of the calibration rounds (planner/calibrate.DesignError replicates are skipped)."""
    from trtllm_spec.planner.calibrate import DesignError

    rng = random.Random(seed)
    samples: dict[tuple[int, int], dict[str, list[float]]] = {}
    for _ in range(n):
        try:
            f = fit(cells, runs, cal, ctx, cost, acceptance, rng)
        except (DesignError, ValueError):
            continue
        for k, p in predict(f, ctx, mech_plan, concurrencies, osl).items():
            s = samples.setdefault(k, {"speedup": [], "tpot_speedup": []})
            s["speedup"].append(p["speedup"])
            s["tpot_speedup"].append(p["tpot_speedup"])
    q = (1 - level) / 2
    return {k: {m: (_quantile(v, q), _quantile(v, 1 - q)) for m, v in s.items() if v} for k, s in samples.items()}


def _quantile(values: list[float], q: float) -> float:
    v = sorted(values)
    pos = q * (len(v) - 1)
    i = int(pos)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (pos - i)


# ---- picks and the schedule -------------------------------------------------------------------------------------

def picks(pred: dict[tuple[int, int], dict], margin: float, metric: str = "speedup") -> dict[int, int]:
    """Per concurrency, the smallest D whose predicted ``metric`` is within ``margin`` of the best (fewer wasted
    drafts; no flip-flop from differences the noise cannot resolve)."""
    by: dict[int, list[tuple[int, float]]] = {}
    for (c, d), p in pred.items():
        by.setdefault(c, []).append((d, p[metric]))
    out = {}
    for c, ds in by.items():
        top = max(v for _d, v in ds)
        out[c] = min(d for d, v in ds if v >= top * (1 - margin))
    return dict(sorted(out.items()))


def vllm_ranges(per_c: dict[int, int], max_num_seqs: int) -> list[tuple[int, int, int]]:
    """The picks as vLLM's ``num_speculative_tokens_per_batch_size``: (k_{i-1}, k_i] -> D(k_i), from 1, up to
    ``max_num_seqs`` (above the largest concurrency measured: its D)."""
    out, start = [], 1
    cs = sorted(per_c)
    for i, c in enumerate(cs):
        end = max_num_seqs if i == len(cs) - 1 else min(c, max_num_seqs)
        if end >= start:
            out.append((start, end, per_c[c]))
        start = c + 1
    merged: list[list[int]] = []
    for s, e, d in out:
        if merged and merged[-1][2] == d and merged[-1][1] + 1 == s:
            merged[-1][1] = e
        else:
            merged.append([s, e, d])
    return [tuple(x) for x in merged]


def judge(cells: dict, per_c: dict[int, int], margin: float) -> dict[int, dict]:
    """Per concurrency: the measured best fixed D (by server speedup), the pick's measured speedup and whether it
    is within ``margin`` of the best's (right), where both were measured."""
    out = {}
    for c, d in per_c.items():
        fixed = {k: cell.speedup for (cc, k), cell in cells.items() if cc == c and isinstance(k, int)}
        if not fixed or d not in fixed:
            out[c] = {"pick": d, "measured": False}
            continue
        best = max(fixed, key=lambda k: fixed[k])
        out[c] = {"pick": d, "measured": True, "pick_speedup": fixed[d], "best_draft_len": best,
                  "best_speedup": fixed[best], "right": fixed[d] >= fixed[best] * (1 - margin),
                  "pick_over_best": fixed[d] / fixed[best]}
    return out


def errors(pred: dict, cells: dict, held_out: Iterable[tuple[int, int]]) -> dict[str, list[float]]:
    """Relative errors of the predicted speedups (server and TPOT) on the held-out measured cells."""
    server, tpot = [], []
    for k in held_out:
        if k in cells and k in pred:
            server.append(pred[k]["speedup"] / cells[k].speedup - 1.0)
            tpot.append(pred[k]["tpot_speedup"] / cells[k].tpot_speedup - 1.0)
    return {"server": server, "tpot": tpot}


def median_abs(values: Sequence[float]) -> float | None:
    return statistics.median(abs(v) for v in values) if values else None
