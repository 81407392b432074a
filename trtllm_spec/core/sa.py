"""The recipe's suffix-automaton pieces shared by several drafter sections: TensorRT-LLM's SA enhancer
(``drafter.sa_enhancer`` on EAGLE-3 / MTP) and SA's numbers, each written once here (the pool's match cap, its
default slots, the enhancer's default threshold) for the recipe, the mirror and the reference decoder. The release
that first has SA is its decoding tag's (``core.releases.DECODING_TAGS["SA"].since``: ``sa_since``). The ``suffix``
section itself is in ``core.recipe``; sources on ``trtllm_spec.drafters.suffix``."""

from __future__ import annotations

from pydantic import Field

from trtllm_spec.core.releases import tag_since
from trtllm_spec.core.schema import StrictModel

SA_POOL_MATCH_CAP = 64  # SADecodingConfig.enable_global_pool: "suffix matching is capped at 64 tokens per request"
# automaton slots of the global pool when global_pool_size is not given: max(64, max_batch_size) (SADecodingConfig);
# a slot count, not the token cap above, though both are 64
SA_POOL_DEFAULT_SLOTS = 64
# SAEnhancerConfig.threshold: PositiveInt = 4 (the minimum suffix match, in tokens, for the automaton's drafts to win)
SA_THRESHOLD_DEFAULT = 4


class SAEnhancerConfig(StrictModel):
    """``drafter.sa_enhancer``: TensorRT-LLM's suffix-automaton draft enhancer (``SAEnhancerConfig``, passed as
    ``sa_config`` on Eagle3 / MTP decoding configs; 1.3.0rc27 and 1.4.0rc4 API pages): where the request's
    longest suffix match reaches ``threshold`` tokens, the automaton's drafts replace the neural ones
    (``_torch/speculative/sa_enhancer.py`` ``maybe_override_all_draft_tokens``: match_len >= threshold)."""

    threshold: int = Field(SA_THRESHOLD_DEFAULT, ge=1, le=1_000_000, description="minimum suffix match length (tokens) for the "
                           "suffix drafts to replace the neural drafts")
    enable_global_pool: bool = Field(False, description="also match against the other requests' token streams "
                                     "(measure: the suite's earlier prompts and outputs, in suite order)")


def sa_since() -> str:
    """The first release with SADecodingConfig / SAEnhancerConfig (absent from the 1.2 llm_args.py, present in
    1.3.0rc27): the ``SA`` decoding tag's record."""
    return tag_since("SA")


def enhancer_release(enhancer: SAEnhancerConfig | None, own: str) -> str:
    if enhancer is None:
        return own
    from trtllm_spec.core.releases import order

    return max(own, sa_since(), key=order)


def pool_slots(global_pool_size: int | None, max_batch_size: int) -> int:
    """Automaton slots of the global pool: global_pool_size, else max(64, max_batch_size) (SADecodingConfig)."""
    return global_pool_size or max(SA_POOL_DEFAULT_SLOTS, max_batch_size)


def enhancer_runtime_options(enhancer: SAEnhancerConfig | None, max_batch_size: int = 1) -> dict:
    """The SA enhancer's settings as the reference decoder reads them (``drafters/load.py``): built here
    once for the recipe's section (``Mechanism.runtime_options``) and for ``measure --sa-enhancer-threshold``."""
    if enhancer is None:
        return {}
    return {"sa_enhancer": {"threshold": enhancer.threshold, "enable_global_pool": enhancer.enable_global_pool,
                            "pool_slots": pool_slots(None, max_batch_size) if enhancer.enable_global_pool else None}}
