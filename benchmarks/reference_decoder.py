"""Which engine should run a target in the reference decoder: our Llama-family decoder (runtime/llama.py) vs the
transformers-backed target (runtime/hf_target.py), side by side in one run on the same checkpoint, the same
speed-lite prompts and the same budget: target-only greedy decoding and n-gram speculative decoding, tokens/s,
the ratio, and whether both engines wrote the same tokens. The two engines alternate prompt by prompt, so a
neighbour's load on a shared machine hits both alike.

    .venv/bin/python benchmarks/reference_decoder.py --targets smollm2-135m tiny --prompts 4 --max-new-tokens 64

``smollm2-135m``: the real SmolLM2-135M-Instruct asset (`trtllm-spec assets fetch smollm2-135m prompts`);
``tiny``: a random 4-layer, hidden-64 Llama with SmolLM2's tokenizer and vocabulary (per-forward overhead
dominates there). Any other name is a checkpoint folder. fp32 (measure's default; bf16 is emulated on AVX2).
Results: benchmarks/reference_decoder.md; the run writes its record ``benchmarks/reference_decoder.json``
(``benchmarks/_record.py``; ``--json`` elsewhere, ``--no-record`` none), from which README's table is rendered.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from _record import BENCHMARKS, write_record

CLOCK = time.process_time  # --clock


def tiny_llama(folder: Path, like: Path) -> Path:
    """A random small Llama with ``like``'s tokenizer and vocabulary."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(like))
    cfg.update(dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, intermediate_size=128))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(folder))
    for f in like.iterdir():
        if "token" in f.name or f.name.startswith("chat_template"):
            shutil.copy(f, folder / f.name)
    return folder


def bench(label: str, folder: Path, prompts_text: list, args) -> list[dict]:
    import json

    import torch

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.targets import load_target

    cfg = json.loads((folder / "config.json").read_text())
    tok = load_tokenizer(folder)
    prompts = [prompt_ids(tok, it.messages) for it in prompts_text]
    engines = {e: load_target(folder, cfg, e, torch.float32, "cpu")[1] for e in ("ours", "hf")}
    eos = tuple(engines["ours"].cfg.eos_token_ids)
    for t in engines.values():  # one-off costs (allocations, first kernels) out of the timing
        generate(t, prompts[0][-8:], 4, eos)
        speculative_generate(t, NGramDrafter(), prompts[0][-8:], 4, args.draft_len, eos_ids=eos)
    secs = {(e, m): 0.0 for e in engines for m in ("target", "ngram")}
    toks = {(e, m): 0 for e in engines for m in ("target", "ngram")}
    outs: dict = {(e, m): [] for e in engines for m in ("target", "ngram")}
    prefill = dict.fromkeys(engines, 0.0)
    for i, p in enumerate(prompts):
        order = ("ours", "hf") if i % 2 == 0 else ("hf", "ours")
        for e in order:
            t0 = CLOCK()
            ref = generate(engines[e], p, args.max_new_tokens, eos)
            t1 = CLOCK()
            spec, _ = speculative_generate(engines[e], NGramDrafter(), p, args.max_new_tokens, args.draft_len,
                                           eos_ids=eos)
            t2 = CLOCK()
            c0 = CLOCK()  # the prompt forward alone (the same one starts both runs), on the same clock
            engines[e].forward(torch.tensor([p]), torch.tensor([0]), engines[e].new_cache(1, len(p) + 1),
                               logits="last")
            prefill[e] += CLOCK() - c0
            for m, o, s in (("target", ref, t1 - t0), ("ngram", spec, t2 - t1)):
                secs[e, m] += s
                toks[e, m] += len(o)
                outs[e, m].append(o)
    n_tok = sum(len(p) for p in prompts)
    rows = [{"target": label, "phase": "prefill", "prompt_tokens": n_tok, "ours_tok_s": round(n_tok / prefill["ours"], 1),
             "hf_tok_s": round(n_tok / prefill["hf"], 1), "ratio": round(prefill["hf"] / prefill["ours"], 2)}]
    print(f"| {label} | prefill ({n_tok} prompt tokens) | {n_tok / prefill['ours']:.1f} | {n_tok / prefill['hf']:.1f} | "
          f"{prefill['hf'] / prefill['ours']:.2f}x | | | | |", flush=True)
    for m, mode in (("target", "target only"), ("ngram", f"n-gram D={args.draft_len}")):
        rate = {e: toks[e, m] / (secs[e, m] - prefill[e]) for e in engines}
        e2e = {e: toks[e, m] / secs[e, m] for e in engines}
        same = outs["ours", m] == outs["hf", m]
        lossless = outs["ours", m] == outs["ours", "target"] and outs["hf", m] == outs["hf", "target"]
        print(f"| {label} | {mode}, decode | {rate['ours']:.1f} | {rate['hf']:.1f} | {rate['ours'] / rate['hf']:.2f}x "
              f"| {e2e['ours'] / e2e['hf']:.2f}x | {toks['ours', m]} | {same} | {lossless} |", flush=True)
        rows.append({"target": label, "phase": f"{mode}, decode", "ours_tok_s": round(rate["ours"], 1),
                     "hf_tok_s": round(rate["hf"], 1), "ratio": round(rate["ours"] / rate["hf"], 2),
                     "ratio_with_prefill": round(e2e["ours"] / e2e["hf"], 2), "new_tokens": toks["ours", m],
                     "same_tokens": same, "lossless": lossless})
    return rows


