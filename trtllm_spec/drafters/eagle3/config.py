"""The recipe's ``drafter`` section for ``type: eagle3`` (registered with the mechanism: drafters/eagle3/__init__.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from trtllm_spec.core.recipe import ConvertSource, TrainedSection
from trtllm_spec.core.sa import SAEnhancerConfig, enhancer_release


class Eagle3Drafter(TrainedSection):
    type: Literal["eagle3"] = "eagle3"
    draft_vocab_size: int | None = Field(None, ge=1, description="None = the target's full vocabulary")
    layers_to_capture: list[int] | None = None
    convert_from: ConvertSource | None = Field(None, description="a SafeAILab EAGLE or speculators EAGLE-3 "
                                               "checkpoint to convert instead of training")
    sa_enhancer: SAEnhancerConfig | None = Field(None, description="suffix-automaton drafts override the head's "
                                                 "where the match reaches the threshold (TensorRT-LLM 1.3+)")

    def offline_features(self) -> bool:
        return self.training.data.offline_features

    def required_trtllm(self) -> str:
        return enhancer_release(self.sa_enhancer, self.min_trtllm)

    @model_validator(mode="after")
    def _one_source(self) -> Eagle3Drafter:
        if self.convert_from is not None and self.checkpoint:
            raise ValueError("drafter.checkpoint and drafter.convert_from both name a drafter; keep one")
        return self
