"""The host-cost sections of plan.md and overhead.md: which profile priced the plan, and how the pick moves with
each host-cost term halved and doubled (plan.json ``host_costs`` / ``robustness``)."""

from __future__ import annotations

PER_SEQUENCE = ("sequence_s", "spec_sequence_s", "draft_sequence_s")


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


WIDER_WHY = ("the fitted runs miss the step model by more than the release profile's own uncertainty "
             "(host_costs.json fit.measurements[].fitted_error): check that they ran what they declare, at the "
             "concurrency asked for, on one quiet machine")


def interval_change(cal: dict) -> dict | None:
    """How a calibration changed the median speedup interval (plan.json ``uncertainty.calibration``), in words that
    match its numbers: {'verb': 'narrowed' | 'widened' | 'unchanged', 'before', 'after' (percent of the
    prediction, as printed), 'by' ('81% narrower' / '131% wider'), 'why' (a widening's likely cause, else '')};
    None without both widths. Unchanged where the two print the same."""
    before, after = cal.get("median_relative_width_before"), cal.get("median_relative_width_after")
    if before is None or after is None:
        return None
    b, a = f"{before:.0%}", f"{after:.0%}"
    if a == b or not before:
        return {"verb": "unchanged", "before": b, "after": a, "by": "", "why": ""}
    if after < before:
        return {"verb": "narrowed", "before": b, "after": a, "by": f"{1 - after / before:.0%} narrower", "why": ""}
    return {"verb": "widened", "before": b, "after": a, "by": f"{after / before - 1:.0%} wider", "why": WIDER_WHY}


def host_costs_markdown(plan: dict) -> list[str]:
    hc = plan.get("host_costs")
    if not hc:
        return []
    t = hc.get("terms_s") or {}
    lines = ["## Host costs", "", f"Profile **{hc['name']}**"
             + (f" ({hc.get('framework', 'TensorRT-LLM')} {hc['release']}; measurements from "
                f"{hc['measured_release']})" if hc.get("measured_release") else "")
             + f": {_ms(t.get('iteration_s', 0))} ms per iteration, {_ms(t.get('spec_iteration_s', 0))} ms per "
             f"speculative iteration, {_ms(t.get('draft_step_s', 0))} ms per draft step"
             + (f"; per sequence: {_ms(t.get('sequence_s', 0))} / {_ms(t.get('spec_sequence_s', 0))} / "
                f"{_ms(t.get('draft_sequence_s', 0))} ms" if any(t.get(k) for k in PER_SEQUENCE) else "") + ".", ""]
    if hc.get("fitted_on"):
        lines += ["Fitted on: " + "; ".join(hc["fitted_on"]) + f" ({hc.get('fitted', '')}).", ""]
    if hc.get("overridden_by_recipe"):
        lines += [f"Overridden by the recipe (hardware.overrides): {', '.join(hc['overridden_by_recipe'])}.", ""]
    if hc.get("note"):
        lines += [hc["note"], ""]
    return lines


def step_terms_markdown(plan: dict) -> list[str]:
    """Every term of the step model, its value and its source (plan.json ``step_terms``, planner/step.py)."""
    rows = plan.get("step_terms")
    if not rows:
        return []
    lines = ["## Step model terms", "", "| term | what | value ms | source |", "|---|---|---|---|"]
    for r in rows:
        v = "-" if r["value_s"] is None else _ms(r["value_s"])
        lines.append(f"| {r['term']} | {r['what']} | {v} | {r['source']} |")
    return lines + [""]


def robustness_markdown(plan: dict) -> list[str]:
    rob = plan.get("robustness")
    if not rob:
        return []
    lines = ["## Robustness to host costs", "", rob["note"] + ".", "",
             "| term | x | value ms | pick changes | max_draft_len | draft_len_schedule | D by batch | "
             "speedup change of the planned pick |", "|---|---|---|---|---|---|---|---|"]
    for r in rob["rows"]:
        sched = r["draft_len_schedule"] or (f"max_concurrency {r['max_concurrency']}" if r["max_concurrency"] else "-")
        by_b = ", ".join(f"{b}:{d}" for b, d in r["draft_len_by_batch"].items())
        moved = ", ".join(f"{b}: {v:+.2f}x" for b, v in r["speedup_change_by_batch"].items())
        lines.append(f"| {r['term']} | {r['factor']:g} | {_ms(r['value_s'])} | {'**yes**' if r['pick_changes'] else 'no'} "
                     f"| {r['max_draft_len']} | {sched} | {by_b} | {moved} |")
    return lines + [""]


def speedup_cell(r: dict) -> str:
    """A predicted speedup with its interval (plan.json ``speedup_low`` / ``speedup_high``) when the plan has one."""
    if r.get("speedup_low") is None or r.get("draft_len", 1) == 0:
        return f"{r['speedup']:.2f}x"
    return f"{r['speedup']:.2f}x ({r['speedup_low']:.2f}-{r['speedup_high']:.2f})"


def uncertainty_markdown(plan: dict) -> list[str]:
    """The intervals: level, how they are made, the release rule behind the host costs, where they change the
    decision, and how much a calibration narrowed them."""
    u = plan.get("uncertainty")
    if not u:
        return []
    lines = ["## Uncertainty of the predicted speedups", "",
             f"Every predicted speedup carries its {u['level']:.0%} interval: {u['how']}. Host-term log sd: "
             + ", ".join(f"{k} {v:.2f}" for k, v in u["host_log_sd"].items())
             + ("; unmeasured terms (0 in the profile), absolute sd: "
                + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in u["host_sd_s"].items()) if u.get("host_sd_s") else "")
             + f"; model residual sd {u['model_log_sd']:.3f}. Median interval width: "
             + (f"{u['median_relative_width']:.0%} of the prediction." if u.get("median_relative_width") is not None
                else "-."), ""]
    rule = u.get("rule")
    if rule:
        if rule.get("rule") == "fitted":
            lines += [f"Host costs: the release's own fitted profile ({rule['base']}).", ""]
        else:
            feats = ", ".join(f"{f['feature']} ({f['source']})" for f in rule.get("features", [])) or "none"
            lines += [f"Host costs by the release rule: {rule['text']}. Base {rule['base']}, {rule['distance']:g} "
                      f"minor release(s) away; features applied: {feats}.", ""]
    change = interval_change(u.get("calibration") or {})
    if change:
        lines += [(f"The calibration left the median interval unchanged at {change['before']} of the prediction"
                   if change["verb"] == "unchanged" else
                   f"The calibration {change['verb']} the median interval from {change['before']} to "
                   f"{change['after']} of the prediction ({change['by']})") + "."
                  + (f" {change['why'][0].upper()}{change['why'][1:]}." if change["why"] else ""), ""]
    if u.get("note"):
        lines += [f"Decision: {u['note']}.", ""]
    return lines
