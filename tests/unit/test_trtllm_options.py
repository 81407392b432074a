"""TensorRT-LLM LLM API options: golden YAML per drafter and release profile, and the strict mirror's rejections.

Regenerate the golden files after an intended change: ``UPDATE_GOLDEN=1 pytest tests/unit/test_trtllm_options.py``.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import yaml

from trtllm_spec.core import releases
from trtllm_spec.core.sa import SAEnhancerConfig
from trtllm_spec.deploy.trtllm_options import make_llm_api_options, render_yaml
from trtllm_spec.deploy.trtllm_schema import (
    DECODING_TAGS,
    decoding_classes,
    options_model,
    validate_options,
    validate_with_tensorrt_llm,
)
from trtllm_spec.drafters.dflash.config import DFlashDrafter
from trtllm_spec.drafters.dflash2.config import DFlash2Drafter
from trtllm_spec.drafters.draft_model.config import DraftModelDrafter
from trtllm_spec.drafters.dspark.config import DSparkDrafter
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.drafters.mtp.config import MTPDrafter
from trtllm_spec.drafters.ngram.config import NGramDrafter
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.drafters.suffix.config import SuffixDrafter
from trtllm_spec.errors import UserError

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "trtllm"

BASE = dict(tp=1, pp=1, ep=1, max_batch_size=64, max_seq_len=4096, batch_sizes=[1, 8, 32, 64],
            free_gpu_memory_fraction=0.9, enable_block_reuse=True, kv_cache_dtype="auto", cuda_graphs=True,
            draft_len_schedule=None)

CASES = {
    "eagle3_1.2": dict(profile="1.2", drafter_type="eagle3", drafter_config=Eagle3Drafter(),
                       speculative_model="drafter", max_draft_len=4, tp=2,  # no schedule: 1.2 ignores it
                       drafter_extras={"eagle3_layers_to_capture": [1, 15, 28]}),
    "eagle3_1.3": dict(profile="1.3", drafter_type="eagle3", drafter_config=Eagle3Drafter(),
                       speculative_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", max_draft_len=4,
                       draft_len_schedule={8: 4, 64: 2}),
    "mtp_1.2": dict(profile="1.2", drafter_type="mtp", drafter_config=MTPDrafter(), speculative_model=None,
                    max_draft_len=3, tp=8, ep=8, max_batch_size=256, batch_sizes=[1, 16, 64, 256],
                    kv_cache_dtype="fp8", trust_remote_code=True),
    "mtp_1.3": dict(profile="1.3", drafter_type="mtp", drafter_config=MTPDrafter(), speculative_model=None,
                    max_draft_len=3, tp=8, ep=8, max_batch_size=256, batch_sizes=[1, 16, 64, 256],
                    kv_cache_dtype="fp8", draft_len_schedule={16: 3, 256: 1}),
    "ngram_1.2": dict(profile="1.2", drafter_type="ngram", drafter_config=NGramDrafter(), speculative_model=None,
                      max_draft_len=5, disable_overlap_scheduler=True),
    "ngram_1.3": dict(profile="1.3", drafter_type="ngram", drafter_config=NGramDrafter(max_matching_ngram_size=4),
                      speculative_model=None, max_draft_len=5),
    "draft_model_1.2": dict(profile="1.2", drafter_type="draft_model",
                            drafter_config=DraftModelDrafter(model="meta-llama/Llama-3.2-1B-Instruct"),
                            speculative_model="draft", max_draft_len=4, cuda_graphs=False),
    "draft_model_1.3": dict(profile="1.3", drafter_type="draft_model",
                            drafter_config=DraftModelDrafter(model="meta-llama/Llama-3.2-1B-Instruct"),
                            speculative_model="draft", max_draft_len=4, kv_cache_dtype="bf16"),
    "dflash_1.3": dict(profile="1.3", drafter_type="dflash", drafter_config=DFlashDrafter(), speculative_model="drafter",
                       max_draft_len=15, drafter_extras={"dflash_mask_token_id": 151669, "dflash_target_layer_ids": [1, 9, 17, 25, 33]},
                       draft_len_schedule={8: 15, 32: 7, 64: 3}),
    "dspark_1.3": dict(profile="1.3", drafter_type="dspark",  # DSpark: max_draft_len == block_size only
                       drafter_config=DSparkDrafter(block_size=8, target_layer_ids=[2, 18, 34]),
                       speculative_model="drafter", max_draft_len=8, drafter_extras={"dflash_mask_token_id": 151669}),
    "eagle3_1.4": dict(profile="1.4", drafter_type="eagle3", drafter_config=Eagle3Drafter(),
                       speculative_model="drafter", max_draft_len=4, draft_len_schedule={16: 4}),
    "mtp_1.4": dict(profile="1.4", drafter_type="mtp", drafter_config=MTPDrafter(), speculative_model=None,
                    max_draft_len=3, tp=8, ep=8, max_batch_size=256, batch_sizes=[1, 16, 64, 256],
                    kv_cache_dtype="fp8", draft_len_schedule={16: 3, 256: 1}),
    "ngram_1.4": dict(profile="1.4", drafter_type="ngram", drafter_config=NGramDrafter(), speculative_model=None,
                      max_draft_len=5),
    "draft_model_1.4": dict(profile="1.4", drafter_type="draft_model",
                            drafter_config=DraftModelDrafter(model="meta-llama/Llama-3.2-1B-Instruct"),
                            speculative_model="draft", max_draft_len=4),
    "dflash_1.4": dict(profile="1.4", drafter_type="dflash", drafter_config=DFlashDrafter(), speculative_model="drafter",
                       max_draft_len=15, drafter_extras={"dflash_mask_token_id": 151669, "dflash_target_layer_ids": [1, 9, 17, 25, 33]},
                       draft_len_schedule={8: 15, 32: 7, 64: 3}),
    "dspark_1.4": dict(profile="1.4", drafter_type="dspark",  # one D: no schedule, no max_concurrency (ignored)
                       drafter_config=DSparkDrafter(block_size=8, target_layer_ids=[2, 18, 34]),
                       speculative_model="drafter", max_draft_len=8, drafter_extras={"dflash_mask_token_id": 151669}),
    "dflash2_1.4": dict(profile="1.4", drafter_type="dflash2", drafter_config=DFlash2Drafter(block_size=8),
                        speculative_model="drafter", max_draft_len=7,
                        drafter_extras={"dflash_mask_token_id": 151669, "dflash_target_layer_ids": [1, 17, 33]},
                        draft_len_schedule={8: 7, 32: 3}),
    "suffix_1.3": dict(profile="1.3", drafter_type="suffix", drafter_config=SuffixDrafter(), speculative_model=None,
                       max_draft_len=4, draft_len_schedule={8: 4, 64: 2}),
    "suffix_1.4": dict(profile="1.4", drafter_type="suffix",  # the pool, sized explicitly
                       drafter_config=SuffixDrafter(enable_global_pool=True, global_pool_size=128,
                                                    max_matching_ngram_size=8),
                       speculative_model=None, max_draft_len=6),
    "eagle3_sa_1.3": dict(profile="1.3", drafter_type="eagle3",
                          drafter_config=Eagle3Drafter(sa_enhancer=SAEnhancerConfig(threshold=4)),
                          speculative_model="drafter", max_draft_len=3),
    "eagle3_sa_1.4": dict(profile="1.4", drafter_type="eagle3",
                          drafter_config=Eagle3Drafter(sa_enhancer=SAEnhancerConfig(threshold=6, enable_global_pool=True)),
                          speculative_model="drafter", max_draft_len=3, draft_len_schedule={16: 3}),
    "mtp_sa_1.3": dict(profile="1.3", drafter_type="mtp", drafter_config=MTPDrafter(sa_enhancer=SAEnhancerConfig()),
                       speculative_model=None, max_draft_len=3, tp=8, ep=8, max_batch_size=256,
                       batch_sizes=[1, 16, 64, 256], kv_cache_dtype="fp8"),
    "mtp_sa_1.4": dict(profile="1.4", drafter_type="mtp", drafter_config=MTPDrafter(sa_enhancer=SAEnhancerConfig()),
                       speculative_model=None, max_draft_len=3, tp=8, ep=8, max_batch_size=256,
                       batch_sizes=[1, 16, 64, 256], kv_cache_dtype="fp8"),
    "no_speculation_1.2": dict(profile="1.2", drafter_type="eagle3", drafter_config=Eagle3Drafter(),
                               speculative_model=None, max_draft_len=0, draft_len_schedule={1: 4, 8: 0},
                               max_seq_len=None),
}


def build(name: str) -> dict:
    return make_llm_api_options(**{**BASE, **CASES[name]})


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_yaml(name):
    profile = CASES[name]["profile"]
    text = render_yaml(build(name), profile=profile)
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name}: output differs from {path}; if intended, rerun with UPDATE_GOLDEN=1"
    reread = yaml.safe_load(text)
    validate_options(reread, profile)  # what TensorRT-LLM reads back from the file validates too
    assert text.startswith("# TensorRT-LLM")


def test_every_drafter_and_profile_is_covered():
    """Every registered mechanism x release, none exempt (a mechanism that shares its decoding tag with another, or
    writes none, included): a golden whose decoding_type is one of the tags the descriptor declares and the release
    knows, or a one-line refusal: the recipe's (the release predates the mechanism's decoding config) or the
    descriptor's (``trtllm_refusal``: TensorRT-LLM cannot serve it, e.g. eagle_mtp)."""
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.errors import RecipeError

    covered = {(c["drafter_type"], c["profile"]): n for n, c in CASES.items() if c["max_draft_len"]}
    for name, mechanism in MECHANISMS.items():
        for profile in releases.names():
            if releases.order(profile) < releases.order(mechanism.min_trtllm):
                with pytest.raises(RecipeError, match=rf"drafter {name} needs TensorRT-LLM {mechanism.min_trtllm}\+"):
                    recipe_from_dict({"name": "c", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": name}, "engine": {"trtllm_version": profile}})
                continue
            why = mechanism.trtllm_refusal(mechanism.default_config(), profile)
            if why is not None:
                assert why and "\n" not in why and (name, profile) not in covered, (name, profile, why)
                continue
            assert (name, profile) in covered, f"no golden for {name} on TensorRT-LLM {profile}"
            tag = build(covered[name, profile])["speculative_config"]["decoding_type"]
            assert tag in mechanism.decoding_types and tag in DECODING_TAGS[profile], (name, profile, tag)


def test_the_mirror_is_generated_from_the_field_table():
    # every release record's tags get a class, built from the newest row of the tag's fields not after the release
    # on that release's base row (deploy/trtllm_schema.BASE_FIELDS / TAG_FIELDS)
    for profile in releases.names():
        classes = decoding_classes(profile)
        assert set(classes) == set(DECODING_TAGS[profile])
        for tag, cls in classes.items():
            assert cls.model_fields["decoding_type"].default == tag and cls.profile == profile
    fields = {p: {t: set(c.model_fields) for t, c in decoding_classes(p).items()} for p in ("1.2", "1.3", "1.4")}
    assert "sa_config" in fields["1.4"]["Eagle3"] and "sa_config" not in fields["1.2"]["Eagle3"]  # a row holds on
    assert "moe_backend" in fields["1.4"]["NGram"] and "moe_backend" not in fields["1.3"]["NGram"]  # base rows
    assert "acceptance_window" in fields["1.2"]["MTP"] and "acceptance_rate_threshold" in fields["1.3"]["MTP"]
    assert "num_nextn_predict_layers" in fields["1.2"]["MTP"] and "num_nextn_predict_layers" not in fields["1.3"]["MTP"]
    assert "context_recompute_tail" in fields["1.4"]["DFlash"] and "block_size" in fields["1.4"]["DSpark"]
    # 1.2's MTP reads its draft length from num_nextn_predict_layers (its row's mixin comes before the base)
    assert decoding_classes("1.2")["MTP"](num_nextn_predict_layers=3).effective_max_draft_len() == 3


def test_a_release_with_no_field_row_and_no_mirror_base_is_one_line():
    from trtllm_spec.core.releases import Release

    releases.register(Release("1.7", image="x", read_from="nothing", final=False, stable=False))
    try:
        with pytest.raises(UserError, match="no options mirror .*BASE_FIELDS has no row for it"):
            validate_options({"backend": "pytorch"}, "1.7")
    finally:
        releases.unregister("1.7")


def test_release_differences():
    assert build("mtp_1.2")["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    assert build("mtp_1.3")["speculative_config"]["max_draft_len"] == 3
    assert "num_nextn_predict_layers" not in build("mtp_1.3")["speculative_config"]
    assert build("draft_model_1.2")["speculative_config"]["decoding_type"] == "Draft_Target"
    assert build("draft_model_1.2")["cuda_graph_config"] is None
    assert build("draft_model_1.3")["kv_cache_config"]["dtype"] == "auto"  # bf16: the model's precision


# ---- the 1.2 form both stored 1.2-era parsers read (issue 37) ---------------------------------------------------
# Parser A: NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, stored version id 1520735490 (the from_dict era,
# with max_concurrency and acceptance_window); R12: the same file, id 7019226376 (pydantic decoding_type Literals,
# TensorRT backend still present). Both read with the read_file tool; no commit is recorded for either.

ONE_TWO = sorted(n for n, c in CASES.items() if c["profile"] == "1.2")


@pytest.mark.parametrize("name", ONE_TWO)
def test_12_cuda_graphs_are_batch_sizes_only(name):
    """Parser A's TorchLlmArgs.validate_cuda_graph_config raises "Please don't set both cuda_graph_config.batch_sizes
    and cuda_graph_config.max_batch_size" unless batch_sizes is exactly the list it generates from max_batch_size;
    R12's CudaGraphConfig.validate_cuda_graph_config sets max_batch_size = max(batch_sizes) when it is 0. So a 1.2
    bundle writes batch_sizes alone (1.3 / 1.4 keep both, equal maxima: MAIN accepts that)."""
    graphs = build(name)["cuda_graph_config"]
    assert graphs is None or ("max_batch_size" not in graphs and graphs["batch_sizes"]), graphs
    both = {**build("eagle3_1.2"), "cuda_graph_config": {"batch_sizes": [1, 8, 64], "max_batch_size": 64}}
    with pytest.raises(UserError, match=r"cuda_graph_config.max_batch_size: .*parser A.*Please don't set both"):
        validate_options(both, "1.2")
    validate_options({**both, "speculative_config": build("eagle3_1.3")["speculative_config"]}, "1.3")


def test_12_draft_model_key_is_the_one_both_parsers_read():
    """Parser A's DecodingBaseConfig has only speculative_model_dir (StrictBaseModel: an unknown key is an error);
    R12's has speculative_model with validation_alias=AliasChoices("speculative_model", "speculative_model_dir")."""
    for name in ("eagle3_1.2", "draft_model_1.2"):
        spec = build(name)["speculative_config"]
        assert "speculative_model_dir" in spec and "speculative_model" not in spec, spec
    for name in ("eagle3_1.3", "draft_model_1.3", "eagle3_1.4", "draft_model_1.4"):
        assert "speculative_model" in build(name)["speculative_config"]
    legacy = build("eagle3_1.2")
    legacy["speculative_config"]["speculative_model"] = legacy["speculative_config"].pop("speculative_model_dir")
    with pytest.raises(UserError, match=r"speculative_config.speculative_model: the 1.2-era parser A knows only "
                                        r"speculative_model_dir"):
        validate_options(legacy, "1.2")


def test_12_draft_target_targets_the_1_2_1_parser():
    """No tag reads in both: parser A's DecodingBaseConfig.from_dict maps "DraftTarget" and raises "Invalid decoding
    type: Draft_Target"; R12's DraftTargetDecodingConfig is decoding_type: Literal["Draft_Target"] in a union with
    Field(discriminator="decoding_type"). A 1.2 draft-model bundle targets TensorRT-LLM 1.2.1 (the R12 line:
    docs/trtllm_compat.md), so it writes Draft_Target and the mirror refuses parser A's spelling."""
    assert build("draft_model_1.2")["speculative_config"]["decoding_type"] == "Draft_Target"
    wrong = build("draft_model_1.2")
    wrong["speculative_config"]["decoding_type"] = "DraftTarget"
    with pytest.raises(UserError, match="'DraftTarget' is unknown; spell it 'Draft_Target'"):
        validate_options(wrong, "1.2")


@pytest.mark.parametrize("profile", ["1.2", "1.3", "1.4"])
def test_kv_cache_dtype_is_what_upstream_documents(profile):
    """KvCacheConfig.dtype: upstream documents auto | fp8 | fp8_ds_mla | nvfp4, and
    TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype (parser A id 1520735490 and MAIN) syncs auto and fp8
    only, warning "Cannot sync quant_config.kv_cache_quant_algo with kv_cache_config.dtype of bfloat16" for a torch
    dtype name. A bf16 KV cache is the model's own precision: written as auto; bfloat16 is refused."""
    name = next(n for n, c in CASES.items() if c["profile"] == profile and c["drafter_type"] == "draft_model")
    opts = make_llm_api_options(**{**BASE, **CASES[name], "kv_cache_dtype": "bf16"})
    assert opts["kv_cache_config"]["dtype"] == "auto"
    assert make_llm_api_options(**{**BASE, **CASES[name], "kv_cache_dtype": "fp8"})["kv_cache_config"]["dtype"] == "fp8"
    opts["kv_cache_config"]["dtype"] = "bfloat16"
    with pytest.raises(UserError, match="kv_cache_config.dtype"):
        validate_options(opts, profile)


def test_no_speculation_without_draft_len():
    options = build("no_speculation_1.2")
    assert "speculative_config" not in options
    assert options["cuda_graph_config"]["batch_sizes"] == [1, 8, 32, 64]  # the schedule adds no sizes


def test_schedule_keys_become_cuda_graph_sizes():
    options = build("dflash_1.3")
    assert options["cuda_graph_config"] == {"batch_sizes": [1, 8, 32, 64], "max_batch_size": 64,
                                            "enable_padding": True}
    options = make_llm_api_options(**{**BASE, **CASES["eagle3_1.3"], "draft_len_schedule": {12: 4, 64: 2}})
    assert 12 in options["cuda_graph_config"]["batch_sizes"]


def test_speculative_config_comes_from_the_descriptor():
    spec = MECHANISMS["eagle3"].trtllm_speculative_config(
        Eagle3Drafter(layers_to_capture=[28, 1, 15]), profile="1.3", max_draft_len=3, speculative_model="d")
    assert spec == {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "d",
                    "eagle3_layers_to_capture": [1, 15, 28]}
    spec = MECHANISMS["dflash"].trtllm_speculative_config(
        DFlashDrafter(mask_token=7), profile="1.3", max_draft_len=3, speculative_model="d")
    assert spec["mask_token_id"] == 7 and "target_layer_ids" not in spec


# ---- rejections ---------------------------------------------------------------------------------------

def test_unknown_key_rejected_with_path_and_hint():
    options = build("eagle3_1.2")
    options["speculative_config"]["max_draft_length"] = 4
    with pytest.raises(UserError, match=r"unknown key 'speculative_config.max_draft_length'; did you mean "
                                        r"'max_draft_len'"):
        validate_options(options, "1.2")
    with pytest.raises(UserError, match=r"unknown key 'kv_cache_config.free_gpu_mem_fraction'"):
        validate_options({"kv_cache_config": {"free_gpu_mem_fraction": 0.5}}, "1.3")
    with pytest.raises(UserError, match=r"unknown key 'tensor_paralel_size'; did you mean 'tensor_parallel_size'"):
        validate_options({"tensor_paralel_size": 2}, "1.2")


def test_dflash_needs_13():
    with pytest.raises(UserError, match=r"'DFlash' is not in TensorRT-LLM 1.2; it arrives in TensorRT-LLM 1.3"):
        make_llm_api_options(**{**BASE, **CASES["dflash_1.3"], "profile": "1.2", "draft_len_schedule": None})
    with pytest.raises(UserError, match=r"'DSpark' .* 1\.3"):
        validate_options({"speculative_config": {"decoding_type": "DSpark", "max_draft_len": 3}}, "1.2")


@pytest.mark.parametrize("profile,schedule,match", [
    ("1.3", {8: 4, 32: 5}, r"draft_len_schedule\[32\] = 5 exceeds max_draft_len = 4"),
    ("1.3", {8: 2, 32: 1}, r"draft_len_schedule\[8\] = 2 must equal max_draft_len"),
    ("1.3", {0: 4}, "must be a batch size >= 1"),
])
def test_schedule_violations(profile, schedule, match):
    case = {**BASE, **CASES[f"eagle3_{profile}"], "draft_len_schedule": schedule}
    with pytest.raises(UserError, match=match):
        make_llm_api_options(**case)


@pytest.mark.parametrize("schedule,match", [
    ({4: 4, 32: 2}, "must include batch size 1"),
    ({1: 3, 32: 2}, r"draft_len_schedule\[1\] = 3 must equal max_draft_len = 4"),
])
def test_mirror_keeps_the_12_schedule_rules(schedule, match):
    # a hand-written 1.2 options file (replan input, Triton's model.yaml) is still checked by 1.2's validator
    spec = {"decoding_type": "Eagle", "max_draft_len": 4, "speculative_model_dir": "d", "draft_len_schedule": schedule}
    with pytest.raises(UserError, match=match):
        validate_options({"speculative_config": spec}, "1.2")


@pytest.mark.parametrize("case,gate", [
    ("eagle3_1.2", {"draft_len_schedule": {1: 4, 32: 2}}),  # one-model EAGLE-3 gained it after 1.2 (PR #10860)
    ("ngram_1.3", {"draft_len_schedule": {8: 5, 64: 2}}),  # NGram: never (support_dynamic_draft_len)
    ("ngram_1.4", {"max_concurrency": 16}),
    ("dspark_1.3", {"max_concurrency": 16}),  # DSpark: never
    ("mtp_1.2", {"draft_len_schedule": {1: 3, 64: 1}}),
])
def test_options_never_carry_a_gate_the_engine_ignores(case, gate):
    """Issue 22 item 4: where support_dynamic_draft_len() is false for the mechanism in that release, a schedule or
    max_concurrency would be silently ignored by TensorRT-LLM: refused, naming the release and the alternative."""
    with pytest.raises(UserError, match=r"applies no draft_len_schedule or max_concurrency to .*would be ignored"):
        make_llm_api_options(**{**BASE, **CASES[case], **gate})


def test_mechanism_validators():
    with pytest.raises(UserError, match="speculative_model .* is required for Eagle3"):
        make_llm_api_options(**{**BASE, **CASES["eagle3_1.3"], "speculative_model": None})
    with pytest.raises(UserError, match="speculative_model .* is required for Draft_Target"):
        make_llm_api_options(**{**BASE, **CASES["draft_model_1.2"], "speculative_model": None})
    with pytest.raises(UserError, match=r"max_draft_len must be > 0 for NGram"):
        validate_options({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 0}}, "1.2")
    with pytest.raises(UserError, match="num_nextn_predict_layers"):
        validate_options({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 3}}, "1.3")
    with pytest.raises(UserError, match="overrides max_draft_len"):
        validate_options({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 3,
                                                 "max_draft_len": 2}}, "1.2")
    with pytest.raises(UserError, match="spell it 'Draft_Target'"):
        validate_options({"speculative_config": {"decoding_type": "DraftTarget", "max_draft_len": 2}}, "1.3")
    with pytest.raises(UserError, match="decoding_type is missing"):
        validate_options({"speculative_config": {"max_draft_len": 2}}, "1.3")
    with pytest.raises(UserError, match="moe_expert_parallel_size = 3 must divide"):
        validate_options({"tensor_parallel_size": 4, "moe_expert_parallel_size": 3}, "1.2")


