"""The one check of an engine's own acceptance numbers before they are believed, for every source that reports them:
``/metrics`` counters (vLLM ``vllm:spec_decode_*``, llama.cpp ``llamacpp:spec_decode_*``), per-request blocks
(``metrics.speculative_decoding``, llama.cpp ``timings``), trtllm-serve iteration stats (``specDecodingStats``) and
trtllm-bench reports (``decoding_stats``).

A count that cannot be true (negative, NaN or infinite, a fraction where a count is whole, more drafts accepted than
drafted, i.e. an acceptance rate above 1, drafts without a step to draft in) is refused in one line naming where it
came from, the counter, its value and what is allowed: the engine's metrics are broken, and a measurement built on
them would record a speedup that never happened (``plan --calibrate`` and ``tune`` read it back as the truth).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from trtllm_spec.errors import UserError

BROKEN = ("the engine's speculative-decoding metrics are broken: measure without them (or with a fixed engine) and "
          "report it to the engine")


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _show(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) and math.isfinite(v) else repr(v)


def check_counts(where: str, values: Mapping[str, object], *, whole: Collection[str] = (),
                 at_most: Sequence[tuple[str, str]] = (), rates: Collection[str] = (),
                 steps: tuple[str, str] | None = None, fix: str = BROKEN) -> None:
    """Refuse (UserError, one line) numbers an engine cannot have reported truthfully. ``values``: name -> value
    (leave out what was not reported), each a finite number >= 0; those in ``whole`` are counts (whole numbers), those
    in ``rates`` at most 1; each (accepted, drafted) pair of ``at_most`` has accepted <= drafted (an acceptance
    rate of at most 1); ``steps`` = (steps, drafted): drafted tokens need at least one step. ``where`` names the
    server or file and the source; ``fix`` what to do."""
    def refuse(problem: str) -> None:
        raise UserError(f"{where} cannot be true: {problem}; {fix}")

    for name, v in values.items():
        allowed = ("a rate in [0, 1]" if name in rates else "a count: a whole number >= 0" if name in whole
                   else "a number >= 0")
        if not _number(v) or not math.isfinite(v):
            refuse(f"{name} = {_show(v)} is not a finite number ({allowed})")
        if v < 0:
            refuse(f"{name} = {_show(v)} is negative ({allowed})")
        if name in whole and v != int(v):
            refuse(f"{name} = {_show(v)} is not a whole number ({allowed})")
        if name in rates and v > 1:
            refuse(f"{name} = {_show(v)} is above 1 ({allowed})")
    for accepted, drafted in at_most:
        a, d = values.get(accepted), values.get(drafted)
        if a is not None and d is not None and a > d:
            rate = f"an acceptance rate of {a / d:.3g}" if d else "accepted drafts where none were drafted"
            refuse(f"{accepted} = {_show(a)} > {drafted} = {_show(d)} ({rate}; at most 1: a draft token is accepted "
                   "at most once)")
    if steps is not None:
        n, d = values.get(steps[0]), values.get(steps[1])
        if n == 0 and d is not None and d > 0:
            refuse(f"{steps[0]} = 0 with {steps[1]} = {_show(d)} (draft tokens need a step to be drafted in)")
