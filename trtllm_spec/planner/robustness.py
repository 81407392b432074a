"""How much the recommendation leans on the host-cost terms: each term halved and doubled, the pick re-made.

For each of iteration_s, spec_iteration_s and draft_step_s (core/host_costs.py), and each per-sequence term that is
not 0 (a calibration fitted it), and each factor in FACTORS, the
recipe's mechanism is evaluated again with that one term scaled (search.evaluate), and

- the pick is made again by the plan's own recommend (max_draft_len, draft_len_schedule or max_concurrency by the
  release's rules for the mechanism): ``pick_changes`` says whether it differs;
- the planned pick (the D the plan chose at each batch size) is priced under the scaled costs: how far its
  predicted speedup moves from the plan's (``speedup_change``, per batch and the largest in absolute value).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from trtllm_spec.core.host_costs import HOST_TERMS
from trtllm_spec.planner.search import CostContext, MechanismPlan, evaluate

TERMS = ("iteration_s", "spec_iteration_s", "draft_step_s")
FACTORS = (0.5, 2.0)


def scaled_context(ctx: CostContext, term: str, factor: float) -> CostContext:
    ov = ctx.hw.overheads
    hw = ctx.hw.model_copy(update={"overheads": ov.model_copy(update={term: getattr(ov, term) * factor})})
    return replace(ctx, hw=hw)


def pick(rec: dict) -> dict:
    """max_draft_len, draft_len_schedule, max_concurrency and D per batch of a recommendation (plan.recommend)."""
    return {"max_draft_len": rec["max_draft_len"], "draft_len_schedule": rec["draft_len_schedule"],
            "max_concurrency": rec["max_concurrency"],
            "by_batch": {r["batch_size"]: r["draft_len"] for r in rec["by_batch"]}}


def _speedups(cands, mechanism: str, by_batch: dict[int, int]) -> dict[int, float]:
    return {c.batch_size: c.speedup for c in cands if c.mechanism == mechanism and c.batch_size in by_batch
            and c.draft_len == by_batch[c.batch_size]}


def robustness(ctx: CostContext, main: MechanismPlan, base_cands, base_rec: dict,
               recommend_with: Callable[[CostContext, list], dict]) -> dict:
    """The robustness table of plan.json (``robustness``): ``recommend_with(ctx, cands)`` makes the pick exactly as
    the plan does (plan.recommend, with the release's schedule rules), so a scaled term changes only the costs."""
    name = main.mechanism.name
    base = pick(base_rec)
    base_speed = _speedups(base_cands, name, base["by_batch"])
    rows = []
    terms = [t for t in HOST_TERMS if t in TERMS or getattr(ctx.hw.overheads, t) > 0]
    for term in terms:
        for factor in FACTORS:
            c2 = scaled_context(ctx, term, factor)
            cands = evaluate(c2, [main])
            new = pick(recommend_with(c2, cands))
            moved = _speedups(cands, name, base["by_batch"])
            change = {b: moved[b] - base_speed[b] for b in base_speed if b in moved}
            rows.append({
                "term": term, "factor": factor, "value_s": getattr(c2.hw.overheads, term),
                "pick_changes": any(new[k] != base[k] for k in ("max_draft_len", "draft_len_schedule",
                                                                 "max_concurrency")),
                "max_draft_len": new["max_draft_len"], "draft_len_schedule": new["draft_len_schedule"],
                "max_concurrency": new["max_concurrency"],
                "draft_len_by_batch": {str(b): d for b, d in sorted(new["by_batch"].items())},
                "speedup_change_by_batch": {str(b): round(v, 4) for b, v in sorted(change.items())},
                "max_abs_speedup_change": round(max((abs(v) for v in change.values()), default=0.0), 4),
            })
    changed = [f"{r['term']} x{r['factor']:g}" for r in rows if r["pick_changes"]]
    worst = max(rows, key=lambda r: r["max_abs_speedup_change"]) if rows else None
    return {"terms_s": {t: getattr(ctx.hw.overheads, t) for t in terms}, "factors": list(FACTORS),
            "pick": {k: base[k] for k in ("max_draft_len", "draft_len_schedule", "max_concurrency")},
            "rows": rows, "pick_changes_under": changed,
            "note": robustness_note(changed, worst)}


def robustness_note(changed: list[str], worst: dict | None) -> str:
    head = ("the pick holds with every host-cost term halved or doubled" if not changed else
            f"the pick changes with {', '.join(changed)}")
    if worst is None or not worst["speedup_change_by_batch"]:
        return head
    return (f"{head}; the planned pick's predicted speedup moves by at most {worst['max_abs_speedup_change']:.2f}x "
            f"({worst['term']} x{worst['factor']:g})")
