"""The recipe's ``drafter`` section for ``type: suffix`` (registered with the mechanism: drafters/suffix/__init__.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from trtllm_spec.core.recipe import DrafterSection
from trtllm_spec.core.sa import SA_POOL_MATCH_CAP, sa_since

if TYPE_CHECKING:
    from trtllm_spec.core.recipe import Recipe



class SuffixDrafter(DrafterSection):
    """Suffix decoding with TensorRT-LLM's suffix automaton (``decoding_type: SA``, ``SADecodingConfig``; 1.3.0rc27
    and 1.4.0rc4 API pages; validators in ``tensorrt_llm/llmapi/llm_args.py`` @0004396): drafts the continuation
    of the longest suffix of the request's tokens that occurred before, for up to D tokens. No model."""

    min_trtllm: ClassVar[str] = sa_since()

    type: Literal["suffix"] = "suffix"
    max_matching_ngram_size: int = Field(-1, ge=-1, le=1_000_000, description="-1: the longest suffix match (the "
                                         "automaton); k > 0: fixed-size matching, sizes k down to 1; 0 is invalid")
    enable_global_pool: bool = Field(False, description="match across the other requests as well (measure: the "
                                     "suite's earlier prompts and outputs, in suite order)")
    global_pool_size: int | None = Field(None, ge=1, le=1_000_000, description="automaton slots in the global pool "
                                         "(None: max(64, max batch size)); completed requests stay until it is full, "
                                         "then the oldest is evicted; needs enable_global_pool")

    @field_validator("max_matching_ngram_size")
    @classmethod
    def _not_zero(cls, v: int) -> int:
        if v == 0:
            raise ValueError("max_matching_ngram_size 0 is invalid: use -1 (longest match) or k > 0 (fixed size)")
        return v

    @model_validator(mode="after")
    def _pool(self) -> SuffixDrafter:
        # SADecodingConfig.validate_sa_config (llm_args.py @0004396)
        if self.global_pool_size is not None and not self.enable_global_pool:
            raise ValueError(f"drafter.global_pool_size = {self.global_pool_size} needs drafter.enable_global_pool: "
                             "true (TensorRT-LLM refuses it otherwise); set it or drop global_pool_size")
        if self.enable_global_pool and self.max_matching_ngram_size > SA_POOL_MATCH_CAP:
            raise ValueError(f"drafter.max_matching_ngram_size = {self.max_matching_ngram_size}: with "
                             f"enable_global_pool it must be -1 or in 1..{SA_POOL_MATCH_CAP} (TensorRT-LLM caps pool "
                             f"matching at {SA_POOL_MATCH_CAP} tokens)")
        return self

    def pool_slots(self, max_batch_size: int) -> int:
        """Automaton slots of the global pool: global_pool_size, else max(64, max_batch_size) (SADecodingConfig)."""
        from trtllm_spec.core.sa import pool_slots

        return pool_slots(self.global_pool_size, max_batch_size)

    def check(self, recipe: Recipe) -> None:
        largest = recipe.engine.max_batch_size or max(recipe.workload.all_batch_sizes())
        if self.global_pool_size is not None and self.global_pool_size < largest:
            raise ValueError(f"drafter.global_pool_size = {self.global_pool_size} is below the largest batch size "
                             f"{largest} (TensorRT-LLM: 'must be >= max_batch_size'); raise it to {largest} or more")
