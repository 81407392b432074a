"""SmolLM2-135M on this CPU: our decoder (target-only, n-gram, EAGLE-3) against Hugging Face transformers
(greedy, prompt-lookup decoding), same prompts, same max_new_tokens, outputs checked; and the planner's
prediction (probed CPU + measured acceptance) against the measured speedup, per category.

Run:  .venv/bin/python benchmarks/ecosystem.py --eagle out/<recipe>/drafter [--num-prompts 3] [--max-new-tokens 64] \
          [--hw probe.json] [--from-json benchmarks/ecosystem-run.json]
Prints markdown; --json FILE also writes the raw numbers (benchmarks/ecosystem-run.json is the recorded run's), and
the run writes its record benchmarks/ecosystem.json (benchmarks/_record.py; --record elsewhere, --no-record none),
from which README's table is rendered. The planner check probes this CPU
('trtllm-spec hw probe', or --hw FILE from an earlier probe), feeds it each category's measured AL at the
benchmarked D, and compares its predicted speedup and pick (none / n-gram / EAGLE-3) with the measured ones. Needs 'trtllm-spec assets fetch smollm2-135m prompts'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
from _record import BENCHMARKS, portable_arg, read_record, write_record


def _hf_generate(model, ids: list[int], max_new: int, eos: int, lookup: int | None) -> list[int]:
    inp = torch.tensor([ids])
    kw = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    with torch.inference_mode():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=max_new, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos, **kw)
    return out[0, len(ids):].tolist()


def _configs(ours, hf, eagle, args, eos: int = 2) -> dict:
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate

    n = args.max_new_tokens
    configs = {
        "ours-greedy": lambda ids: (generate(ours, ids, n, (eos,)), None),
        "ours-ngram": lambda ids: speculative_generate(ours, NGramDrafter(3), ids, n, args.ngram_d, eos_ids=(eos,)),
        "hf-greedy": lambda ids: (_hf_generate(hf, ids, n, eos, None), None),
        "hf-prompt-lookup": lambda ids: (_hf_generate(hf, ids, n, eos, args.ngram_d), None),
    }
    if eagle is not None:
        configs["ours-eagle3"] = lambda ids: speculative_generate(ours, eagle, ids, n, args.eagle_d, eos_ids=(eos,))
    return configs


def _prefill_s(model, ids: list[int]) -> float:
    """Time of the prompt forward that target-only decoding starts with (what the speculative runs time as
    their prefill_s), so that the decode phases can be compared on their own."""
    cache = model.new_cache(1, len(ids) + 1)
    t0 = time.perf_counter()
    model.forward(torch.tensor([ids]), torch.tensor([0]), cache, logits="last")
    return time.perf_counter() - t0


def run(args) -> dict:
    from transformers import AutoModelForCausalLM

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.data.suite import build_suite
    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.llama import LlamaModel

    target_dir = fetch_model("smollm2-135m")
    tok = load_tokenizer(target_dir)
    items = build_suite(categories=args.categories, num_prompts=args.num_prompts)
    prompts = [(it.category, prompt_ids(tok, it.messages)) for it in items]
    rows: list[dict] = []
    for dtype_name in args.dtypes:
        dt = torch.bfloat16 if dtype_name == "bf16" else torch.float32
        ours = LlamaModel.from_pretrained(target_dir, dtype=dt)
        hf = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=dt).eval()
        configs = _configs(ours, hf, Eagle3Drafter(args.eagle, ours) if args.eagle else None, args)
        for cat, ids in prompts:
            configs["ours-greedy"](ids[:8])  # warm-up
            outs = {}
            for name, fn in configs.items():
                t0 = time.perf_counter()
                toks, stats = fn(ids)
                dt_s = time.perf_counter() - t0
                outs[name] = toks
                prefill = stats.prefill_s if stats else (_prefill_s(ours, ids) if name == "ours-greedy" else None)
                rows.append({"dtype": dtype_name, "category": cat, "config": name, "seconds": dt_s,
                             "prompt_tokens": len(ids), "prefill_s": prefill,
                             "tokens": len(toks), "al": stats.acceptance_length() if stats else None,
                             "draft_s": stats.draft_s if stats else None, "verify_s": stats.verify_s if stats else None,
                             "iterations": stats.iterations if stats else None,
                             "proposed": sum(stats.proposed) if stats else None,
                             "proposed_per_iteration": list(stats.proposed) if stats else None})
            ref_ours, ref_hf = outs["ours-greedy"], outs["hf-greedy"]
            for r in rows[-len(configs):]:
                ref = ref_hf if r["config"].startswith("hf") else ref_ours
                r["identical"] = outs[r["config"]] == ref
                r["same_as_hf_greedy"] = outs[r["config"]] == ref_hf
    return {"rows": rows, "settings": vars(args)}


def summarize(data: dict) -> str:
    rows = data["rows"]
    by = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for r in rows:
        acc = by[(r["dtype"], r["config"])][r["category"]]
        acc[0] += r["seconds"]
        acc[1] += r["tokens"]
    lines = []
    for dtype in sorted({r["dtype"] for r in rows}):
        cats = sorted({r["category"] for r in rows})
        lines += [f"### {dtype}", "", "| config | " + " | ".join(cats) + " | overall | identical to its greedy |",
                  "|---|" + "---|" * (len(cats) + 2)]
        for cfg in ("ours-greedy", "ours-ngram", "ours-eagle3", "hf-greedy", "hf-prompt-lookup"):
            if (dtype, cfg) not in by:
                continue
            base = by[(dtype, "hf-greedy" if cfg.startswith("hf") else "ours-greedy")]
            cells = []
            tot_t = tot_b = 0.0
            for c in cats:
                s, n = by[(dtype, cfg)][c]
                bs, bn = base[c]
                cells.append(f"{(n / s) / (bn / bs):.2f}x ({n / s:.0f} t/s)")
                tot_t, tot_b = tot_t + s, tot_b + bs
            n_all = sum(v[1] for v in by[(dtype, cfg)].values())
            nb_all = sum(v[1] for v in base.values())
            ident = [r["identical"] for r in rows if r["dtype"] == dtype and r["config"] == cfg]
            lines.append(f"| {cfg} | " + " | ".join(cells) + f" | {(n_all / tot_t) / (nb_all / tot_b):.2f}x | "
                         f"{sum(ident)}/{len(ident)} |")
        eag = [r for r in rows if r["dtype"] == dtype and r["config"] in ("ours-eagle3", "ours-ngram") and r["iterations"]]
        for cfg in ("ours-ngram", "ours-eagle3"):
            rs = [r for r in eag if r["config"] == cfg]
            if rs:
                per_step = statistics.mean(r["draft_s"] / max(1, r["iterations"]) for r in rs) * 1e3
                verify = statistics.mean(r["verify_s"] / max(1, r["iterations"]) for r in rs) * 1e3
                al = statistics.mean(r["al"] for r in rs)
                lines.append(f"\n{cfg}: AL {al:.2f}; per iteration {per_step:.2f} ms drafting, {verify:.2f} ms verifying")
        lines += ["", same_output_line(rows, dtype, cats), ""]
    return "\n".join(lines)


def same_output_cells(rows: list[dict], dtype: str, cats: list[str]) -> list[tuple[str, float, float, int] | None]:
    """Our n-gram vs transformers' prompt lookup in absolute tokens/s over the prompts where both wrote the same
    tokens (both equal transformers' greedy output): the same work, so only the implementations differ. In
    bf16 the two diverge after the first rounding difference and may stop at different lengths, which moves
    end-to-end tokens/s by the prompt's prefill share. One (category, ours, hf, prompts) per category, None where
    no prompt had the same output."""
    cells: list[tuple[str, float, float, int] | None] = []
    for c in cats:
        def sel(cfg: str, c: str = c) -> list[dict]:
            return [r for r in rows if r["dtype"] == dtype and r["category"] == c and r["config"] == cfg]

        pairs = [(a, b) for a, b in zip(sel("ours-ngram"), sel("hf-prompt-lookup"), strict=True)
                 if a["same_as_hf_greedy"] and b["identical"]]
        if not pairs:
            cells.append(None)
            continue
        ours = sum(a["tokens"] for a, _ in pairs) / sum(a["seconds"] for a, _ in pairs)
        hf = sum(b["tokens"] for _, b in pairs) / sum(b["seconds"] for _, b in pairs)
        cells.append((c, ours, hf, len(pairs)))
    return cells


def same_output_line(rows: list[dict], dtype: str, cats: list[str]) -> str:
    cells = [f"{c} -" if x is None else f"{c} {x[1]:.1f} vs {x[2]:.1f} ({x[3]})"
             for c, x in zip(cats, same_output_cells(rows, dtype, cats), strict=True)]
    return ("same-output prompts, ours-ngram vs hf-prompt-lookup t/s (prompts): " + "; ".join(cells))


def overall(data: dict) -> dict[str, dict[str, float]]:
    """Per dtype and config: tokens/s over all prompts against the same library's greedy decoding (the tables'
    'overall' column)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    rows = data["rows"]
    for dtype in sorted({r["dtype"] for r in rows}):
        for cfg in ("ours-ngram", "ours-eagle3", "hf-prompt-lookup"):
            mine = [r for r in rows if r["dtype"] == dtype and r["config"] == cfg]
            base_cfg = "hf-greedy" if cfg.startswith("hf") else "ours-greedy"
            cats = {m["category"] for m in mine}
            base = [r for r in rows if r["dtype"] == dtype and r["config"] == base_cfg and r["category"] in cats]
            if mine and base:
                rate = sum(r["tokens"] for r in mine) / sum(r["seconds"] for r in mine)
                out[dtype][cfg] = round(rate / (sum(r["tokens"] for r in base) / sum(r["seconds"] for r in base)), 2)
    return dict(out)


