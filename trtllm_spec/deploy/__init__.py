"""Renderers, importing no stage: LLM API options (a strict, versioned mirror of the fields we emit), the
serve/bench/SLURM scripts, legacy engine commands, the Triton model repository, the manifest and the quantized
checkpoint -- what the bundle stages write at the TensorRT-LLM boundary.

Nothing here imports ``tensorrt_llm``; only ``trtllm_schema.validate_with_tensorrt_llm`` tries to, lazily.
"""
