"""Where and in which precision a model runs: one rule for every command that takes ``--device auto|cpu|cuda``
and ``--dtype auto|bf16|fp32`` (train, data regenerate, feature capture, doctor, measure, hw probe).

- device ``auto``: CUDA when torch sees a device, else the CPU; ``cuda`` without one is an error.
- dtype ``auto``: bf16 on a CUDA device that supports it; on a CPU bf16 only where this CPU runs a bf16 GEMM
  faster than fp32 (AVX512-BF16 / AMX). On an AVX2-only EPYC a 32x576 @ 576x1536 bf16 GEMM took ~71 ms against
  ~0.8 ms fp32 (measured on the project's CPU VM, docs/training.md): emulated bf16, so auto picks fp32 there.
  The comparison is timed once per process (``cpu_bf16_timing``) and recorded with the choice
  (``Placement.as_dict``, for provenance).
- an explicit ``bf16`` a device cannot run (a CUDA device without bf16) is an error, never replaced.

``torch`` is passed in (or imported lazily), so this module stays importable without it.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

from trtllm_spec.core.devices import DEVICES, DTYPES  # noqa: F401  (the names, re-exported)
from trtllm_spec.errors import UserError

# the GEMM the issue timed: a 32-row batch through a SmolLM2-sized MLP projection
_GEMM = (32, 576, 1536)


def resolve_device(torch, device: str) -> str:
    """'auto' -> cuda when torch sees a CUDA device, else cpu; 'cuda' without one is an error."""
    if device not in DEVICES:
        raise UserError(f"--device {device!r}: choose auto, cpu or cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is visible to torch here; use --device cpu (or auto)")
    return device


@functools.lru_cache(maxsize=1)
def cpu_bf16_timing() -> tuple[float, float]:
    """(fp32 ms, bf16 ms) of one 32x576 @ 576x1536 GEMM on this CPU (best of 5 after a warm-up); once per process."""
    import torch

    m, k, n = _GEMM
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    best = {}
    for dt in (torch.float32, torch.bfloat16):
        x, y = a.to(dt), b.to(dt)
        x @ y
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            x @ y
            times.append(time.perf_counter() - t0)
        best[dt] = min(times) * 1e3
    return best[torch.float32], best[torch.bfloat16]


def cpu_capability(torch) -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # older torch
        return "unknown"


@dataclass(frozen=True)
class Placement:
    """The device and precision a command really used, and why."""

    device: str
    dtype: str  # "bf16" | "fp32"
    reason: str
    requested: tuple[str, str] = ("auto", "auto")

    @property
    def bf16(self) -> bool:
        return self.dtype == "bf16"

    def torch_dtype(self, torch):
        return torch.bfloat16 if self.bf16 else torch.float32

    def describe(self) -> str:
        return f"device {self.device}, {self.dtype} ({self.reason})"

    def as_dict(self) -> dict:
        return {"device": self.device, "dtype": self.dtype, "reason": self.reason,
                "requested_device": self.requested[0], "requested_dtype": self.requested[1]}


def resolve_dtype(torch, device: str, dtype: str, *, timing=cpu_bf16_timing) -> tuple[str, str]:
    """(dtype, reason) for a resolved ``device``; ``timing`` () -> (fp32 ms, bf16 ms) on this CPU."""
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: choose auto, bf16 or fp32")
    if device == "cuda":
        ok = bool(torch.cuda.is_bf16_supported())
        name = torch.cuda.get_device_name(0)
        if dtype == "bf16" and not ok:
            raise UserError(f"--dtype bf16: {name} has no bf16 support; use --dtype fp32 (or auto)")
        if dtype == "auto":
            return ("bf16", f"auto: {name} supports bf16") if ok else ("fp32", f"auto: {name} has no bf16")
        return dtype, f"requested on {name}"
    if dtype == "fp32":
        return "fp32", "requested"
    fp32_ms, bf16_ms = timing()
    measured = (f"{cpu_capability(torch)} CPU: bf16 GEMM {bf16_ms:.2f} ms vs fp32 {fp32_ms:.2f} ms")
    if dtype == "bf16":
        return "bf16", f"requested; {measured}"
    fast = bf16_ms < 0.8 * fp32_ms
    return ("bf16" if fast else "fp32"), f"auto: {measured}"


def choose(device: str = "auto", dtype: str = "auto", torch=None) -> Placement:
    """The one rule: resolve ``device`` then ``dtype`` (see the module docstring)."""
    if torch is None:
        import torch
    dev = resolve_device(torch, device)
    dt, reason = resolve_dtype(torch, dev, dtype)
    return Placement(dev, dt, reason, (device, dtype))


def check_device_request(device: str, dtype: str = "auto", torch=None) -> None:
    """Refuse a bad ``--device``/``--dtype`` before anything is written (cheap: no timing, no model)."""
    if device not in DEVICES:
        raise UserError(f"--device {device!r}: choose auto, cpu or cuda")
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: choose auto, bf16 or fp32")
    if device == "cuda":
        if torch is None:
            import torch
        resolve_device(torch, device)