def readme_rows(result: dict) -> list[dict]:
    """README's rows: the n-gram speedups of both libraries, and the planner check's agreement and error."""
    ov, out = result["overall_speedup"], []
    dtypes = sorted(ov)
    if dtypes and all("ours-ngram" in ov[d] for d in dtypes):
        same = result["same_output_cells"]
        ahead = sum(c["ours"] >= c["hf"] for c in same)
        ours = " / ".join(f"{ov[d]['ours-ngram']:.2f}x" for d in dtypes)
        theirs = " / ".join(f"{ov[d].get('hf-prompt-lookup', 0):.2f}x" for d in dtypes)
        text = (f"n-gram {ours} overall ({' / '.join(dtypes)}), transformers' prompt lookup {theirs}; on the prompts "
                f"where both wrote the same tokens ours is ahead in {ahead} of {len(same)} (dtype, category) cells")
        reread = f" (decoding rows re-read from {result['raw_rows']}, not re-run)" if result.get("reread") else ""
        out.append({"what": "our decoder vs transformers (greedy, prompt lookup, EAGLE-3), " + " + ".join(dtypes)
                    + reread, "result": text, "where": "`benchmarks/ecosystem.md`"})
    pc = result.get("planner_check")
    if pc:
        out.append({"what": "planner (probe at the target's shapes + measured AL) vs measured speedup on this CPU",
                    "result": f"picks the fastest in {pc['picks_measured_fastest']}/{pc['cells']} (dtype, category) "
                              f"cells; median error of the predicted decode speedup {pc['median_abs_error']:.0%} "
                              f"(max {pc['max_abs_error']:.0%})",
                    "where": "`benchmarks/ecosystem.md`"})
    return out


