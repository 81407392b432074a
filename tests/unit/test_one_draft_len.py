"""Mechanisms TensorRT-LLM runs at one D only (DSpark: max_draft_len == block_size, cited on
``drafters.dspark.DSpark``): the planner offers that D or none and never a draft_len_schedule; and since
``support_dynamic_draft_len()`` is false for DSpark in every release (issue 22 item 4), no ``max_concurrency``
either: the plan shows D = block_size at every batch size, says where it stops paying and what to do instead, and
the options builder refuses a gate the engine would ignore. Pure Python (no torch)."""

import pytest

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.recipe_load import recipe_from_dict
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.deploy.trtllm_options import make_llm_api_options
from trtllm_spec.drafters.dflash.config import DFlashDrafter
from trtllm_spec.drafters.dspark.config import DSparkDrafter
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.errors import RecipeError, UserError
from trtllm_spec.planner.acceptance import table
from trtllm_spec.planner.plan import PlanRequest, make_plan, one_draft_len
from trtllm_spec.planner.search import Workload

BATCHES = (1, 4, 16, 64, 256)


def _plan(drafter, batches=BATCHES, max_draft_len=8, acceptance=None):
    req = PlanRequest(target=resolve_shape("llama-3.1-8b-instruct"), hardware=load_hardware("h100"), drafter=drafter,
                      workload=Workload(batches, 512, 512), max_draft_len=max_draft_len, compare=False,
                      trtllm_profile="1.3", mechanisms=MECHANISMS, acceptance=acceptance)
    return make_plan(req)


def _options(drafter, d, schedule=None, max_concurrency=None):
    return make_llm_api_options(
        profile="1.3", drafter_type=drafter.type, drafter_config=drafter, speculative_model="drafter",
        max_draft_len=d, draft_len_schedule=schedule, tp=1, pp=1, ep=1, max_batch_size=1024, max_seq_len=2048,
        batch_sizes=BATCHES, free_gpu_memory_fraction=0.9, enable_block_reuse=True, kv_cache_dtype="auto",
        cuda_graphs=True, max_concurrency=max_concurrency)


def test_dspark_plan_has_one_draft_len_and_no_schedule():
    drafter = DSparkDrafter(block_size=6)
    # a weak drafter (AL 2.0 at D = 6, measured): pays at small batch, not once verification gets compute bound
    plan = _plan(drafter, max_draft_len=3, acceptance=table({6: 2.0}, "test", measured=True))  # cap: not a choice
    ds = {c["draft_len"] for c in plan["candidates"] if c["mechanism"] == "dspark"}
    assert ds == {0, 6}
    rec = plan["recommendation"]
    assert rec["max_draft_len"] == 6 and rec["draft_len_schedule"] is None and rec["max_concurrency"] is None
    by = {r["batch_size"]: (r["draft_len"], r["speedup"]) for r in rec["by_batch"]}
    assert all(d == 6 for d, _ in by.values())  # what the engine runs: the single-D curve
    assert by[1][1] > 1.0 and by[256][1] < 1.0
    rule = rec["draft_len_rule"]
    assert "applies no draft_len_schedule or max_concurrency to DSpark" in rule
    assert "predicted slower than plain decoding" in rule and "separate deployment without speculative_config" in rule
    # the emitted TensorRT-LLM options: D = block_size, no schedule, no max_concurrency
    spec = _options(drafter, rec["max_draft_len"], rec["draft_len_schedule"], rec["max_concurrency"])[
        "speculative_config"]
    assert spec["decoding_type"] == "DSpark" and spec["max_draft_len"] == 6
    assert "max_concurrency" not in spec and "draft_len_schedule" not in spec


def test_dflash_still_gets_a_schedule_where_d_should_shrink():
    rec = _plan(DFlashDrafter(block_size=9))["recommendation"]
    assert rec["max_concurrency"] is None and rec["draft_len_rule"] is None
    assert len({r["draft_len"] for r in rec["by_batch"]}) > 1  # D varies by batch: the chain-like planner path


def test_one_draft_len_rule():
    assert one_draft_len({1: 8, 4: 8, 16: 8}, 8) == (8, None, None)
    assert one_draft_len({1: 8, 4: 8, 16: 0, 64: 8}, 8) == (8, 4, 16)  # off above the first run: no re-enable
    assert one_draft_len({1: 0, 4: 8}, 8) == (0, None, 1)
    assert one_draft_len({}, 8) == (0, None, None)


def test_the_rule_names_memory_when_the_drafter_does_not_fit():
    rec = _plan(DSparkDrafter(block_size=6), (1, 64, 384))["recommendation"]  # 384 fits only without the drafter
    assert rec["max_concurrency"] is None and "at batch 384 the drafter's KV cache does not fit" in \
        rec["draft_len_rule"]


def test_options_refuse_another_d_or_a_schedule_for_dspark():
    drafter = DSparkDrafter(block_size=6)
    with pytest.raises(UserError, match="max_draft_len = 4: TensorRT-LLM runs DSpark only at max_draft_len = "
                                        "block_size = 6"):
        _options(drafter, 4)
    with pytest.raises(UserError, match="applies no draft_len_schedule or max_concurrency to DSpark"):
        _options(drafter, 6, schedule={64: 6})
    with pytest.raises(UserError, match="max_concurrency = 32: .*would be ignored"):
        _options(drafter, 6, max_concurrency=32)
    assert "speculative_config" not in _options(drafter, 0)  # speculation off is always allowed
    with pytest.raises(UserError, match="mutually exclusive"):  # both gates at once: refused by the schema
        _options(DFlashDrafter(block_size=9), 8, schedule={64: 8}, max_concurrency=32)


def _recipe(**top):
    d = {"type": "dspark", "block_size": 8, "training": {"data": {"path": "c.jsonl"}}}
    return recipe_from_dict({"name": "r", "target": {"model": "llama-3.1-8b-instruct"}, "drafter": d,
                             "engine": {"trtllm_version": "1.3"}} | top)


def test_recipe_refuses_a_dspark_d_other_than_the_block():
    assert _recipe(draft_len=8).draft_len == 8
    assert _recipe().draft_len == "auto"
    with pytest.raises(RecipeError, match="draft_len = 4: TensorRT-LLM runs DSpark only at D = drafter.block_size = 8"):
        _recipe(draft_len=4)
