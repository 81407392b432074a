"""'trtllm-spec doctor' for a DFlash2 export: DFlash's checks plus the convolution and selector tensors."""

from __future__ import annotations

from trtllm_spec.drafters.base import Finding
from trtllm_spec.drafters.dflash.doctor import static as dflash_static


def static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
    """DFlash's checks (block_size read from dflash_config, where z-lab's layout nests it), the DFlash2 fields, and
    the convolution and selector tensors with their shapes (docs/dflash2.md, "Tensors")."""
    from trtllm_spec.drafters.dflash2.layout import field, layout_refusal

    out = dflash_static({**cfg, "block_size": field(cfg, "block_size")}, tensors, target)
    why = layout_refusal(cfg, "config.json")
    if why is not None:
        return [*out, Finding("error", "config", why)]
    h, vocab = cfg.get("hidden_size") or 0, cfg.get("vocab_size") or 0
    k, g, r = (field(cfg, x) for x in ("conv_kernel_size", "conv_group_size", "selector_rank"))
    want = {"candidate_selector.hidden_projection.weight": (r, h),
            "candidate_selector.predecessor_codebook": (vocab, r),
            "candidate_selector.successor_codebook": (vocab, r)}
    for i in range(cfg.get("num_hidden_layers", 0)):
        for conv in ("attention_conv", "mlp_conv"):
            want[f"layers.{i}.{conv}.base_kernel"] = (2, k, h)
            want[f"layers.{i}.{conv}.kernel_projection.weight"] = (2 * k * (h // g), h)
    bad = [f"{n} {'missing' if n not in tensors else list(tensors[n].shape)} (expected {list(s)})"
           for n, s in want.items() if n not in tensors or tuple(tensors[n].shape) != s]
    if bad:
        out.append(Finding("error", "layout", f"DFlash2 tensors: {'; '.join(bad[:3])}"))
    else:
        out.append(Finding("ok", "layout", f"DFlash2 convolutions (kernel {k}, group {g}) and selector (rank {r}, "
                                           f"top-{field(cfg, 'selector_top_k')})"))
    return out
