"""ModelOpt PTQ of a tiny target into a unified HF checkpoint (what TensorRT-LLM's PyTorch backend loads)."""

import json

import pytest

from trtllm_spec.deploy.quantize import check_quantization, quantize_target
from trtllm_spec.errors import UserError


def test_fp8_exports_a_unified_checkpoint(tiny_target, tmp_path):
    info = quantize_target(tiny_target, "fp8", tmp_path / "q", ["w1 w2 w3 w4", "w5 w6 w7"], log=lambda m: None)
    assert "hf_quant_config.json" in info["files"] and "config.json" in info["files"]
    q = json.loads((tmp_path / "q" / "hf_quant_config.json").read_text())
    assert q["quantization"]["quant_algo"] == "FP8"
    assert (tmp_path / "q" / "tokenizer.json").is_file()


def test_quantization_rules():
    with pytest.raises(UserError, match="hidden size >= 128"):
        check_quantization("int4_awq", 64, gpu_available=False)
    assert check_quantization("nvfp4", 4096, gpu_available=False)  # deferred without a GPU
    assert check_quantization("fp8", 64, gpu_available=False) is None
