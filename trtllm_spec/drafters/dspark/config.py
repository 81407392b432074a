"""The recipe's ``drafter`` section for ``type: dspark`` (registered with the mechanism: drafters/dspark/__init__.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from trtllm_spec.core.recipe import PlannerConfig
from trtllm_spec.drafters.dflash.config import DFlashDrafter

if TYPE_CHECKING:
    from trtllm_spec.core.recipe import Recipe



class DSparkDrafter(DFlashDrafter):
    shift_label: ClassVar[bool] = True  # ModelOpt's DSpark trains next-token aligned only (block_drafts)

    type: Literal["dspark"] = "dspark"
    markov_head_type: Literal["vanilla", "gated", "rnn"] = "vanilla"
    markov_rank: int = Field(64, ge=1, le=4096, description="rank of the Markov head's low-rank transition "
                             "(markov_w1: vocab -> rank, markov_w2: rank -> vocab)")

    def check(self, recipe: Recipe) -> None:
        # TensorRT-LLM runs DSpark only at max_draft_len == block_size (drafters.dspark.DSpark.only_draft_len);
        # more than the block is refused by DFlashDrafter.check ("raise drafter.block_size")
        if isinstance(recipe.draft_len, int) and recipe.draft_len < self.block_size:
            raise ValueError(f"draft_len = {recipe.draft_len}: TensorRT-LLM runs DSpark only at D = drafter.block_size "
                             f"= {self.block_size}; set draft_len: {self.block_size} (or auto), or change "
                             "drafter.block_size")
        asked = recipe.planner.max_draft_len
        if asked < self.block_size and asked != PlannerConfig.model_fields["max_draft_len"].default:
            # a limit below the only D DSpark runs at is refused, not silently exceeded (the default limit does not
            # apply to DSpark, and the plan's draft_len_rule says so: a resolved recipe holds it explicitly)
            raise ValueError(f"planner.max_draft_len = {asked} (--max-draft-len) is below D = drafter.block_size = "
                             f"{self.block_size}, the only D TensorRT-LLM runs DSpark at; set drafter.block_size: "
                             f"{asked} for a shorter block (--set drafter.block_size={asked}), or drop the limit")
        super().check(recipe)
