"""ModelOpt's ``eagle`` mode config for an EAGLE-3 (or EAGLE-MTP) section: the descriptor's preset with the
target's dimensions, the captured layers and the training options (``Mechanism.modelopt_config``)."""

from __future__ import annotations

import copy

from trtllm_spec.drafters.base import draft_dims, rope_theta
from trtllm_spec.errors import UserError


def mode_config(target_cfg: dict, drafter, draft_vocab_size: int,
                offline: bool = False) -> dict:
    from modelopt.torch.speculative import config as presets

    from trtllm_spec.drafters.registry import get

    mech = get(drafter.type)
    cfg = copy.deepcopy(getattr(presets, mech.modelopt_preset)["config"])
    theta = rope_theta(target_cfg)
    arch = cfg["eagle_architecture_config"]
    arch.update(draft_dims(target_cfg), num_hidden_layers=drafter.num_layers or 1, rope_theta=theta,
                rope_scaling={"rope_type": "default", "rope_theta": theta}, draft_vocab_size=draft_vocab_size,
                torch_dtype="float32", **mech.modelopt_architecture(drafter))
    layers = getattr(drafter, "layers_to_capture", None)
    if layers:
        n = target_cfg["num_hidden_layers"]
        bad = [i for i in layers if not 0 <= i < n]
        if bad:
            raise UserError(f"drafter.layers_to_capture {bad} out of range for a {n}-layer target (0..{n - 1})")
        arch["eagle_aux_hidden_state_layer_ids"] = list(layers)
    cfg.update(eagle_use_torch_compile=False, eagle_export_rope_scaling={}, eagle_offline=offline)
    if drafter.training.ttt_steps:
        cfg["eagle_ttt_steps"] = drafter.training.ttt_steps
    return cfg
