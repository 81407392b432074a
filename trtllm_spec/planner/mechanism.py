"""What the planner needs to know about a drafting mechanism: its cost per iteration and a small protocol.
The mechanisms themselves (``trtllm_spec.drafters``) implement it and are passed in (``PlanRequest.mechanisms``),
so the planner imports no drafter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.planner.acceptance import AcceptanceModel


@dataclass(frozen=True)
class DraftPass:
    """A forward pass the drafter makes each iteration.

    ``per_token``: D sequential passes of one token per sequence (chain drafting); otherwise one pass over
    a block of D + 1 tokens per sequence. ``shape`` None means only ``extra_params`` of linear weights.
    """

    shape: ModelShape | None
    per_token: bool
    lm_head_vocab: int | None = None
    extra_params: float = 0.0


@dataclass(frozen=True)
class DraftCost:
    passes: tuple[DraftPass, ...]
    drafter_layers: int  # for guideline 4's rho = drafter layers / target layers
    weight_params: float  # resident drafter weights (elements), beside the target
    kv_shape: ModelShape | None  # the drafter's own KV cache per token, if any
    sequential: bool = True  # host bookkeeping once per draft token (chain) or once per iteration
    # a model-free drafter's own device state (the suffix automaton): bytes per token of context in one slot,
    # and the slots held whatever the batch (a cross-request pool; 0 = one slot per sequence)
    state_bytes_per_token: float = 0.0
    state_pool_slots: int = 0


class MechanismModel(Protocol):
    """The part of a drafter descriptor (``trtllm_spec.drafters.base.Mechanism``) the planner reads."""

    name: str
    title: str
    acceptance_kind: str
    min_trtllm: str
    needs_training: bool
    dynamic_draft_len_since: str | None  # the first release that applies a draft_len_schedule to it (None: never)

    def default_config(self): ...

    def default_acceptance(self, target: ModelShape, cfg) -> AcceptanceModel: ...

    def cost(self, target: ModelShape, cfg) -> DraftCost: ...

    def max_draft_len(self, target: ModelShape, cfg) -> int | None: ...

    def only_draft_len(self, cfg) -> int | None: ...

    def unavailable_reason(self, target: ModelShape, cfg) -> str | None: ...
