"""N-gram / prompt lookup: string matching over the prompt and the generated stream; no model."""

from __future__ import annotations

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, Mechanism
from trtllm_spec.drafters.ngram.config import NGramDrafter
from trtllm_spec.planner.acceptance import AcceptanceModel, chain

# TensorRT-LLM tech blog 7 (blog7_NGram_performance_Analysis_And_Auto_Enablement.md): "Average accepted
# length (AL) is ~1.3 in generic chat (MT-Bench, Magpie ...) and can exceed 4.0 on highly repetitive data";
# Magpie turn 1 at max_draft_len 5: AL 1.37-1.40. These rates give AL(5) = 1.40: a rare first match, then
# likely continuation.
NGRAM_RATES = [0.22, 0.45] + [0.5] * 62
NGRAM_SOURCE = "TensorRT-LLM blog 7: n-gram AL ~1.3-1.4 on generic chat (Magpie turn 1, max_draft_len 5)"


class NGram(Mechanism):
    name = "ngram"
    config_class = NGramDrafter
    decoding_types = ("NGram",)
    llamacpp_refusal = ("llama.cpp's ngram types (ngram-simple, ngram-map-*, ngram-mod) are other algorithms "
                        "than TensorRT-LLM's NGram drafter, so they are no second opinion on it")
    title = "n-gram"
    # vLLM's ngram: the longest suffix n-gram (prompt_lookup_min..max tokens) matched at its earliest position
    # (vllm/v1/spec_decode/ngram_proposer.py _find_longest_matched_ngram_and_propose_tokens), our is_use_oldest
    vllm_method = "ngram"
    acceptance_kind = "chain"
    dynamic_draft_len_since = None  # support_dynamic_draft_len() never lists NGram: one D at every batch size
    folderless = True
    summary = "prompt lookup: drafts the continuation of the last matching n-gram; no model, ~free"

    def default_config(self) -> NGramDrafter:
        return NGramDrafter()

    def default_acceptance(self, target: ModelShape, cfg: NGramDrafter) -> AcceptanceModel:
        return chain(NGRAM_RATES, NGRAM_SOURCE)

    def measure_spec(self, drafter_dir) -> str:
        return "ngram"  # the reference decoder's prompt-lookup drafter

    def runtime_options(self, cfg: NGramDrafter, max_batch_size: int = 1) -> dict:
        return {"max_matching_ngram_size": cfg.max_matching_ngram_size, "is_use_oldest": cfg.is_use_oldest}

    def vllm_options(self, runtime_options: dict) -> dict:
        if not runtime_options.get("is_use_oldest", True):
            from trtllm_spec.errors import UserError

            raise UserError("vLLM's ngram proposer continues the earliest match only; is_use_oldest: false has no "
                            "vLLM equivalent (measure it with 'measure reference')")
        return {"prompt_lookup_max": int(runtime_options.get("max_matching_ngram_size", 3)), "prompt_lookup_min": 1}

    def load_builtin(self, options: dict):
        from trtllm_spec.drafters.ngram.runtime import NGramDrafter as Runtime

        return Runtime(options.get("max_matching_ngram_size", 3), options.get("is_use_oldest", True))

    def cost(self, target: ModelShape, cfg: NGramDrafter) -> DraftCost:
        # matching runs on the host once per iteration (TensorRT-LLM blog 7: "<15% of iteration latency")
        return DraftCost(passes=(), drafter_layers=0, weight_params=0.0, kv_shape=None, sequential=False)

    def trtllm_speculative_config(self, cfg: NGramDrafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, **extra) -> dict:
        # NGramDecodingConfig fields, identical in 1.2 and 1.3 (llm_args.py)
        return {"decoding_type": "NGram", "max_draft_len": max_draft_len,
                "max_matching_ngram_size": cfg.max_matching_ngram_size, "is_keep_all": cfg.is_keep_all,
                "is_use_oldest": cfg.is_use_oldest, "is_public_pool": cfg.is_public_pool}
