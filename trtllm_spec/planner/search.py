"""The search: mechanism x draft length x batch size -> step time, AL, TPOT, throughput, speedup.

Per iteration at batch B and draft length D (context C = isl + osl/2, the mean during decode):
    t_step   = t_target(B, 1 + D) + t_draft(B, D)
    t_target = forward(B, 1 + D) + exposed host time per iteration (an overlap scheduler may hide it on plain
               decoding only) + per speculative iteration (acceptance, KV rewind) + sampling over B (1 + D) rows
    t_draft  = chain drafters: a catch-up pass over the 1 + D tokens the target just settled, then D - 1 passes of
               one token per sequence (EAGLE-3 / MTP / draft model; every pass at M = B rows grows with B), plus
               host time per draft step; block drafters: one pass over D + 1 tokens
    AL       = acceptance model at D
    TPOT     = t_step / AL
    tok/s/user = AL / t_step ;  tok/s/GPU = B * AL / (t_step * tp)   (pp stages pipeline pp micro-batches)
    speedup  = tok/s/user at D over tok/s/user at D = 0, same B
A candidate is feasible when B sequences of isl + osl + D tokens (target + drafter KV) fit beside the
weights in free_gpu_memory_fraction of what is left of HBM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trtllm_spec.core.hardware import Hardware
from trtllm_spec.core.shape import ModelShape
from trtllm_spec.planner.acceptance import AcceptanceModel
from trtllm_spec.planner.cost import (
    Breakdown,
    Parallelism,
    Precision,
    forward_time,
    gemm_time_s,
    kv_bytes_per_token_per_gpu,
    sampling_time_s,
    weight_bytes_per_gpu,
)
from trtllm_spec.planner.mechanism import DraftCost, MechanismModel


@dataclass(frozen=True)
class Workload:
    batch_sizes: tuple[int, ...]
    isl: int
    osl: int

    @property
    def mean_context(self) -> int:
        return self.isl + self.osl // 2

    @property
    def max_context(self) -> int:
        return self.isl + self.osl


@dataclass
class MechanismPlan:
    """A mechanism as the search sees it: its descriptor, recipe config, acceptance and cost."""

    mechanism: MechanismModel
    config: object
    acceptance: AcceptanceModel
    cost: DraftCost
    max_draft_len: int
    only_draft_len: int | None = None  # the mechanism runs at this D or not at all (Mechanism.only_draft_len)

    def draft_lens(self, include_zero: bool = True) -> list[int]:
        """The draft lengths the search prices for this mechanism."""
        ds = [self.only_draft_len] if self.only_draft_len else list(range(1, self.max_draft_len + 1))
        return [0, *ds] if include_zero else ds


@dataclass
class Candidate:
    mechanism: str
    draft_len: int
    batch_size: int
    acceptance_length: float
    step_time_s: float
    tpot_s: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    speedup: float
    feasible: bool
    max_batch_size: int
    target: Breakdown = field(default_factory=Breakdown)
    draft: Breakdown = field(default_factory=Breakdown)

    def as_dict(self) -> dict:
        return {
            "mechanism": self.mechanism, "draft_len": self.draft_len, "batch_size": self.batch_size,
            "acceptance_length": round(self.acceptance_length, 4), "step_time_s": self.step_time_s,
            "tpot_s": self.tpot_s, "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "speedup": round(self.speedup, 4),
            "feasible": self.feasible, "max_batch_size": self.max_batch_size,
            "breakdown": {"target": self.target.as_dict(), "draft": self.draft.as_dict()},
        }


@dataclass(frozen=True)
class CostContext:
    target: ModelShape
    hw: Hardware
    par: Parallelism
    prec: Precision
    workload: Workload
    free_gpu_memory_fraction: float = 0.9


def target_step(ctx: CostContext, batch: int, draft_len: int) -> Breakdown:
    """Verification pass over 1 + D tokens per sequence, plus the per-iteration overhead."""
    hw = ctx.hw
    b = forward_time(ctx.target, hw, ctx.prec, ctx.par, batch, 1 + draft_len, ctx.workload.mean_context)
    b.overhead_s += hw.overheads.exposed_iteration_s(draft_len > 0)
    b.overhead_s += hw.overheads.exposed_spec_iteration_s() if draft_len else 0.0
    b.overhead_s += sampling_time_s(hw, batch * (1 + draft_len), ctx.target.vocab_size, ctx.par.tp)
    return b


def draft_step(ctx: CostContext, cost: DraftCost, batch: int, draft_len: int) -> Breakdown:
    """Everything the drafter does in one iteration to propose ``draft_len`` tokens per sequence."""
    if draft_len == 0:
        return Breakdown()
    total = Breakdown(overhead_s=ctx.hw.overheads.draft_step_s * (draft_len if cost.sequential else 1))
    c = ctx.workload.mean_context
    for p in cost.passes:
        if p.shape is None:
            m = batch * (1 + draft_len)
            total += Breakdown(gemm_s=gemm_time_s(ctx.hw, p.extra_params / ctx.par.tp, m, ctx.prec))
        elif p.per_token:  # catch-up over the 1 + D settled tokens, then D - 1 single-token steps
            total += forward_time(p.shape, ctx.hw, ctx.prec, ctx.par, batch, 1 + draft_len, c, p.lm_head_vocab,
                                  p.extra_params)
            if draft_len > 1:
                one = forward_time(p.shape, ctx.hw, ctx.prec, ctx.par, batch, 1, c, p.lm_head_vocab, p.extra_params)
                total += one.scaled(draft_len - 1)
        else:
            total += forward_time(p.shape, ctx.hw, ctx.prec, ctx.par, batch, 1 + draft_len, c, p.lm_head_vocab,
                                  p.extra_params)
    return total


def max_feasible_batch(ctx: CostContext, cost: DraftCost | None, draft_len: int) -> int:
    """Largest batch whose KV cache (target + drafter, isl + osl + D tokens) fits beside the weights."""
    par, prec, hw = ctx.par, ctx.prec, ctx.hw
    weights = weight_bytes_per_gpu(ctx.target, prec, par)
    if cost is not None:
        weights += cost.weight_params * prec.weight_bytes / (par.tp * par.pp)
    free = (hw.mem_bytes - hw.runtime_reserve_bytes - weights) * ctx.free_gpu_memory_fraction
    tokens = ctx.workload.max_context + draft_len
    per_token = kv_bytes_per_token_per_gpu(ctx.target, prec, par, tokens)
    if cost is not None and cost.kv_shape is not None and draft_len > 0:
        per_token += kv_bytes_per_token_per_gpu(cost.kv_shape, prec, par, tokens)
    if cost is not None and cost.state_bytes_per_token and draft_len > 0:
        # automaton slots sized by max_seq_len (every GPU holds them): a pool is a fixed reservation, else per sequence
        state = cost.state_bytes_per_token * tokens
        if cost.state_pool_slots:
            free -= cost.state_pool_slots * state
        else:
            per_token += state / tokens
    if free <= 0:
        return 0
    return int(free // (per_token * tokens)) * par.pp


def evaluate(ctx: CostContext, plans: list[MechanismPlan]) -> list[Candidate]:
    """Every mechanism x D in [0, its max] x batch size."""
    out: list[Candidate] = []
    baseline: dict[int, float] = {}
    base_capacity = max_feasible_batch(ctx, None, 0)
    for b in ctx.workload.batch_sizes:
        t0 = target_step(ctx, b, 0).total_s
        baseline[b] = 1.0 / t0
    for mp in plans:
        for d in mp.draft_lens():
            capacity = max_feasible_batch(ctx, mp.cost, d) if d else base_capacity
            for b in ctx.workload.batch_sizes:
                tgt = target_step(ctx, b, d)
                drf = draft_step(ctx, mp.cost, b, d)
                step = tgt.total_s + drf.total_s
                al = mp.acceptance.acceptance_length(d)
                per_user = al / step
                out.append(Candidate(
                    mechanism=mp.mechanism.name, draft_len=d, batch_size=b, acceptance_length=al,
                    step_time_s=step, tpot_s=step / al, tokens_per_s_per_user=per_user,
                    tokens_per_s_per_gpu=b * al / (step * ctx.par.tp), speedup=per_user / baseline[b],
                    feasible=b <= capacity, max_batch_size=capacity, target=tgt, draft=drf,
                ))
    return out


NEAR_BEST = 0.01  # within 1% of the best speedup the model cannot tell D apart: take the smaller D


def best_by_batch(candidates: list[Candidate], mechanism: str, fixed_draft_len: int | None = None
                  ) -> dict[int, Candidate]:
    """Per batch size, the smallest feasible D of ``mechanism`` whose predicted speedup is within 1% of the best
    (fewer wasted draft tokens, and no flip-flopping schedule from differences the model cannot resolve)."""
    pool: dict[int, list[Candidate]] = {}
    for c in candidates:
        if c.mechanism != mechanism or not c.feasible:
            continue
        if fixed_draft_len is not None and c.draft_len not in (0, fixed_draft_len):
            continue
        pool.setdefault(c.batch_size, []).append(c)
    best: dict[int, Candidate] = {}
    for b, cs in pool.items():
        top = max(c.speedup for c in cs)
        best[b] = min((c for c in cs if c.speedup >= top * (1 - NEAR_BEST)), key=lambda c: c.draft_len)
    return best


def pareto_frontier(candidates: list[Candidate]) -> list[Candidate]:
    """Feasible candidates not beaten on both tokens/s per user and tokens/s per GPU."""
    pts = sorted((c for c in candidates if c.feasible),
                 key=lambda c: (-c.tokens_per_s_per_user, -c.tokens_per_s_per_gpu))
    frontier: list[Candidate] = []
    best_gpu = -math.inf
    for c in pts:
        if c.tokens_per_s_per_gpu > best_gpu * (1 + 1e-12):
            frontier.append(c)
            best_gpu = c.tokens_per_s_per_gpu
    return frontier
