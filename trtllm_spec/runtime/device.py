"""Where the reference runtime runs: one rule for every command that takes ``--device auto|cpu|cuda``."""

from __future__ import annotations

from trtllm_spec.errors import UserError


def resolve_device(torch, device: str) -> str:
    """'auto' -> cuda when torch sees a CUDA device, else cpu; 'cuda' without one is an error."""
    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: choose auto, cpu or cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is visible to torch here; use --device cpu (or auto)")
    return device
