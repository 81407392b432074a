"""GGUF files for llama.cpp from our checkpoints, written by llama.cpp's own ``convert_hf_to_gguf.py`` (the copy
kept with the build, so the converter and the binaries come from the same commit).

- The target is converted at f32 or bf16 (the precision of the reference run it is compared with), never a
  4-bit model: a comparison of acceptance needs the same weights on both engines.
- Byte-level BPE tokenizers (SmolLM2, GPT-2 style) take the converter's GPT-2 vocabulary path
  (``convert_runner.py`` says why); the written ``tokenizer.ggml.model`` is checked after conversion.
- EAGLE-3 (``conversion/llama.py``: detected by ``draft_vocab_size`` and one layer, needs
  ``--target-model-dir``) reads ``eagle_aux_hidden_state_layer_ids`` at the config's top level only, as indices
  of target *layer inputs*, and otherwise uses ``[2, L//2, L-3]``. Our export (ModelOpt's layout) keeps the ids
  nested under ``eagle_config`` as 0-based layer *outputs* (TensorRT-LLM's ``layers_to_capture``): output of
  layer i = input of layer i + 1. So the conversion call stages the drafter folder with the top-level ids
  ``[i + 1 for i in ours]``: llama.cpp then feeds the same hidden states TensorRT-LLM captures, whether the ids
  are the defaults or not. Our export itself is left unchanged (TensorRT-LLM reads the nested ids).
- DFlash (``DFlashDraftModel``, ``conversion/qwen.py``) reads ``dflash_config.target_layer_ids`` as layer outputs
  and shifts them itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from trtllm_spec.errors import UserError

OUTTYPES = {"fp32": "f32", "bf16": "bf16"}
RUNNER = Path(__file__).with_name("convert_runner.py")
LINKED = (".safetensors", ".json", ".jinja", ".txt", ".model")


def outtype(dtype: str) -> str:
    if dtype not in OUTTYPES:
        raise UserError(f"GGUF precision {dtype!r}: llama.cpp is compared at the reference run's precision, one of "
                        f"{', '.join(OUTTYPES)} (never a 4-bit model)")
    return OUTTYPES[dtype]


def byte_level_bpe(model_dir: Path) -> bool:
    """tokenizer.json is a BPE model behind a ByteLevel pre-tokenizer (GPT-2 style)."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return False
    tok = json.loads(path.read_text(encoding="utf-8"))
    if (tok.get("model") or {}).get("type") != "BPE":
        return False
    pre = tok.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers") or [pre]
    return any((p or {}).get("type") == "ByteLevel" for p in parts)


def convert_target(converter: Path, target_dir: Path, out_file: Path, dtype: str,
                   log: Callable[[str], None] = lambda _m: None) -> dict:
    """``target_dir`` (an HF checkpoint) -> ``out_file`` (GGUF at ``dtype``). Returns what was done."""
    cfg = json.loads((target_dir / "config.json").read_text())
    if cfg.get("quantization_config"):
        raise UserError(f"target {target_dir} is quantized ({cfg['quantization_config'].get('quant_method')}); "
                        "llama.cpp is compared on the same f32/bf16 weights as the reference decoder: give the "
                        "unquantized checkpoint")
    vocab = "gpt2" if byte_level_bpe(target_dir) else "auto"
    _run(converter, vocab, [str(target_dir), "--outfile", str(out_file), "--outtype", outtype(dtype)], log)
    model = gguf_tokenizer_model(converter, out_file)
    if vocab == "gpt2" and model != "gpt2":
        raise UserError(f"{out_file}: the converter wrote a {model!r} vocabulary for {target_dir}'s byte-level BPE "
                        "tokenizer (llama.cpp would mis-tokenize or abort); report it with the converter's log")
    return {"dtype": dtype, "outtype": outtype(dtype), "vocabulary": model, "forced_gpt2_vocab": vocab == "gpt2"}


def llamacpp_capture_ids(cfg: dict, target_layers: int) -> list[int]:
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


def convert_eagle3(converter: Path, drafter_dir: Path, target_dir: Path, out_file: Path, dtype: str,
                   log: Callable[[str], None] = lambda _m: None) -> dict:
    """An exported EAGLE-3 head -> GGUF (arch eagle3), with the capture layers written as llama.cpp reads them."""
    cfg = json.loads((drafter_dir / "config.json").read_text())
    target_cfg = json.loads((target_dir / "config.json").read_text())
    if cfg.get("num_hidden_layers", 1) != 1:
        raise UserError(f"EAGLE-3 drafter {drafter_dir} has {cfg.get('num_hidden_layers')} layers; llama.cpp's "
                        "converter takes a 1-layer EAGLE-3 head only (conversion/llama.py)")
    ids = llamacpp_capture_ids(cfg, int(target_cfg["num_hidden_layers"]))
    with tempfile.TemporaryDirectory(prefix=".eagle3-", dir=out_file.parent) as tmp:
        staged = Path(tmp)
        for f in drafter_dir.iterdir():
            if f.is_file() and f.suffix in LINKED and f.name != "config.json":
                os.symlink(f.resolve(), staged / f.name)
        (staged / "config.json").write_text(json.dumps({**cfg, "eagle_aux_hidden_state_layer_ids": ids}, indent=2))
        vocab = "gpt2" if byte_level_bpe(target_dir) else "auto"
        _run(converter, vocab, [str(staged), "--target-model-dir", str(target_dir), "--outfile", str(out_file),
                                "--outtype", outtype(dtype)], log)
    return {"dtype": dtype, "outtype": outtype(dtype), "llamacpp_target_layers": ids,
            "our_capture_layers": [i - 1 for i in ids]}


def convert_dflash(converter: Path, drafter_dir: Path, target_dir: Path, out_file: Path, dtype: str,
                   log: Callable[[str], None] = lambda _m: None) -> dict:
    """An exported DFlash drafter (DFlashDraftModel) -> GGUF (arch dflash)."""
    vocab = "gpt2" if byte_level_bpe(target_dir) else "auto"
    _run(converter, vocab, [str(drafter_dir), "--target-model-dir", str(target_dir), "--outfile", str(out_file),
                            "--outtype", outtype(dtype)], log)
    return {"dtype": dtype, "outtype": outtype(dtype)}


def gguf_tokenizer_model(converter: Path, gguf_file: Path) -> str | None:
    """``tokenizer.ggml.model`` of a GGUF, read with the build's own gguf-py (in a child: no import here)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import gguf; r = gguf.GGUFReader(sys.argv[2]); "
            "f = r.fields.get('tokenizer.ggml.model'); print(f.contents() if f else '')")
    proc = subprocess.run([sys.executable, "-c", code, str(converter.parent / "gguf-py"), str(gguf_file)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"cannot read {gguf_file} with gguf-py: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip() or None


def _run(converter: Path, vocab: str, args: list[str], log) -> None:
    cmd = [sys.executable, str(RUNNER), str(converter.parent), vocab, "--", *args]
    log(f"llama.cpp: converting {Path(args[0]).name} -> {Path(args[args.index('--outfile') + 1]).name} "
        f"({args[args.index('--outtype') + 1]}) ...")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise UserError(f"llama.cpp's convert_hf_to_gguf.py failed on {args[0]} (exit {proc.returncode}):\n{tail}")
