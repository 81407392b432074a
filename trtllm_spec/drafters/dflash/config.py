"""The recipe's ``drafter`` section for ``type: dflash`` (registered with the mechanism: drafters/dflash/__init__.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from trtllm_spec.core.recipe import TrainedSection, block_drafts

if TYPE_CHECKING:
    from trtllm_spec.core.recipe import Recipe



class DFlashDrafter(TrainedSection):
    # DFlash/DSpark decoding configs first appear in TensorRT-LLM 1.3 (1.3.0rc docs: DFlashDecodingConfig)
    min_trtllm: ClassVar[str] = "1.3"
    shift_label: ClassVar[bool] = False  # see block_drafts

    type: Literal["dflash"] = "dflash"
    num_layers: int = Field(2, ge=1, le=64)
    block_size: int = Field(16, ge=2, le=64)
    mask_token: str | int | None = Field(None, description="token (or id) the block is filled with")
    target_layer_ids: list[int] | None = None
    num_anchors: int = Field(512, ge=1, le=4096, description="blocks drawn per training sequence, each at a random "
                             "anchor (ModelOpt's dflash_num_anchors; its default 512): every block adds block_size "
                             "rows to the drafter's forward and LM head, so fewer train faster on a CPU")
    # fields only training reads: refused beside a checkpoint, which is reused as it is
    training_only: ClassVar[tuple[str, ...]] = ("num_anchors",)

    @property
    def max_draft_len(self) -> int:
        return block_drafts(self.block_size, self.shift_label)[0]

    def check(self, recipe: Recipe) -> None:
        if self.checkpoint:
            fields = type(self).model_fields
            for name in self.training_only:
                if getattr(self, name) != fields[name].default:
                    raise ValueError(f"drafter.{name} = {getattr(self, name)} only changes training, but "
                                     "drafter.checkpoint reuses a trained head; drop one of them")
        most, formula = block_drafts(self.block_size, self.shift_label)
        if isinstance(recipe.draft_len, int) and recipe.draft_len > most:
            raise ValueError(f"draft_len = {recipe.draft_len} exceeds what a block of {self.block_size} drafts "
                             f"({formula} = {most}); raise drafter.block_size")
        if self.training.seq_len % self.block_size:
            raise ValueError(f"drafter.training.seq_len = {self.training.seq_len} is not divisible by "
                             f"drafter.block_size = {self.block_size}; DFlash trains on whole blocks")
        super().check(recipe)
