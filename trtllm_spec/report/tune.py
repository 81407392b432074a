"""tune.md and tune.png: the fitted step model, every cell measured beside its prediction, the picks and the schedule
(stages/tune.py writes tune.json; these render it)."""

from __future__ import annotations

from pathlib import Path


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def tune_markdown(r: dict, plot: str | None) -> str:
    s = r["settings"]
    m = r.get("machine") or {}
    lines = [f"# trtllm-spec tune: {s['drafter_type']} on {r.get('engine', s['engine'])}", ""]
    if plot:
        lines += [f"![predicted vs measured per cell]({plot})", ""]
    lines += [f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, CPU flags {m.get('cpu_flags') or '-'}; "
              f"command: `{r.get('command', '')}`; {r.get('date', '')}; trtllm-spec {r.get('trtllm_spec_version', '')}.",
              "",
              f"Grid: concurrency {', '.join(map(str, s['concurrency']))} x D {', '.join(map(str, s['draft_lens']))}; "
              f"{s['rounds']} interleaved rounds (plain and speculative servers measured in turn, the order rotated "
              f"each round); {s['max_tokens']} tokens per request; verify: {s['verify']}.", "",
              "## The fit", "",
              f"Form {r['form']}, on {len(r['calibration_cells'])} calibration cells: "
              + ", ".join(f"(c {c}, D {d})" for c, d in r["calibration_cells"]) + ". Step terms (ms): "
              + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in r["terms_s"].items())
              + ". TTFT terms (ms): " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in r["ttft_terms_s"].items())
              + f". Acceptance: {r['acceptance'].get('source', '')}."
              + (f" {r['fit_note']}." if r.get("fit_note") else ""), "",
              f"Pick margin {r['margin']:.1%} ({r['margin_rule']}): at each concurrency the smallest D whose predicted "
              "server speedup is within the margin of the best.", "",
              "## Prediction against measurement", "",
              f"Held-out cells (measured, not calibrated, D > 0): {r['held_out']['cells']}; median |error| of the "
              f"predicted server speedup {_pct(r['held_out']['median_abs_error_server'])}, of the TPOT speedup "
              f"{_pct(r['held_out']['median_abs_error_tpot'])}. Noise floor (what reproducing every measured step "
              f"exactly would score, the drift between chunks and rounds that same-round ratios cancel): server "
              f"{_pct(r['noise_floor']['server'])}, TPOT {_pct(r['noise_floor']['tpot'])}.", "",
              "| c | D | cal. | speedup measured (spread) | predicted (80% interval) | TPOT speedup measured | "
              "predicted | AL | tok/s | TPOT ms | TTFT ms |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in r["cells"]:
        iv = f" ({c['interval'][0]:.2f}-{c['interval'][1]:.2f})" if c.get("interval") else ""
        if c["measured"]:
            meas = f"{c['speedup']:.3f} ({c['spread'][0]:.2f}-{c['spread'][1]:.2f})"
            rest = (f"{c['tpot_speedup']:.3f} | {c['predicted_tpot_speedup']:.3f} | {c['acceptance_length']:.2f} | "
                    f"{c['tokens_per_s']:.1f} | {c['tpot_ms']:.1f} | {c['ttft_ms']:.0f} |")
        else:
            meas, rest = "-", f"- | {c['predicted_tpot_speedup']:.3f} | {c['predicted_acceptance_length']:.2f} | - | - | - |"
        lines.append(f"| {c['concurrency']} | {c['draft_len']} | {'yes' if c['calibration'] else ''} | {meas} | "
                     f"{c['predicted_speedup']:.3f}{iv} | {rest}")
    judged = r.get("judged") or {}
    lines += ["", "## D per concurrency", "", "| c | pick | its measured speedup | best fixed D (measured) | pick / best "
              "| right (within the margin) |", "|---|---|---|---|---|---|"]
    for c, j in judged.items():
        if j.get("measured"):
            lines.append(f"| {c} | {j['pick']} | {j['pick_speedup']:.3f} | {j['best_draft_len']} "
                         f"({j['best_speedup']:.3f}) | {j['pick_over_best']:.3f} | {'yes' if j['right'] else '**no**'} |")
        else:
            lines.append(f"| {c} | {j['pick']} | not measured | - | - | - |")
    right = [j["right"] for j in judged.values() if j.get("measured")]
    if right:
        lines += ["", f"Right at {sum(right)} of {len(right)} concurrencies."]
    lines += ["", "## The schedule", ""] + schedule_markdown(r["schedule"])
    if r.get("dropped_rounds"):
        lines += ["", "## Rounds dropped and measured again", ""]
        for d in r["dropped_rounds"]:
            w = d["why"]
            lines.append(f"- {d['chunk']} round {d['round'] + 1} at concurrency {d['concurrency']}: plain "
                         f"{w['tokens_per_s']:.1f} tok/s, {w['deviation']:.0%} from the others' {w['others_median']:.1f} "
                         f"(threshold {w['threshold']:.0%})")
    return "\n".join(lines) + "\n"


