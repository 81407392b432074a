"""The test-only inverse of ``trtllm_spec.drafters.eagle3.convert``: a drafter in our layout written as a SafeAILab
(``eagle``) or ``speculators`` checkpoint, so the converter's round trips can be tested (moved out of the package:
nothing in trtllm-spec writes those layouts)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from trtllm_spec.core.files import atomic_dir, check_output_dir
from trtllm_spec.core.shape import default_capture_layers
from trtllm_spec.drafters.eagle3.convert import (
    _apply_target,
    _config,
    _dims,
    _provenance,
    _stored_dtype,
    _write,
    check_drafter,
    detect_layout,
    load_weights,
)
from trtllm_spec.errors import UserError


def read_ours(folder: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """Config and tensors of a drafter in our layout, checked."""
    folder = Path(folder)
    if detect_layout(folder) != "ours":
        raise UserError(f"{folder} is not in our layout (ModelOpt/TensorRT-LLM EAGLE-3); convert it first")
    cfg, (tensors, _) = _config(folder), load_weights(folder)
    check_drafter(cfg, tensors, str(folder))
    return cfg, tensors


def export_to_layout(our_folder: str | Path, out: str | Path, fmt: Literal["eagle", "speculators"],
                     target_config: dict | None = None, *, force: bool = False) -> dict:
    """Write a drafter in our layout as a SafeAILab (``eagle``) or ``speculators`` checkpoint."""
    our_folder, out = Path(our_folder), Path(out)
    if fmt not in ("eagle", "speculators"):
        raise UserError(f"format {fmt!r} is not one of eagle, speculators")
    check_output_dir(out, force, (our_folder,))
    cfg, t = read_ours(our_folder)
    notes: list[str] = []
    layers = _apply_target(dict(cfg), target_config, notes)
    dims, dtype = _dims(cfg, str(our_folder)), _stored_dtype(t, None, str(our_folder))
    if cfg.get("torch_dtype") not in (None, dtype):
        notes.append(f"config.json says torch_dtype {cfg['torch_dtype']}, the weights are {dtype}: wrote "
                     f"{dtype}")
    ids, dv = cfg["eagle_config"].get("eagle_aux_hidden_state_layer_ids"), cfg["draft_vocab_size"]
    if "d2t" in t:
        t["t2d"] = torch.zeros(cfg["vocab_size"], dtype=torch.bool)
        t["t2d"][torch.arange(dv) + t["d2t"]] = True
    if fmt == "eagle":
        if ids and layers is not None and sorted(ids) != default_capture_layers(layers):
            raise UserError(f"the SafeAILab layout hard-codes the captured layers "
                            f"{default_capture_layers(layers)}; this drafter captures {ids}, so it cannot be "
                            "written in that layout")
        if ids and layers is None:
            notes.append(f"captured layers {ids} are not stored: SafeAILab always uses {{1, L/2-1, L-4}}")
        t = {(f"midlayer.{k[len('layers.0.'):]}" if k.startswith("layers.0.") else k): v
             for k, v in t.items()}
        new_cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **dims,
                   **{k: cfg[k] for k in ("target_hidden_size",) if k in cfg}, "draft_vocab_size": dv,
                   "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": dtype}
    else:
        tc = target_config or {}
        inner = {"model_type": "llama", **{k: v for k, v in dims.items() if k != "rope_scaling" or v},
                 "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
                 "tie_word_embeddings": False, "torch_dtype": dtype}
        verifier = {"name_or_path": tc.get("_name_or_path"), "architectures": tc.get("architectures") or []}
        new_cfg = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                   "transformer_layer_config": inner, "draft_vocab_size": dv, "norm_before_residual": False,
                   "norm_before_fc": False, "fc_norm": False, "norm_output": False,
                   "target_hidden_size": cfg.get("target_hidden_size"),
                   "eagle_aux_hidden_state_layer_ids": [i + 1 for i in sorted(ids)] if ids else None,
                   "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                          "proposal_methods": [{"proposal_type": "greedy",
                                                                "speculative_tokens": 3}],
                                          "verifier": verifier},
                   "torch_dtype": dtype}
    with atomic_dir(out, force, (our_folder,)) as tmp:
        _write(tmp, new_cfg, t)
        _provenance(tmp, our_folder)
    return {"layout": fmt, "source": str(our_folder), "out": str(out), "tensors": sorted(t), "dtype": dtype,
            "draft_vocab_size": dv, "notes": notes}
