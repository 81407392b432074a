"""DFlash2 on two engines here: a DFlash2 head for SmolLM2-135M run by our reference decoder and by llama.cpp's own
speculative decoding (``draft-dflash``; its loader tells DFlash2 by the ``selector_hidden.weight`` tensor) on the
same speed-lite prompts, greedy fp32, through ``measure llamacpp`` (comparison on).

    .venv/bin/python benchmarks/dflash2_parity.py --dflash out/dflash-cpu/drafter [--draft-len 3] [--num-prompts 1]

No DFlash2 head can be trained here (ModelOpt 0.47 has no DFlash2 mode; docs/dflash2.md), so the head is *grown*
from a DFlash head the way the trainers start one (SpecForge: identity convolutions, zero successor codebook), with
two changes so that every DFlash2 part is exercised: the convolution taps and their projections get small random
values (seeded), and so does the successor codebook (the walk's predecessor term is non-zero: a draft depends on
the token chosen before it). Its drafts are therefore not a trained DFlash2's: what this measures is that both
engines read the same z-lab layout (nested fields, bare codebook names) and compute the same drafts from it (AL per
prompt, outputs equal to target-only greedy); acceptance itself stays near DFlash's. The record:
``benchmarks/dflash2_parity.json`` (``--no-record``: none); the table: ``benchmarks/dflash2_parity.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from _record import write_record
from engine_parity import comparison_table, machine, measure_greedy


def grow(dflash: Path, out: Path, *, kernel: int = 2, group: int = 16, rank: int = 32, top_k: int = 16,
         seed: int = 0, scale: float = 0.02) -> Path:
    """A z-lab-format DFlash2 folder from a DFlash export: its tensors, plus per layer two convolutions (identity
    base kernel + N(0, scale) taps, N(0, scale) projections) and a selector (N(0, scale) hidden projection, N(0, 1)
    predecessor and N(0, scale) successor codebooks); block_size, target layers and mask nested in dflash_config."""
    import torch
    from safetensors.torch import load_file, save_file

    cfg = json.loads((dflash / "config.json").read_text())
    w = load_file(str(dflash / "model.safetensors"))
    h, vocab, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, s: float = scale) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * s).to(torch.float32)

    for i in range(layers):
        for conv in ("attention_conv", "mlp_conv"):
            base = rnd(2, kernel, h)
            base[:, 0] += 1.0
            w[f"layers.{i}.{conv}.base_kernel"] = base
            w[f"layers.{i}.{conv}.kernel_projection.weight"] = rnd(2 * kernel * (h // group), h)
    w["candidate_selector.hidden_projection.weight"] = rnd(rank, h)
    w["candidate_selector.predecessor_codebook"] = rnd(vocab, rank, s=1.0)
    w["candidate_selector.successor_codebook"] = rnd(vocab, rank)
    dc = dict(cfg.get("dflash_config") or {})
    dc.setdefault("block_size", cfg.pop("block_size", None))
    dc.update(conv_kernel_size=kernel, conv_group_size=group, selector_rank=rank, selector_top_k=top_k)
    cfg.update(architectures=["DFlash2DraftModel"], dflash_config=dc, torch_dtype="float32")
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.float32).contiguous() for k, v in w.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dflash", type=Path, required=True, help="a DFlash export for SmolLM2-135M to grow from")
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=1, help="speed-lite prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--work", type=Path, default=Path("out/dflash2-parity"))
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    print(f"command: {' '.join(sys.argv)}")
    head = grow(args.dflash, args.work / "drafter")
    t0 = time.perf_counter()
    prof = measure_greedy(str(head), args.draft_len, args.work / "measure", args.num_prompts, args.max_new_tokens)
    c = prof["comparison"]
    print("\n".join(comparison_table(c)))
    same = [p for p in c["prompts"] if p["same_output_both_engines"]]
    equal = sum(p["acceptance_length_llamacpp"] == p["acceptance_length_reference"] for p in same)
    print(f"same AL to 4 decimals on {equal} of {len(same)} prompts with the same output on both engines")
    o = c["overall"]
    result = {"grown_from": str(args.dflash), "draft_len": args.draft_len, "num_prompts_per_category": args.num_prompts,
              "max_new_tokens": args.max_new_tokens, "llamacpp": prof["settings"]["llamacpp"]["version"],
              "spec_type": prof["settings"]["llamacpp"]["spec_type"], "wall_s": round(time.perf_counter() - t0, 1),
              "comparison": {k: c[k] for k in ("overall", "categories", "prompts")},
              "same_al_where_same_output": [equal, len(same)]}
    readme = [{"what": f"DFlash2 (a head grown from a DFlash export, untrained selector) on llama.cpp vs ours "
                       f"({o['num_prompts']} speed-lite prompts, D = {args.draft_len}, fp32)",
               "result": f"AL {o['acceptance_length_llamacpp']:.3f} vs ours {o['acceptance_length_reference']:.3f} "
                         f"({o['relative_difference']:+.1%}); same AL on {equal}/{len(same)} prompts with the same "
                         f"output; llama.cpp = its target-only greedy on "
                         f"{o['identical_to_llamacpp_target_greedy']}/{o['num_prompts']}",
               "where": "`benchmarks/dflash2_parity.md`"}]
    if not args.no_record:
        print(f"record: {write_record('dflash2_parity', result, readme)}")


if __name__ == "__main__":
    main()
