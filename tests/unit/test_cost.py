import pytest

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.drafters.ngram.config import NGramDrafter
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.planner.cost import (
    Parallelism,
    Precision,
    attention_time_s,
    experts_touched,
    forward_time,
    gemm_time_s,
    overlapped,
    padded_rows,
    sampling_time_s,
    wave_efficiency,
)
from trtllm_spec.planner.search import CostContext, Workload, draft_step, max_feasible_batch, target_step

H100 = load_hardware("h100")
LLAMA8 = resolve_shape("llama-3.1-8b-instruct")


def ctx(shape=LLAMA8, hw=H100, par=Parallelism(), prec=Precision(), isl=1024, osl=512):
    return CostContext(shape, hw, par, prec, Workload((1, 8, 64), isl, osl))


def test_gemm_small_m_is_weight_stream_plus_work():
    """Catalogue GPUs: t = max(mem, comp) + (1 - overlap) min(mem, comp); default overlap 0 (fitted): the sum."""
    p = 4096 * 4096
    mem = p * 2 / H100.achievable_mem_bytes_per_s
    flops = H100.gemm_flops_per_s("bf16", 1)
    # M = 1 computes 8 rows (the MMA's narrow side): mem + 2 * 8 * P / F
    assert gemm_time_s(H100, p, 1, Precision()) == pytest.approx(mem + 2 * 8 * p / flops, rel=1e-9)
    assert gemm_time_s(H100, p, 5, Precision()) == gemm_time_s(H100, p, 8, Precision())  # same padded rows
    roof = H100.model_copy(update={"efficiency": H100.efficiency.model_copy(update={"gemm_overlap": 1.0})})
    assert gemm_time_s(roof, p, 1, Precision()) == pytest.approx(mem, rel=1e-9)  # overlap 1: the old roofline
    big = gemm_time_s(roof, p, 8192, Precision())
    assert big == pytest.approx(2 * 8192 * p / flops, rel=0.01)  # compute-bound


def test_wave_quantisation():
    # 132 SMs, 128 x 128 tiles: 1 x 14336/128 = 112 CTAs fit one wave (split-K fills it): 1.0
    assert wave_efficiency(64, 14336, 132, 128, 128) == 1.0
    # 2 x 112 = 224 CTAs: two waves of 132, the second 92/132 full: 224 / 264
    assert wave_efficiency(256, 14336, 132, 128, 128) == pytest.approx(224 / 264)
    assert wave_efficiency(256, 14336, 0, 128, 128) == 1.0  # no SM count (probed CPU): no quantisation
    assert padded_rows(1, 8) == 8 and padded_rows(9, 8) == 16 and padded_rows(16, 8) == 16


def test_overlapped_and_sampling():
    assert overlapped(3.0, 1.0, 1.0) == 3.0 and overlapped(3.0, 1.0, 0.0) == 4.0
    assert overlapped(1.0, 3.0, 0.5) == 3.5
    # 4 rows x 128256 vocab of fp32 logits read once: 2 MB / achievable bandwidth
    assert sampling_time_s(H100, 4, 128256) == pytest.approx(4 * 128256 * 4 / H100.achievable_mem_bytes_per_s)


def test_verification_is_not_free_below_the_ridge():
    """Issue 17: the D=3 verification of 4 tokens per sequence cost nothing extra below the roofline ridge; now
    each verified token adds ~2 P / F (vLLM's fitted Llama-3.1-8B H100 step: +21 us per batched token)."""
    c = ctx(isl=512, osl=512)
    per_token = (target_step(c, 64, 3).gemm_s - target_step(c, 64, 0).gemm_s) / (64 * 3)
    assert 15e-6 < per_token < 30e-6


def test_speedup_falls_with_batch():
    """The sweep of issue 17 (Llama-3.1-8B + EAGLE-3 on H100, ISL = OSL = 512): D=3 speedup falls from batch 1 on."""
    from trtllm_spec.planner.limits import speedup_at
    from trtllm_spec.planner.plan import PlanRequest, mechanism_plan

    c = ctx(isl=512, osl=512)
    req = PlanRequest(mechanisms=MECHANISMS, target=LLAMA8, hardware=H100, drafter=Eagle3Drafter(draft_vocab_size=32000),
                      workload=c.workload)
    mp = mechanism_plan(req, "eagle3", req.drafter, None)
    s = [speedup_at(c, mp, b, 3) for b in (1, 2, 8, 32, 64, 128)]
    assert all(b <= a * 1.005 for a, b in zip(s, s[1:], strict=False)), s  # never rises (SGLang: 1.81x, 1.82x)
    assert s[2] < s[0] * 0.97 and s[-1] < s[0] * 0.8, s


def test_experts_touched():
    assert experts_touched(256, 8, 1) == pytest.approx(8)
    assert experts_touched(256, 8, 2) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 2))
    assert experts_touched(8, 2, 10_000) == pytest.approx(8)


def test_attention_steps_at_tile_boundary():
    ds = resolve_shape("llama-3.3-70b-instruct")  # G = 8 at tp 1
    times = [attention_time_s(ds, H100, Precision(), Parallelism(), 256, 1 + d, 32768) for d in range(0, 20)]
    assert times[15] == pytest.approx(times[0], rel=1e-9) or times[15] <= times[16]
    # G (1 + D) = 8 * 17 = 136 > 128 at D = 16: a second tile
    assert times[16] > times[15] * 1.2


