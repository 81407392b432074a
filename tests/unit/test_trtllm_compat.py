"""docs/trtllm_compat.md stays true: multi-layer EAGLE-3 is refused for a TensorRT-LLM bundle (issue 22 item 6), the
bundle's EAGLE-3 tensors are renamed to what every release loads, and every test the page names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.drafters.registry import MECHANISMS

REPO = Path(__file__).resolve().parents[2]


def test_multi_layer_eagle3_is_refused_for_a_bundle(cli, tmp_path, tiny_target, monkeypatch):
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "two-layers", "target": {"model": str(tiny_target)}, "hardware": {"gpu": "l40s"},
        "drafter": {"type": "eagle3", "num_layers": 2, "training": {"data": {"path": str(tmp_path / "c.jsonl")}}},
        "workload": {"batch_sizes": [1], "isl": 16, "osl": 8}}))
    out = tmp_path / "bundle"
    r = cli("build", recipe, "--out", out)
    assert r.exit_code == 2
    assert "drafter.num_layers: 2" in r.output and "Eagle3DecoderLayer" in r.output
    assert "Use drafter.num_layers: 1" in r.output and not out.exists()
    assert "Traceback" not in r.output
    # plan still runs (only the bundle is refused), and says why the build would stop
    r = cli("recipe", "validate", recipe)
    assert r.exit_code == 0 and "build refuses this recipe" in r.output


@pytest.mark.parametrize("profile", ["1.2", "1.3", "1.4"])
def test_eagle3_refusal_and_renames_per_layer_count(profile):
    m = MECHANISMS["eagle3"]
    assert m.trtllm_refusal(Eagle3Drafter(), profile) is None
    assert m.trtllm_tensor_renames(Eagle3Drafter()) == {"layers.0.": "midlayer."}
    assert f"TensorRT-LLM {profile} cannot load" in m.trtllm_refusal(Eagle3Drafter(num_layers=3), profile)


def test_rename_tensors_rewrites_names_and_keeps_values(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from trtllm_spec.deploy.trtllm_drafter import rename_tensors

    t = {"layers.0.self_attn.q_proj.weight": torch.randn(4, 8, dtype=torch.bfloat16), "fc.weight": torch.randn(4, 12),
         "d2t": torch.arange(5)}
    save_file(t, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    assert rename_tensors(tmp_path, {"layers.0.": "midlayer."}) == ["model.safetensors"]
    got = load_file(str(tmp_path / "model.safetensors"))
    assert sorted(got) == ["d2t", "fc.weight", "midlayer.self_attn.q_proj.weight"]
    assert torch.equal(got["midlayer.self_attn.q_proj.weight"], t["layers.0.self_attn.q_proj.weight"])
    assert got["midlayer.self_attn.q_proj.weight"].dtype == torch.bfloat16
    assert rename_tensors(tmp_path, {"layers.0.": "midlayer."}) == []  # nothing left to rename
    assert not list(tmp_path.glob("*.partial"))


def test_every_test_the_compat_page_names_exists():
    text = (REPO / "docs" / "trtllm_compat.md").read_text()
    named = set(re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?", text))
    assert named
    for path, test in named:
        f = REPO / path
        assert f.is_file(), path
        if test:
            assert re.search(rf"def {test}\b", f.read_text()), f"{path}::{test}"
