"""report.md and the plots of a speculation profile."""

from __future__ import annotations

from pathlib import Path

from trtllm_spec.report.plots import pyplot, save

PLOTS = ("acceptance_length_by_category.png", "acceptance_by_position.png")

BF16_NOTE = (
    "**Why bf16 outputs can differ from the target alone.** The speculative decoder verifies 1 + D positions "
    "in one forward pass, while target-only decoding computes one position at a time. The matrix products then "
    "have different shapes, so the kernels sum in a different order and round differently; in bf16 (8 significant "
    "bits) that moves logits by enough to flip the argmax where two tokens are nearly tied, and from the "
    "first flip on the two continuations diverge. Both are valid greedy decodes of the same model. "
    "`token_agreement` is the share of reference tokens before the first "
    "divergence; the acceptance figures stay valid. In fp32 the outputs must be identical.")


_REF_ENGINE = {"ours": "our Llama-family decoder", "hf": "transformers target"}

def _f(x, nd: int = 2, suffix: str = "") -> str:
    return "-" if x is None else f"{x:.{nd}f}{suffix}"


def _rates(xs) -> str:
    return "-" if not xs else " ".join(f"{x:.2f}" for x in xs)


def _identical(s: dict) -> str:
    if s["identical_outputs"] is None:
        return "n/a (sampling)"
    return f"{s['identical_outputs']}/{s['num_prompts']} ({_f(s['token_agreement'] * 100, 1)}% tokens)"


def _row(name: str, s: dict, d: int) -> str:
    al_d = s["acceptance_length"].get(str(d))
    return (f"| {name} | {s['num_prompts']} | {s['generated_tokens']} | {_f(s['mean_acceptance_length'])} | "
            f"{_f(al_d)} | {_rates(s['conditional_rates'])} | {_f(s['tokens_per_s_target'], 1)} | "
            f"{_f(s['tokens_per_s_spec'], 1)} | {_f(s['speedup'], 2, 'x')} | {_identical(s)} |")


def lossless_problem(profile: dict) -> str | None:
    """A message when greedy fp32 outputs differ from the target alone (a decoder bug), else None."""
    st, ov = profile["settings"], profile["overall"]
    if st["temperature"] > 0 or st.get("dtype") != "fp32" or ov["identical_outputs"] is None:
        return None
    if profile.get("engine") in ("llamacpp", "vllm"):  # another engine's numerics: its comparison reports it
        return None
    if ov["identical_outputs"] == ov["num_prompts"]:
        return None
    bad = [p["id"] for p in profile.get("prompts", []) if p.get("identical") is False]
    return (f"greedy fp32 speculative output differs from the target alone on {ov['num_prompts'] - ov['identical_outputs']}"
            f" of {ov['num_prompts']} prompts ({', '.join(bad[:3])}); speculative decoding must be lossless")


def mode_lines(p: dict) -> list[str]:
    """The request mode the profile was measured in, and what its structured outputs did."""
    from trtllm_spec.core.request_mode import profile_mode

    mode = profile_mode(p)
    out = [f"- request mode: {mode.label()}" if mode is not None else "- request mode: not recorded"]
    skipped = (p.get("suite") or {}).get("skipped_categories")
    if skipped:
        out.append("- categories left out: " + "; ".join(f"{c} ({why})" for c, why in skipped.items()))
    so = p.get("structured_output")
    if so:
        out.append(f"- structured output: {so['num_outputs']} outputs (speculative and target-only), {so['parsed']} "
                   f"parse as JSON, {so['valid']} validate against the schema, {so['truncated']} cut by the token "
                   "limit before the value closed")
    return out


