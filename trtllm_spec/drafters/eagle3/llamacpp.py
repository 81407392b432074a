"""An exported EAGLE-3 head as the GGUF llama.cpp's ``draft-eagle3`` reads (``Mechanism.llamacpp_convert``).

EAGLE-3 (``conversion/llama.py``: detected by ``draft_vocab_size`` and one layer, needs
``--target-model-dir``) reads ``eagle_aux_hidden_state_layer_ids`` at the config's top level only, as indices
of target *layer inputs*, and otherwise uses ``[2, L//2, L-3]``. Our export (ModelOpt's layout) keeps the ids
nested under ``eagle_config`` as 0-based layer *outputs* (TensorRT-LLM's ``layers_to_capture``): output of
layer i = input of layer i + 1. So the conversion call stages the drafter folder with the top-level ids
``[i + 1 for i in ours]``: llama.cpp then feeds the same hidden states TensorRT-LLM captures, whether the ids
are the defaults or not. Our export itself is left unchanged (TensorRT-LLM reads the nested ids).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from trtllm_spec.errors import UserError
from trtllm_spec.llamacpp.convert import LINKED, byte_level_bpe, outtype, run_converter


def capture_ids(cfg: dict, target_layers: int) -> list[int]:
    """The EAGLE-3 capture layers as llama.cpp reads them (target layer inputs): ours + 1."""
    from trtllm_spec.core.shape import default_capture_layers

    ours = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or \
        default_capture_layers(target_layers)
    if len(ours) != 3:
        raise UserError(f"EAGLE-3 drafter captures {len(ours)} target layers ({ours}); llama.cpp's draft-eagle3 "
                        "runs heads over exactly 3 (common/speculative.cpp)")
    bad = [i for i in ours if not 0 <= int(i) < target_layers]
    if bad:
        raise UserError(f"EAGLE-3 capture layer {bad[0]} is outside the target's 0..{target_layers - 1}")
    return [int(i) + 1 for i in ours]


def convert(converter: Path, drafter_dir: Path, target_dir: Path, out_file: Path, dtype: str,
            log: Callable[[str], None] = lambda _m: None) -> dict:
    """An exported EAGLE-3 head -> GGUF (arch eagle3), with the capture layers written as llama.cpp reads them."""
    cfg = json.loads((drafter_dir / "config.json").read_text())
    target_cfg = json.loads((target_dir / "config.json").read_text())
    if cfg.get("num_hidden_layers", 1) != 1:
        raise UserError(f"EAGLE-3 drafter {drafter_dir} has {cfg.get('num_hidden_layers')} layers; llama.cpp's "
                        "converter takes a 1-layer EAGLE-3 head only (conversion/llama.py)")
    ids = capture_ids(cfg, int(target_cfg["num_hidden_layers"]))
    with tempfile.TemporaryDirectory(prefix=".eagle3-", dir=out_file.parent) as tmp:
        staged = Path(tmp)
        for f in drafter_dir.iterdir():
            if f.is_file() and f.suffix in LINKED and f.name != "config.json":
                os.symlink(f.resolve(), staged / f.name)
        (staged / "config.json").write_text(json.dumps({**cfg, "eagle_aux_hidden_state_layer_ids": ids}, indent=2))
        vocab = "gpt2" if byte_level_bpe(target_dir) else "auto"
        run_converter(converter, vocab, [str(staged), "--target-model-dir", str(target_dir), "--outfile",
                                         str(out_file), "--outtype", outtype(dtype)], log)
    return {"dtype": dtype, "outtype": outtype(dtype), "llamacpp_target_layers": ids,
            "our_capture_layers": [i - 1 for i in ids]}
