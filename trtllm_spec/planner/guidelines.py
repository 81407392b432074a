"""The five co-design guidelines (docs/planner.md, "The five guidelines"), one function each.

Each returns a ``Guideline``: the D it recommends (or None when it does not constrain D) and a reason that
shows its numbers, so a reader can check the arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trtllm_spec.planner.search import Candidate, CostContext, MechanismPlan, best_by_batch, target_step


@dataclass
class Guideline:
    id: int
    title: str
    draft_len: int | None
    reason: str
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "draft_len": self.draft_len, "reason": self.reason,
                "details": self.details}


# ---- pure arithmetic (unit-tested on known shapes) -------------------------------------------------------

def attention_optimal_draft_len(group_size: int, tile_rows: int = 128) -> int | None:
    """Guideline 2: G * (1 + D) = tile  ->  D = tile / G - 1 (None when G alone fills a tile or more)."""
    d = tile_rows // group_size - 1
    return d if d >= 1 else None


def tile_aligned_draft_lens(group_size: int, max_draft_len: int, tile_rows: int = 128) -> list[int]:
    """Guideline 3: the D in [1, max] with G * (1 + D) a multiple of the tile."""
    return [d for d in range(1, max_draft_len + 1) if (group_size * (1 + d)) % tile_rows == 0]


def tile_steps(group_size: int, max_draft_len: int, tile_rows: int = 128) -> list[int]:
    """The D at which G * (1 + D) spills into one more tile (attention run time steps up)."""
    return [d for d in range(1, max_draft_len + 1)
            if math.ceil(group_size * (1 + d) / tile_rows) > math.ceil(group_size * d / tile_rows)]


def compute_bound_rows(ctx: CostContext) -> int:
    """Guideline 1: the GEMM M where linear layers turn compute-bound: 2 M / F(M) = bytes_per_weight / BW."""
    bw = ctx.hw.achievable_mem_bytes_per_s
    b = ctx.prec.weight_bytes
    m = 1
    while m < 1 << 20:
        if 2.0 * m / ctx.hw.gemm_flops_per_s(ctx.prec.weight, m) >= b / bw:
            return m
        m = m + 1 if m < 64 else int(m * 1.05) + 1
    return m


# ---- the five guidelines ------------------------------------------------------------------------------------

def g1_compute_bound(ctx: CostContext, main: MechanismPlan, cands: list[Candidate]) -> Guideline:
    m_star = compute_bound_rows(ctx)
    per_batch: dict[int, int] = {}
    capacity = {c.draft_len: c.max_batch_size for c in cands if c.mechanism == main.mechanism.name}
    for b in ctx.workload.batch_sizes:
        d = max(0, min(main.max_draft_len, math.ceil(m_star / b) - 1))
        while d > 0 and capacity.get(d, 0) < b:  # extra draft KV must not squeeze the batch out
            d -= 1
        per_batch[b] = d
    b0 = ctx.workload.batch_sizes[0]
    f = ctx.hw.gemm_flops_per_s(ctx.prec.weight, m_star)
    reason = (f"linear layers turn compute-bound at GEMM M ~ {m_star} rows ({ctx.prec.weight} weights: "
              f"{f / 1e12:.1f} TFLOP/s vs {ctx.hw.achievable_mem_bytes_per_s / 1e12:.2f} TB/s); "
              f"M = B(1+D), so D = ceil({m_star}/B) - 1 capped at {main.max_draft_len} and by KV headroom: "
              + ", ".join(f"B={b}: D={d}" for b, d in per_batch.items()))
    return Guideline(1, "Push GEMMs into the compute-bound regime", per_batch[b0], reason,
                     {"compute_bound_m": m_star, "draft_len_by_batch": per_batch})


def g2_attention(ctx: CostContext, main: MechanismPlan) -> Guideline:
    g = ctx.target.group_size(ctx.par.tp)
    tile = ctx.hw.attention_tile_rows
    d_att = attention_optimal_draft_len(g, tile)
    b = ctx.workload.batch_sizes[-1]
    step = target_step(ctx, b, 0)
    share = step.attention_s / step.total_s
    dominated = share >= 0.5
    mla = " (MLA, absorbed: all heads share one latent)" if ctx.target.mla else ""
    reason = (f"G = {g} query heads per KV head{mla}; decode attention runs G(1+D) rows per KV head, best at "
              f"{tile} rows: D = {tile}/G - 1 = {d_att if d_att is not None else 'none (G >= tile)'}. "
              f"Attention is {share:.0%} of a plain decode step at B={b}, context "
              f"{ctx.workload.mean_context}: " + ("attention-dominated, guideline applies"
                                                   if dominated else "not attention-dominated"))
    return Guideline(2, "Attention-dominated workloads: D = 128/G - 1", d_att if dominated else None, reason,
                     {"group_size": g, "tile_rows": tile, "tile_draft_len": d_att,
                      "attention_share": round(share, 4), "batch_size": b})


def g3_tiles(ctx: CostContext, main: MechanismPlan) -> Guideline:
    g = ctx.target.group_size(ctx.par.tp)
    tile = ctx.hw.attention_tile_rows
    d_max = main.max_draft_len
    aligned = tile_aligned_draft_lens(g, 128 * 4, tile)[:8]
    steps = tile_steps(g, d_max, tile)
    in_range = [d for d in aligned if d <= d_max]
    if not steps:
        d, why = None, f"no tile boundary is crossed for D <= {d_max}: no constraint"
    elif in_range:
        d, why = in_range[-1], f"largest tile-aligned D <= {d_max} is {in_range[-1]}"
    else:
        d, why = steps[0] - 1, f"D = {steps[0]} spills into a new tile: stay at {steps[0] - 1}"
    reason = (f"G = {g}, tile = {tile} rows: tile-aligned D (G(1+D) multiple of {tile}): "
              f"{aligned or 'none'}; attention steps up at D = {steps or 'none in range'}; {why}")
    return Guideline(3, "Respect attention tile boundaries", d, reason,
                     {"group_size": g, "tile_aligned": aligned, "tile_steps": steps})


def g4_low_latency(ctx: CostContext, main: MechanismPlan) -> Guideline:
    rho = main.cost.drafter_layers / ctx.target.num_layers
    table = []
    for d in range(0, main.max_draft_len + 1):
        al = main.acceptance.acceptance_length(d)
        table.append({"draft_len": d, "acceptance_length": round(al, 4),
                      "marginal_gain": round(main.acceptance.marginal_gain(d), 4) if d else None,
                      "estimate": round(al / (1 + rho * d), 4)})
    best = max(table, key=lambda r: (r["estimate"], -r["draft_len"]))
    d = best["draft_len"] or None
    gains = ", ".join(f"{r['marginal_gain']:.2f}" for r in table[1:6])
    reason = (f"rho = drafter layers / target layers = {main.cost.drafter_layers}/{ctx.target.num_layers} = "
              f"{rho:.3f}; single-stream speedup ~ AL/(1 + rho D) peaks at D = {best['draft_len']} "
              f"({best['estimate']:.2f}x, AL {best['acceptance_length']:.2f}); marginal AL gain of draft "
              f"tokens 1-5: {gains}; each costs ~rho = {rho:.3f} of a target step")
    return Guideline(4, "Low-latency regime: overhead ~ rho*D", d, reason, {"rho": round(rho, 5), "table": table})


def g5_mechanism(ctx: CostContext, plans: list[MechanismPlan], cands: list[Candidate]) -> Guideline:
    rows = []
    for mp in plans:
        best = best_by_batch(cands, mp.mechanism.name)
        for b, c in best.items():
            rows.append({"mechanism": mp.mechanism.name, "batch_size": b, "draft_len": c.draft_len,
                         "acceptance_length": round(c.acceptance_length, 3), "speedup": round(c.speedup, 3),
                         "acceptance_measured": mp.acceptance.measured,
                         "needs_training": mp.mechanism.needs_training,
                         "min_trtllm": mp.mechanism.min_trtllm})
    b0 = ctx.workload.batch_sizes[0]
    first = [r for r in rows if r["batch_size"] == b0]
    if not first:
        return Guideline(5, "Choose the mechanism by measurement", None, "no feasible candidate", {"table": rows})
    # measured acceptance ranks first: an assumed AL (a published or third-hand figure) is named, marked, after it
    measured = [r for r in first if r["acceptance_measured"]]
    winner = max(measured or first, key=lambda r: r["speedup"])
    guess = max((r for r in first if not r["acceptance_measured"]), key=lambda r: r["speedup"], default=None)
    main = plans[0].mechanism.name
    mine = next((r for r in first if r["mechanism"] == main), None)
    assumed = sorted({r["mechanism"] for r in rows if not r["acceptance_measured"]})
    kind = "measured" if measured else "assumed"
    reason = (f"at B={b0} the fastest with {kind} acceptance is {winner['mechanism']} at D={winner['draft_len']} "
              f"({winner['speedup']:.2f}x, AL {winner['acceptance_length']:.2f} {kind})"
              + (f"; with assumed acceptance (not measured here) {guess['mechanism']} (TensorRT-LLM "
                 f"{guess['min_trtllm']}+) at D={guess['draft_len']} "
                 f"would reach {guess['speedup']:.2f}x (AL {guess['acceptance_length']:.2f} assumed)"
                 if measured and guess and guess["speedup"] > winner["speedup"] else "")
              + (f"; the recipe's {main}: {mine['speedup']:.2f}x at D={mine['draft_len']}"
                 if mine and mine is not winner else "")
              + (f". Acceptance assumed, not measured, for: {', '.join(assumed)} -- measure on your prompts "
                 "('trtllm-spec measure') before trusting the ranking" if assumed else "")
              + ". Learned drafters go stale when the target is fine-tuned: re-measure after each update.")
    return Guideline(5, "Choose the mechanism by measurement", winner["draft_len"] or None, reason,
                     {"best_mechanism": winner["mechanism"], "table": rows})
