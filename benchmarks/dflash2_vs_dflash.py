"""DFlash2 beside DFlash, both trained here for SmolLM2-135M on the same data, steps and settings (issue 45 item 4):
each head measured by our reference decoder and by llama.cpp's own speculative decoding (``draft-dflash``) on the
same speed-lite prompts, greedy fp32, through ``measure llamacpp`` (comparison on): AL per category on both
engines, outputs against target-only greedy, and the draft cost per step of each head in our decoder (one
``propose(D)`` call, timed alternately on the same contexts in this run).

    .venv/bin/python benchmarks/dflash2_vs_dflash.py --dflash out/dflash-cmp/dflash/drafter \\
        --dflash2 out/dflash-cmp/dflash2/drafter [--draft-len 3] [--num-prompts 2]

The heads come from ``trtllm-spec train recipes/smollm2-135m-<dflash|dflash2>-cpu.yaml`` with the same ``--set``
overrides (``benchmarks/dflash2_vs_dflash.md`` has the command); each head's training record
(``trtllm_spec_drafter.json``) is read back so the record shows that the budgets match. The record:
``benchmarks/dflash2_vs_dflash.json`` (``--no-record``: none); the reading: ``benchmarks/dflash2_vs_dflash.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from _record import write_record
from engine_parity import comparison_table, machine, measure_greedy

TRAINING_KEYS = ("conversations", "train_chunks", "steps", "tokens", "train_seconds", "heldout_acc",
                 "trainable_params_per_rank", "placement")


def training(head: Path) -> dict:
    meta = json.loads((head / "trtllm_spec_drafter.json").read_text())
    t = meta.get("training") or {}
    return {"type": meta.get("type"), **{k: t.get(k) for k in TRAINING_KEYS}}


def draft_costs(heads: dict[str, Path], draft_len: int, contexts: int = 8, repeats: int = 5) -> dict[str, float]:
    """Median seconds per ``propose(draft_len)`` of each head's runtime on the same contexts (speed-lite prompts run
    through the target), the heads timed alternately so machine load falls on both alike."""
    import torch
    from transformers import AutoTokenizer

    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.data.suite import build_suite
    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.llama import LlamaModel

    target_dir = resolve_target("smollm2-135m").path
    target = LlamaModel.from_pretrained(target_dir)
    drafters = {k: load_runtime_drafter(str(p), target, expect=k)[1] for k, p in heads.items()}
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    items = build_suite(num_prompts=1)[:contexts]
    times: dict[str, list[float]] = {k: [] for k in heads}
    with torch.inference_mode():
        for item in items:
            text = tok.apply_chat_template(item.messages, tokenize=False, add_generation_prompt=True)
            ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"][-256:]])
            for _ in range(repeats):
                for kind, drafter in drafters.items():
                    logits, aux, _ = target.forward(ids, torch.tensor([0]), target.new_cache(1, 512),
                                                    capture=drafter.capture, logits="last")
                    drafter.reset(ids[0].tolist(), int(logits[0, -1].argmax()), aux)
                    t0 = time.perf_counter()
                    drafter.propose(draft_len)
                    times[kind].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dflash", type=Path, required=True, help="the DFlash head trained here")
    ap.add_argument("--dflash2", type=Path, required=True, help="the DFlash2 head trained on the same data and budget")
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=2, help="speed-lite prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--work", type=Path, default=Path("out/dflash2-vs-dflash"))
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    print(f"command: {' '.join(sys.argv)}")
    heads = {"dflash": args.dflash, "dflash2": args.dflash2}
    result: dict = {"draft_len": args.draft_len, "num_prompts_per_category": args.num_prompts,
                    "max_new_tokens": args.max_new_tokens, "heads": {}}
    t0 = time.perf_counter()
    for kind, head in heads.items():
        prof = measure_greedy(str(head), args.draft_len, args.work / kind, args.num_prompts, args.max_new_tokens)
        c = prof["comparison"]
        print(f"\n{kind} ({head})")
        print("\n".join(comparison_table(c)))
        result["heads"][kind] = {"head": str(head), "training": training(head),
                                 "llamacpp": prof["settings"]["llamacpp"]["version"],
                                 "spec_type": prof["settings"]["llamacpp"]["spec_type"],
                                 "comparison": {k: c[k] for k in ("overall", "categories", "prompts")}}
    cost = draft_costs(heads, args.draft_len)
    for kind, s in cost.items():
        result["heads"][kind]["draft_seconds_per_step"] = round(s, 5)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    o1, o2 = (result["heads"][k]["comparison"]["overall"] for k in ("dflash", "dflash2"))
    print(f"\ndraft cost per step (ours, propose({args.draft_len}), median): dflash {cost['dflash'] * 1e3:.1f} ms, "
          f"dflash2 {cost['dflash2'] * 1e3:.1f} ms ({cost['dflash2'] / cost['dflash']:.2f}x)")
    print(f"AL ours: dflash {o1['acceptance_length_reference']:.3f}, dflash2 {o2['acceptance_length_reference']:.3f}; "
          f"llama.cpp / ours: dflash {1 + o1['relative_difference']:.3f}, dflash2 {1 + o2['relative_difference']:.3f}")
    readme = [{"what": f"DFlash2 vs DFlash trained here on the same data and steps ({o2['num_prompts']} speed-lite "
                       f"prompts, D = {args.draft_len}, fp32; ours and llama.cpp)",
               "result": f"AL ours {o2['acceptance_length_reference']:.3f} vs {o1['acceptance_length_reference']:.3f}; "
                         f"llama.cpp / ours {1 + o2['relative_difference']:.3f} (DFlash2), "
                         f"{1 + o1['relative_difference']:.3f} (DFlash); draft step {cost['dflash2'] * 1e3:.1f} vs "
                         f"{cost['dflash'] * 1e3:.1f} ms",
               "where": "`benchmarks/dflash2_vs_dflash.md`"}]
    if not args.no_record:
        print(f"record: {write_record('dflash2_vs_dflash', result, readme)}")


if __name__ == "__main__":
    main()
