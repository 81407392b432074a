"""Which engine runs a target in the reference decoder: ``ours`` (``runtime/llama.LlamaModel``, the families its
``SUPPORTED`` lists, with a preallocated cache that rolls back for free) or ``hf`` (``runtime/hf_target.HFTarget``,
any architecture transformers loads, cache cropped on rollback).

``auto``: ours wherever it runs the checkpoint (its model_type and rope type), transformers for the rest. Ours is
the faster of the two on the families it runs (benchmarks/reference_decoder.md: same target, same prompts, same
greedy tokens), so auto never trades speed for generality; ``hf`` on a Llama-family target checks our decoder
against transformers' own implementation.
"""

from __future__ import annotations

from pathlib import Path

from trtllm_spec.errors import UserError

REFERENCE_ENGINES = ("auto", "ours", "hf")


def resolve_reference_engine(name: str, cfg: dict, where: str = "config.json") -> str:
    """'ours' | 'hf' for a target's config.json; ``ours`` on a family it does not run is refused by name."""
    if name not in REFERENCE_ENGINES:
        raise UserError(f"--reference-engine {name!r}: choose one of {', '.join(REFERENCE_ENGINES)}")
    if name == "hf":
        return name
    from trtllm_spec.runtime.llama import LlamaConfig

    try:
        LlamaConfig.from_hf(cfg, where)
    except UserError as exc:
        if name == "ours":
            raise UserError(f"--reference-engine ours: {exc}; use --reference-engine hf (transformers, any "
                            "architecture) or auto") from None
        return "hf"
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        pass  # an incomplete Llama-family config: our loader names what is missing
    return "ours"


def load_target(folder: Path, cfg: dict, engine: str, torch_dtype, device: str):
    """(engine, target) -- a ``LlamaModel`` or an ``HFTarget``, both with the interface the decoder uses."""
    engine = resolve_reference_engine(engine, cfg, str(folder / "config.json"))
    if engine == "ours":
        from trtllm_spec.runtime.llama import LlamaModel

        return engine, LlamaModel.from_pretrained(folder, dtype=torch_dtype, device=device)
    from trtllm_spec.runtime.hf_target import HFTarget

    return engine, HFTarget.from_pretrained(folder, dtype=torch_dtype, device=device)