def readme_rows(result: dict) -> list[dict]:
    """README's row: ours / transformers per target (prefill, target-only decode; a range where both decodes)."""
    by: dict[str, list[dict]] = {}
    for r in result["rows"]:
        by.setdefault(r["target"], []).append(r)
    parts = []
    for target, rows in by.items():
        pre = next(r["ratio"] for r in rows if r["phase"] == "prefill")
        dec = [r["ratio"] for r in rows if r["phase"] != "prefill"]
        if target == "smollm2-135m":
            parts.append(f"ours {pre:.2f}x prefill, {dec[0]:.2f}x decode on SmolLM2-135M")
        else:
            name = "a tiny Llama" if target == "tiny" else target
            parts.append(f"{min(dec):.1f}-{max(dec):.1f}x on {name}")
    ratios = [r["ratio"] for r in result["rows"]]
    lossless = all(r.get("lossless", True) for r in result["rows"])
    verdict = ("`auto` keeps ours for the Llama family" if min(ratios) >= 1
               else "transformers faster in at least one phase: see the benchmark")
    return [{"what": f"reference decoder: our Llama path vs the transformers target (same checkpoint, prompts, tokens; "
                     f"{'CPU time' if result['clock'] == 'cpu' else 'wall clock'}, {result['threads']} thread"
                     f"{'s' if result['threads'] != 1 else ''})",
             "result": "; ".join(parts) + f": {verdict}" + ("" if lossless else " (NOT lossless: see the benchmark)"),
             "where": "`benchmarks/reference_decoder.md`"}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", nargs="+", default=["smollm2-135m", "tiny"])
    ap.add_argument("--prompts", type=int, default=4, help="speed-lite prompts (from its coding/math categories)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-len", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; with 1, process CPU time measures the work alone even on a shared machine")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: this process's CPU time (robust to neighbours on a shared machine); wall: elapsed")
    ap.add_argument("--json", type=Path, default=BENCHMARKS / "reference_decoder.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter

    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.suite import build_suite

    smol = model_dir("smollm2-135m")
    items = build_suite(categories=["coding", "math"], num_prompts=(args.prompts + 1) // 2)[:args.prompts]
    load = os.getloadavg()
    print(f"{platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, {torch.get_num_threads()} "
          f"threads, torch {torch.__version__}, fp32, {args.clock} clock; {len(items)} prompts, max_new_tokens {args.max_new_tokens}; "
          f"load average at start {load[0]:.1f} (other processes share these cores)")
    print("| target | phase | ours tok/s | transformers tok/s | ours / transformers | same, with prefill | "
          "new tokens | same tokens | lossless |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.targets:
            folder = {"smollm2-135m": smol, "tiny": None}.get(spec, Path(spec))
            if folder is None:
                folder = tiny_llama(Path(tmp) / "tiny", smol)
            rows += bench(spec if spec in ("smollm2-135m", "tiny") else Path(spec).name, folder, items, args)
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    if not args.no_record:
        result = {"clock": args.clock, "threads": args.threads, "dtype": "fp32", "prompts": len(items),
                  "max_new_tokens": args.max_new_tokens, "draft_len": args.draft_len,
                  "load_average": [round(load[0], 1), round(os.getloadavg()[0], 1)], "rows": rows}
        print(f"record: {write_record('reference_decoder', result, readme_rows(result), out=args.json)}")


if __name__ == "__main__":
    main()
