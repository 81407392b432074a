"""DSpark: DFlash-style KV fusion plus a light Markov head over the block; one parallel pass, at D = block_size."""

from __future__ import annotations

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import Mechanism
from trtllm_spec.drafters.dflash import DFlash
from trtllm_spec.drafters.dspark.config import DSparkDrafter


class DSpark(DFlash):
    name = "dspark"
    config_class = DSparkDrafter
    decoding_types = ("DSpark",)
    llamacpp_spec_type = None
    vllm_method = None
    vllm_refusal = ("vLLM's 'dspark' method runs DSpark heads with adaptive verification, which our DSpark export "
                    "has not been checked against; measure it with 'measure reference'")
    llamacpp_convert = Mechanism.llamacpp_convert  # no converter: refused with llamacpp_refusal
    llamacpp_refusal = ("llama.cpp's draft-dspark runs the DSpark heads of DeepSeek-V4 and Gemma-4 checkpoints "
                        "(conversion/deepseek.py, gemma.py), not a DFlash drafter with a Markov head")
    title = "DSpark"
    summary = "DFlash-style KV fusion + a light Markov head over the block; one parallel pass"
    # DSpark drafts all block_size positions (next-token alignment from the anchor; DSparkDrafter.shift_label):
    # - NVIDIA Model-Optimizer 0.47, modelopt/torch/speculative/plugins/modeling_dspark.py: DSparkModule sets
    #   shift_label = True ("DSpark treats the anchor as the first prediction position"); hf_dspark.py's loss
    #   takes labels at anchor + k + 1 for k = 0..block_size-1 ("position 0 is not excluded"); the exporter
    #   (torch/export/plugins/hf_spec_export.py, DSparkExporter) writes dflash_config.shift_label.
    # - NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/dspark.py (DSparkWorker._lazy_init, at 005c932d):
    #   "DSpark draft model block_size must equal worker max_draft_len".

    def default_config(self) -> DSparkDrafter:
        return DSparkDrafter()

    dynamic_draft_len_since = None  # support_dynamic_draft_len() never lists DSpark: one D, no max_concurrency
    step_cost_table = True  # confidence-scheduled verification reads a step-cost table (planner/dspark_table.py)

    def only_draft_len(self, cfg: DSparkDrafter) -> int:
        # TensorRT-LLM's DSparkWorker._lazy_init (cited above) refuses any max_draft_len but the checkpoint's
        # block_size, and the worker drafts the whole block each iteration, so a draft_len_schedule (another D at
        # some batch sizes) is not something it can run: D = block_size, or speculation off (max_concurrency).
        return cfg.block_size

    def _head_params(self, target: ModelShape) -> float:
        return 2 * target.hidden_size * target.hidden_size  # assumption: a small gated head, ~2 H x H

    def modelopt_architecture(self, cfg: DSparkDrafter) -> dict:
        # ModelOpt 0.47: DSpark = the dflash mode with projector_type "dspark" (nvidia-modelopt 0.47.0,
        # modelopt/torch/speculative/config.py and plugins/modeling_dspark.py)
        return {"projector_type": "dspark", "markov_head_type": cfg.markov_head_type, "markov_rank": cfg.markov_rank}

    def trtllm_speculative_config(self, cfg: DSparkDrafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, **extra) -> dict:
        # DSparkDecodingConfig (1.3+) shares DFlash's fields; block_size and markov_head_type default to the
        # checkpoint's values, so they are not written
        out = super().trtllm_speculative_config(cfg, profile=profile, max_draft_len=max_draft_len,
                                                speculative_model=speculative_model, **extra)
        out["decoding_type"] = "DSpark"
        return out
