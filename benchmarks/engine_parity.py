"""Engine parity: each trained drafter measured by our reference decoder and by llama.cpp's own speculative
decoding on the same prompts (``trtllm-spec measure --engine llamacpp``, comparison on), per category, with the
machine. A drafter type llama.cpp cannot run is listed with the reason the descriptor gives.

    .venv/bin/python benchmarks/engine_parity.py --drafter eagle3=out/smollm2-135m-eagle3-cpu/train/drafter \\
        [--drafter dflash=DIR] [--draft-len 3] [--num-prompts 3] [--max-new-tokens 64] [--out DIR]

Each drafter comes from its CPU recipe (``trtllm-spec train recipes/smollm2-135m-<type>-cpu.yaml``). Needs
``trtllm-spec assets fetch smollm2-135m prompts``; builds llama.cpp on first use. Results:
benchmarks/engine_parity.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"{cpu}, {os.cpu_count()} cores, {platform.platform(terse=True)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", action="append", required=True, metavar="TYPE=DIR")
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=3, help="prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--categories", default=None)
    ap.add_argument("--out", type=Path, default=None, help="keep each measurement folder here")
    args = ap.parse_args()

    from trtllm_spec.errors import TrtllmSpecError
    from trtllm_spec.stages.llamacpp import run_measure_llamacpp

    print(f"machine: {machine()}")
    print(f"command: {' '.join(sys.argv)}")
    results = []
    for spec in args.drafter:
        kind, _, folder = spec.partition("=")
        t0 = time.perf_counter()
        try:
            prof = run_measure_llamacpp(
                "smollm2-135m", folder, args.draft_len, out=args.out / kind if args.out else None, force=True,
                suite="speed-lite", categories=args.categories.split(",") if args.categories else None,
                num_prompts=args.num_prompts, max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0,
                dtype="fp32", device="cpu", progress=lambda m: print(f"  {m}", file=sys.stderr))
        except TrtllmSpecError as e:
            print(f"\n### {kind}: not run by llama.cpp\n\n{e}\n")
            results.append({"type": kind, "error": str(e)})
            continue
        c = prof["comparison"]
        print(f"\n### {kind} ({folder}), D={args.draft_len}, {time.perf_counter() - t0:.0f} s, "
              f"{prof['settings']['llamacpp']['version']}, spec type {prof['settings']['llamacpp']['spec_type']}\n")
        print("| category | prompts | AL ours | AL llama.cpp | llama.cpp / ours | = llama.cpp greedy | = our greedy |")
        print("|---|---|---|---|---|---|---|")
        for name, r in [*sorted(c["categories"].items()), ("overall", c["overall"])]:
            print(f"| {name} | {r['num_prompts']} | {r['acceptance_length_reference']:.3f} | "
                  f"{r['acceptance_length_llamacpp']:.3f} | {1 + r['relative_difference']:.3f} | "
                  f"{r['identical_to_llamacpp_target_greedy']}/{r['num_prompts']} | "
                  f"{r['identical_to_reference_target_greedy']}/{r['num_prompts']} |")
        results.append({"type": kind, "folder": folder, "comparison": {k: c[k] for k in ("overall", "categories")},
                        "llamacpp": prof["settings"]["llamacpp"]["version"]})
    print("\n" + json.dumps({"machine": machine(), "results": results}, indent=1)[:4000], file=sys.stderr)


if __name__ == "__main__":
    main()
