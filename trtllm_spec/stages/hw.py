"""``trtllm-spec hw probe``: this machine measured into a hardware entry (``runtime/probe.py`` runs the timed
kernels; torch is imported there, only when a probe runs)."""

from __future__ import annotations

from collections.abc import Callable


def probe_machine(device: str, quick: bool, target: str | None, log: Callable[[str], None] = lambda _m: None):
    """The ``HardwareSpec`` of this machine's ``device`` (per-layer overhead on ``target``'s shape when given)."""
    from trtllm_spec.core.targets import resolve_shape
    from trtllm_spec.runtime.probe import probe

    shape = resolve_shape(target) if target is not None else None
    return probe(device=device, quick=quick, log=log, target=shape)
