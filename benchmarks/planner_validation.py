"""Planner predictions vs published speculative-decoding measurements, side by side.

Run:  .venv/bin/python benchmarks/planner_validation.py [--json]
Each point names its source; `calibration` marks the points the default overheads were fitted on (in-sample).
The acceptance length measured by each source is fed in, so what is compared is the cost model: step times and
the speedup they imply at that AL. Results recorded in benchmarks/planner_validation.md.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.recipe import Eagle3Drafter, MTPDrafter
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.planner.acceptance import table
from trtllm_spec.planner.cost import Parallelism, Precision
from trtllm_spec.planner.plan import PlanRequest, make_plan
from trtllm_spec.planner.search import Workload


@dataclass
class Point:
    name: str
    source: str
    framework: str
    target: str
    gpu: str
    drafter: object
    par: Parallelism
    num_gpus: int
    weights: str
    batch: int
    isl: int
    osl: int
    al: dict[int, float]  # measured AL per D
    speedup: dict[int, float]  # measured speedup per D
    base_step_s: float | None = None
    calibration: bool = False
    notes: str = ""
    extra: dict = field(default_factory=dict)


POINTS = [
    Point("DeepSeek-R1 MTP D-sweep", "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1 (table 'Autoregressive MTP "
          "Layers')", "TensorRT-LLM", "deepseek-v3", "b200", MTPDrafter(), Parallelism(tp=8, ep=2), 8, "nvfp4", 1,
          1024, 2048, {1: 1.92, 2: 2.58, 3: 2.82, 4: 2.99, 5: 3.01},
          {1: 1.78, 2: 2.25, 3: 2.28, 4: 2.21, 5: 2.15}, base_step_s=1 / 111, calibration=True),
    Point("Llama-3.3-70B EAGLE-3, conc 4", "NVIDIA/TensorRT-LLM PR #5146 (H200 TP8, conc=4, aa_gen_16k_1k)",
          "TensorRT-LLM", "llama-3.3-70b-instruct", "h200", Eagle3Drafter(draft_vocab_size=32000),
          Parallelism(tp=8), 8, "bf16", 4, 16384, 1024, {3: 1.83}, {3: 1.26}, calibration=True,
          notes="speculative run with disable_overlap_scheduler: true"),
    Point("Llama-4-Maverick EAGLE-3, conc 4", "NVIDIA/TensorRT-LLM PR #5146 (H200 TP8, conc=4)", "TensorRT-LLM",
          "llama-4-maverick-17b-128e-instruct", "h200", Eagle3Drafter(draft_vocab_size=32000), Parallelism(tp=8), 8,
          "fp8", 4, 16384, 1024, {3: 2.90}, {3: 1.67}),
    Point("Llama-3.1-8B EAGLE-3 K-sweep, bs1", "vllm-project/vllm issue #20780 (MT-Bench, GPU likely H100)", "vLLM",
          "llama-3.1-8b-instruct", "h100", Eagle3Drafter(draft_vocab_size=32000), Parallelism(), 1, "bf16", 1, 512,
          256, {2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54},
          {2: 1.64, 3: 1.73, 4: 1.75, 5: 1.71, 6: 1.68, 7: 1.65}, base_step_s=7.07e-3),
    Point("Qwen3-30B-A3B EAGLE-3 chain D=3, bs1", "Tencent/AngelSlim-linked sgl-project/SpecForge issue #339 "
          "(2x H100 TP2, MT-Bench)", "SGLang", "qwen3-30b-a3b", "h100", Eagle3Drafter(draft_vocab_size=32000),
          Parallelism(tp=2), 2, "bf16", 1, 512, 256, {3: 1.86}, {3: 0.72}, base_step_s=1 / 222.47),
    Point("Qwen3-30B-A3B EAGLE-3 chain D=3, bs4", "sgl-project/SpecForge issue #339 (2x H100 TP2)", "SGLang",
          "qwen3-30b-a3b", "h100", Eagle3Drafter(draft_vocab_size=32000), Parallelism(tp=2), 2, "bf16", 4, 512, 256,
          {3: 1.86}, {3: 0.79}),
]


def predict(p: Point) -> dict:
    d_max = max(p.al)
    req = PlanRequest(
        target=resolve_shape(p.target), hardware=load_hardware(p.gpu), drafter=p.drafter,
        workload=Workload((p.batch,), p.isl, p.osl), par=p.par, num_gpus=p.num_gpus,
        precision=Precision(weight=p.weights), acceptance=table(p.al, p.source, measured=True),
        max_draft_len=d_max, compare=False, mechanisms=MECHANISMS,
    )
    plan = make_plan(req)
    by_d = {c["draft_len"]: c for c in plan["candidates"]}
    rows = []
    for d, s in sorted(p.speedup.items()):
        pred = by_d[d]["speedup"]
        rows.append({"draft_len": d, "al": p.al[d], "measured": s, "predicted": round(pred, 3),
                     "error": round(pred / s - 1, 3)})
    best_measured = max(p.speedup, key=p.speedup.get)
    best_predicted = max(p.speedup, key=lambda d: by_d[d]["speedup"])
    out = {"point": p.name, "framework": p.framework, "source": p.source, "calibration": p.calibration,
           "rows": rows, "best_d_measured": best_measured, "best_d_predicted": best_predicted}
    if p.base_step_s:
        out["base_step_ms"] = {"measured": round(p.base_step_s * 1e3, 2),
                               "predicted": round(by_d[0]["step_time_s"] * 1e3, 2)}
    return out


def main() -> None:
    results = [predict(p) for p in POINTS]
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))
        return
    print("| point | framework | in-sample | D | AL | measured | predicted | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        for row in r["rows"]:
            print(f"| {r['point']} | {r['framework']} | {'yes' if r['calibration'] else 'no'} | {row['draft_len']} | "
                  f"{row['al']:.2f} | {row['measured']:.2f}x | {row['predicted']:.2f}x | {row['error']:+.0%} |")
    print()
    for r in results:
        base = r.get("base_step_ms")
        extra = f"; base step {base['predicted']} ms predicted vs {base['measured']} ms measured" if base else ""
        print(f"- {r['point']}: best D measured {r['best_d_measured']}, predicted {r['best_d_predicted']}{extra}")


if __name__ == "__main__":
    main()
