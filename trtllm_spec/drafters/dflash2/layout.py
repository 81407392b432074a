"""What a DFlash2 config.json must hold (z-lab's layout, docs/dflash2.md "config.json"), read by the descriptor, the
runtime, the converter and doctor (torch-free)."""

from __future__ import annotations

from trtllm_spec.drafters.dflash import DFLASH2_FIELDS


def field(cfg: dict, key: str):
    """A DFlash2 field of a config.json: ``dflash_config``'s (z-lab's layout nests them), else the top level's (the
    readers' fallback); None when neither has it."""
    dc = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else {}
    return dc.get(key, cfg.get(key))


def missing_fields(cfg: dict) -> list[str]:
    """The DFlash2 fields a z-lab-format config.json lacks (every reader needs them)."""
    return [k for k in (*DFLASH2_FIELDS, "block_size", "target_layer_ids", "mask_token_id") if field(cfg, k) is None]


def layout_refusal(cfg: dict, where: str) -> str | None:
    """Why a config.json that says DFlash2 cannot be run (one line), or None: a missing field, K outside [1, vocab],
    a group size that does not divide the hidden size, a kernel longer than the block."""
    miss = missing_fields(cfg)
    if miss:
        return (f"{where}: a DFlash2 drafter lacks dflash_config.{miss[0]} (it needs "
                f"{', '.join(DFLASH2_FIELDS)}, block_size, target_layer_ids and mask_token_id in dflash_config, as "
                "z-lab's DFlash2DraftModel writes them); re-export it in the z-lab layout")
    val = {k: field(cfg, k) for k in (*DFLASH2_FIELDS, "block_size")}
    bad = [k for k, v in val.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
    if bad:
        return f"{where}: dflash_config.{bad[0]} = {val[bad[0]]!r} must be a positive integer"
    hidden, vocab = cfg.get("hidden_size"), cfg.get("vocab_size")
    if isinstance(vocab, int) and val["selector_top_k"] > vocab:
        return (f"{where}: dflash_config.selector_top_k = {val['selector_top_k']} exceeds vocab_size {vocab} (the "
                f"selector keeps K of the vocabulary's logits); give K <= {vocab}")
    if isinstance(hidden, int) and hidden % val["conv_group_size"]:
        return (f"{where}: dflash_config.conv_group_size = {val['conv_group_size']} does not divide hidden_size "
                f"{hidden} (every reader needs whole groups)")
    if val["conv_kernel_size"] > val["block_size"]:
        return (f"{where}: dflash_config.conv_kernel_size = {val['conv_kernel_size']} exceeds block_size "
                f"{val['block_size']}")
    return None
