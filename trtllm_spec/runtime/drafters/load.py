"""Pick the runtime drafter for a spec: ``ngram``, or a folder (EAGLE-3 / DFlash export, or a draft model).
The folder's mechanism and its loader come from the drafter descriptors (``trtllm_spec.drafters``)."""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_spec.errors import UserError
from trtllm_spec.runtime.decoder import Drafter
from trtllm_spec.runtime.llama import LlamaModel


def folder_kind(folder: Path) -> str:
    """'eagle3' | 'mtp' | 'dflash' | 'dspark' | 'draft_model' from a folder's config.json."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"drafter folder {folder} has no config.json")
    from trtllm_spec.drafters.registry import exported_type

    kind = exported_type(json.loads(cfg_path.read_text()))
    if kind is not None:
        return kind
    raise UserError(f"{folder}: config.json is not an EAGLE-3, EAGLE-MTP, DFlash/DSpark drafter or a Llama-family "
                    "draft model")


def load_runtime_drafter(spec: str, target: LlamaModel, *, expect: str | None = None,
                         max_matching_ngram_size: int = 3, max_len: int = 8192) -> tuple[str, Drafter]:
    """(kind, drafter). ``expect``: the drafter type the caller asked for; a mismatch is a clear error."""
    # Drafter-type branch 1 of 3 outside drafters/: 'ngram' is the spec token of the one mechanism without a
    # folder (measure --drafter ngram); everything else is recognised from its folder by the descriptors.
    if spec == "ngram":
        from trtllm_spec.runtime.drafters.ngram import NGramDrafter

        return "ngram", NGramDrafter(max_matching_ngram_size)
    folder = Path(spec)
    if not folder.is_dir():
        raise UserError(f"drafter {spec!r} is neither 'ngram' nor an existing folder")
    kind = folder_kind(folder)
    if expect and expect != kind:
        raise UserError(f"drafter folder {folder} holds a {kind} drafter, not {expect}")
    from trtllm_spec.drafters.registry import get

    return kind, get(kind).load_runtime(folder, target, max_len)