def schedule_markdown(sch: dict) -> list[str]:
    """tune.md's schedule section: the engine's forms, the served schedule per concurrency, and where its D = 0 is
    not the plain server."""
    lines: list[str] = []
    if not sch["vllm_ranges"]:
        lines += ["No speculation pays at any concurrency by the prediction: nothing to schedule (serve without a "
                  "speculative config)."]
    else:
        lines += [f"vLLM `num_speculative_tokens` {sch['vllm_num_speculative_tokens']}, "
                  f"`num_speculative_tokens_per_batch_size` {sch['vllm_ranges']} (vllm_speculative_config.json); "
                  f"TensorRT-LLM ({sch['trtllm_rules']} rules) `max_draft_len` {sch['trtllm_max_draft_len']}, "
                  + (f"`max_concurrency` {sch['trtllm_max_concurrency']} ({sch.get('trtllm_rule')})"
                     if sch.get("trtllm_max_concurrency") else f"`draft_len_schedule` {sch['trtllm_draft_len_schedule']}")
                  + ".", ""]
        if sch["measured"]:
            lines += ["| c | schedule speedup (spread) | / best fixed D |", "|---|---|---|"]
            for x in sch["measured"]:
                lines.append(f"| {x['concurrency']} | {x['speedup']:.3f} ({x['spread'][0]:.2f}-{x['spread'][1]:.2f}) | "
                             f"{_x(x.get('over_best_fixed'))} |")
        z = sch.get("at_zero")
        if z and z["slower_than_plain"]:
            lo, hi = min(z["speedups"]), max(z["speedups"])
            lines += ["", f"Where the schedule asks for D = 0 (concurrency {', '.join(map(str, z['concurrencies']))}) "
                      f"the speculative server measured {lo:.2f}-{hi:.2f}x the plain one, below it beyond the margin at "
                      f"{', '.join(map(str, z['slower_than_plain']))}: on this engine D = 0 in the schedule is not the "
                      "plain server (what inside the engine pays it is not traced here), a cost the step model prices "
                      "at D > 0 only. Where those concurrencies matter, serve the plain server there (route by "
                      "load) or compare the fixed D over the load you expect."]
    return lines


def tune_plot(r: dict, path: Path) -> bool:
    """Two panels: predicted vs measured server speedup per cell (calibration cells apart), and the speedup against
    concurrency per D (measured points, predicted lines)."""
    cells = [c for c in r["cells"] if c["measured"]]
    if not cells:
        return False
    from trtllm_spec.report.plots import pyplot, save

    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    for cal, mark in ((False, "o"), (True, "s")):
        pts = [c for c in cells if c["calibration"] == cal and c["draft_len"]]
        a.scatter([c["speedup"] for c in pts], [c["predicted_speedup"] for c in pts], marker=mark,
                  label="calibration" if cal else "held out")
    lo = min(min(c["speedup"], c["predicted_speedup"]) for c in cells) * 0.9
    hi = max(max(c["speedup"], c["predicted_speedup"]) for c in cells) * 1.1
    a.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    a.set_xlabel("measured server speedup")
    a.set_ylabel("predicted")
    a.legend()
    a.set_title("per cell")
    ds = sorted({c["draft_len"] for c in r["cells"] if c["draft_len"]})
    for d in ds:
        row = sorted((c for c in r["cells"] if c["draft_len"] == d), key=lambda c: c["concurrency"])
        line = b.plot([c["concurrency"] for c in row], [c["predicted_speedup"] for c in row], lw=1, label=f"D={d}")
        got = [c for c in row if c["measured"]]
        b.scatter([c["concurrency"] for c in got], [c["speedup"] for c in got], color=line[0].get_color(), s=14)
    sched = r["schedule"]["measured"]
    if sched:
        b.scatter([x["concurrency"] for x in sched], [x["speedup"] for x in sched], marker="*", s=90, color="black",
                  label="schedule")
    b.axhline(1.0, color="grey", lw=0.8)
    b.set_xscale("log", base=2)
    b.set_xlabel("concurrency")
    b.set_ylabel("server speedup over D = 0")
    b.legend(fontsize=7)
    b.set_title("predicted (lines) and measured (points)")
    fig.suptitle(f"{r['settings']['drafter_type']}: {r.get('engine', '')}", fontsize=9)
    save(fig, path)
    return True
