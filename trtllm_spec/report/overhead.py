"""The bundle's overhead report: the chosen D and schedule and why, the predicted step-time breakdown
(verify GEMMs, attention, communication, drafting overhead), measured AL per category, predicted speedup and
throughput per batch size. Markdown + JSON; plots come from the plan and measure stages."""

from __future__ import annotations

from trtllm_spec.report.host_costs import speedup_cell


def overhead_json(plan: dict, profile: dict | None, stages: list[dict]) -> dict:
    rec = plan["recommendation"]
    main = plan["drafter"]["type"]
    breakdown = []
    for c in plan["candidates"]:
        if c["mechanism"] == main and c["draft_len"] in {0, rec["max_draft_len"]} | {r["draft_len"] for r in rec["by_batch"]}:
            t, d = c["breakdown"]["target"], c["breakdown"]["draft"]
            breakdown.append({"batch_size": c["batch_size"], "draft_len": c["draft_len"],
                              "verify_gemm_s": t["gemm_s"], "attention_s": t["attention_s"], "comm_s": t["comm_s"],
                              "overhead_s": t["overhead_s"], "drafting_s": d["total_s"], "step_s": c["step_time_s"],
                              "drafting_share": d["total_s"] / c["step_time_s"] if c["step_time_s"] else 0.0})
    measured = None
    if profile:
        measured = {"overall": {k: profile["overall"].get(k) for k in ("mean_acceptance_length", "acceptance_length",
                                                                        "speedup", "conditional_rates")},
                    "categories": {c: {"mean_acceptance_length": v.get("mean_acceptance_length"),
                                       "speedup": v.get("speedup")} for c, v in profile.get("categories", {}).items()},
                    "machine": (profile.get("settings") or {}).get("machine")}
        if "sources" in profile["overall"]:  # the SA enhancer: which source drafted, and its share of the time
            measured["sources"] = profile["overall"]["sources"]
            measured["enhancer_time_share"] = profile["overall"].get("enhancer_time_share")
            measured["enhancer"] = (profile.get("drafter") or {}).get("options", {}).get("sa_enhancer")
    return {
        "schema": "trtllm-spec/overhead_report/v1",
        "recommendation": rec,
        "guidelines": [{k: g[k] for k in ("id", "title", "draft_len", "reason")} for g in plan["guidelines"]],
        "rho": plan["drafter"]["rho"],
        "breakdown": breakdown,
        "measured_acceptance": measured,
        "acceptance_source": plan["drafter"]["acceptance"].get("source"),
        "host_costs": plan.get("host_costs"),
        "robustness": plan.get("robustness"),
        "uncertainty": plan.get("uncertainty"),
        "stages": stages,
    }