def test_step_time_monotone_in_d_and_batch():
    c = ctx()
    for b in (1, 8, 64):
        prev = 0.0
        for d in range(0, 9):
            t = target_step(c, b, d).total_s
            assert t >= prev
            prev = t
    assert target_step(c, 64, 3).total_s > target_step(c, 8, 3).total_s


def test_llama8b_h100_bs1_matches_published_step():
    # vLLM V1 on 1x H100, Llama-3.1-8B-Instruct, no speculation: 7.07 ms TPOT (vllm-project/vllm #20780); the
    # default (TensorRT-LLM-fitted) overheads: within 10%; SGLang's 6.32 ms (158.34 tok/s) within 20%.
    t = target_step(ctx(isl=256, osl=256), 1, 0).total_s
    assert t == pytest.approx(7.07e-3, rel=0.10)
    assert t == pytest.approx(6.32e-3, rel=0.20)


def test_tp_splits_weights_and_adds_allreduce():
    seventy = resolve_shape("llama-3.3-70b-instruct")
    h200 = load_hardware("h200")
    one = forward_time(seventy, h200, Precision(), Parallelism(tp=1), 1, 1, 1024)
    four = forward_time(seventy, h200, Precision(), Parallelism(tp=4), 1, 1, 1024)
    assert four.gemm_s == pytest.approx(one.gemm_s / 4, rel=0.05)
    assert four.comm_s > 0 and one.comm_s == 0


def test_draft_costs():
    c = ctx()
    e3 = MECHANISMS["eagle3"].cost(LLAMA8, Eagle3Drafter(draft_vocab_size=32000))
    t1, t4 = draft_step(c, e3, 1, 1).total_s, draft_step(c, e3, 1, 4).total_s
    assert t4 == pytest.approx(4 * t1, rel=0.1)  # sequential drafting ~ linear in D
    ng = MECHANISMS["ngram"].cost(LLAMA8, NGramDrafter())
    assert draft_step(c, ng, 1, 5).total_s == pytest.approx(H100.overheads.draft_step_s)
    assert draft_step(c, e3, 1, 0).total_s == 0.0


def test_kv_capacity():
    c = ctx()
    b0 = max_feasible_batch(c, None, 0)
    # (80 GB - 3.76 GB reserve - 16.06 GB weights) * 0.9 / (1536 tokens * 128 KiB)
    assert b0 == pytest.approx((80e9 - 3.5 * 2**30 - LLAMA8.total_params() * 2) * 0.9 / (1536 * 131072), abs=1)
    e3 = MECHANISMS["eagle3"].cost(LLAMA8, Eagle3Drafter(draft_vocab_size=32000))
    assert max_feasible_batch(c, e3, 8) < b0
    assert max_feasible_batch(ctx(shape=resolve_shape("llama-3.3-70b-instruct")), None, 0) == 0  # 141 GB of weights


def test_overlap_scheduler_hides_host_time_on_plain_decoding_only():
    hw = H100.model_copy(update={"overheads": H100.overheads.model_copy(update={"overlap_hides": 0.5})})
    plain = target_step(ctx(hw=hw), 8, 0).overhead_s - target_step(ctx(), 8, 0).overhead_s
    spec = target_step(ctx(hw=hw), 8, 3).overhead_s - target_step(ctx(), 8, 3).overhead_s
    assert plain == pytest.approx(-0.5 * H100.overheads.iteration_s) and spec == pytest.approx(0.0)
    both = hw.model_copy(update={"overheads": hw.overheads.model_copy(update={"overlap_with_speculation": True})})
    # running with speculation, the overlap scheduler also hides the speculative iteration's own host work
    ov = H100.overheads
    assert target_step(ctx(hw=both), 8, 3).overhead_s == pytest.approx(
        target_step(ctx(), 8, 3).overhead_s - 0.5 * (ov.iteration_s + ov.spec_iteration_s))


def test_chain_drafter_pays_a_catch_up_pass_that_grows_with_batch():
    from trtllm_spec.planner.plan import PlanRequest, mechanism_plan

    req = PlanRequest(mechanisms=MECHANISMS, target=LLAMA8, hardware=H100, drafter=Eagle3Drafter(draft_vocab_size=32000),
                      workload=ctx().workload)
    cost = mechanism_plan(req, "eagle3", req.drafter, None).cost
    c = ctx()
    assert draft_step(c, cost, 64, 3).gemm_s > draft_step(c, cost, 1, 3).gemm_s * 1.1  # drafting grows with B
    # D = 1: the one draft pass runs over the 2 settled tokens of each sequence (M = 16 rows at B = 8), not 1
    layers = next(p for p in cost.passes if p.per_token)
    two = forward_time(layers.shape, H100, Precision(), Parallelism(), 8, 2, c.workload.mean_context,
                       layers.lm_head_vocab, layers.extra_params)
    fc = next(p for p in cost.passes if p.shape is None)
    assert draft_step(c, cost, 8, 1).gemm_s == pytest.approx(two.gemm_s + gemm_time_s(H100, fc.extra_params, 16,
                                                                                       Precision()))


def test_gemm_time_never_falls_as_m_grows():
    """A partly filled last M-tile adds CTAs without adding a wave; pricing rows over the wave efficiency alone made
    M = 650 cheaper than M = 585 on a B200 (qwen3-8b, batch 65: D = 9 verified faster than D = 8)."""
    from trtllm_spec.planner.cost import layer_linear_time_s

    shape = resolve_shape("qwen3-8b")
    for gpu in ("b200", "h100", "l40s"):
        hw = load_hardware(gpu)
        times = [layer_linear_time_s(shape, hw, Precision(), Parallelism(), m) for m in range(1, 1300)]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:], strict=False)), gpu
