"""'trtllm-spec doctor' for an EAGLE-MTP export (ModelOpt's EAGLE-1/MTP layout); its parity check is EAGLE-3's."""

from __future__ import annotations

from trtllm_spec.drafters.base import Finding
from trtllm_spec.drafters.eagle3.doctor import d2t_findings


def static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
    """ModelOpt's EAGLE-1/MTP layout: regular Llama layers over the target's final hidden state (no fc)."""
    out = []
    for key in ("hidden_size", "vocab_size"):
        if cfg.get(key) != target.get(key):
            out.append(Finding("error", "target", f"drafter {key} {cfg.get(key)} != target {key} {target.get(key)}: "
                                                  "the drafter belongs to another target"))
    h, heads = cfg.get("hidden_size") or 0, cfg.get("num_attention_heads") or 1
    hd = cfg.get("head_dim") or h // heads
    q, kv, inter = heads * hd, (cfg.get("num_key_value_heads") or heads) * hd, cfg.get("intermediate_size")
    shapes = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
              "self_attn.o_proj": (h, q), "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h),
              "mlp.down_proj": (h, inter), "input_layernorm": (h,), "post_attention_layernorm": (h,)}
    bad = []
    for i in range(cfg.get("num_hidden_layers") or 0):
        for name, shape in shapes.items():
            t = tensors.get(f"layers.{i}.{name}.weight")
            if t is None or tuple(t.shape) != shape:
                bad.append(f"layers.{i}.{name}.weight {None if t is None else list(t.shape)} (expected {list(shape)})")
    if "norm.weight" not in tensors:
        bad.append("norm.weight missing")
    if "fc.weight" in tensors:
        bad.append("fc.weight present although eagle_config.use_aux_hidden_state is false")
    out.append(Finding("error", "layout", "; ".join(bad[:3])) if bad else
               Finding("ok", "layout", f"{cfg.get('num_hidden_layers')} regular layer(s) over the target's final "
                                       "hidden state, shapes match config.json"))
    out += d2t_findings(cfg, tensors)
    out.append(Finding("warning", "deploy", "TensorRT-LLM serves MTP only as a target's own layers "
                                            "(num_nextn_predict_layers, DeepSeek-V3-style checkpoints): this head is "
                                            "for measurement and planning (drafter.type eagle_mtp); train eagle3 for a deployable drafter"))
    return out