def test_acceptance_fields_renamed_between_releases():
    ngram = {"decoding_type": "NGram", "max_draft_len": 3}
    validate_options({"speculative_config": {**ngram, "acceptance_window": 100,
                                             "acceptance_length_threshold": 1.3}}, "1.2")
    validate_options({"speculative_config": {**ngram, "acceptance_rate_window_size": 100,
                                             "acceptance_rate_threshold": 0.2}}, "1.3")
    with pytest.raises(UserError, match="reads acceptance_rate_window_size .*PR #12905"):
        validate_options({"speculative_config": {**ngram, "acceptance_window": 100}}, "1.3")
    with pytest.raises(UserError, match="acceptance_rate_threshold"):
        validate_options({"speculative_config": {**ngram, "acceptance_rate_threshold": 1.5}}, "1.3")


def test_legacy_alias_and_eagle_tag_accepted():
    spec = {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "drafter"}
    validate_options({"speculative_config": spec}, "1.2")


def test_bad_inputs():
    with pytest.raises(UserError, match="unknown TensorRT-LLM profile '1.1'"):
        validate_options({}, "1.1")
    with pytest.raises(UserError, match="absolute path"):
        make_llm_api_options(**{**BASE, **CASES["eagle3_1.2"], "speculative_model": "/home/me/drafter"})
    with pytest.raises(UserError, match="kv_cache_dtype 'int8'"):
        make_llm_api_options(**{**BASE, **CASES["eagle3_1.2"], "kv_cache_dtype": "int8"})
    with pytest.raises(UserError, match=r"free_gpu_memory_fraction: Input should be less than or equal to 1"):
        make_llm_api_options(**{**BASE, **CASES["eagle3_1.2"], "free_gpu_memory_fraction": 1.5})


