"""What the features step (``data features``) costs next to regeneration, on this machine.

    .venv/bin/python benchmarks/decisions/features_step.py <regenerated conversations.jsonl> --num 64 --dtype fp32

Times the teacher-forced pass (transformers, ``data/features.write_features``) over the first ``--num``
conversations of the file (its exact token ids), prints tokens read per second, and sets it beside this machine's
recorded regeneration rate for the same target and precision (``rates.json``, written by every regeneration):
the seconds the features of one conversation cost against the seconds its reply cost to generate.
Results: benchmarks/decisions/features_step.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--num", type=int, default=64)
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--layers", default="1,14,26")
    args = ap.parse_args()

    import torch

    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.data.budget import _rates_path, rate_key
    from trtllm_spec.data.features import spec_for, write_features
    from trtllm_spec.data.regen_hf import HFEngine
    from trtllm_spec.data.regenerate import read_done

    target = resolve_target(args.target, Path.cwd()).path
    recs = [r for r in read_done(args.data).values() if "tokens" in r][:args.num]
    seqs = {r["id"]: (r["tokens"], r["assistant"]) for r in recs}
    generated = sum(sum(r["assistant"]) for r in recs)
    layers = tuple(int(x) for x in args.layers.split(","))
    engine = HFEngine(target, dtype=args.dtype, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        spec = spec_for(target, args.target, layers, "bf16")
        started = time.perf_counter()
        rep = write_features(seqs, engine, Path(tmp) / "f", spec, batch_size=args.batch_size)
        seconds = time.perf_counter() - started
    cfg = json.loads((target / "config.json").read_text())
    rates = json.loads(_rates_path().read_text()) if _rates_path().is_file() else {}
    regen = {k: v for k, v in rates.items() if k.startswith(rate_key("regen", cfg)) and f"dtype={args.dtype}" in k}
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, cpu capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"features step: {len(seqs)} conversations, {rep.tokens} tokens read in {seconds:.1f} s "
          f"({rep.tokens / seconds:.0f} tok/s, {args.dtype}, batch {args.batch_size}, layers {list(layers)})")
    for k, v in sorted(regen.items()):
        regen_s = generated / v["tokens_per_s"]
        print(f"regeneration of the same {generated} reply tokens at the recorded {v['tokens_per_s']} tok/s ({k}): "
              f"{regen_s:.0f} s; features / regeneration = {seconds / regen_s:.3f}")


if __name__ == "__main__":
    main()
