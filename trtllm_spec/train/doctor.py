"""``trtllm-spec doctor``: is this drafter folder what TensorRT-LLM will load, and does it still do what it
did in training? Every check reports; nothing stops at the first finding.

EAGLE-3: config keys, tensor names and shapes against the target (fc = 3 x target hidden), declared dtype
vs stored tensors, rope scaling, captured layer ids in range, d2t range and uniqueness, the lm_head is the
target's (full vocabulary) or correlated with it (draft vocabulary), finite non-zero weights, and train/serve
parity: first-step accuracy recomputed with the *deployment* semantics (runtime/drafters/eagle3.py) on the
held-out chunks training scored, against the recorded held-out accuracy.
DFlash / DSpark: config (block size, mask token, target layer ids), tensors and shapes, dtypes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from trtllm_spec.errors import UserError

HELDOUT_FILE = "heldout_chunks.json"


@dataclass
class Finding:
    level: str  # "ok" | "warning" | "error" | "info"
    check: str
    message: str

    def as_dict(self) -> dict:
        return {"level": self.level, "check": self.check, "message": self.message}


def drafter_type(cfg: dict) -> str:
    """The drafter mechanism of an exported config.json (the descriptors recognise it); 'unknown' otherwise."""
    from trtllm_spec.drafters.registry import exported_type, get

    kind = exported_type(cfg)  # doctor checks drafters with a layout of their own, not plain (draft) models
    return kind if kind is not None and get(kind).doctor_layout is not None else "unknown"


def run_doctor(drafter_dir: Path, target_dir: Path | None, target_cfg: dict, heldout: Path | None = None,
               parity_tolerance: float = 0.04, placement=None) -> tuple[str, list[Finding]]:
    """``placement`` (runtime.device.Placement): where the parity check runs the target (default: CPU fp32)."""
    if not (drafter_dir / "config.json").is_file():
        raise UserError(f"{drafter_dir} is not a drafter folder (no config.json)")
    try:
        cfg = json.loads((drafter_dir / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{drafter_dir}/config.json is not valid JSON ({exc.msg})") from None
    from trtllm_spec.runtime.llama import load_safetensors

    tensors = load_safetensors(drafter_dir)
    kind = drafter_type(cfg)
    f: list[Finding] = []
    # the checks read the exported tensors with torch and the descriptors stay torch-free (recipe validate / plan
    # import them): a descriptor names its layout (Mechanism.doctor_layout) and whether the train/serve parity
    # check runs (doctor_parity); the checks of each layout are here
    if kind != "unknown":
        from trtllm_spec.drafters.registry import get

        mech = get(kind)
        f += LAYOUT_CHECKS[mech.doctor_layout](cfg, tensors, target_cfg)
        if mech.doctor_parity and target_dir is not None and not any(x.level == "error" for x in f):
            f.append(_eagle3_parity(drafter_dir, target_dir, heldout, parity_tolerance, placement))
    else:
        from trtllm_spec.drafters.registry import folder_refusal

        f.append(Finding("error", "type", folder_refusal(cfg, "config.json") or
                         f"config.json is neither EAGLE-3 (draft_vocab_size) nor DFlash (dflash_config): "
                         f"architectures {cfg.get('architectures')}"))
    f += _common(cfg, tensors)
    return kind, f


# ---- shared checks ----------------------------------------------------------------------------------------------

def _common(cfg: dict, tensors: dict[str, torch.Tensor]) -> list[Finding]:
    out = []
    floats = {str(t.dtype).replace("torch.", "") for t in tensors.values() if t.is_floating_point()}
    declared = cfg.get("torch_dtype") or cfg.get("dtype")
    if len(floats) > 1:
        out.append(Finding("error", "dtype", f"weights mix dtypes {sorted(floats)}; export with one dtype"))
    elif floats and declared not in floats:
        out.append(Finding("error", "dtype", f"config.json declares torch_dtype {declared!r} but the tensors are "
                                             f"{floats.pop()}; TensorRT-LLM would load them with the wrong type"))
    else:
        out.append(Finding("ok", "dtype", f"tensors and config agree on {declared}"))
    bad = [n for n, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    zero = [n for n, t in tensors.items() if t.is_floating_point() and t.numel() > 1 and not t.any()]
    if bad:
        out.append(Finding("error", "weights", f"non-finite values in {', '.join(bad[:3])}"))
    if zero:
        out.append(Finding("error", "weights", f"all-zero tensors {', '.join(zero[:3])}: an untrained export?"))
    if not bad and not zero:
        out.append(Finding("ok", "weights", f"{len(tensors)} tensors finite and non-zero"))
    rope = cfg.get("rope_scaling")
    if rope and (rope.get("rope_type") or rope.get("type")) not in (None, "default"):
        out.append(Finding("warning", "rope", f"rope_scaling {rope} will be applied by TensorRT-LLM; if the drafter "
                                              "was not trained with it this lowers acceptance (ModelOpt injects YaRN "
                                              "unless told not to)"))
    return out


# ---- EAGLE-3 --------------------------------------------------------------------------------------------------

def _eagle3_static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
    from trtllm_spec.train.convert import check_drafter

    out = []
    if cfg.get("architectures") != ["LlamaForCausalLMEagle3"]:
        out.append(Finding("warning", "config", f"architectures {cfg.get('architectures')}; TensorRT-LLM expects "
                                                "['LlamaForCausalLMEagle3']"))
    for key, tkey in (("hidden_size", "hidden_size"), ("vocab_size", "vocab_size")):
        if cfg.get(key) != target.get(tkey):
            out.append(Finding("error", "target", f"drafter {key} {cfg.get(key)} != target {tkey} {target.get(tkey)}: "
                                                  "the drafter belongs to another target"))
    try:
        check_drafter(cfg, tensors, "drafter")
        out.append(Finding("ok", "layout", "tensor names and shapes match config.json (fc takes 3 x target hidden)"))
    except UserError as exc:
        out.append(Finding("error", "layout", str(exc)))
    n = target.get("num_hidden_layers", 0)
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or []
    if any(not 0 <= i < n for i in ids):
        out.append(Finding("error", "layers", f"captured target layers {ids} out of range for {n} target layers"))
    else:
        out.append(Finding("ok", "layers", f"captured target layers {ids or 'default'} within 0..{n - 1}"))
    out += _d2t_findings(cfg, tensors)
    return out


def _d2t_findings(cfg: dict, tensors: dict) -> list[Finding]:
    from trtllm_spec.data.vocab import check_d2t

    dv, vocab = cfg.get("draft_vocab_size"), cfg.get("vocab_size")
    if "d2t" in tensors:
        problems = check_d2t(tensors["d2t"].tolist(), vocab)
        return [Finding("error", "d2t", "; ".join(problems)) if problems else
                Finding("ok", "d2t", f"{dv} draft ids map to distinct target ids in range")]
    if dv != vocab:
        return [Finding("error", "d2t", f"draft_vocab_size {dv} < vocab {vocab} but no d2t table")]
    return []


def _eagle_mtp_static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
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
    out += _d2t_findings(cfg, tensors)
    out.append(Finding("warning", "deploy", "TensorRT-LLM serves MTP only as a target's own layers "
                                            "(num_nextn_predict_layers, DeepSeek-V3-style checkpoints): this head is "
                                            "for measurement and planning (drafter.type eagle_mtp); train eagle3 for a deployable drafter"))
    return out


def _lm_head_check(drafter_lm: torch.Tensor | None, d2t: torch.Tensor | None, target_lm: torch.Tensor) -> Finding:
    if drafter_lm is None:
        return Finding("ok", "lm_head", "no lm_head: TensorRT-LLM uses the target's")
    ids = torch.arange(drafter_lm.shape[0]) + (d2t if d2t is not None else 0)
    ref = target_lm[ids].float()
    cos = torch.nn.functional.cosine_similarity(drafter_lm.float(), ref, dim=-1).mean().item()
    if d2t is None and torch.allclose(drafter_lm.float(), ref, atol=1e-2, rtol=1e-2):
        return Finding("ok", "lm_head", "lm_head is the target's")
    if cos < 0.05:
        return Finding("warning", "lm_head", f"lm_head rows barely resemble the target's (mean cosine {cos:.3f}): "
                                             "random or for another target?")
    return Finding("ok", "lm_head", f"lm_head rows follow the target's (mean cosine {cos:.3f})")


def first_step_counts(target, drafter, ids: list[int], scored: list[int]) -> tuple[int, int, int, int]:
    """Teacher-forced first draft step of an EAGLE-3 ``drafter`` over the tokens j of ``ids`` with ``scored[j]``
    (each predicted from position j - 2: the target's features there and the embedding of token j - 1):
    (proposals equal to the target's greedy token, i.e. accepted; proposals equal to the target's best token
    inside the draft vocabulary, the metric training reports; greedy tokens the draft vocabulary holds; tokens)."""
    cache, dev = target.new_cache(1, len(ids) + 1), target.device
    logits, aux, _ = target.forward(torch.tensor([ids], device=dev), torch.tensor([0], device=dev), cache,
                                    capture=drafter.capture)
    draft = drafter.teacher_forced(ids, aux)  # position t predicts token t + 2
    vocab_ids = torch.arange(draft.shape[-1], device=dev) + (drafter.d2t if drafter.d2t is not None else 0)
    greedy = logits[0].argmax(-1)[1:]  # token t + 2 as the target chooses it at position t + 1
    best_inside = logits[0][:, vocab_ids].argmax(-1)[1:]
    prop = draft.argmax(-1)
    mask = torch.tensor([*scored[2:], 0], dtype=torch.bool, device=dev)
    return (int((vocab_ids[prop] == greedy)[mask].sum()), int((prop == best_inside)[mask].sum()),
            int(torch.isin(greedy, vocab_ids)[mask].sum()), int(mask.sum()))


def _eagle3_parity(drafter_dir: Path, target_dir: Path, heldout: Path | None, tol: float, placement=None) -> Finding:
    from trtllm_spec.runtime.drafters.eagle3 import Eagle3Drafter
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.train.export import read_meta

    meta = read_meta(drafter_dir)
    recorded = (meta.get("training") or {}).get("heldout_acc")
    path = heldout or drafter_dir.parent / HELDOUT_FILE
    if not recorded or not path.is_file():
        return Finding("info", "parity", "no recorded held-out accuracy and chunks next to the drafter; parity "
                                         f"not checked (expected {path})")
    chunks = json.loads(path.read_text())
    dev, dt = (placement.device, placement.torch_dtype(torch)) if placement else ("cpu", torch.float32)
    target = LlamaModel.from_pretrained(target_dir, dtype=dt, device=dev)
    drafter = Eagle3Drafter(drafter_dir, target)
    hit = total = 0
    for c in chunks:  # loss_mask[j] gates token j + 1
        _, within, _, n = first_step_counts(target, drafter, c["input_ids"], [0, *c["loss_mask"][:-1]])
        hit, total = hit + within, total + n
    acc = hit / max(total, 1)
    lm = _lm_head_check(drafter.lm_head if drafter.lm_head is not target.lm_head else None, drafter.d2t,
                        target.lm_head)
    diff = acc - recorded[0]
    msg = (f"first-step accuracy on {len(chunks)} held-out chunks: {acc:.3f} reading the export as deployed vs "
           f"{recorded[0]:.3f} recorded in training ({lm.message})")
    if abs(diff) > tol:
        return Finding("error", "parity", msg + f": differs by {diff:+.3f} (> {tol}); the exported drafter does not "
                                                "compute what was trained")
    return Finding("ok", "parity", msg)


# ---- DFlash -----------------------------------------------------------------------------------------------------

def _dflash_static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
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


# ---- DFlash2 ----------------------------------------------------------------------------------------------------

def _dflash2_static(cfg: dict, tensors: dict, target: dict) -> list[Finding]:
    """DFlash's checks (block_size read from dflash_config, where z-lab's layout nests it), the DFlash2 fields, and
    the convolution and selector tensors with their shapes (docs/dflash2.md, "Tensors")."""
    from trtllm_spec.drafters.dflash2.layout import field, layout_refusal

    out = _dflash_static({**cfg, "block_size": field(cfg, "block_size")}, tensors, target)
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


# the static checks of each exported layout (Mechanism.doctor_layout names one)
LAYOUT_CHECKS = {"eagle3": _eagle3_static, "eagle_mtp": _eagle_mtp_static, "dflash": _dflash_static,
                 "dflash2": _dflash2_static}
