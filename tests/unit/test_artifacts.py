"""Typed artifacts between stages (core/artifacts.py): each reads today's JSON and writes it back key for key,
so golden files and users' files do not change; an unknown key is an error, not silently dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from trtllm_spec.core.artifacts import DrafterResult, Plan, SpeculationProfile
from trtllm_spec.core.recipe_load import load_recipe

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES[:6], ids=lambda p: p.stem)
def test_plan_round_trips_key_for_key(path):
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import make_plan

    raw = make_plan(plan_inputs(load_recipe(path), mechanisms=MECHANISMS).request)
    plan = Plan.from_json(raw)
    assert json.dumps(plan.to_json()) == json.dumps(raw)
    assert plan.recommendation.max_draft_len == raw["recommendation"]["max_draft_len"]


def test_plan_refuses_an_unknown_key():
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import make_plan

    raw = make_plan(plan_inputs(load_recipe(RECIPES[0]), mechanisms=MECHANISMS).request)
    with pytest.raises(ValidationError, match="extra"):
        Plan.from_json({**raw, "surprise": 1})


def test_profile_round_trips_both_engines(tiny_target, tiny_suite):
    from trtllm_spec.measure.run import measure

    raw = measure(tiny_target, "ngram", 2, categories=["coding"], num_prompts=1, max_new_tokens=6, device="cpu")
    assert json.dumps(SpeculationProfile.from_json(raw).to_json()) == json.dumps(raw)
    trt = {k: v for k, v in raw.items() if k != "prompts"}
    trt["engine"] = "trtllm"
    trt["drafter"] = {"type": "ngram", "path": None, "draft_len": 2, "acceptance_kind": "chain",
                      "al_method": "measured_at_bundle_draft_len", "bundle": "/b"}
    assert SpeculationProfile.from_json(trt).to_json() == trt  # no prompts, no max_draft_len: left out


def test_drafter_result_json(tmp_path):
    assert DrafterResult("trained", tmp_path, {"steps": 3}).to_json() == {
        "kind": "trained", "drafter_dir": str(tmp_path), "summary": {"steps": 3}}
