"""Where speculation stops paying: the batch size beyond which no draft length beats plain decoding.

The planned batch sizes are few; the limit is searched on powers of two (and the planned sizes) up to the
memory capacity without speculation, with the same cost model:
    pays(B) = max_{1 <= D <= Dmax, B fits at D} speedup(B, D) > 1 + margin
    pays_up_to = the largest B of the grid with pays(B) whose every smaller grid B pays too
TensorRT-LLM can switch speculation off above a concurrency (``max_concurrency`` in the speculative config; in
1.3 it is exclusive with ``draft_len_schedule``, whose keys end speculation above the largest key anyway), so the
plan reports the number for the bundle to use; it does not render options itself.
"""

from __future__ import annotations

from trtllm_spec.planner.search import CostContext, MechanismPlan, draft_step, max_feasible_batch, target_step

PAYS_MARGIN = 0.02  # a predicted gain under 2% is inside the model's resolution: not worth a drafter


def speedup_at(ctx: CostContext, mp: MechanismPlan, batch: int, draft_len: int) -> float:
    base = target_step(ctx, batch, 0).total_s
    step = target_step(ctx, batch, draft_len).total_s + draft_step(ctx, mp.cost, batch, draft_len).total_s
    return mp.acceptance.acceptance_length(draft_len) * base / step


def speculation_limit(ctx: CostContext, mp: MechanismPlan) -> dict:
    """{'pays_up_to': B or None, 'stops_paying_at': B or None, 'searched_up_to': capacity, 'best': {B: (D, x)}}."""
    capacity = max_feasible_batch(ctx, None, 0)
    grid = sorted({b for b in ctx.workload.batch_sizes if b <= capacity}
                  | {1 << i for i in range(0, 20) if (1 << i) <= capacity})
    best: dict[int, tuple[int, float]] = {}
    pays_up_to, stops_at = None, None
    for b in grid:
        options = [(d, speedup_at(ctx, mp, b, d)) for d in mp.draft_lens(include_zero=False)
                   if max_feasible_batch(ctx, mp.cost, d) >= b]
        d, x = max(options, key=lambda t: t[1]) if options else (0, 1.0)
        best[b] = (d, round(x, 4))
        if x > 1 + PAYS_MARGIN and stops_at is None:
            pays_up_to = b
        elif stops_at is None:
            stops_at = b
    return {"pays_up_to": pays_up_to, "stops_paying_at": stops_at, "searched_up_to": capacity,
            "best_by_batch": {str(b): {"draft_len": d, "speedup": x} for b, (d, x) in best.items()}}


def limit_note(limit: dict, engine: tuple[bool, bool, str | None] = (True, True, None)) -> str:
    """The limit in words; ``engine`` = ``core.trtllm_gates.engine_schedule`` for the plan's mechanism and release,
    so the advice names only a gate the engine applies."""
    if limit["searched_up_to"] <= 0:
        return "no batch size fits in memory"
    if limit["pays_up_to"] is None:
        return "speculation does not pay at any batch size (no D gains more than 2% over plain decoding)"
    if limit["stops_paying_at"] is None:
        return (f"speculation pays at every batch size that fits (up to {limit['searched_up_to']}); no concurrency "
                "limit is needed")
    head = f"speculation pays up to batch {limit['pays_up_to']} and stops paying at {limit['stops_paying_at']}: "
    applies, switches_off, _ = engine
    if applies and switches_off:
        return head + (f"serve speculation only up to a concurrency of {limit['pays_up_to']} (TensorRT-LLM "
                       "max_concurrency, or the draft_len_schedule's largest key)")
    why_not = "it floors D at 1" if applies else "no schedule or max_concurrency applies"
    return head + (f"this release cannot switch it off at a batch size ({why_not}; "
                   f"docs/trtllm_compat.md): serve batches above {limit['pays_up_to']} from a deployment without "
                   "speculative_config")
