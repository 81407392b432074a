"""z-lab's DFlash2 checkpoints are not DFlash: a ``config.json`` with ``architectures: ["DFlash2DraftModel"]`` or
the conv / selector integers in ``dflash_config`` (``conv_kernel_size``, ``conv_group_size``, ``selector_rank``,
``selector_top_k``) is recognised as ``dflash2`` (drafters/dflash2) and by no other mechanism, and given as
``dflash`` it is refused in one line naming the folder, what marks it as DFlash2 and the fix (drafter.type:
dflash2). DFlash v1 configs are recognised as before. (The DFlash2 runtime, doctor and bundle: test_dflash2.py.)

The config below is small and written by hand after the layout of z-lab's published DFlash2 config.json as issue
45 describes it (block 8, kernel 2, group 16, rank 256, top-K 16, five target layers, nested in ``dflash_config``;
not copied from the published file); the sizes are not a real model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtllm_spec.errors import UserError

DFLASH2 = {
    "architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 1, "vocab_size": 256,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    "sliding_window": 2048, "layer_types": ["sliding_attention"],
    "dflash_config": {"block_size": 8, "target_layer_ids": [1, 3, 5, 7, 9], "mask_token_id": 255,
                      "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 256, "selector_top_k": 16},
}
SELECTOR = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


def dflash_v1() -> dict:
    """The same checkpoint as DFlash (v1) writes it: no conv / selector fields, DFlash's architecture."""
    cfg = json.loads(json.dumps(DFLASH2))
    cfg["architectures"] = ["DFlashDraftModel"]
    for k in SELECTOR:
        del cfg["dflash_config"][k]
    return cfg


@pytest.fixture
def folder(tmp_path) -> Path:
    d = tmp_path / "zlab-dflash2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(DFLASH2))
    return d


def test_dflash2_is_recognised_as_dflash2_only():
    from trtllm_spec.drafters.registry import MECHANISMS, exported_type

    assert exported_type(DFLASH2) == "dflash2"
    assert [n for n, m in MECHANISMS.items() if m.recognises(DFLASH2)] == ["dflash2"]
    # each sign alone is enough: the architecture, or a selector field (llama.cpp: selector_top_k > 0)
    only_arch = {**dflash_v1(), "architectures": ["DFlash2DraftModel"]}
    only_top_k = {**dflash_v1(), "dflash_config": {**dflash_v1()["dflash_config"], "selector_top_k": 16}}
    flat = {**dflash_v1(), "conv_kernel_size": 2}
    assert exported_type(only_arch) == exported_type(only_top_k) == exported_type(flat) == "dflash2"


def test_dflash_v1_is_recognised_as_before():
    from trtllm_spec.drafters.registry import exported_type, folder_refusal

    v1 = dflash_v1()
    assert exported_type(v1) == "dflash"
    assert exported_type({**v1, "dflash_config": {**v1["dflash_config"], "projector_type": "dspark"}}) == "dspark"
    assert exported_type({"dflash_config": {"block_size": 4}}) == "dflash"  # a dflash_config alone, as before
    zero = {**v1, "dflash_config": {**v1["dflash_config"], "selector_top_k": 0}}  # llama.cpp: top-K 0 is DFlash
    assert exported_type(zero) == "dflash"
    assert folder_refusal(v1, "x", "dflash") is None and folder_refusal(v1, "x") is None


def _check_message(msg: str, where: str) -> None:
    assert "\n" not in msg and msg.startswith(where)
    assert "architectures ['DFlash2DraftModel']" in msg
    for k in SELECTOR:
        assert f"dflash_config.{k} = {DFLASH2['dflash_config'][k]}" in msg
    assert "not DFlash" in msg and "drafter.type: dflash2" in msg and "give a DFlash checkpoint" in msg


def test_given_as_dflash_it_is_refused_in_one_line(folder):
    from trtllm_spec.drafters.load import folder_kind, load_runtime_drafter
    from trtllm_spec.drafters.registry import folder_refusal

    where = str(folder / "config.json")
    _check_message(folder_refusal(DFLASH2, where, "dflash"), where)
    with pytest.raises(UserError) as exc:  # refused before any target or weight is read
        load_runtime_drafter(str(folder), None, expect="dflash")
    _check_message(str(exc.value), where)
    assert folder_kind(folder) == "dflash2"  # a folder given without a type is what it is


def test_a_recipe_reusing_it_as_dflash_is_refused(folder):
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.stages.drafter import obtain_drafter

    recipe = recipe_from_dict({"name": "z", "target": {"model": "llama-3.1-8b-instruct"},
                               "drafter": {"type": "dflash", "checkpoint": str(folder)}})
    with pytest.raises(UserError) as exc:
        obtain_drafter(recipe, resolve_target("llama-3.1-8b-instruct"), folder.parent / "out")
    _check_message(str(exc.value), f"drafter.checkpoint {folder}/config.json")
    # a DFlash (v1) folder is reused as before
    (folder / "config.json").write_text(json.dumps(dflash_v1()))
    res = obtain_drafter(recipe, resolve_target("llama-3.1-8b-instruct"), folder.parent / "out")
    assert res.kind == "reused" and res.drafter_dir == folder


def test_measure_and_llamacpp_recognise_it(folder):
    from trtllm_spec.measure.run import inspect_drafter
    from trtllm_spec.stages.llamacpp import drafter_type_of

    info = inspect_drafter(str(folder), {"hidden_size": 64, "vocab_size": 256}, 3)
    assert info.kind == "dflash2" and info.max_draft_len == 7  # dflash_config.block_size 8 - 1, nested
    assert drafter_type_of(folder) == "dflash2"


def test_doctor_names_it(folder):
    import torch
    from safetensors.torch import save_file

    from trtllm_spec.train.doctor import drafter_type, run_doctor

    save_file({"fc.weight": torch.zeros(64, 320, dtype=torch.bfloat16)}, str(folder / "model.safetensors"))
    assert drafter_type(DFLASH2) == "dflash2"
    kind, findings = run_doctor(folder, None, {"hidden_size": 64, "vocab_size": 256, "num_hidden_layers": 12})
    errors = [f.message for f in findings if f.level == "error" and f.check == "layout"]
    assert kind == "dflash2" and any("DFlash2 tensors" in e for e in errors)