def overhead_markdown(report: dict, plan: dict) -> str:
    rec = report["recommendation"]
    t, hw = plan["target"], plan["hardware"]
    lines = [f"# Overhead report: {t['id']} + {plan['drafter']['title']} on {plan['parallelism']['num_gpus']}x "
             f"{hw['name']}", ""]
    if rec["speculation_recommended"]:
        sched = rec["draft_len_schedule"]
        lines.append(f"**Chosen:** `max_draft_len: {rec['max_draft_len']}`" +
                     (f", `draft_len_schedule: {sched}` (TensorRT-LLM {rec['trtllm_profile']} rules)" if sched else "") +
                     f"; drafting overhead per draft token rho = {report['rho']:.3f} of a target layer stack.")
        for reason in rec.get("speculation_gates") or []:
            lines.append(f"\n**Speculation off above a batch size:** {reason}.")
        if rec.get("draft_len_rule"):
            lines.append(f"\n**What the engine does at each batch size:** {rec['draft_len_rule']}.")
    else:
        lines.append(f"**No speculation recommended.** {rec.get('note', '')}")
        alt = rec.get("speculative_alternative")
        if alt:
            lines.append(f"\nTo check this on the GPU, the bundle also holds the drafter at its best predicted D in "
                         f"`{alt['options']}`: run `bash bench.sh` and `bash {alt['bench']}` and compare.")
    lines += ["", "## Why (the five guidelines)", ""]
    for g in report["guidelines"]:
        d = "no constraint" if g["draft_len"] is None else f"D = {g['draft_len']}"
        lines.append(f"{g['id']}. **{g['title']}** -> {d}: {g['reason']}")
    lines += ["", "## Predicted step time (ms per iteration)", "",
              "| batch | D | verify GEMMs | attention | comm | overhead | drafting | step | drafting share |",
              "|---|---|---|---|---|---|---|---|---|"]
    for b in report["breakdown"]:
        ms = {k: f"{b[k] * 1e3:.3f}" for k in ("verify_gemm_s", "attention_s", "comm_s", "overhead_s", "drafting_s",
                                                 "step_s")}
        lines.append(f"| {b['batch_size']} | {b['draft_len']} | {ms['verify_gemm_s']} | {ms['attention_s']} | "
                     f"{ms['comm_s']} | {ms['overhead_s']} | {ms['drafting_s']} | {ms['step_s']} | "
                     f"{b['drafting_share']:.1%} |")
    lines += ["", "## Predicted speedup and throughput per batch size", "",
              "| batch | D | AL | speedup | TPOT ms | tok/s/user | tok/s/GPU |", "|---|---|---|---|---|---|---|"]
    for r in rec["by_batch"]:
        lines.append(f"| {r['batch_size']} | {r['draft_len']} | {r['acceptance_length']:.2f} | {speedup_cell(r)} | "
                     f"{r['tpot_s'] * 1e3:.2f} | {r['tokens_per_s_per_user']:.1f} | {r['tokens_per_s_per_gpu']:.1f} |")
    from trtllm_spec.report.host_costs import host_costs_markdown, robustness_markdown, uncertainty_markdown

    lines += [""] + uncertainty_markdown(plan) + host_costs_markdown(plan) + robustness_markdown(plan)
    m = report["measured_acceptance"]
    lines += ["## Measured acceptance", ""]
    if m:
        mach = m.get("machine") or {}
        where = (f"{mach.get('cpu_count')}-core {mach.get('machine')} ({mach.get('device')}, torch {mach.get('torch')})"
                 if isinstance(mach, dict) else str(mach or "this machine"))
        lines += [f"Measured with trtllm-spec's reference decoder on {where} "
                  "(speed-lite suite). The planner used these numbers.", "",
                  "| category | mean AL | wall-clock speedup (reference decoder) |", "|---|---|---|"]
        for cat, v in sorted(m["categories"].items()):
            lines.append(f"| {cat} | {v['mean_acceptance_length'] or 0:.2f} | {v['speedup'] or 0:.2f}x |")
        o = m["overall"]
        lines.append(f"| **overall** | **{o['mean_acceptance_length'] or 0:.2f}** | **{o['speedup'] or 0:.2f}x** |")
        if m.get("sources"):
            lines += enhancer_lines(m)
    else:
        lines.append(f"Not measured: the planner used {report['acceptance_source']}.")
    lines += ["", "## Stages", "", "| stage | status | seconds | detail |", "|---|---|---|---|"]
    for s in report["stages"]:
        detail = s.get("detail", "") + (f" -- run: `{s['command']}`" if s.get("command") else "")
        lines.append(f"| {s['name']} | {s['status']} | {s.get('seconds', 0):.1f} | {detail} |")
    lines.append("")
    return "\n".join(lines)


def enhancer_lines(m: dict) -> list[str]:
    """The SA enhancer's part of the measured run: per source, how often it drafted and how much was accepted,
    and the automaton's share of the reference decoder's time."""
    enh = m.get("enhancer") or {}
    share = m.get("enhancer_time_share")
    lines = ["", "## SA enhancer (suffix automaton over the neural drafter)", "",
             f"Suffix drafts replace the neural ones where the match reaches {enh.get('threshold', '?')} tokens"
             + (" (global pool on)" if enh.get("enable_global_pool") else "") + "; the automaton took "
             + (f"{share:.1%}" if share is not None else "an unmeasured share") + " of the reference decoder's time.",
             "", "| source | iterations | draft tokens | accepted | acceptance rate | AL when drafting |",
             "|---|---|---|---|---|---|"]
    total = sum(v["iterations"] for v in m["sources"].values()) or 1
    for src, v in m["sources"].items():
        rate = v.get("acceptance_rate")
        lines.append(f"| {src} | {v['iterations']} ({v['iterations'] / total:.0%}) | {v['drafted_tokens']} | "
                     f"{v['accepted_tokens']} | {'-' if rate is None else f'{rate:.2f}'} | "
                     f"{v.get('mean_acceptance_length') or 0:.2f} |")
    return lines
