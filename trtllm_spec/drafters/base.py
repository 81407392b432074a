"""What a drafting mechanism is, for every stage that needs to know (principle 3: behaviour lives on the
variant). Descriptors are light: heavy code (ModelOpt, torch) is imported lazily by the stages that need it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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


class Mechanism:
    """A drafting mechanism. Subclasses set the class attributes and implement the hooks."""

    name: ClassVar[str]
    title: ClassVar[str]
    acceptance_kind: ClassVar[str]  # "chain" (AL(D) from one run) or "block" (measure each D)
    min_trtllm: ClassVar[str] = "1.2"
    needs_training: ClassVar[bool] = False
    summary: ClassVar[str] = ""

    def default_config(self):
        """The recipe drafter section this mechanism gets when none is given."""
        raise NotImplementedError

    def default_acceptance(self, target: ModelShape, cfg) -> AcceptanceModel:
        raise NotImplementedError

    def cost(self, target: ModelShape, cfg) -> DraftCost:
        raise NotImplementedError

    def max_draft_len(self, target: ModelShape, cfg) -> int | None:
        """The largest D this drafter can propose (None: no limit of its own)."""
        return None

    def unavailable_reason(self, target: ModelShape, cfg) -> str | None:
        """Why this mechanism cannot serve this target (None when it can)."""
        return None

    def trtllm_speculative_config(self, cfg, *, profile: str, max_draft_len: int, speculative_model: str | None,
                                  **extra) -> dict:
        """The TensorRT-LLM LLM API ``speculative_config`` for this mechanism under release ``profile``
        ("1.2" / "1.3"); keys and tags as mirrored in ``trtllm_spec.build.trtllm_schema``. ``extra`` carries
        values found at build time (e.g. ``eagle3_layers_to_capture``, ``dflash_mask_token_id``)."""
        raise NotImplementedError


def dense_layer_shape(target: ModelShape, num_layers: int, vocab: int, name: str) -> ModelShape:
    """A dense Llama-style decoder stack with the target's attention dims (drafter layers)."""
    return ModelShape(
        name=name, model_type="llama", num_layers=num_layers, hidden_size=target.hidden_size,
        num_heads=target.num_heads, num_kv_heads=target.num_kv_heads, head_dim=target.head_dim,
        intermediate_size=target.intermediate_size, vocab_size=vocab, tied_embeddings=True,
    )


def extended(rates: list[float], n: int, step: float, floor: float) -> list[float]:
    """Extend measured per-position rates to ``n`` positions, decaying by ``step`` down to ``floor``."""
    out = list(rates)
    while len(out) < n:
        out.append(max(floor, out[-1] - step))
    return out
