"""Pick the runtime drafter for a spec: ``ngram``, or a folder (EAGLE-3 / DFlash export, or a draft model)."""

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
    from trtllm_spec.train.doctor import drafter_type

    cfg = json.loads(cfg_path.read_text())
    kind = drafter_type(cfg)
    if kind != "unknown":
        return kind
    if cfg.get("model_type") in ("llama", "mistral", "qwen2", "qwen3"):
        return "draft_model"
    raise UserError(f"{folder}: config.json is not an EAGLE-3, EAGLE-MTP, DFlash/DSpark drafter or a Llama-family "
                    "draft model")


def load_runtime_drafter(spec: str, target: LlamaModel, *, expect: str | None = None,
                         max_matching_ngram_size: int = 3, max_len: int = 8192) -> tuple[str, Drafter]:
    """(kind, drafter). ``expect``: the drafter type the caller asked for; a mismatch is a clear error."""
    if spec == "ngram":
        from trtllm_spec.runtime.drafters.ngram import NGramDrafter

        kind, drafter = "ngram", NGramDrafter(max_matching_ngram_size)
    else:
        folder = Path(spec)
        if not folder.is_dir():
            raise UserError(f"drafter {spec!r} is neither 'ngram' nor an existing folder")
        kind = folder_kind(folder)
        if expect and expect != kind and not (expect == "dspark" and kind == "dflash"):
            raise UserError(f"drafter folder {folder} holds a {kind} drafter, not {expect}")
        if kind in ("eagle3", "mtp"):  # an EAGLE-MTP head is an EAGLE layout without fc (see eagle3.py)
            from trtllm_spec.runtime.drafters.eagle3 import Eagle3Drafter

            drafter = Eagle3Drafter(folder, target, max_len=max_len)
        elif kind in ("dflash", "dspark"):
            from trtllm_spec.runtime.drafters.dflash import DFlashDrafter

            drafter = DFlashDrafter(folder, target, max_len=max_len)
        else:
            from trtllm_spec.runtime.drafters.draft_model import DraftModelDrafter

            model = LlamaModel.from_pretrained(folder, dtype=target.dtype, device=target.device)
            if model.cfg.vocab_size != target.cfg.vocab_size:
                raise UserError(f"draft model {folder} has vocab {model.cfg.vocab_size}, the target "
                                f"{target.cfg.vocab_size}: a draft model needs the target's tokenizer")
            drafter = DraftModelDrafter(model, max_len=max_len)
    return kind, drafter
