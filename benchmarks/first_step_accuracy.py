"""Where first-step acceptance goes: teacher-forced first-step accuracy of EAGLE-3 exports, side by side in one
run, on (a) their held-out training conversations (assistant positions) and (b) the speed-lite prompts followed
by the target's own greedy replies, per category. Three numbers per cell:

- full: the drafter's proposal (mapped through d2t) equals the target's greedy token (what acceptance needs);
- within: the same, but against the target's best token *inside the draft vocabulary* (the metric training and
  `doctor` report; it forgives tokens the draft vocabulary cannot express);
- coverage: the share of the target's greedy tokens that the draft vocabulary contains (a ceiling on full).

Teacher-forced accuracy is per token; the decoder's conditional rate at position 1 is per attempt, and attempts
fall more often where the drafter is wrong (an accepted run skips positions), so the decoder's rate reads lower.

    .venv/bin/python benchmarks/first_step_accuracy.py DRAFTER_DIR [DRAFTER_DIR ...] --num-prompts 4 --max-new-tokens 64

Needs `trtllm-spec assets fetch smollm2-135m prompts`. Results: benchmarks/drafter_training.md section 6.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path


def score(target, drafter, cells: dict[str, list[int]], ids: list[int], scored: list[int], label: str) -> None:
    from trtllm_spec.drafters.eagle3.doctor import first_step_counts

    c = cells.setdefault(label, [0, 0, 0, 0])
    for i, v in enumerate(first_step_counts(target, drafter, ids, scored)):
        c[i] += v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafters", nargs="+", type=Path, help="exported EAGLE-3 drafter folders")
    ap.add_argument("--num-prompts", type=int, default=4, help="per speed-lite category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()

    import torch

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.suite import build_suite
    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    d = model_dir("smollm2-135m")
    tok = load_tokenizer(d)
    target = LlamaModel.from_pretrained(d, dtype=torch.float32)
    eos = tuple(target.cfg.eos_token_ids)
    items = build_suite(num_prompts=args.num_prompts)
    # the target's own greedy replies in fp32: the reference decoding every speculative run reproduces
    seqs = []
    for it in items:
        p = prompt_ids(tok, it.messages)
        seqs.append((it.category, p, generate(target, p, args.max_new_tokens, eos)))
    print(f"{platform.machine()}, torch {torch.__version__}, fp32 target; {len(items)} speed-lite prompts x "
          f"{args.max_new_tokens} reply tokens")

    for folder in args.drafters:
        drafter = Eagle3Drafter(folder, target)
        cells: dict[str, list[int]] = {}

        held = folder.parent / "heldout_chunks.json"
        if held.is_file():  # written by `trtllm-spec train` next to the drafter; loss_mask[j] gates token j + 1
            for ch in json.loads(held.read_text()):
                score(target, drafter, cells, ch["input_ids"], [0] + ch["loss_mask"][:-1], "held-out (assistant)")
        for cat, p, reply in seqs:
            score(target, drafter, cells, p + reply, [0] * len(p) + [1] * len(reply), cat)
        total = [sum(v[i] for k, v in cells.items() if k != "held-out (assistant)") for i in range(4)]
        cells["speed-lite (all replies)"] = total
        print(f"\n{folder}\n| positions | tokens | full | within | coverage |\n|---|---|---|---|---|")
        for label, (full, within, cov, n) in cells.items():
            print(f"| {label} | {n} | {full / n:.3f} | {within / n:.3f} | {cov / n:.3f} |", flush=True)


if __name__ == "__main__":
    main()
