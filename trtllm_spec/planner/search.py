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
    speedup  = tok/s/user at D over tok/s/user at D = 0, same B (the decode, TPOT speedup: what the step predicts)
    TTFT     = one prompt's prefill (the target's pass over isl tokens, and the drafter's own when it has a model:
               a draft model or a head prefills too) + the iteration's host time; or, fitted on the engine's runs
               (``tune``), ttft_s + B ttft_sequence_s (+ spec_ttft_s + B spec_ttft_sequence_s with speculation)
    server tok/s = B osl / (TTFT + (osl - 1) TPOT) / tp: what a server delivers to B users that each send a
               request when the last one ended (the closed loop of 'measure served'); server_speedup its ratio
The step's terms are planner/step.py's: the GPU work the roofline prices plus host terms per iteration, per
speculative iteration and per draft step, each with its per-sequence part.
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
from trtllm_spec.planner.step import draft_steps, snap_batch, target_host_s


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
    ttft_s: float = 0.0
    server_tokens_per_s: float = 0.0  # per GPU, time to first token included (module docstring)
    server_speedup: float = 1.0

    def as_dict(self) -> dict:
        return {
            "mechanism": self.mechanism, "draft_len": self.draft_len, "batch_size": self.batch_size,
            "acceptance_length": round(self.acceptance_length, 4), "step_time_s": self.step_time_s,
            "tpot_s": self.tpot_s, "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "speedup": round(self.speedup, 4),
            "feasible": self.feasible, "max_batch_size": self.max_batch_size,
            "ttft_s": self.ttft_s, "server_tokens_per_s": self.server_tokens_per_s,
            "server_speedup": round(self.server_speedup, 4),
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
    # the engine's captured CUDA-graph batch sizes (padding on): a batch runs its GEMMs at the next captured size
    graph_batch_sizes: tuple[int, ...] = ()
    # time to first token fitted on the engine's runs (HostProfile.prefill); None: priced by the roofline
    prefill: dict | None = None
    # the target's pass from measured kernel tables (planner.work: aiconfigurator, trtllm_spec/silicon/aic.py):
    # (batch, D) -> seconds by kind {gemm, attention, comm, other}; None: the roofline
    target_work: dict | None = None

    def gemm_batch(self, batch: int) -> int:
        return snap_batch(batch, self.graph_batch_sizes)


def target_step(ctx: CostContext, batch: int, draft_len: int) -> Breakdown:
    """Verification pass over 1 + D tokens per sequence, plus the host terms of the target's iteration (per step,
    per speculative step, each with its per-sequence part: planner/step.py). On a measured step (``tune``) the
    pass is inside the terms."""
    hw = ctx.hw
    host = target_host_s(hw.overheads, batch, draft_len)
    if hw.overheads.measured_step:
        return Breakdown(overhead_s=host)
    if ctx.target_work is not None:
        w = ctx.target_work.get((batch, draft_len))
        if w is None:
            from trtllm_spec.errors import UserError

            raise UserError(f"planner.work: aiconfigurator priced no step at batch {batch}, D {draft_len}; plan those "
                            "batch sizes (workload.batch_sizes) or use planner.work: roofline")
        return Breakdown(gemm_s=w["gemm"], attention_s=w["attention"], comm_s=w["comm"],
                         overhead_s=w["other"] + host)
    b = forward_time(ctx.target, hw, ctx.prec, ctx.par, batch, 1 + draft_len, ctx.workload.mean_context,
                     gemm_batch=ctx.gemm_batch(batch))
    b.overhead_s += host
    b.overhead_s += sampling_time_s(hw, batch * (1 + draft_len), ctx.target.vocab_size, ctx.par.tp)
    return b


def draft_step(ctx: CostContext, cost: DraftCost, batch: int, draft_len: int) -> Breakdown:
    """Everything the drafter does in one iteration to propose ``draft_len`` tokens per sequence: its passes by kind
    (chain: a catch-up pass then D - 1 single-token passes; block: one pass at the verify width) and the per-draft
    host terms, n(D) (draft_step_s + b draft_sequence_s)."""
    if draft_len == 0:
        return Breakdown()
    ov = ctx.hw.overheads
    n = draft_steps(ov, cost.sequential, draft_len)
    total = Breakdown(overhead_s=n * (ov.draft_step_s + batch * ov.draft_sequence_s))
    if ov.measured_step:
        return total
    c = ctx.workload.mean_context
    gb = ctx.gemm_batch(batch)
    for p in cost.passes:
        if p.shape is None:
            m = gb * (1 + draft_len)
            total += Breakdown(gemm_s=gemm_time_s(ctx.hw, p.extra_params / ctx.par.tp, m, ctx.prec))
        elif p.per_token:  # catch-up over the 1 + D settled tokens, then D - 1 single-token steps
            total += forward_time(p.shape, ctx.hw, ctx.prec, ctx.par, batch, 1 + draft_len, c, p.lm_head_vocab,
                                  p.extra_params, gemm_batch=gb)
            if draft_len > 1:
                one = forward_time(p.shape, ctx.hw, ctx.prec, ctx.par, batch, 1, c, p.lm_head_vocab, p.extra_params,
                                   gemm_batch=gb)
                total += one.scaled(draft_len - 1)
        else:
            total += forward_time(p.shape, ctx.hw, ctx.prec, ctx.par, batch, 1 + draft_len, c, p.lm_head_vocab,
                                  p.extra_params, gemm_batch=gb)
    return total


def ttft_s(ctx: CostContext, cost: DraftCost | None, batch: int, draft_len: int) -> float:
    """Time to first token at batch ``batch`` (module docstring): fitted where the engine was measured, else one
    prompt's prefill by the roofline (the target's, and the drafter's own pass when it has a model), which is a
    lower bound at B > 1 (prefills queued behind each other are not priced)."""
    q = ctx.prefill
    if q:
        t = q.get("ttft_s", 0.0) + batch * q.get("ttft_sequence_s", 0.0)
        if draft_len:
            t += q.get("spec_ttft_s", 0.0) + batch * q.get("spec_ttft_sequence_s", 0.0)
        return max(t, 0.0)
    isl = max(1, ctx.workload.isl)
    hw = ctx.hw
    t = forward_time(ctx.target, hw, ctx.prec, ctx.par, 1, isl, isl // 2).total_s + hw.overheads.iteration_s
    if draft_len and cost is not None:
        for p in cost.passes:
            if p.shape is not None:
                t += forward_time(p.shape, hw, ctx.prec, ctx.par, 1, isl, isl // 2, p.lm_head_vocab,
                                  p.extra_params).total_s
    return t


def server_tokens_per_s(batch: int, osl: int, ttft: float, tpot: float, tp: int = 1) -> float:
    """Tokens per second per GPU a server delivers to ``batch`` users in a closed loop (module docstring)."""
    osl = max(1, osl)
    return batch * osl / (ttft + (osl - 1) * tpot) / tp


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
    base_server: dict[int, float] = {}
    base_capacity = max_feasible_batch(ctx, None, 0)
    osl = ctx.workload.osl
    for b in ctx.workload.batch_sizes:
        t0 = target_step(ctx, b, 0).total_s
        baseline[b] = 1.0 / t0
        base_server[b] = server_tokens_per_s(b, osl, ttft_s(ctx, None, b, 0), t0, ctx.par.tp)
    for mp in plans:
        for d in mp.draft_lens():
            capacity = max_feasible_batch(ctx, mp.cost, d) if d else base_capacity
            for b in ctx.workload.batch_sizes:
                tgt = target_step(ctx, b, d)
                drf = draft_step(ctx, mp.cost, b, d)
                step = tgt.total_s + drf.total_s
                al = mp.acceptance.acceptance_length(d)
                per_user = al / step
                ttft = ttft_s(ctx, mp.cost, b, d)
                server = server_tokens_per_s(b, osl, ttft, step / al, ctx.par.tp)
                out.append(Candidate(
                    mechanism=mp.mechanism.name, draft_len=d, batch_size=b, acceptance_length=al,
                    step_time_s=step, tpot_s=step / al, tokens_per_s_per_user=per_user,
                    tokens_per_s_per_gpu=b * al / (step * ctx.par.tp), speedup=per_user / baseline[b],
                    feasible=b <= capacity, max_batch_size=capacity, target=tgt, draft=drf, ttft_s=ttft,
                    server_tokens_per_s=server, server_speedup=server / base_server[b],
                ))
    return out


NEAR_BEST = 0.01  # within 1% of the best speedup the model cannot tell D apart: take the smaller D


def best_by_batch(candidates: list[Candidate], mechanism: str, fixed_draft_len: int | None = None,
                  margin: float = NEAR_BEST, key: str = "speedup") -> dict[int, Candidate]:
    """Per batch size, the smallest feasible D of ``mechanism`` whose predicted ``key`` (the TPOT ``speedup``, or
    the ``server_speedup``) is within ``margin`` of the best (fewer wasted draft tokens, and no flip-flopping
    schedule from differences the model cannot resolve; ``tune`` sets the margin from its measured noise)."""
    pool: dict[int, list[Candidate]] = {}
    for c in candidates:
        if c.mechanism != mechanism or not c.feasible:
            continue
        if fixed_draft_len is not None and c.draft_len not in (0, fixed_draft_len):
            continue
        pool.setdefault(c.batch_size, []).append(c)
    best: dict[int, Candidate] = {}
    for b, cs in pool.items():
        top = max(getattr(c, key) for c in cs)
        best[b] = min((c for c in cs if getattr(c, key) >= top * (1 - margin)), key=lambda c: c.draft_len)
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
