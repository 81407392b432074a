"""GGUF files for llama.cpp from our checkpoints, written by llama.cpp's own ``convert_hf_to_gguf.py`` (the copy
kept with the build, so the converter and the binaries come from the same commit).

- The target is converted at f32 or bf16 (the precision of the reference run it is compared with), never a
  4-bit model: a comparison of acceptance needs the same weights on both engines.
- Byte-level BPE tokenizers (SmolLM2, GPT-2 style) take the converter's GPT-2 vocabulary path
  (``convert_runner.py`` says why); the written ``tokenizer.ggml.model`` is checked after conversion.
- A drafter is converted by its mechanism's package (``Mechanism.llamacpp_convert``: EAGLE-3's
  ``drafters/eagle3/llamacpp.py``, the one DFlash and DFlash2 share in ``drafters/dflash/llamacpp.py``), which
  calls ``run_converter`` here.
"""

from __future__ import annotations

import json
import subprocess
import sys
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
    run_converter(converter, vocab, [str(target_dir), "--outfile", str(out_file), "--outtype", outtype(dtype)], log)
    model = gguf_tokenizer_model(converter, out_file)
    if vocab == "gpt2" and model != "gpt2":
        raise UserError(f"{out_file}: the converter wrote a {model!r} vocabulary for {target_dir}'s byte-level BPE "
                        "tokenizer (llama.cpp would mis-tokenize or abort); report it with the converter's log")
    return {"dtype": dtype, "outtype": outtype(dtype), "vocabulary": model, "forced_gpt2_vocab": vocab == "gpt2"}


def gguf_tokenizer_model(converter: Path, gguf_file: Path) -> str | None:
    """``tokenizer.ggml.model`` of a GGUF, read with the build's own gguf-py (in a child: no import here)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import gguf; r = gguf.GGUFReader(sys.argv[2]); "
            "f = r.fields.get('tokenizer.ggml.model'); print(f.contents() if f else '')")
    proc = subprocess.run([sys.executable, "-c", code, str(converter.parent / "gguf-py"), str(gguf_file)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"cannot read {gguf_file} with gguf-py: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip() or None


def run_converter(converter: Path, vocab: str, args: list[str], log) -> None:
    cmd = [sys.executable, str(RUNNER), str(converter.parent), vocab, "--", *args]
    log(f"llama.cpp: converting {Path(args[0]).name} -> {Path(args[args.index('--outfile') + 1]).name} "
        f"({args[args.index('--outtype') + 1]}) ...")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise UserError(f"llama.cpp's convert_hf_to_gguf.py failed on {args[0]} (exit {proc.returncode}):\n{tail}")
