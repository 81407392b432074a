"""Training progress on the terminal: one line at the first step, then at least every ``every_s`` seconds, and at
the last step. The trainer (``train/trainer.py``) hands each step's record to ``on_step``; printing is here."""

from __future__ import annotations

import time
from collections.abc import Callable


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def remaining_s(rec: dict) -> float | None:
    """Seconds left: the steps still to run at this run's mean step time, or the time budget left, the smaller."""
    step, total, elapsed = rec["step"], rec.get("max_steps"), rec.get("elapsed_s") or 0.0
    left = []
    if total and step:
        left.append((total - step) * elapsed / step)
    if rec.get("time_budget_s"):
        left.append(rec["time_budget_s"] - elapsed)
    return max(0.0, min(left)) if left else None


def progress_line(rec: dict) -> str:
    total = rec.get("max_steps")
    step = f"step {rec['step']}/{total}" if total else f"step {rec['step']}"
    acc = " ".join(f"{a:.2f}" for a in rec["train_acc"])
    left = remaining_s(rec)
    return (f"train: {step}, {_tokens(rec['tokens'])} tokens ({rec['tokens_per_s']:.0f}/s), loss {rec['loss']:.3f}, "
            f"train acc per position [{acc}], {_clock(rec.get('elapsed_s') or 0)} elapsed"
            + (f", ~{_clock(left)} left" if left is not None else ""))


class TrainingProgress:
    """``on_step`` callback: prints ``progress_line`` at the first step, whenever ``every_s`` seconds passed since
    the last line, and at the last step (``max_steps``)."""

    def __init__(self, echo: Callable[[str], None], every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.echo, self.every_s, self.clock, self.last = echo, every_s, clock, None

    def __call__(self, rec: dict) -> None:
        now = self.clock()
        last_step = rec.get("max_steps") is not None and rec["step"] >= rec["max_steps"]
        if self.last is None or now - self.last >= self.every_s or last_step:
            self.last = now
            self.echo(progress_line(rec))
