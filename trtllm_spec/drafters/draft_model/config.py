"""The recipe's ``drafter`` section for ``type: draft_model`` (registered with the mechanism: drafters/draft_model/__init__.py)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from trtllm_spec.core.recipe import DrafterSection


class DraftModelDrafter(DrafterSection):
    tensorrt_backend: ClassVar[bool] = True

    type: Literal["draft_model"] = "draft_model"
    model: str = Field(description="path, preset name or fetched asset of a small LLM with the same tokenizer")
