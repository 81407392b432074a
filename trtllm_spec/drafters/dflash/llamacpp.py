"""An exported DFlash-family drafter as the GGUF llama.cpp's ``draft-dflash`` reads (``Mechanism.llamacpp_convert``
of DFlash and DFlash2).

DFlash (``DFlashDraftModel``, ``conversion/qwen.py``) reads ``dflash_config.target_layer_ids`` as layer outputs
and shifts them itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trtllm_spec.llamacpp.convert import byte_level_bpe, outtype, run_converter


def convert(converter: Path, drafter_dir: Path, target_dir: Path, out_file: Path, dtype: str,
            log: Callable[[str], None] = lambda _m: None) -> dict:
    """An exported DFlash or DFlash2 drafter -> GGUF (arch dflash; the vendored converter writes DFlash2's four
    ``dflash_config`` integers when it finds ``conv_kernel_size``, conversion/qwen.py)."""
    vocab = "gpt2" if byte_level_bpe(target_dir) else "auto"
    run_converter(converter, vocab, [str(drafter_dir), "--target-model-dir", str(target_dir), "--outfile",
                                     str(out_file), "--outtype", outtype(dtype)], log)
    return {"dtype": dtype, "outtype": outtype(dtype)}
