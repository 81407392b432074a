"""SmolLM2-135M on this CPU: our decoder (target-only, n-gram, EAGLE-3) against Hugging Face transformers
(greedy, prompt-lookup decoding), same prompts, same max_new_tokens, outputs checked; and the planner's
prediction (probed CPU + measured acceptance) against the measured speedup, per category.

Run:  .venv/bin/python benchmarks/ecosystem.py --eagle out/<recipe>/drafter [--num-prompts 3] [--max-new-tokens 64]
Prints markdown; --json FILE also writes the raw numbers. Needs 'trtllm-spec assets fetch smollm2-135m prompts'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch


def _hf_generate(model, ids: list[int], max_new: int, eos: int, lookup: int | None) -> list[int]:
    inp = torch.tensor([ids])
    kw = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    with torch.inference_mode():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=max_new, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos, **kw)
    return out[0, len(ids):].tolist()


def _configs(ours, hf, eagle, args, eos: int = 2) -> dict:
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.drafters.ngram import NGramDrafter
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


def run(args) -> dict:
    from transformers import AutoModelForCausalLM

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.data.suite import build_suite
    from trtllm_spec.runtime.drafters.eagle3 import Eagle3Drafter
    from trtllm_spec.runtime.llama import LlamaModel

    target_dir = fetch_model("smollm2-135m")
    tok = load_tokenizer(target_dir)
    items = build_suite(num_prompts=args.num_prompts)
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
                rows.append({"dtype": dtype_name, "category": cat, "config": name, "seconds": dt_s,
                             "tokens": len(toks), "al": stats.acceptance_length() if stats else None,
                             "draft_s": stats.draft_s if stats else None, "verify_s": stats.verify_s if stats else None,
                             "iterations": stats.iterations if stats else None})
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
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eagle", type=Path, help="an exported EAGLE-3 drafter folder for SmolLM2-135M")
    ap.add_argument("--eagle-d", type=int, default=3)
    ap.add_argument("--ngram-d", type=int, default=5)
    ap.add_argument("--num-prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    data = run(args)
    if args.json:
        args.json.write_text(json.dumps(data, indent=2, default=str))
    print(summarize(data))


if __name__ == "__main__":
    main()
