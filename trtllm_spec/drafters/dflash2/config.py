"""The recipe's ``drafter`` section for ``type: dflash2`` (registered with the mechanism: drafters/dflash2/__init__.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from trtllm_spec.drafters.dflash.config import DFlashDrafter

if TYPE_CHECKING:
    from trtllm_spec.core.recipe import Recipe



class DFlash2Drafter(DFlashDrafter):
    """DFlash2 (z-lab's ``DFlash2DraftModel``, docs/dflash2.md): DFlash plus a grouped dynamic causal convolution
    around each sublayer and a top-K candidate selector over the target's logits. TensorRT-LLM runs it under the
    DFlash decoding config from 1.4 (drafters/dflash2). Reused from ``checkpoint`` (a z-lab-format folder), or
    trained on ModelOpt's DFlash mode with the convolutions and the selector added as a plugin
    (drafters/dflash2/train.py; ModelOpt 0.47 has no DFlash2 mode)."""

    min_trtllm: ClassVar[str] = "1.4"
    training_only: ClassVar[tuple[str, ...]] = ("num_anchors", "selector_loss_alpha")

    type: Literal["dflash2"] = "dflash2"
    conv_kernel_size: int = Field(2, ge=1, le=64, description="taps of each block convolution (<= block_size)")
    conv_group_size: int = Field(16, ge=1, description="channels sharing one dynamic coefficient (divides the "
                                 "target's hidden size)")
    selector_rank: int = Field(64, ge=1, le=4096, description="rank of the selector's bilinear transition score")
    selector_top_k: int = Field(16, ge=1, le=4096, description="candidates per drafted position (llama.cpp needs "
                                "hidden_size >= K * (K + 1))")
    selector_loss_alpha: float = Field(1.0, gt=0, le=100, description="weight of the selector's cross-entropy over "
                                       "its K candidates beside DFlash's loss (training only)")

    def check(self, recipe: Recipe) -> None:
        if self.conv_kernel_size > self.block_size:
            raise ValueError(f"drafter.conv_kernel_size = {self.conv_kernel_size} exceeds drafter.block_size = "
                             f"{self.block_size} (a tap reaches before the block); lower it")
        super().check(recipe)
