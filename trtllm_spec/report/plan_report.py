"""plan.md and the plan's plots."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from trtllm_spec.report.host_costs import speedup_cell
from trtllm_spec.report.plots import pyplot, save


def _fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def render_markdown(plan: dict) -> str:
    t, hw, rec, dr = plan["target"], plan["hardware"], plan["recommendation"], plan["drafter"]
    par = plan["parallelism"]
    lines = [
        f"# Speculative decoding plan: {t['id']} + {dr['title']} on {par['num_gpus']}x {hw['name']}",
        "",
        f"- target: {t['model_type']}, {t['num_layers']} layers, hidden {t['hidden_size']}, "
        f"{t['num_heads']} heads / {t['num_kv_heads']} KV heads, G = {t['group_size']} per GPU, "
        f"{t['params'] / 1e9:.2f} B params ({t['active_params_per_token'] / 1e9:.2f} B active per token)",
        f"- hardware: {hw['description'] or hw['name']}; tp {par['tp']}, pp {par['pp']}, ep {par['ep']}; "
        f"weights {plan['precision']['weights']}, KV cache {plan['precision']['kv_cache']}",
        f"- workload: batch sizes {plan['workload']['batch_sizes']}, isl {plan['workload']['isl']}, "
        f"osl {plan['workload']['osl']}",
        "",
        "## Recommendation",
        "",
    ]
    if rec["speculation_recommended"]:
        lines += [f"**{rec['mechanism']}**, `max_draft_len: {rec['max_draft_len']}`"
                  + (f", `draft_len_schedule: {rec['draft_len_schedule']}` (TensorRT-LLM {rec['trtllm_profile']} rules)"
                     if rec["draft_len_schedule"] else
                     f", `max_concurrency: {rec['max_concurrency']}`" if rec.get("max_concurrency") else
                     " at every batch size"), ""]
        if rec.get("draft_len_rule"):
            lines += [rec["draft_len_rule"] + ".", ""]
    elif not rec["by_batch"]:
        lines += [f"**No plan: no batch size fits in memory.** {rec['memory']['note']}", ""]
    else:
        lines += [f"**No speculation.** {rec.get('note', '')}", ""]
    if rec.get("speculation_limit"):
        lines += [f"Where speculation stops paying: {rec['speculation_limit']['note']}.", ""]
    if rec.get("uncertainty_note"):
        lines += [f"Inside the uncertainty: {rec['uncertainty_note']}.", ""]
    lines += ["| batch | D | AL | speedup (TPOT) | server speedup | TTFT ms | TPOT ms | tok/s/user | tok/s/GPU |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rec["by_batch"]:
        server = f"{r['server_speedup']:.2f}x" if r.get("server_speedup") is not None else "-"
        ttft = _fmt_ms(r["ttft_s"]) if r.get("ttft_s") is not None else "-"
        lines.append(f"| {r['batch_size']} | {r['draft_len']} | {r['acceptance_length']:.2f} | {speedup_cell(r)} | "
                     f"{server} | {ttft} | {_fmt_ms(r['tpot_s'])} | {r['tokens_per_s_per_user']:.1f} | "
                     f"{r['tokens_per_s_per_gpu']:.1f} |")
    if plan.get("speedup_kinds"):
        k = plan["speedup_kinds"]
        lines += ["", f"Speedup (TPOT): {k['speedup']}. Server speedup: {k['server_speedup']}. TTFT: {k['ttft_s']}."]
    if rec["infeasible_batch_sizes"]:
        lines += ["", f"Batch sizes that do not fit in memory: {rec['infeasible_batch_sizes']} "
                      f"(largest feasible by D: {rec['largest_feasible_batch']})"]
        if rec.get("memory") and rec["by_batch"]:
            lines += ["", rec["memory"]["note"]]
    if rec.get("latency_target"):
        lt = rec["latency_target"]
        lines += ["", f"Latency target {lt['tpot_ms']} ms/token: largest batch meeting it: "
                      f"{lt['largest_batch_meeting_it']}"]
    lines += ["", "## The five guidelines", ""]
    for g in plan["guidelines"]:
        d = "no constraint" if g["draft_len"] is None else f"D = {g['draft_len']}"
        lines += [f"{g['id']}. **{g['title']}** -> {d}. {g['reason']}", ""]
    lines += ["## Step time at the smallest batch (ms)", "",
              "| D | target GEMM | attention | comm | overhead | drafting | step | AL | speedup |",
              "|---|---|---|---|---|---|---|---|---|"]
    b0 = plan["workload"]["batch_sizes"][0]
    for c in plan["candidates"]:
        if c["mechanism"] == dr["type"] and c["batch_size"] == b0:
            tb, db = c["breakdown"]["target"], c["breakdown"]["draft"]
            lines.append(f"| {c['draft_len']} | {_fmt_ms(tb['gemm_s'])} | {_fmt_ms(tb['attention_s'])} | "
                         f"{_fmt_ms(tb['comm_s'])} | {_fmt_ms(tb['overhead_s'])} | {_fmt_ms(db['total_s'])} | "
                         f"{_fmt_ms(c['step_time_s'])} | {c['acceptance_length']:.2f} | {_cand_speedup(c)} |")
    from trtllm_spec.report.host_costs import (
        host_costs_markdown,
        robustness_markdown,
        step_terms_markdown,
        uncertainty_markdown,
    )

    lines += [""] + uncertainty_markdown(plan) + host_costs_markdown(plan) + step_terms_markdown(plan) \
        + robustness_markdown(plan)
    lines += ["## Assumptions", ""] + [f"- {a}" for a in plan["assumptions"]]
    names = drawable_plots(plan)
    lines += ["", ("Plots: " + ", ".join(f"`{n}`" for n in names) + ".") if names else
              "No plots: no batch size fits in memory, so there is nothing to draw.", ""]
    return "\n".join(lines)


def _cand_speedup(c: dict) -> str:
    band = c.get("speedup_interval")
    if not band or c["draft_len"] == 0:
        return f"{c['speedup']:.2f}x"
    return f"{c['speedup']:.2f}x ({band[0]:.2f}-{band[1]:.2f})"


def drawable_plots(plan: dict) -> list[str]:
    """The plots that have data: none of them when no candidate fits in memory (nothing to draw)."""
    if not any(c["feasible"] for c in plan["candidates"]):
        return []
    return ["speedup_vs_batch.png", "speedup_vs_draft_len.png", "pareto_frontier.png", "step_time_breakdown.png"]


def write_plots(plan: dict, out: Path) -> list[Path]:
    names = drawable_plots(plan)
    if not names:
        return []
    plt = pyplot()
    main = plan["drafter"]["type"]
    mine = [c for c in plan["candidates"] if c["mechanism"] == main]
    drawers = {"speedup_vs_batch.png": _speedup_vs_batch, "speedup_vs_draft_len.png": _speedup_vs_draft_len,
               "pareto_frontier.png": _pareto, "step_time_breakdown.png": _breakdown}
    paths = []
    for name in names:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        drawers[name](ax, plan, main, mine)
        paths.append(out / name)
        save(fig, paths[-1])
    return paths


def _speedup_vs_batch(ax, plan: dict, main: str, mine: list[dict]) -> None:
    """Predicted speedup of every D across batch sizes (feasible points), the recommended D per batch circled,
    and where speculation stops paying."""
    by_d: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for c in mine:
        if c["draft_len"] and c["feasible"]:
            by_d[c["draft_len"]].append((c["batch_size"], c["speedup"]))
    for d, pts in sorted(by_d.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", lw=1, label=f"D={d}")
    rows = plan["recommendation"]["by_batch"]
    ax.scatter([r["batch_size"] for r in rows], [r["speedup"] for r in rows], s=90, facecolors="none",
               edgecolors="black", lw=1.5, zorder=5, label="chosen D")
    band = [r for r in rows if r.get("speedup_low") is not None and r["draft_len"]]
    if band:  # the chosen D's interval (plan.json uncertainty)
        level = (plan.get("uncertainty") or {}).get("level", 0.8)
        ax.errorbar([r["batch_size"] for r in band], [r["speedup"] for r in band],
                    yerr=[[r["speedup"] - r["speedup_low"] for r in band],
                          [r["speedup_high"] - r["speedup"] for r in band]],
                    fmt="none", ecolor="black", elinewidth=1, capsize=3, zorder=4, label=f"{level:.0%} interval")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    limit = plan["recommendation"].get("speculation_limit") or {}
    if limit.get("stops_paying_at") is not None:
        ax.axvline(limit["stops_paying_at"], color="red", lw=0.8, ls=":",
                   label=f"stops paying at B={limit['stops_paying_at']}")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch size", ylabel="predicted speedup vs D=0", title=f"{main}: speedup per D across batch sizes")
    ax.legend(fontsize=7, ncol=2)


def _speedup_vs_draft_len(ax, plan: dict, main: str, mine: list[dict]) -> None:
    by_batch: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for c in mine:
        if c["feasible"]:
            by_batch[c["batch_size"]].append((c["draft_len"], c["speedup"]))
    for b, pts in sorted(by_batch.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"B={b}")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="draft length D", ylabel="predicted speedup vs D=0", title=f"{main}: speedup vs draft length")
    ax.legend(fontsize=8)


def _pareto(ax, plan: dict, main: str, mine: list[dict]) -> None:
    for m in sorted({c["mechanism"] for c in plan["candidates"]}):
        pts = [c for c in plan["candidates"] if c["mechanism"] == m and c["feasible"]]
        ax.scatter([c["tokens_per_s_per_user"] for c in pts], [c["tokens_per_s_per_gpu"] for c in pts], s=10,
                   alpha=0.5, label=m)
    fr = sorted(plan["frontier"], key=lambda c: c["tokens_per_s_per_user"])
    ax.plot([c["tokens_per_s_per_user"] for c in fr], [c["tokens_per_s_per_gpu"] for c in fr], color="black",
            lw=1.2, label="Pareto frontier")
    ax.set(xlabel="tokens/s per user", ylabel="tokens/s per GPU", title="Per-user speed vs per-GPU throughput")
    ax.set_yscale("log")
    ax.legend(fontsize=8)


def _breakdown(ax, plan: dict, main: str, mine: list[dict]) -> None:
    b0 = min(c["batch_size"] for c in mine if c["feasible"])
    rows = sorted((c for c in mine if c["batch_size"] == b0), key=lambda c: c["draft_len"])
    xs = [c["draft_len"] for c in rows]
    bottom = [0.0] * len(rows)
    parts = [("target GEMM", lambda c: c["breakdown"]["target"]["gemm_s"]),
             ("attention", lambda c: c["breakdown"]["target"]["attention_s"]),
             ("communication", lambda c: c["breakdown"]["target"]["comm_s"]),
             ("overhead", lambda c: c["breakdown"]["target"]["overhead_s"]),
             ("drafting", lambda c: c["breakdown"]["draft"]["total_s"])]
    for label, get in parts:
        vals = [get(c) * 1e3 for c in rows]
        ax.bar(xs, vals, bottom=bottom, label=label)
        bottom = [a + b for a, b in zip(bottom, vals, strict=True)]
    ax.set(xlabel="draft length D", ylabel="ms per iteration", title=f"Step-time breakdown at B={b0} ({main})")
    ax.legend(fontsize=8)
