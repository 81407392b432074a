"""Post-training quantization of the target with ModelOpt into a unified HF checkpoint (``hf_quant_config.json``,
what TensorRT-LLM's PyTorch backend loads). FP8 and INT4-AWQ calibrate and export on CPU; NVFP4's
fake-quant forward needs CUDA, so without a GPU the stage is deferred with its command.

A drafter trained on the bf16 target should be re-measured on the quantized one: quantization moves the
target's distribution, and with it acceptance.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from trtllm_spec.errors import UserError

AWQ_BLOCK = 128


def check_quantization(method: str, hidden_size: int, gpu_available: bool) -> str | None:
    """Raise on what cannot work; return a 'deferred' reason when it needs a GPU."""
    if method == "int4_awq" and hidden_size < AWQ_BLOCK:
        raise UserError(f"quantization.method int4_awq needs hidden size >= {AWQ_BLOCK} (its block size); the target "
                        f"has {hidden_size}. Use fp8 or none")
    if method == "int4_awq" and hidden_size % AWQ_BLOCK:
        raise UserError(f"quantization.method int4_awq needs the hidden size ({hidden_size}) to be a multiple of "
                        f"{AWQ_BLOCK}; use fp8 or none")
    if method == "nvfp4" and not gpu_available:
        return "NVFP4 calibration runs a CUDA fake-quant forward; no GPU here"
    return None


def quantize_target(target_dir: Path, method: str, out: Path, calib_texts: list[str],
                    log: Callable[[str], None] = print) -> dict:
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = {"fp8": mtq.FP8_DEFAULT_CFG, "int4_awq": mtq.INT4_AWQ_CFG, "nvfp4": mtq.NVFP4_DEFAULT_CFG}[method]
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()

    def forward_loop(m) -> None:
        for text in calib_texts:
            ids = tok(text, return_tensors="pt", truncation=True, max_length=512)
            with torch.no_grad():
                m(**ids)

    log(f"quantize: calibrating {method} on {len(calib_texts)} texts ...")
    mtq.quantize(model, cfg, forward_loop)
    out.mkdir(parents=True, exist_ok=True)
    export_hf_checkpoint(model, dtype=torch.bfloat16, export_dir=str(out))
    tok.save_pretrained(str(out))
    for extra in ("chat_template.jinja", "generation_config.json"):
        if (target_dir / extra).is_file() and not (out / extra).exists():
            shutil.copy2(target_dir / extra, out / extra)
    files = sorted(p.name for p in out.iterdir())
    if "hf_quant_config.json" not in files:
        raise UserError(f"ModelOpt exported no hf_quant_config.json for {method}; files: {files}")
    return {"method": method, "files": files, "calibration_texts": len(calib_texts)}