def record_result(data: dict, stats: dict | None, raw: Path | None, reread: bool = False) -> dict:
    rows = data["rows"]
    cats = sorted({r["category"] for r in rows})
    same = [{"dtype": d, "category": x[0], "ours": round(x[1], 2), "hf": round(x[2], 2), "prompts": x[3]}
            for d in sorted({r["dtype"] for r in rows}) for x in same_output_cells(rows, d, cats) if x]
    settings = {k: (portable_arg(v) if isinstance(v, str) else v) for k, v in data["settings"].items()}
    return {"settings": settings, "raw_rows": portable_arg(str(raw)) if raw else None,
            "reread": reread, "overall_speedup": overall(data), "same_output_cells": same, "planner_check": stats}


def planner_check(data: dict, hw_file: Path, eagle: Path | None, stats: dict | None = None) -> str:
    """Per dtype and category: the planner's predicted bs-1 speedup for n-gram and EAGLE-3 at the benchmarked D
    (probed CPU, measured AL) against the measured speedup, and whether it picks the measured-fastest config.

    The planner prices the decode phase (a step of 1 + D tokens, AL tokens per step); the measured runs also
    hold a prefill, which no drafter speeds up and which dominates the long-prompt categories at 64 new
    tokens. So the error is taken against the decode phase alone (each run's time minus its prefill); the
    prefill is the same for every config of a prompt, so the fastest config is the same either way (both
    columns are shown). Our decoder verifies only the drafts it has (an n-gram often has fewer than D; TensorRT-
    LLM pads to D under CUDA graphs, this CPU does not), so a step is priced at each iteration's own width."""
    import tempfile

    import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import make_plan

    args = data["settings"]
    rows = data["rows"]
    isl = round(statistics.mean(r["prompt_tokens"] for r in rows))
    drafters = {"ours-ngram": ({"type": "ngram"}, args["ngram_d"])}
    if eagle is not None:
        ecfg = json.loads((eagle / "config.json").read_text())
        drafters["ours-eagle3"] = ({"type": "eagle3", "num_layers": ecfg.get("num_hidden_layers", 1),
                                    "draft_vocab_size": ecfg.get("draft_vocab_size")}, args["eagle_d"])
    lines = ["| dtype | category | config | AL | measured end-to-end | measured decode | predicted decode | error | "
             "fastest (measured) | planner pick |", "|---|---|---|---|---|---|---|---|---|---|"]
    errors, agree, total = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in sorted({r["dtype"] for r in rows}):
            for cat in sorted({r["category"] for r in rows}):
                sel = [r for r in rows if r["dtype"] == dtype and r["category"] == cat]
                base, base_dec = _rate(sel, "ours-greedy"), _decode_rate(sel, "ours-greedy")
                measured, decode, predicted, als = {"none": 1.0}, {"none": 1.0}, {"none": 1.0}, {}
                for cfg, (drafter, d) in drafters.items():
                    rs = [r for r in sel if r["config"] == cfg]
                    if not rs:
                        continue
                    als[cfg] = sum(r["al"] * r["iterations"] for r in rs) / sum(r["iterations"] for r in rs)
                    measured[cfg] = _rate(sel, cfg) / base
                    decode[cfg] = _decode_rate(sel, cfg) / base_dec
                    acc = Path(tmp) / f"{dtype}-{cat}-{cfg}.json"
                    acc.write_text(json.dumps({"acceptance_length": {str(i): min(als[cfg], i + 1)
                                                                     for i in range(1, d + 1)}}))
                    recipe = recipe_from_dict({
                        "name": "ecosystem-check", "target": {"model": "smollm2-135m", "dtype": dtype},
                        "drafter": drafter, "draft_len": d, "hardware": {"gpu": str(hw_file)},
                        "workload": {"batch_sizes": [1], "isl": isl, "osl": args["max_new_tokens"]},
                        "planner": {"acceptance": str(acc), "max_draft_len": d, "compare_mechanisms": False}})
                    plan = make_plan(plan_inputs(recipe, mechanisms=MECHANISMS).request)
                    step = {c["draft_len"]: c["step_time_s"] for c in plan["candidates"]
                            if c["mechanism"] == drafter["type"] and c["batch_size"] == 1}
                    widths = [k for r in rs for k in r["proposed_per_iteration"]]
                    mean_step = sum(step[k] for k in widths) / len(widths)
                    predicted[cfg] = als[cfg] * step[0] / mean_step
                best_m, best_p = max(measured, key=measured.get), max(predicted, key=predicted.get)
                total += 1
                agree += best_m == best_p
                for cfg in drafters:
                    if cfg not in als:
                        continue
                    err = predicted[cfg] / decode[cfg] - 1
                    errors.append(abs(err))
                    lines.append(f"| {dtype} | {cat} | {cfg} | {als[cfg]:.2f} | {measured[cfg]:.2f}x | {decode[cfg]:.2f}x | "
                                 f"{predicted[cfg]:.2f}x | {err:+.0%} | {best_m} | {best_p} |")
    if stats is not None:
        stats.update(cells=total, picks_measured_fastest=agree, median_abs_error=round(statistics.median(errors), 4),
                     max_abs_error=round(max(errors), 4))
    lines.append(f"\nplanner pick = measured fastest in {agree}/{total} (dtype, category) cells; median |error| of "
                 f"the predicted decode speedup {statistics.median(errors):.0%} (goal <= 15%), max {max(errors):.0%}")
    return "\n".join(lines)


