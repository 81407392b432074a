import pytest

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.planner.cost import Parallelism, Precision
from trtllm_spec.planner.guidelines import (
    attention_optimal_draft_len,
    compute_bound_rows,
    tile_aligned_draft_lens,
    tile_steps,
)
from trtllm_spec.planner.search import CostContext, Workload


@pytest.mark.parametrize("g,d", [(4, 31), (8, 15), (16, 7), (2, 63), (3, 41), (128, None), (64, 1)])
def test_attention_optimal(g, d):
    assert attention_optimal_draft_len(g) == d


def test_tile_aligned():
    assert tile_aligned_draft_lens(4, 100) == [31, 63, 95]
    assert tile_aligned_draft_lens(8, 40) == [15, 31]
    assert tile_aligned_draft_lens(3, 100) == []  # 3(1+D) is a multiple of 128 only at D = 127
    assert tile_aligned_draft_lens(16, 16) == [7, 15]


def test_tile_steps():
    # G = 16: 16(1+D) crosses 128 at D = 8 (144 rows)
    assert tile_steps(16, 10) == [8]
    assert tile_steps(4, 8) == []
    assert tile_steps(128, 2) == [1, 2]


def test_compute_bound_rows_matches_ridge_point():
    hw = load_hardware("h100")
    ctx = CostContext(resolve_shape("llama-3.1-8b-instruct"), hw, Parallelism(), Precision(), Workload((1,), 1, 1))
    # bf16: M* = F * 2 bytes / (2 * BW) = 791.2e12 / 3.015e12 ~ 262
    expected = hw.gemm_flops_per_s("bf16", 1000) * 2 / (2 * hw.achievable_mem_bytes_per_s)
    assert compute_bound_rows(ctx) == pytest.approx(expected, rel=0.03)
    ctx8 = CostContext(ctx.target, hw, Parallelism(), Precision(weight="fp8"), Workload((1,), 1, 1))
    assert compute_bound_rows(ctx8) == pytest.approx(expected, rel=0.03)  # fp8: twice the FLOPs, half the bytes
