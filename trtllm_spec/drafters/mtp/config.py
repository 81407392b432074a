"""The recipe's ``drafter`` section for ``type: mtp`` (registered with the mechanism: drafters/mtp/__init__.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from trtllm_spec.core.recipe import TrainedSection, TrainingConfig
from trtllm_spec.core.sa import SAEnhancerConfig, enhancer_release


class MTPDrafter(TrainedSection):
    """The target's own (native) MTP layers, e.g. DeepSeek-V3/R1's ``num_nextn_predict_layers``: nothing to train,
    TensorRT-LLM runs them. A head trained with ModelOpt's EAGLE-MTP preset is ``drafter.type: eagle_mtp``."""

    type: Literal["mtp"] = "mtp"
    num_layers: int | None = Field(None, ge=1, le=64, description="None: the target's native MTP layers, else 1")
    sa_enhancer: SAEnhancerConfig | None = Field(None, description="suffix-automaton drafts override the MTP "
                                                 "drafts where the match reaches the threshold (TensorRT-LLM 1.3+)")

    @model_validator(mode="before")
    @classmethod
    def _no_head_fields(cls, data: Any) -> Any:
        # the old spelling of a trained EAGLE-MTP head (drafter.type: mtp with a head's fields) points to its type
        if isinstance(data, dict):
            head = [k for k in ("checkpoint", "draft_vocab_size") if data.get(k) is not None]
            if "training" in data and TrainingConfig.model_validate(data["training"] or {}) != TrainingConfig():
                head.append("training")
            if head:
                raise ValueError(f"drafter.{head[0]} belongs to a trained EAGLE-MTP head, which is drafter.type: "
                                 "eagle_mtp (drafter.type: mtp is the target's own MTP layers); set drafter.type: "
                                 "eagle_mtp")
        return data

    def required_trtllm(self) -> str:
        return enhancer_release(self.sa_enhancer, self.min_trtllm)
