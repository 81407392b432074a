"""The build's closing summary in plain words: what was measured on this machine, what the plan recommends for
which GPU and why, and the acceptance length (or batch size) at which speculation would pay there."""

from __future__ import annotations

from trtllm_spec.core.bundle import Bundle


def needed_acceptance(row: dict) -> float | None:
    """The AL at which the plan's row would break even (speedup 1.0) at its D. The planner's speedup at a fixed D
    and batch is AL x (plain step time) / (speculative step time), linear in AL, so it breaks even at AL / speedup."""
    if not row.get("speedup") or not row.get("acceptance_length"):
        return None
    return row["acceptance_length"] / row["speedup"]


def build_summary(bundle: Bundle) -> list[str]:
    """Lines for the end of ``trtllm-spec build``, from the bundle's record (``core.bundle.read_bundle``): its
    manifest, plan and measured profile."""
    lines: list[str] = []
    manifest = bundle.manifest
    plan, p = bundle.plan(), bundle.measured_profile()
    rec = manifest["recommendation"]
    if p is not None:
        ov, where = p["overall"], (p["settings"].get("placement") or {})
        cats = ", ".join(f"{c} {s['mean_acceptance_length']:.2f}" for c, s in p["categories"].items())
        speed = (f"; our reference decoder ran {ov['speedup']:.2f}x the target alone on this machine"
                 f"{' (' + where['device'] + ', ' + where['dtype'] + ')' if where else ''}, a CPU wall-clock figure, "
                 "not the GPU's" if ov.get("speedup") else "")
        lines.append(f"Measured here: {p['drafter']['type']} at D={p['drafter']['draft_len']} accepts AL "
                     f"{ov['mean_acceptance_length']:.2f} tokens per target step over {ov['num_prompts']} prompts "
                     f"(per category: {cats}){speed}.")
    else:
        lines.append(f"Measured here: nothing (acceptance {manifest['planner_inputs']['acceptance']}: "
                     "see the measure stage above).")
    if plan is None:
        return lines
    hw = plan["hardware"]
    name = hw.get("description") or hw["name"]
    lines.append(f"Planned for: {name} (the recipe's hardware.gpu: {bundle.recipe['hardware']['gpu']}; "
                 "TensorRT-LLM serves on a GPU, not on this CPU). Another GPU: --set hardware.gpu=NAME "
                 "(names: 'trtllm-spec hw list'), or a 'trtllm-spec hw probe' file.")
    rows = rec.get("by_batch") or []
    limit = rec.get("speculation_limit") or {}
    if rec.get("speculation_recommended") and rows:
        first = rows[0]
        sched = f", draft_len_schedule {rec['draft_len_schedule']}" if rec.get("draft_len_schedule") else ""
        lines.append(f"Recommended: {rec['mechanism']}, max_draft_len {rec['max_draft_len']}{sched}; predicted "
                     + ", ".join(f"{r['speedup']:.2f}x at batch {r['batch_size']}" for r in rows[:4])
                     + f" (AL {first['acceptance_length']:.2f}).")
    elif rows:
        lines.append(f"Recommended: no speculation (predicted slower than plain decoding): {rec.get('note', '')}")
    if limit.get("note"):
        lines.append(f"Why: {limit['note']}.")
    if rows:
        r = rows[0]
        need = needed_acceptance(r)
        if need is not None and r["speedup"] < 1.0:
            reach = ("" if need <= 1 + r["draft_len"] else
                     f", more than D={r['draft_len']} can give (at most {1 + r['draft_len']}): a cheaper drafter or "
                     "another GPU is needed")
            lines.append(f"It would pay at batch {r['batch_size']} on {hw['name']} from AL {need:.2f} at "
                         f"D={r['draft_len']} ({manifest['planner_inputs']['acceptance']} "
                         f"{r['acceptance_length']:.2f}){reach}; a longer-trained drafter raises AL.")
        elif limit.get("pays_up_to") is not None:
            lines.append(f"It pays up to batch {limit['pays_up_to']} on {hw['name']}.")
    return lines
