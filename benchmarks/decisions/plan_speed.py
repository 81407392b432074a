"""Time a full plan grid (every mechanism x D in 0..Dmax x batch sizes) without writing files.

Run: .venv/bin/python benchmarks/decisions/plan_speed.py
     .venv/bin/python benchmarks/decisions/plan_speed.py --robustness   # make_plan with and without the robustness table
"""

from __future__ import annotations

import platform
import statistics
import sys
import time

import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
from trtllm_spec.core.recipe_load import load_recipe
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


def robustness_cost() -> None:
    """planner.make_plan with the host-cost robustness table (6 re-evaluations of the recipe's mechanism) beside the
    same call with it stubbed out, side by side."""
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner import plan as planner
    from trtllm_spec.planner.inputs import plan_inputs

    real = planner.robustness
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print("| recipe | without robustness s | with s | ratio |")
    print("|---|---|---|---|")
    for path in CASES:
        req = plan_inputs(load_recipe(path), mechanisms=MECHANISMS).request
        med = {}
        for label, fn in (("with", real), ("without", lambda *a, **k: None)):
            planner.robustness = fn
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                planner.make_plan(req)
                times.append(time.perf_counter() - t0)
            med[label] = statistics.median(times)
        planner.robustness = real
        print(f"| {path} | {med['without']:.3f} | {med['with']:.3f} | {med['with'] / med['without']:.2f}x |")


if __name__ == "__main__":
    robustness_cost() if "--robustness" in sys.argv else main()
