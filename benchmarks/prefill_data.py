"""Cheaper training data for an offline EAGLE-3 head: the target only *reads* extra training prompts (one prefill
pass, no reply), and their hidden states join an existing regeneration. With ``loss_on: all`` every position of
such a prompt teaches the target's next-token distribution, at prefill speed instead of decoding speed.

    .venv/bin/python benchmarks/prefill_data.py <regenerated conversations.jsonl> --out out/prefill --num 1200
    .venv/bin/trtllm-spec train recipes/smollm2-135m-eagle3-cpu.yaml --out out/prefill-train \\
        --set drafter.training.data.path=out/prefill/conversations.jsonl

The new folder holds a copy of the JSONL plus the prefill records (their exact token ids; training's features
step captures the target's hidden states over every record, ``data/features``): the
next prompts of the same training pools (never the regenerated ones, never held-out ids, so held-out accuracy
scores the same conversations), formatted with the chat template and generation prompt, up to ``--max-tokens``.
Findings: benchmarks/drafter_training.md section 5.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="a regenerated conversations.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--num", type=int, default=1200, help="prefill-only prompts to add")
    ap.add_argument("--max-tokens", type=int, default=380, help="longest prompt, in tokens (~4 characters each)")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--eval-fraction", type=float, default=0.05)
    args = ap.parse_args()

    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.data.regenerate import read_done, regenerate
    from trtllm_spec.data.suite import training_items
    from trtllm_spec.train.samples import is_heldout

    args.out.mkdir(parents=True, exist_ok=False)
    dst = args.out / "conversations.jsonl"
    shutil.copyfile(args.data, dst)
    done = read_done(dst)
    have = set(done)
    pool = training_items(None, len(have) + 2 * args.num, 0, max_prompt_chars=4 * args.max_tokens)
    # single-turn only: regeneration keeps the exact token ids for those
    items = [i for i in pool if i.id not in have and not is_heldout(i.id, args.eval_fraction)
             and sum(m["role"] == "user" for m in i.messages) == 1][:args.num]
    target = resolve_target(args.target, Path.cwd()).path
    started = time.perf_counter()
    regenerate(items, target, dst, max_new_tokens=0, batch_size=16,
               progress=lambda n, total, _: print(f"prefill: {n - len(have)}/{total} records", flush=True))
    tokens = sum(len(r["tokens"]) for k, r in read_done(dst).items() if k not in have)
    seconds = time.perf_counter() - started
    print(f"{len(items)} prefill records, {tokens} tokens in {seconds:.0f} s ({tokens / seconds:.0f} tok/s) -> {dst}")


if __name__ == "__main__":
    main()