def _decode_rate(rows: list[dict], cfg: str) -> float:
    """Tokens after the first per second of decoding (run time minus prefill)."""
    rs = [r for r in rows if r["config"] == cfg]
    return sum(r["tokens"] - 1 for r in rs) / sum(r["seconds"] - r["prefill_s"] for r in rs)


def _rate(rows: list[dict], cfg: str) -> float:
    rs = [r for r in rows if r["config"] == cfg]
    return sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eagle", type=Path, help="an exported EAGLE-3 drafter folder for SmolLM2-135M")
    ap.add_argument("--eagle-d", type=int, default=3)
    ap.add_argument("--ngram-d", type=int, default=5)
    ap.add_argument("--num-prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--categories", nargs="+", help="speed-lite categories (default: all)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--hw", type=Path, help="a 'trtllm-spec hw probe' file of this machine (default: probe now)")
    ap.add_argument("--no-planner", action="store_true", help="skip the planner check")
    ap.add_argument("--from-json", type=Path, help="re-check the planner against an earlier run's --json file "
                    "(no decoding; --eagle still names the drafter whose config the planner prices)")
    ap.add_argument("--record", type=Path, default=BENCHMARKS / "ecosystem.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    args = ap.parse_args()
    data = read_record(args.from_json)["result"] if args.from_json else run(args)
    if args.json and not args.from_json:
        args.json.write_text(json.dumps(data, indent=2, default=str))
    print(summarize(data), flush=True)
    stats: dict | None = None
    if not args.no_planner:
        hw = args.hw
        if hw is None:
            from trtllm_spec.core.files import write_json_atomic
            from trtllm_spec.core.targets import resolve_shape
            from trtllm_spec.runtime.probe import probe

            # GEMM curves at SmolLM2-135M's own matrix shapes ('hw probe --target smollm2-135m')
            hw = Path("out/ecosystem-cpu-probe.json")
            hw.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(hw, probe(device="cpu", target=resolve_shape("smollm2-135m")).model_dump(mode="json"))
        print("## Planner check (bs 1, probed CPU, measured AL)\n")
        stats = {}
        print(planner_check(data, hw, args.eagle, stats))
    if not args.no_record:
        result = record_result(data, stats, args.from_json or args.json, reread=args.from_json is not None)
        print(f"record: {write_record('ecosystem', result, readme_rows(result), out=args.record)}")


if __name__ == "__main__":
    main()
