"""The recipe's ``drafter`` section for ``type: ngram`` (registered with the mechanism: drafters/ngram/__init__.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trtllm_spec.core.recipe import DrafterSection


class NGramDrafter(DrafterSection):
    type: Literal["ngram"] = "ngram"
    max_matching_ngram_size: int = Field(3, ge=1, le=64)
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True
