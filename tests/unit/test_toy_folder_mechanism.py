"""A trained mechanism kept in one folder that shares a decoding tag (issue 45 item 5): ``tests/toy_mechanism``
(ToyFlash: DFlash trained with its fusion layer frozen, under the shared ``DFlash`` tag) is added with ONE
registration and runs plan -> build (ModelOpt training through its plugin, measure, bundle) -> mirror -> replan ->
doctor on the tiny target, nothing else edited; its folders are told from DFlash's by their architecture and its
bundles by their record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.bundle_fakes import bench_report_for
from tests.tiny import write_conversations


@pytest.fixture
def toyflash():
    from tests.toy_mechanism import ToyFlash
    from trtllm_spec.drafters import registry

    mech = registry.register(ToyFlash())
    yield mech
    registry.unregister("toyflash")


def _fc(cfg: dict) -> int:
    return cfg["hidden_size"] * cfg["hidden_size"] * len(cfg["dflash_config"]["target_layer_ids"])


def _dflash_trainable(target: Path) -> int:
    """What ModelOpt's DFlash mode trains for the recipe's head (1 layer, block 4) without the toy's plugin."""
    import torch
    from transformers import AutoModelForCausalLM

    from trtllm_spec.drafters.dflash.config import DFlashDrafter
    from trtllm_spec.train import modelopt_setup as ms

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    ms.convert(model, json.loads((target / "config.json").read_text()),
               DFlashDrafter(num_layers=1, block_size=4, mask_token=3), mask_token_id=3)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_plan_build_mirror_replan_doctor(toyflash, tiny_target, tiny_suite, cli, tmp_path):
    from tests.toy_mechanism import ARCHITECTURE
    from trtllm_spec.core import releases
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.deploy.trtllm_schema import validate_options
    from trtllm_spec.drafters.registry import exported_type

    assert releases.tag_types("DFlash") == ("dflash", "dflash2", "toyflash")
    data = write_conversations(tmp_path / "c.jsonl", 16)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "toyflash", "target": {"model": str(tiny_target)}, "draft_len": 2,
        "drafter": {"type": "toyflash", "num_layers": 1, "block_size": 4, "mask_token": 3,
                    "training": {"max_steps": 2, "batch_size": 2, "seq_len": 64, "precision": "fp32",
                                 "checkpoint_every": 2, "data": {"path": str(data), "eval_fraction": 0.25}}},
        "engine": {"trtllm_version": "1.3"}, "hardware": {"gpu": "l40s"},
        "workload": {"batch_sizes": [1, 8], "isl": 64, "osl": 32}, "planner": {"max_draft_len": 3},
        "measure": {"num_prompts": 1, "max_new_tokens": 8, "categories": ["coding"]}}))
    r = cli("plan", "--recipe", recipe, "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])
    assert plan["recommendation"]["mechanism"] == "toyflash"
    bundle = tmp_path / "bundle"
    r = cli("build", recipe, "--out", bundle, "--set", "planner.compare_mechanisms=false")
    assert r.exit_code == 0, r.output
    # trained through its plugin: the fusion layer was frozen (DFlash's trainable tensors less fc)
    cfg = json.loads((bundle / "drafter" / "config.json").read_text())
    meta = json.loads((bundle / "drafter" / "trtllm_spec_drafter.json").read_text())
    assert meta["training"]["trainable_params_per_rank"] == [_dflash_trainable(tiny_target) - _fc(cfg)]
    assert cfg["architectures"] == [ARCHITECTURE] and exported_type(cfg) == "toyflash"
    b = read_bundle(bundle)
    assert b.drafter == "toyflash" and b.profile == "1.3"
    options = b.speculative_options()
    assert options["speculative_config"]["decoding_type"] == "DFlash"  # the shared tag
    validate_options(options, "1.3")  # the mirror: DFlash's class
    # replan from a (fake) trtllm-bench report of the shared tag: the bundle's record says which mechanism ran
    report = bench_report_for(tmp_path / "report_c1.json", options["speculative_config"]["max_draft_len"], "DFlash")
    r = cli("replan", "--bundle", bundle, "--from-trtllm-bench", report, "--out", tmp_path / "re")
    assert r.exit_code == 0, r.output
    prof = json.loads((tmp_path / "re" / "measured" / "speculation_profile.json").read_text())
    assert prof["drafter"]["type"] == "toyflash"
    new = yaml.safe_load((tmp_path / "re" / "llm_api_options.yaml").read_text())
    if new.get("speculative_config"):
        validate_options(new, "1.3")
    # doctor: the folder is the toy's (its architecture), checked with DFlash's layout checks
    r = cli("doctor", bundle / "drafter", "--target", tiny_target, "--json")
    assert r.exit_code == 0, r.output
    assert "toyflash" in r.output and '"error"' not in r.output


def test_a_dflash_folder_is_not_the_toys_and_the_toys_is_not_dflash(toyflash):
    from tests.toy_mechanism import ARCHITECTURE
    from trtllm_spec.drafters.registry import exported_type

    base = {"dflash_config": {"mask_token_id": 3, "target_layer_ids": [1]}, "block_size": 4}
    assert exported_type({**base, "architectures": ["DFlashDraftModel"]}) == "dflash"
    assert exported_type(base) == "dflash"  # no architecture named: DFlash's layout
    assert exported_type({**base, "architectures": [ARCHITECTURE]}) == "toyflash"
    assert exported_type({**base, "architectures": ["SomethingElseDraftModel"]}) is None
