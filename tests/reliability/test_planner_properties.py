"""Issue 17: over random valid shapes (config.json dicts) and workloads, the planner never raises anything but our
error family (a clean one-line error), and when it returns a plan the plan is self-consistent."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtllm_spec.core.hardware import CATALOGUE, load_hardware
from trtllm_spec.core.recipe import Eagle3Drafter, NGramDrafter
from trtllm_spec.core.shape import shape_from_config
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.errors import TrtllmSpecError
from trtllm_spec.planner.cost import Parallelism, Precision
from trtllm_spec.planner.plan import PlanRequest, make_plan
from trtllm_spec.planner.search import Workload

FAST = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw) -> dict:
    kv = draw(st.integers(1, 16))
    heads = kv * draw(st.integers(1, 16))
    head_dim = draw(st.sampled_from([32, 64, 80, 128, 256]))
    cfg = {"model_type": draw(st.sampled_from(["llama", "qwen3", "mistral"])),
           "num_hidden_layers": draw(st.integers(1, 96)), "hidden_size": heads * head_dim,
           "num_attention_heads": heads, "num_key_value_heads": kv,
           "intermediate_size": draw(st.integers(1, 65536)), "vocab_size": draw(st.integers(1, 300_000)),
           "tie_word_embeddings": draw(st.booleans())}
    if draw(st.booleans()):
        cfg["head_dim"] = draw(st.sampled_from([64, 128]))
    if draw(st.booleans()):
        cfg.update(model_type="qwen3_moe", num_experts=draw(st.sampled_from([8, 64, 128])),
                   num_experts_per_tok=draw(st.sampled_from([1, 2, 8])), moe_intermediate_size=draw(
                       st.integers(64, 4096)))
        cfg["num_experts_per_tok"] = min(cfg["num_experts_per_tok"], cfg["num_experts"])
    return cfg


@FAST
@given(cfg=configs(), gpu=st.sampled_from(sorted(CATALOGUE)), tp=st.sampled_from([1, 2, 8]),
       batches=st.lists(st.integers(1, 4096), min_size=1, max_size=4, unique=True),
       isl=st.integers(1, 131072), osl=st.integers(1, 32768), ngram=st.booleans(),
       weight=st.sampled_from(["bf16", "fp8", "nvfp4"]))
def test_planner_never_raises_a_foreign_error(cfg, gpu, tp, batches, isl, osl, ngram, weight):
    try:
        shape = shape_from_config(cfg, source="config.json")
        req = PlanRequest(mechanisms=MECHANISMS, target=shape, hardware=load_hardware(gpu),
                          drafter=NGramDrafter() if ngram else Eagle3Drafter(draft_vocab_size=32000),
                          workload=Workload(tuple(sorted(batches)), isl, osl), par=Parallelism(tp=tp), num_gpus=tp,
                          precision=Precision(weight=weight), max_draft_len=6, compare=False)
        plan = make_plan(req)
    except TrtllmSpecError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    rec = plan["recommendation"]
    assert set(rec["infeasible_batch_sizes"]) | {r["batch_size"] for r in rec["by_batch"]} == set(batches)
    for c in plan["candidates"]:
        assert math.isfinite(c["step_time_s"]) and c["step_time_s"] > 0 and c["speedup"] > 0
    if not rec["by_batch"]:
        assert "do not fit in memory" in rec["note"]
