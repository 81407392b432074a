"""The step model as DSpark's confidence scheduler reads a step-cost table (issue 53, item 3).

TensorRT-LLM's DSpark confidence-scheduled verification prices a step as

    T(bs, L) = bias + alpha(bs) + theta(M),   M = bs (L + 1) verified tokens (bonus token included)

(NVIDIA/TensorRT-LLM ``docs/source/features/dspark-confidence-scheduling.md`` @2391b203, "cost model": ``bias`` the
fixed part, ``alpha(bs)`` what grows with the batch (the draft pass: DSpark always drafts the whole block, the weight
stream), ``theta(M)`` the only part verification length can trim; read by clamped linear interpolation over
``token_counts``, plateaus given as two equal points). That page documents its file (``sps.json``:
``token_counts``, ``step_time_ms``, ``fixed_overhead_ms``, ``batch_sizes``, ``batch_overhead_ms``) under
``confidence_sps_table_path``, which is newest main's field, after the 1.4 releases; 1.4.0rc4's
``DSparkDecodingConfig`` reads ``confidence_cost_table_path`` instead, and no source of that release's file format
was found (its reference page lists the field without one). So a bundle carries the table in the documented main
format, names it unconfirmed for its release, and leaves ``enable_confidence_scheduling`` off (stages/bundle.py).

The split of our step (planner/step.py) into those parts, at the engine's captured batch sizes:
- ``theta(M)``: the target's verify GEMMs (decoder linear layers, lm_head) at M rows and reading M rows of logits;
- ``alpha(bs)``: decode attention over bs sequences (KV streaming grows with the batch, not with M), the drafter's
  block pass at bs, and the per-sequence host terms;
- ``bias``: the per-iteration host terms (exposed shares) and the per-layer kernel gaps of both passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from trtllm_spec.planner.cost import (
    attention_time_s,
    forward_time,
    layer_linear_time_s,
    lm_head_time_s,
    sampling_time_s,
)
from trtllm_spec.planner.mechanism import DraftCost
from trtllm_spec.planner.search import CostContext
from trtllm_spec.planner.step import coefficients


def cost_table(ctx: CostContext, cost: DraftCost, block: int, batch_sizes: Sequence[int]) -> dict:
    """The step-cost table (fields of the documented ``sps.json``) for a DSpark drafter of ``block`` positions at
    the captured ``batch_sizes``: token counts at every captured batch x verify length 1..block."""
    hw, t, par, prec = ctx.hw, ctx.target, ctx.par, ctx.prec
    ov = hw.overheads
    c = ctx.workload.mean_context
    tokens = sorted({b * (L + 1) for b in batch_sizes for L in range(1, block + 1)})
    theta = [layer_linear_time_s(t, hw, prec, par, m) + lm_head_time_s(t, hw, prec, par, m)
             + sampling_time_s(hw, m, t.vocab_size, par.tp) for m in tokens]
    one = coefficients(ov, cost.sequential, 1, block)
    gaps = forward_time(t, hw, prec, par, 1, 1, c).overhead_s
    bias = (ov.iteration_s * one["iteration_s"] + ov.spec_iteration_s * one["spec_iteration_s"] + ov.draft_step_s
            + gaps)
    alpha = []
    for b in sorted(batch_sizes):
        k = coefficients(ov, cost.sequential, b, block)
        a = attention_time_s(t, hw, prec, par, b, block + 1, c)
        a += b * (ov.sequence_s * k["iteration_s"] + ov.spec_sequence_s * k["spec_iteration_s"] + ov.draft_sequence_s)
        for p in cost.passes:
            if p.shape is not None:
                a += forward_time(p.shape, hw, prec, par, b, block + 1, c, p.lm_head_vocab, p.extra_params).total_s
        alpha.append(a)
    return {"token_counts": tokens, "step_time_ms": [round(x * 1e3, 6) for x in theta],
            "fixed_overhead_ms": round(bias * 1e3, 6), "batch_sizes": sorted(batch_sizes),
            "batch_overhead_ms": [round(x * 1e3, 6) for x in alpha]}
