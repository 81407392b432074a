"""The ``build`` stage's TensorRT-LLM boundary: LLM API options (a strict, versioned mirror of the fields we
emit), serve/bench/SLURM scripts, legacy engine commands and the Triton model repository.

Nothing here imports ``tensorrt_llm``; only ``trtllm_schema.validate_with_tensorrt_llm`` tries to, lazily.
"""
