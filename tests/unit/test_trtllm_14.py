"""TensorRT-LLM 1.4 profile: its new fields (R14 docs in build/trtllm_schema.py), the TensorRT backend refused after
1.2, and the max_concurrency cut-off the plan justifies."""

from __future__ import annotations

import json

import pytest

from trtllm_spec.core.recipe_load import recipe_from_dict
from trtllm_spec.core.trtllm_gates import cutoff_gate, gate_reasons
from trtllm_spec.deploy.trtllm_options import make_llm_api_options
from trtllm_spec.deploy.trtllm_schema import validate_options
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
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


MAIN_CONFIDENCE = {"confidence_sts_path": "sts.json", "confidence_sps_table_path": "sps.json",
                   "confidence_sps_live_fingerprint_path": "live.json",
                   "confidence_admission_receipt_path": "receipt.json", "confidence_admission_receipt_sha256": "a" * 64,
                   "confidence_mixed_evidence": {"costs_path": "costs.json"}}


@pytest.mark.parametrize("field", sorted(MAIN_CONFIDENCE))
def test_dspark_confidence_fields_are_the_14_release_pages_not_newest_main(field):
    """Issue 37: the 1.4.0rc4 DSparkDecodingConfig page lists enable_confidence_scheduling,
    confidence_cost_table_path, confidence_calibration_path, confidence_min_predicted_gain (>= 0, default 0.04) and
    enable_fused_confidence_scheduler (rc1 has none of them); newest main replaced the three rc4 inputs with the
    STS / SPS / admission-receipt artifacts (upstream tests ids 71255583118, 71003507844 construct
    DSparkDecodingConfig with confidence_sts_path, confidence_sps_table_path, confidence_sps_live_fingerprint_path,
    confidence_admission_receipt_path / _sha256; id 70943366260 confidence_mixed_evidence). The 1.4 profile is the
    rc1 / rc4 release: main's names are refused naming the release that reads them and what 1.4 reads instead."""
    with pytest.raises(UserError, match=rf"speculative_config\.{field}: .*newest main.*1\.4\.0rc4 reads "
                                        r"confidence_cost_table_path"):
        validate_options(spec("DSpark", enable_confidence_scheduling=True, **{field: MAIN_CONFIDENCE[field]}), "1.4")
    with pytest.raises(UserError, match=rf"unknown key 'speculative_config\.{field}'"):
        validate_options(spec("DSpark", **{field: MAIN_CONFIDENCE[field]}), "1.3")


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


@pytest.mark.parametrize("key,tag", [("eagle3_one_model", "Eagle3"), ("mtp_eagle_one_model", "MTP")])
def test_14_refuses_the_removed_two_model_path_naming_the_release(key, tag):
    """Issue 22 item 5: PR #18721 removed the two-model path; 1.4 raises on these flags set to false."""
    spec = {"decoding_type": tag, "max_draft_len": 3, key: False}
    if tag == "Eagle3":
        spec["speculative_model"] = "drafter"
    with pytest.raises(UserError, match=rf"TensorRT-LLM 1.4 options: speculative_config.{key}: False: TensorRT-LLM "
                                        r"1.4 removed the two-model .*PR #18721"):
        validate_options({"speculative_config": spec}, "1.4")


@pytest.mark.parametrize("profile", ["1.3", "1.4"])
@pytest.mark.parametrize("old,new", [("acceptance_window", "acceptance_rate_window_size"),
                                     ("acceptance_length_threshold", "acceptance_rate_threshold")])
def test_renamed_acceptance_gate_names_the_new_field(profile, old, new):
    spec = {"decoding_type": "NGram", "max_draft_len": 3, old: 8}
    with pytest.raises(UserError, match=rf"speculative_config.{old} is the 1.2 name; TensorRT-LLM {profile} reads "
                                        rf"{new} .*PR #12905"):
        validate_options({"speculative_config": spec}, profile)
    spec12 = {"decoding_type": "NGram", "max_draft_len": 3, old: 8}
    validate_options({"speculative_config": spec12}, "1.2")  # the 1.2 names are 1.2's own


def test_every_14_options_file_and_script_of_a_built_plan_level_recipe(cli, tmp_path, monkeypatch):
    """Every file a 1.4 bundle writes validates against 1.4, and its scripts pass the options with
    --extra_llm_api_options (read by every release; 1.4's --config is only an alias of it, PR #9104)."""
    import yaml

    from tests.conftest import RECIPES

    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "b"
    r = cli("build", RECIPES / "qwen3-8b-ngram-h100.yaml", "--out", out, "--set", "engine.trtllm_version='1.4'")
    assert r.exit_code == 0, r.output
    opts = list(out.glob("llm_api_options*.yaml")) + list(out.glob("triton/*/1/model.yaml"))
    assert opts
    for f in opts:
        doc = yaml.safe_load(f.read_text())
        validate_options({k: v for k, v in doc.items() if k != "triton_config"}, "1.4")
    calls = [line for script in out.glob("*.sh") for line in script.read_text().replace("\\\n", " ").splitlines()
             if line.strip().removeprefix("exec ").split(" ")[0] in ("trtllm-serve", "trtllm-bench")]
    assert any("trtllm-bench" in c for c in calls) and any("trtllm-serve" in c for c in calls)
    for line in calls:
        assert "--config " not in line and "--extra_llm_api_options" in line, line


def test_dspark_step_cost_table_has_the_documented_fields_and_shape():
    """Issue 53 item 3: the step model as DSpark's confidence scheduler prices a step (planner/dspark_table.py):
    the documented sps.json fields, theta over verified tokens non-decreasing, alpha growing with the batch."""
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.dspark_table import cost_table
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import plan_context

    r = recipe_from_dict({"target": {"model": "qwen3-8b"}, "drafter": {"type": "dspark"},
                          "hardware": {"gpu": "b200"}, "engine": {"trtllm_version": "1.4"},
                          "workload": {"batch_sizes": [1, 8, 64]}})
    req = plan_inputs(r, mechanisms=MECHANISMS).request
    block = MECHANISMS["dspark"].only_draft_len(r.drafter)
    t = cost_table(plan_context(req), MECHANISMS["dspark"].cost(req.target, r.drafter), block, [1, 8, 64])
    assert set(t) == {"token_counts", "step_time_ms", "fixed_overhead_ms", "batch_sizes", "batch_overhead_ms"}
    assert t["token_counts"][0] == 2 and t["token_counts"][-1] == 64 * (block + 1)
    assert all(b >= a for a, b in zip(t["step_time_ms"], t["step_time_ms"][1:], strict=False))
    assert t["batch_sizes"] == [1, 8, 64] and t["batch_overhead_ms"] == sorted(t["batch_overhead_ms"])
    assert t["fixed_overhead_ms"] > 0 and MECHANISMS["dspark"].step_cost_table
    assert not MECHANISMS["dflash"].step_cost_table
