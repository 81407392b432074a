"""Time a full plan grid (every mechanism x D in 0..Dmax x batch sizes) without writing files.

Run: .venv/bin/python benchmarks/plan_speed.py
"""

from __future__ import annotations

import statistics
import time

from trtllm_spec.core.recipe import load_recipe
from trtllm_spec.stages.plan import compute_plan

CASES = ["recipes/llama-3.1-8b-eagle3-h100.yaml", "recipes/deepseek-r1-mtp-8xh200.yaml",
         "recipes/qwen3-8b-dflash-b200.yaml", "recipes/gpt-oss-120b-eagle3-b200.yaml"]


def main() -> None:
    print("| recipe | candidates | median s (5 runs) |")
    print("|---|---|---|")
    for path in CASES:
        recipe = load_recipe(path)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            plan, _ = compute_plan(recipe)
            times.append(time.perf_counter() - t0)
        print(f"| {path} | {len(plan.candidates)} | {statistics.median(times):.3f} |")


if __name__ == "__main__":
    main()
