"""The drafter registry: CLI choices, help text, docs and recipe types all come from here (principle 4)."""

from __future__ import annotations

from trtllm_spec.core.recipe import DRAFTER_TYPES, MIN_TRTLLM
from trtllm_spec.drafters.base import Mechanism
from trtllm_spec.drafters.dflash import DFlash, DSpark
from trtllm_spec.drafters.draft_model import DraftModel
from trtllm_spec.drafters.eagle3 import Eagle3
from trtllm_spec.drafters.mtp import MTP
from trtllm_spec.drafters.ngram import NGram

MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (Eagle3(), MTP(), DFlash(), DSpark(), DraftModel(), NGram())}
assert tuple(MECHANISMS) == DRAFTER_TYPES, "recipe drafter types and the registry must list the same names"
assert all(MIN_TRTLLM.get(n, "1.2") == m.min_trtllm for n, m in MECHANISMS.items())


def get(name: str) -> Mechanism:
    from trtllm_spec.errors import UserError

    if name not in MECHANISMS:
        raise UserError(f"unknown drafter type {name!r}; valid: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]