def greedy_vs_sampled(p: dict) -> list[str]:
    """Greedy and sampled AL side by side (a sampling mode's profile also decodes each prompt greedily)."""
    g = p.get("greedy_comparison")
    if not g:
        return []
    rows = [f"| {c} | {_f(v['greedy'])} | {_f(v['sampled'])} |" for c, v in sorted(g["categories"].items())]
    return ["## Greedy vs sampled", "", f"The same prompts and drafter, greedy and at temperature {g['temperature']} "
            "(rejection sampling: the output follows the target's distribution).", "",
            "| category | AL greedy | AL sampled |", "|---|---|---|", *rows,
            f"| **overall** | {_f(g['overall']['greedy'])} | {_f(g['overall']['sampled'])} |", ""]


def render_markdown(p: dict) -> str:
    dr, t, st, ov = p["drafter"], p["target"], p["settings"], p["overall"]
    d = dr["draft_len"]
    greedy = st["temperature"] <= 0
    method = {"chain_analytic": "AL(d) for d < D from the per-position rates of one run (chain drafter: "
                                  "AL(d) = 1 + sum m_i)",
              "measured_at_bundle_draft_len": f"AL measured by TensorRT-LLM at D = {d} only"}.get(
        dr.get("al_method"),
        f"AL(d) measured by a separate run per d ({', '.join(map(str, sorted(map(int, ov['acceptance_length']))))})")
    lines = [
        f"# Speculation profile: {dr['type']} (D = {d}) on {t.get('hf_id') or t.get('spec')}",
        "",
        f"- engine: {p['engine']}"
        + (f" ({_REF_ENGINE[st['reference_engine']]})" if st.get("reference_engine") in _REF_ENGINE else "")
        + f"; dtype {st['dtype']}; "
        + ("greedy" if greedy else f"temperature {st['temperature']}") + f"; {st['max_new_tokens']} new tokens max",
        f"- drafter: {dr['type']}" + (f" from `{dr['path']}`" if dr.get("path") else "") + f"; {method}",
        f"- suite: {p['suite'].get('suite')} ({p['suite'].get('items')} prompts, seed {st.get('seed')})",
    ]
    lines += mode_lines(p)
    src = p.get("source")
    if src:
        lines.append(f"- source: {src.get('kind')} `{src.get('file') or src.get('url')}`"
                     + (f" (TensorRT-LLM {src['trtllm_version']})" if src.get("trtllm_version") else ""))
    if st.get("machine"):
        m = st["machine"]
        lines.append(f"- machine: {m.get('platform')}, {m.get('cpu_count')} CPUs, torch {m.get('torch')} "
                     f"({m.get('torch_threads')} threads) on {m.get('device')}")
    lines += ["", "## Overall", "",
              f"Mean acceptance length **{_f(ov['mean_acceptance_length'])}** tokens per target iteration "
              f"(at most {d + 1}); speedup **{_f(ov['speedup'], 2, 'x')}** "
              f"({_f(ov['tokens_per_s_target'], 1)} -> {_f(ov['tokens_per_s_spec'], 1)} tokens/s)."]
    if greedy:
        lines.append(f"Outputs identical to the target alone: {_identical(ov)}.")
    problem = lossless_problem(p)
    if problem:
        lines += ["", f"**Check failed:** {problem}."]
    lines += ["", "| d | " + " | ".join(ov["acceptance_length"]) + " |",
              "|---|" + "---|" * len(ov["acceptance_length"]),
              "| AL(d) | " + " | ".join(_f(v) for v in ov["acceptance_length"].values()) + " |", ""]
    if ov["conditional_rates"] is not None:
        lines += ["| position i | " + " | ".join(str(i + 1) for i in range(len(ov["conditional_rates"]))) + " |",
                  "|---|" + "---|" * len(ov["conditional_rates"]),
                  "| conditional a_i | " + " | ".join(_f(a) for a in ov["conditional_rates"]) + " |",
                  "| marginal m_i | " + " | ".join(_f(m) for m in ov["marginal_rates"]) + " |", ""]
    if ov.get("al_histogram"):
        lines += ["Tokens per iteration: " + ", ".join(f"{k}: {n}" for k, n in ov["al_histogram"].items()), ""]
    shares = ov.get("time_shares") or {}
    if shares.get("draft") is not None:
        lines += [f"Speculative time shares: prefill {_f(shares['prefill'] * 100, 1)}%, drafting "
                  f"{_f(shares['draft'] * 100, 1)}%, verification {_f(shares['verify'] * 100, 1)}%, other "
                  f"{_f(shares['other'] * 100, 1)}%.", ""]
    lines += ["## By category", "",
              f"| category | prompts | tokens | mean AL | AL({d}) | conditional a_i | tok/s target | tok/s spec | "
              "speedup | identical |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(c, s, d) for c, s in sorted(p["categories"].items())]
    lines += [_row("**overall**", ov, d), ""]
    lines += greedy_vs_sampled(p)
    if greedy and st["dtype"] == "bf16":
        lines += [BF16_NOTE, ""]
    lines += ["Definitions: AL = tokens per target iteration (accepted drafts + the target's own token); a_i = "
              "P(draft i accepted | drafts 1..i-1 accepted), over iterations that asked for at least i drafts "
              "(a drafter proposing fewer counts as a rejection); m_i = a_1 x ... x a_i; speedup = tokens/s "
              "speculative / tokens/s target alone, both timed end to end (prefill included).", ""]
    lines += _provenance(p)
    lines += ["", "Plots: " + ", ".join(f"`{x}`" for x in PLOTS) + ".", ""]
    return "\n".join(lines)


def _provenance(p: dict) -> list[str]:
    lines = ["## Provenance", "", "| source | package | licence (data) | prompts |", "|---|---|---|---|"]
    for name, s in sorted((p["suite"].get("sources") or {}).items()):
        lines.append(f"| {name} | {s.get('package')}=={s.get('version')} | {s.get('data_licence')} | {s.get('items')} |")
    split = (p["suite"].get("split") or {}).get("rule")
    if split:
        lines += ["", f"Prompts come from the evaluation pool only ({split}), never from training data."]
    lines += ["", f"Target: `{p['target'].get('path')}`. Command line, versions and input hashes: provenance.json."]
    return lines


def write_plots(p: dict, out: Path) -> list[Path]:
    plt = pyplot()
    cats = sorted(p["categories"])
    d = p["drafter"]["draft_len"]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(cats) + 2.5), 4.0))
    names = [*cats, "overall"]
    vals = [p["categories"][c]["mean_acceptance_length"] for c in cats] + [p["overall"]["mean_acceptance_length"]]
    ax.bar(names, vals, color=["tab:blue"] * len(cats) + ["tab:gray"])
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(ylabel="mean acceptance length", ylim=(0, d + 1.2),
           title=f"{p['drafter']['type']}, D = {d}: tokens per target iteration")
    ax.tick_params(axis="x", rotation=30)
    paths = [out / PLOTS[0]]
    save(fig, paths[-1])

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    sections = [(c, p["categories"][c], 1.0) for c in cats] + [("overall", p["overall"], 2.5)]
    for i, (name, s, lw) in enumerate(sections):
        cond = s.get("conditional_rates") or []
        if not cond:
            continue
        color = "black" if name == "overall" else f"C{i % 10}"
        xs = list(range(1, len(cond) + 1))
        ax.plot(xs, cond, marker="o", color=color, lw=lw, label=f"{name} a_i")
        ax.plot(xs, s["marginal_rates"], ls="--", color=color, lw=lw, alpha=0.7)
    ax.set(xlabel="draft position i", ylabel="acceptance rate", ylim=(0, 1.05), xticks=list(range(1, d + 1)),
           title="Acceptance by position (solid: conditional a_i, dashed: marginal m_i)")
    if ax.lines:
        ax.legend(fontsize=7, ncol=2)
    paths.append(out / PLOTS[1])
    save(fig, paths[-1])
    return paths
