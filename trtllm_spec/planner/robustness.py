"""How much the recommendation leans on the host-cost terms: each term halved and doubled, the pick re-made.

For each of iteration_s, spec_iteration_s and draft_step_s (core/host_costs.py) and each factor in FACTORS, the
recipe's mechanism is evaluated again with that one term scaled (search.evaluate), and

- the pick is made again the way the plan makes it (search.best_by_batch per batch size, then max_draft_len and
  draft_len_schedule by the release's rules, or the one-D rule): ``pick_changes`` says whether it differs;
- the planned pick (the D the plan chose at each batch size) is priced under the scaled costs: how far its
  predicted speedup moves from the plan's (``speedup_change``, per batch and the largest in absolute value).
"""

from __future__ import annotations

from dataclasses import replace

from trtllm_spec.planner.search import CostContext, MechanismPlan, best_by_batch, evaluate

TERMS = ("iteration_s", "spec_iteration_s", "draft_step_s")
FACTORS = (0.5, 2.0)


def scaled_context(ctx: CostContext, term: str, factor: float) -> CostContext:
    ov = ctx.hw.overheads
    hw = ctx.hw.model_copy(update={"overheads": ov.model_copy(update={term: getattr(ov, term) * factor})})
    return replace(ctx, hw=hw)


def pick(cands, main: MechanismPlan, fixed_draft_len: int | None, profile: str, max_batch: int) -> dict:
    """max_draft_len, draft_len_schedule and D per batch, as plan.recommend makes them."""
    from trtllm_spec.planner.plan import one_draft_len
    from trtllm_spec.planner.schedule import render_schedule

    best = best_by_batch(cands, main.mechanism.name, fixed_draft_len or main.only_draft_len)
    by_batch = {b: c.draft_len for b, c in best.items()}
    if fixed_draft_len is not None and by_batch:
        by_batch[min(by_batch)] = fixed_draft_len
    if main.only_draft_len:
        max_d, cut, _off = one_draft_len(by_batch, main.only_draft_len)
        return {"max_draft_len": max_d, "draft_len_schedule": None, "max_concurrency": cut, "by_batch": by_batch}
    max_d, schedule = render_schedule(by_batch, profile, max_batch)
    return {"max_draft_len": max_d, "draft_len_schedule": {str(k): v for k, v in schedule.items()} if schedule
            else None, "max_concurrency": None, "by_batch": by_batch}


def _speedups(cands, mechanism: str, by_batch: dict[int, int]) -> dict[int, float]:
    return {c.batch_size: c.speedup for c in cands if c.mechanism == mechanism and c.batch_size in by_batch
            and c.draft_len == by_batch[c.batch_size]}


def robustness(ctx: CostContext, main: MechanismPlan, base_cands, *, fixed_draft_len: int | None, profile: str,
               max_batch: int) -> dict:
    """The robustness table of plan.json (``robustness``)."""
    name = main.mechanism.name
    base = pick(base_cands, main, fixed_draft_len, profile, max_batch)
    base_speed = _speedups(base_cands, name, base["by_batch"])
    rows = []
    for term in TERMS:
        for factor in FACTORS:
            c2 = scaled_context(ctx, term, factor)
            cands = evaluate(c2, [main])
            new = pick(cands, main, fixed_draft_len, profile, max_batch)
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
    return {"terms_s": {t: getattr(ctx.hw.overheads, t) for t in TERMS}, "factors": list(FACTORS),
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
