"""TensorRT-LLM 1.4 profile: its new fields (R14 docs in build/trtllm_schema.py), the TensorRT backend refused after
1.2, and the max_concurrency cut-off the plan justifies."""

from __future__ import annotations

import json

import pytest

from trtllm_spec.core.recipe import Eagle3Drafter, recipe_from_dict
from trtllm_spec.core.trtllm_gates import cutoff_gate, gate_reasons
from trtllm_spec.deploy.trtllm_options import make_llm_api_options
from trtllm_spec.deploy.trtllm_schema import validate_options
from trtllm_spec.errors import RecipeError, UserError

DRAFT_MODEL = {"target": {"model": "llama-3.1-8b-instruct"},
               "drafter": {"type": "draft_model", "model": "llama-3.2-1b-instruct"}}

NEW_IN_14 = [
    ("DFlash", {"context_recompute_tail": 64}),
    ("DFlash", {"skip_ctx_buffer_budget_check": True}),
    ("DFlash", {"moe_backend": "CUTLASS"}),
    ("DSpark", {"spec_dec_variant": 1}),
    ("DSpark", {"enable_confidence_scheduling": True, "confidence_cost_table_path": "cost.json",
                "confidence_calibration_path": "cal.json", "confidence_min_predicted_gain": 0.04,
                "enable_fused_confidence_scheduler": True}),
    ("Eagle3", {"spec_dec_variant": 3, "moe_backend": "TRTLLM"}),
]


def spec(tag: str, **fields) -> dict:
    base = {"decoding_type": tag, "max_draft_len": 3}
    if tag == "Eagle3":
        base["speculative_model"] = "drafter"
    return {"speculative_config": {**base, **fields}}


@pytest.mark.parametrize("tag,fields", NEW_IN_14)
def test_fields_new_in_14_validate_there_and_not_in_13(tag, fields):
    validate_options(spec(tag, **fields), "1.4")
    with pytest.raises(UserError, match=rf"TensorRT-LLM 1.3 options: unknown key 'speculative_config\.{next(iter(fields))}'"):
        validate_options(spec(tag, **fields), "1.3")


def test_dspark_head_fields_and_bad_values():
    validate_options(spec("DSpark", block_size=8, markov_rank=64, markov_head_type="gated"), "1.4")
    with pytest.raises(UserError, match="markov_head_type"):
        validate_options(spec("DSpark", markov_head_type="lstm"), "1.4")
    with pytest.raises(UserError, match="confidence_min_predicted_gain"):
        validate_options(spec("DSpark", confidence_min_predicted_gain=-0.1), "1.4")
    with pytest.raises(UserError, match="moe_backend"):
        validate_options(spec("DFlash", moe_backend="FASTEST"), "1.4")
    with pytest.raises(UserError, match="spec_dec_variant"):
        validate_options(spec("Eagle3", spec_dec_variant=0), "1.4")


def test_max_concurrency_is_exclusive_with_a_schedule_and_not_in_12():
    validate_options(spec("Eagle3", max_concurrency=16), "1.4")
    with pytest.raises(UserError, match="mutually exclusive"):
        validate_options(spec("Eagle3", max_concurrency=16, draft_len_schedule={16: 3}), "1.4")
    with pytest.raises(UserError, match="unknown key 'speculative_config.max_concurrency'"):
        validate_options(spec("Eagle3", max_concurrency=16), "1.2")


def test_cutoff_gate_only_for_a_single_full_d_run():
    assert cutoff_gate({16: 4}, 4, "1.4")[:2] == (None, {"max_concurrency": 16})
    assert cutoff_gate({16: 4}, 4, "1.2")[:2] == ({16: 4}, {})  # 1.2 keys are lower thresholds
    assert cutoff_gate({16: 4, 64: 2}, 4, "1.3")[:2] == ({16: 4, 64: 2}, {})
    opts = make_llm_api_options(profile="1.4", drafter_type="eagle3", drafter_config=Eagle3Drafter(),
                                speculative_model="drafter", max_draft_len=4, draft_len_schedule={16: 4}, tp=1, pp=1,
                                ep=1, max_batch_size=64, max_seq_len=2048, batch_sizes=[1, 16, 64],
                                free_gpu_memory_fraction=0.9, enable_block_reuse=True, kv_cache_dtype="auto",
                                cuda_graphs=True)
    sc = opts["speculative_config"]
    assert sc["max_concurrency"] == 16 and "draft_len_schedule" not in sc
    assert "stops paying above it" in gate_reasons(opts, "1.4")[0]


@pytest.mark.parametrize("version", ["1.3", "1.4"])
def test_tensorrt_backend_refused_after_12_naming_the_removal(version):
    with pytest.raises(RecipeError, match=r"needs engine.trtllm_version: '1.2'.*tensorrt-backend-removal\.md"):
        recipe_from_dict({**DRAFT_MODEL, "engine": {"backend": "tensorrt", "trtllm_version": version}})


def test_tensorrt_backend_with_12():
    r = recipe_from_dict({**DRAFT_MODEL, "engine": {"backend": "tensorrt", "trtllm_version": "1.2"}})
    assert r.trtllm_profile == "1.2"
    assert recipe_from_dict({**DRAFT_MODEL, "engine": {"backend": "tensorrt"}}).trtllm_profile == "1.2"


def test_block_drafters_run_on_14_not_12():
    base = {"target": {"model": "qwen3-8b"}, "drafter": {"type": "dspark"}}
    assert recipe_from_dict({**base, "engine": {"trtllm_version": "1.4"}}).trtllm_profile == "1.4"
    with pytest.raises(RecipeError, match="needs TensorRT-LLM 1.3"):
        recipe_from_dict({**base, "engine": {"trtllm_version": "1.2"}})


def test_plan_cli_with_14(cli):
    res = cli("plan", "--target", "qwen3-8b", "--drafter", "dflash", "--gpu", "b200", "--trtllm-version", "1.4",
              "--batch-sizes", "1,8,64", "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output[res.output.index("{"):res.output.rindex("}") + 1])
    assert plan["recommendation"]["trtllm_profile"] == "1.4"
    res = cli("plan", "--target", "llama-3.1-8b-instruct", "--drafter", "draft_model", "--draft-model",
              "llama-3.2-1b-instruct", "--gpu", "h100", "--trtllm-version", "1.4", "--set", "engine.backend=tensorrt",
              "--json")
    assert res.exit_code == 2 and "tensorrt-backend-removal.md" in res.output
