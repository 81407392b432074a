"""'trtllm-spec doctor' for a DFlash-family export (DFlash, DSpark): config (block size, mask token, target layer
ids), tensors and shapes."""

from __future__ import annotations

from trtllm_spec.drafters.base import Finding


def static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
    out = []
    h, n_t, vocab = target.get("hidden_size"), target.get("num_hidden_layers", 0), target.get("vocab_size")
    dc = cfg.get("dflash_config") or {}
    mask, ids = dc.get("mask_token_id"), dc.get("target_layer_ids") or []
    if cfg.get("hidden_size") != h:
        out.append(Finding("error", "target", f"drafter hidden_size {cfg.get('hidden_size')} != target {h}"))
    if cfg.get("vocab_size") != vocab:
        out.append(Finding("error", "target", f"drafter vocab_size {cfg.get('vocab_size')} != target {vocab}"))
    if not isinstance(mask, int) or not 0 <= mask < (vocab or 0):
        out.append(Finding("error", "mask", f"dflash_config.mask_token_id {mask!r} is not a token id of the target"))
    else:
        out.append(Finding("ok", "mask", f"mask token id {mask} is in the vocabulary"))
    if not ids or any(not 0 <= i < n_t for i in ids):
        out.append(Finding("error", "layers", f"target_layer_ids {ids} out of range for {n_t} target layers"))
    block = cfg.get("block_size")
    if not isinstance(block, int) or block < 2:
        out.append(Finding("error", "config", f"block_size {block!r} must be an integer >= 2"))
    fc = tensors.get("fc.weight")
    if fc is None or tuple(fc.shape) != (h, len(ids) * h):
        out.append(Finding("error", "layout", f"fc.weight shape {None if fc is None else list(fc.shape)}; expected "
                                              f"[{h}, {len(ids)} x {h}]"))
    n = cfg.get("num_hidden_layers", 0)
    names = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm",
             "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
             "post_attention_layernorm")
    missing = [f"layers.{i}.{x}.weight" for i in range(n) for x in names if f"layers.{i}.{x}.weight" not in tensors]
    missing += [x for x in ("hidden_norm.weight", "norm.weight") if x not in tensors]
    if missing:
        out.append(Finding("error", "layout", f"missing tensors: {', '.join(missing[:4])}"))
    elif fc is not None and tuple(fc.shape) == (h, len(ids) * h):
        out.append(Finding("ok", "layout", f"{n} DFlash layers, fc over {len(ids)} target layers"))
    return out
