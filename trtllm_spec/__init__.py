"""trtllm-spec: speculative decoding co-design for TensorRT-LLM."""

__version__ = "0.1.0"