# ---- the real-TensorRT-LLM path -----------------------------------------------------------------------

def test_validate_with_tensorrt_llm_is_deferred_here():
    note = validate_with_tensorrt_llm(build("eagle3_1.3"))
    assert note is not None and note.startswith("deferred")


def test_validate_with_tensorrt_llm_uses_the_real_classes(monkeypatch):
    # A fake: TensorRT-LLM cannot be installed here. Built from the documented interface
    # (tensorrt_llm.llmapi.llm_args.TorchLlmArgs, a pydantic model whose fields are the YAML keys); our 1.3
    # mirror stands in for its field types.
    llm_args = types.ModuleType("tensorrt_llm.llmapi.llm_args")
    llm_args.TorchLlmArgs = options_model("1.3")
    for name, module in (("tensorrt_llm", types.ModuleType("tensorrt_llm")),
                         ("tensorrt_llm.llmapi", types.ModuleType("tensorrt_llm.llmapi")),
                         ("tensorrt_llm.llmapi.llm_args", llm_args)):
        monkeypatch.setitem(sys.modules, name, module)
    assert validate_with_tensorrt_llm(build("eagle3_1.3")) is None
    with pytest.raises(UserError, match="unknown key 'enable_magic'"):
        validate_with_tensorrt_llm({"enable_magic": True})
    with pytest.raises(UserError, match="kv_cache_config.free_gpu_memory_fraction"):
        validate_with_tensorrt_llm({"kv_cache_config": {"free_gpu_memory_fraction": 2}})


