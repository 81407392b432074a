"""``trtllm-spec doctor``: is this drafter folder what TensorRT-LLM will load, and does it still do what it
did in training? Every check reports; nothing stops at the first finding.

The checks of a mechanism's exported layout, and its train/serve parity check where it has one, are in its package
(``drafters/<name>/doctor.py``, reached through ``Mechanism.doctor_checks`` / ``doctor_parity``: EAGLE-3 and
EAGLE-MTP layouts, d2t, lm_head, first-step parity; the DFlash family's block, mask and tensors; DFlash2's
convolutions and selector). Here: the folder is read once, the mechanism recognised, and the checks every export
gets (declared dtype vs stored tensors, finite non-zero weights, rope scaling).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trtllm_spec.core.artifacts import HELDOUT_FILE  # noqa: F401  (re-exported: train/run writes it)
from trtllm_spec.drafters.base import Finding
from trtllm_spec.errors import UserError


def drafter_type(cfg: dict) -> str:
    """The drafter mechanism of an exported config.json (the descriptors recognise it); 'unknown' otherwise."""
    from trtllm_spec.drafters.registry import exported_type, get

    kind = exported_type(cfg)  # doctor checks drafters with a layout of their own, not plain (draft) models
    return kind if kind is not None and get(kind).has_doctor_checks else "unknown"


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
    # the mechanism's own checks (its package's doctor.py, torch imported there: the descriptors stay torch-free for
    # recipe validate / plan), then its train/serve parity check where it has one and its layout is sound
    if kind != "unknown":
        from trtllm_spec.drafters.registry import get

        mech = get(kind)
        f += mech.doctor_checks(cfg, tensors, target_cfg) or []
        if target_dir is not None and not any(x.level == "error" for x in f):
            parity = mech.doctor_parity(drafter_dir, target_dir, heldout, parity_tolerance, placement)
            f += [parity] if parity is not None else []
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
