"""Regeneration throughput of the reference decoder, side by side in one run: batched greedy decoding of real
training prompts with and without dropping finished rows from the batch, per batch size (same prompts, same
outputs, asserted). Regeneration is the first cost of every drafter training run on CPU.

    .venv/bin/python benchmarks/decisions/regen_speed.py --prompts 64 --batch-sizes 16 32 --max-new-tokens 160

Needs `trtllm-spec assets fetch smollm2-135m prompts`. Results: benchmarks/decisions/regen_speed.md.
"""

from __future__ import annotations

import argparse
import platform
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--max-prompt-tokens", type=int, default=128)
    ap.add_argument("--capture", type=int, nargs="*", default=[1, 14, 26],
                    help="target layers whose hidden states are kept (offline EAGLE-3 features); none: plain decoding")
    args = ap.parse_args()

    import torch

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.suite import training_items
    from trtllm_spec.runtime.generate import generate_batch
    from trtllm_spec.runtime.llama import LlamaModel

    d = model_dir("smollm2-135m")
    model = LlamaModel.from_pretrained(d, dtype=torch.bfloat16)
    tok = load_tokenizer(d)
    eos = tuple(model.cfg.eos_token_ids)
    items = training_items(None, 4 * args.prompts, 0, max_prompt_chars=4 * args.max_prompt_tokens)
    prompts = [p for p in (prompt_ids(tok, it.messages[:1]) for it in items) if len(p) <= args.max_prompt_tokens]
    prompts = sorted(prompts[:args.prompts], key=len)  # as regeneration does: little padding per batch
    capture = tuple(args.capture)
    print(f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, bf16; "
          f"{len(prompts)} prompts, max_new_tokens {args.max_new_tokens}, capture {capture or 'none'}")
    print("| batch | keep finished rows tok/s | drop finished rows tok/s | ratio | tokens | identical |")
    print("|---|---|---|---|---|---|")
    for b in args.batch_sizes:
        res = {}
        for drop in (False, True):
            t, outs = time.perf_counter(), []
            for i in range(0, len(prompts), b):
                feats: list[dict] = []
                outs += generate_batch(model, prompts[i:i + b], args.max_new_tokens, eos, capture=capture,
                                       features=feats if capture else None, drop_finished=drop)
            res[drop] = (outs, time.perf_counter() - t)
        n = sum(len(o) for o in res[True][0])
        same = res[True][0] == res[False][0]
        print(f"| {b} | {n / res[False][1]:.1f} | {n / res[True][1]:.1f} | {res[False][1] / res[True][1]:.2f}x "
              f"| {n} | {same} |", flush=True)
        assert same, "dropping finished rows changed the output"


if __name__ == "__main__":
    main()
