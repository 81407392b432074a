"""Pick the runtime drafter for a spec: ``ngram`` / ``suffix``, or a folder (EAGLE-3 / DFlash export, or a draft model).
The folder's mechanism and its loader come from the drafter descriptors (``trtllm_spec.drafters``)."""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_spec.errors import UserError
from trtllm_spec.runtime.decoder import Drafter
from trtllm_spec.runtime.llama import LlamaModel


def folder_kind(folder: Path) -> str:
    """'eagle3' | 'eagle_mtp' | 'dflash' | 'dspark' | 'draft_model' from a folder's config.json."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"drafter folder {folder} has no config.json")
    from trtllm_spec.drafters.registry import exported_type, folder_refusal

    cfg = json.loads(cfg_path.read_text())
    kind = exported_type(cfg)
    if kind is not None:
        return kind
    why = folder_refusal(cfg, str(cfg_path))  # a layout that resembles one of ours (DFlash2's: not DFlash)
    if why is not None:
        raise UserError(why)
    raise UserError(f"{folder}: config.json is not an EAGLE-3, EAGLE-MTP, DFlash/DSpark drafter or a Llama-family "
                    "draft model")


def load_runtime_drafter(spec: str, target: LlamaModel, *, expect: str | None = None, options: dict | None = None,
                         max_len: int = 8192) -> tuple[str, Drafter]:
    """(kind, drafter). ``spec``: a folderless mechanism's name ('ngram', 'suffix') or an exported folder, whose
    mechanism the descriptors recognise. ``options``: the descriptor's ``runtime_options`` (a folderless drafter's
    settings; ``sa_enhancer`` wraps a neural drafter in TensorRT-LLM's suffix-automaton enhancer). ``expect``: the
    drafter type the caller asked for; a mismatch is a clear error."""
    from trtllm_spec.drafters.registry import folderless, get

    options = dict(options or {})
    if spec in folderless():
        if options.get("sa_enhancer"):
            raise UserError(f"sa_enhancer enhances a neural drafter ({_enhanced()}), not {spec}")
        return spec, get(spec).load_builtin(options)
    folder = Path(spec)
    if not folder.is_dir():
        raise UserError(f"drafter {spec!r} is neither {' nor '.join(repr(n) for n in folderless())} nor an "
                        "existing folder")
    if expect:
        from trtllm_spec.drafters.registry import folder_refusal

        cfg_path = folder / "config.json"
        why = folder_refusal(json.loads(cfg_path.read_text()), str(cfg_path), expect) if cfg_path.is_file() else None
        if why is not None:
            raise UserError(why)
    kind = folder_kind(folder)
    if expect and expect != kind:
        raise UserError(f"drafter folder {folder} holds a {kind} drafter, not {expect}")
    drafter = get(kind).load_runtime(folder, target, max_len)
    enhancer = options.pop("sa_enhancer", None)
    if options:
        raise UserError(f"drafter options {sorted(options)} do not apply to a {kind} folder")
    if enhancer:
        if not get(kind).sa_enhanced:
            raise UserError(f"sa_enhancer: TensorRT-LLM's sa_config exists on the decoding configs of {_enhanced()}, "
                            f"not on a {kind} drafter")
        from trtllm_spec.core.sa import SA_THRESHOLD_DEFAULT
        from trtllm_spec.drafters.suffix.sa_enhancer import SAEnhancedDrafter

        drafter = SAEnhancedDrafter(drafter, int(enhancer.get("threshold", SA_THRESHOLD_DEFAULT)), bool(enhancer.get("enable_global_pool")),
                                    enhancer.get("pool_slots"))
    return kind, drafter


def _enhanced() -> str:
    """The mechanisms TensorRT-LLM's SA enhancer applies to (Mechanism.sa_enhanced), for messages."""
    from trtllm_spec.drafters.registry import MECHANISMS

    return " / ".join(m.title for m in MECHANISMS.values() if m.sa_enhanced)