@pytest.mark.parametrize("profile", ["1.2", "1.3", "1.4"])
def test_eagle3_names_per_release(profile):
    """Issue 22 item 3. 1.2: the form every 1.2-era llm_args.py reads -- the from_dict parser (decoding_type keys
    Eagle/NGram/MTP/..., field speculative_model_dir) and the later union (EagleDecodingConfig Literal "Eagle" run as
    EAGLE-3, speculative_model with the alias speculative_model_dir). 1.3 / 1.4: Eagle3 + speculative_model, as the
    versioned Eagle3DecodingConfig pages list (docs/trtllm_compat.md)."""
    spec = build(f"eagle3_{profile}")["speculative_config"]
    if profile == "1.2":
        assert spec["decoding_type"] == "Eagle" and "speculative_model" not in spec
        assert spec["speculative_model_dir"]
    else:
        assert spec["decoding_type"] == "Eagle3" and "speculative_model_dir" not in spec
        assert spec["speculative_model"]
    validate_options(build(f"eagle3_{profile}"), profile)


def test_suffix_automaton_options_per_release():
    """SA: decoding_type SA and sa_config exist from 1.3 (1.3.0rc27 / 1.4.0rc4 pages); 1.2 has neither and both are
    refused naming the release."""
    assert build("suffix_1.3")["speculative_config"] == {
        "decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1, "enable_global_pool": False,
        "draft_len_schedule": {8: 4, 64: 2}}
    assert build("suffix_1.4")["speculative_config"]["global_pool_size"] == 128
    assert build("eagle3_sa_1.3")["speculative_config"]["sa_config"] == {"threshold": 4, "enable_global_pool": False}
    assert build("mtp_sa_1.4")["speculative_config"]["sa_config"]["threshold"] == 4
    with pytest.raises(UserError, match="TensorRT-LLM 1.2 has no SADecodingConfig"):
        make_llm_api_options(**{**BASE, **CASES["suffix_1.3"], "profile": "1.2", "draft_len_schedule": None})
    with pytest.raises(UserError, match="TensorRT-LLM 1.2 has no sa_config"):
        make_llm_api_options(**{**BASE, **CASES["eagle3_sa_1.3"], "profile": "1.2"})
    opts = build("eagle3_1.2")
    with pytest.raises(UserError, match="sa_config"):  # the 1.2 mirror refuses the key itself
        validate_options({**opts, "speculative_config": {**opts["speculative_config"], "sa_config": {}}}, "1.2")
    with pytest.raises(UserError, match="'SA' is not in TensorRT-LLM 1.2; it arrives in TensorRT-LLM 1.3"):
        validate_options({"speculative_config": {"decoding_type": "SA", "max_draft_len": 3}}, "1.2")
    for spec, match in (({"max_matching_ngram_size": 0}, "max_matching_ngram_size"),
                        ({"global_pool_size": 8}, "requires enable_global_pool"),
                        ({"enable_global_pool": True, "max_matching_ngram_size": 65}, r"\[1, 64\]"),
                        ({"max_draft_len": 0}, "max_draft_len must be > 0 for SA"),
                        ({"sa_threshold": 3}, "sa_threshold")):
        with pytest.raises(UserError, match=match):
            validate_options({"speculative_config": {"decoding_type": "SA", "max_draft_len": 3, **spec}}, "1.3")
    with pytest.raises(UserError, match="threshold"):
        validate_options({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3,
                                                 "speculative_model": "d", "sa_config": {"threshold": 0}}}, "1.4")
