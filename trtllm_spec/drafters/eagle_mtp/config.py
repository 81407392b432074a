"""The recipe's ``drafter`` section for ``type: eagle_mtp`` (registered with the mechanism: drafters/eagle_mtp/__init__.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from trtllm_spec.core.recipe import TrainedSection
from trtllm_spec.core.sa import SAEnhancerConfig, enhancer_release

if TYPE_CHECKING:
    from trtllm_spec.core.recipe import Recipe



class EagleMTPDrafter(TrainedSection):
    """A head trained with ModelOpt's EAGLE-MTP preset for a target without native MTP layers (trained, measured
    and planned here; TensorRT-LLM serves MTP only as a target's own layers, so ``build`` refuses it)."""

    type: Literal["eagle_mtp"] = "eagle_mtp"
    draft_vocab_size: int | None = Field(None, ge=1, description="None = the target's full vocabulary")
    sa_enhancer: SAEnhancerConfig | None = Field(None, description="suffix-automaton drafts override the head's "
                                                 "drafts where the match reaches the threshold (reference decoder)")

    def required_trtllm(self) -> str:
        return enhancer_release(self.sa_enhancer, self.min_trtllm)

    def check(self, recipe: Recipe) -> None:
        if self.training.init_from_target == "last_layer":
            raise ValueError("drafter.training.init_from_target: last_layer is an EAGLE-3 start (it fills the 2H-wide "
                             "first layer and fc); for an eagle_mtp head use none or lm_head")
        super().check(recipe)
