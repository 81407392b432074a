"""Predictions against published measurements, with honest tolerances. See benchmarks/planner_validation.md.

Source: TensorRT-LLM tech blog 1, "Pushing Latency Boundaries: Optimizing DeepSeek-R1 Performance on NVIDIA
B200 GPUs" (docs/source/blogs/tech_blog/blog1_...md), table "Autoregressive MTP Layers": DeepSeek-R1 FP4,
8x B200 (attention TP8, MoE EP2 x TP4), batch 1, ISL/OSL 1k/2k, one MTP module reused for D draft tokens:
AL 1.92/2.58/2.82/2.99/3.01 and TPS/user speedup 1.78/2.25/2.28/2.21/2.15 for D = 1..5; 111 TPS/user without
MTP (9.0 ms per iteration).

Caveat, stated in the calibration: our per-layer/per-expert overheads were fitted on this same table's step
times (and on Llama-3.1-8B in SGLang), so the speedup check is in-sample for the overheads; what it still
tests is that the model shape (MLA, MoE expert traffic at M = 1 + D, the MTP module cost) reproduces the
*shape* of the curve: the optimum at D = 3-4 and the fall-off beyond.
"""

import pytest

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.drafters.mtp.config import MTPDrafter
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.planner.acceptance import table
from trtllm_spec.planner.cost import Parallelism, Precision
from trtllm_spec.planner.plan import PlanRequest, make_plan
from trtllm_spec.planner.search import Workload

MEASURED_AL = {1: 1.92, 2: 2.58, 3: 2.82, 4: 2.99, 5: 3.01}
MEASURED_SPEEDUP = {1: 1.78, 2: 2.25, 3: 2.28, 4: 2.21, 5: 2.15}
MEASURED_BASE_STEP_S = 1 / 111


@pytest.fixture(scope="module")
def plan():
    req = PlanRequest(
        target=resolve_shape("deepseek-v3"), hardware=load_hardware("b200"), drafter=MTPDrafter(),
        workload=Workload((1,), 1024, 2048), par=Parallelism(tp=8, ep=2), num_gpus=8,
        precision=Precision(weight="nvfp4"), acceptance=table(MEASURED_AL, "blog1", measured=True),
        max_draft_len=5, compare=False, mechanisms=MECHANISMS,
    )
    return make_plan(req)


def test_speedup_vs_draft_len_within_10_percent(plan):
    pred = {c["draft_len"]: c["speedup"] for c in plan["candidates"] if c["draft_len"]}
    for d, s in MEASURED_SPEEDUP.items():
        assert pred[d] == pytest.approx(s, rel=0.10), f"D={d}"


def test_best_d_is_in_the_measured_plateau(plan):
    # measured best: D=3 (2.28x), D=2 and D=4 within 3%: the planner must land in that plateau
    assert plan["recommendation"]["max_draft_len"] in (2, 3, 4)


def test_base_step_time_within_15_percent(plan):
    base = next(c for c in plan["candidates"] if c["draft_len"] == 0)
    assert base["step_time_s"] == pytest.approx(MEASURED_BASE_STEP_S, rel=0.15)


# NVIDIA/TensorRT-LLM PR #5146 (Eagle3 one-model, 8x H200 TP8, concurrency 4, aa_gen_16k_1k, D = 3):
# Llama-3.3-70B BF16 AL 1.83 -> 1.26x tokens/s per user; Llama-4-Maverick FP8 AL 2.90 -> 1.67x.
# Llama-3.3-70B is in the calibration set of benchmarks/planner_validation.py, Maverick in its validation set; the
# planner stays optimistic on both (+21% / +20%: the run disabled the overlap scheduler, 2025 kernels); the
# tolerance says so rather than hiding it.
@pytest.mark.parametrize("target,weights,al,measured", [
    ("llama-3.3-70b-instruct", "bf16", 1.83, 1.26),
    ("llama-4-maverick-17b-128e-instruct", "fp8", 2.90, 1.67),
])
def test_eagle3_h200_tp8_conc4(target, weights, al, measured):
    from trtllm_spec.drafters.eagle3.config import Eagle3Drafter

    req = PlanRequest(
        target=resolve_shape(target), hardware=load_hardware("h200"), drafter=Eagle3Drafter(draft_vocab_size=32000),
        workload=Workload((4,), 16384, 1024), par=Parallelism(tp=8), num_gpus=8, precision=Precision(weight=weights),
        acceptance=table({3: al}, "PR #5146", measured=True), max_draft_len=3, compare=False,
        mechanisms=MECHANISMS,
    )
    pred = next(c["speedup"] for c in make_plan(req)["candidates"] if c["draft_len"] == 3)
    assert -0.10 <= pred / measured - 1 <= 0.30


# ---- the MoE weight term against fused-MoE kernel times (not fitted: a check of experts_touched) -------------
# vllm-project/vllm PR #19049: benchmark_moe.py kernel time of one Qwen3-30B-A3B MoE layer (E=128, top-8,
# N=768, hidden 2048, bf16, TP1) on one A100 PCIe 40GB (1.555 TB/s), default Triton config, by batch M.
A100_PCIE_KERNEL_US = {1: 109.21, 2: 159.81, 4: 268.89, 8: 403.13, 16: 611.19, 24: 730.19, 32: 808.53,
                       48: 885.97, 64: 917.45, 96: 943.14}


def test_moe_term_grows_with_m_as_the_fused_moe_kernel_does():
    """Kernel time minus its M = 1 value is the cost of the extra experts M tokens touch: the model's weight
    stream of E (1 - (1 - k/E)^M) experts follows it within 12% at every M, with nothing per expert beyond the
    stream (Overheads.per_expert_s = 0); what is left, ~55 us, is a fixed per-layer cost (alignment/sort,
    launches), 2-3 of the model's 20 us kernel units per MoE layer (moe_layer_units)."""
    from trtllm_spec.core.hardware import GB, TB, TFLOPS, Hardware
    from trtllm_spec.planner.cost import moe_layer_time_s

    a100 = Hardware(name="a100-pcie-40gb", peak_flops_per_s={"bf16": 312 * TFLOPS}, mem_bytes_per_s=1.555 * TB,
                    mem_bytes=40 * GB, sm_count=108)
    shape = resolve_shape("qwen3-30b-a3b")

    def model_us(m: int) -> float:
        return moe_layer_time_s(shape, a100, Precision(), Parallelism(), m) * 1e6

    for m, t in A100_PCIE_KERNEL_US.items():
        if m > 1:
            grow_measured, grow_model = t - A100_PCIE_KERNEL_US[1], model_us(m) - model_us(1)
            assert grow_model == pytest.approx(grow_measured, rel=0.12), m
    fixed = [t - model_us(m) for m, t in A100_PCIE_KERNEL_US.items()]
    assert all(40 < f < 75 for f in fixed)
