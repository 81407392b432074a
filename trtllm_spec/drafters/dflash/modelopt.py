"""ModelOpt's ``dflash`` mode config for a DFlash-family section (DFlash, DSpark, DFlash2): block, mask token,
anchors and the target's dimensions, with the mechanism's own architecture keys (``modelopt_architecture``)."""

from __future__ import annotations

from trtllm_spec.drafters.base import draft_dims
from trtllm_spec.errors import UserError


def mode_config(target_cfg: dict, drafter, mask_token_id: int) -> dict:
    n = target_cfg["num_hidden_layers"]
    if drafter.num_layers > n:
        raise UserError(f"drafter.num_layers = {drafter.num_layers} exceeds the target's {n} layers")
    arch = dict(draft_dims(target_cfg), num_hidden_layers=drafter.num_layers)
    if drafter.target_layer_ids:
        arch["target_layer_ids"] = list(drafter.target_layer_ids)
    from trtllm_spec.drafters.registry import get

    arch.update(get(drafter.type).modelopt_architecture(drafter))
    return dict(dflash_block_size=drafter.block_size, dflash_mask_token_id=mask_token_id,
                dflash_num_anchors=drafter.num_anchors,
                dflash_architecture_config=arch, dflash_use_torch_compile=False, dflash_export_rope_scaling={})
