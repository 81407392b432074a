"""The step model's host terms: one structure for every engine (issue 53).

One decoding iteration at batch b (sequences in flight) and draft length D costs

    t_step(b, D) = work(b, D)
                 + e_it (iteration_s + b sequence_s)                     per step, per sequence
                 + [D > 0] e_sp (spec_iteration_s + b spec_sequence_s)   per speculative step, per sequence
                 + n(D) (draft_step_s + b draft_sequence_s)              per draft step, per sequence

- ``work``: the GPU work the roofline prices (search.target_step / draft_step: the target's verify pass over
  b (1 + D) tokens, snapped to the engine's captured CUDA-graph batch sizes, and the drafter's passes by kind:
  a chain drafter one pass per draft token, a block drafter one pass at the verify width) -- or nothing, when the
  engine's step was measured (``Overheads.measured_step``: ``trtllm-spec tune`` on an engine whose kernels the
  roofline does not price, such as vLLM on a CPU): then the terms carry that work too, and the plain step
  T_AR(b) = iteration_s + b sequence_s is the measured one;
- ``e_it`` / ``e_sp``: the share an overlap scheduler leaves exposed (Overheads.exposed_*);
- ``n(D)``: D for a chain drafter (one draft step per token); 1 for a block drafter whose block the roofline
  prices; D for every drafter when the step is measured (the verify width and the block width grow with D, and
  nothing else carries them).

TensorRT-LLM's DSpark confidence scheduling uses the same shape, T(bs, L) = bias + alpha(bs) + theta(bs (L + 1))
(``docs/source/features/dspark-confidence-scheduling.md``), and warns that one batch size cannot separate the
per-sequence terms from the rest: every fit here needs two batch sizes or more.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from trtllm_spec.core.hardware import Overheads
from trtllm_spec.core.host_costs import HOST_TERMS as TERMS
from trtllm_spec.core.host_costs import PER_SEQUENCE_TERMS as PER_SEQUENCE

TERM_TEXT = {
    "iteration_s": "per iteration",
    "sequence_s": "per sequence per iteration",
    "spec_iteration_s": "per speculative iteration",
    "spec_sequence_s": "per sequence per speculative iteration",
    "draft_step_s": "per draft step",
    "draft_sequence_s": "per sequence per draft step",
}


def draft_steps(ov: Overheads, sequential: bool, draft_len: int) -> float:
    """n(D): how many times the per-draft terms count in one iteration."""
    if draft_len <= 0:
        return 0.0
    return float(draft_len) if (sequential or ov.measured_step) else 1.0


def coefficients(ov: Overheads, sequential: bool, batch: int, draft_len: int) -> dict[str, float]:
    """d t_step / d term at (batch, D): the model is linear in every host term."""
    spec = draft_len > 0
    e_it = 1.0 - (ov.overlap_hides if (not spec or ov.overlap_with_speculation) else 0.0)
    e_sp = (1.0 - (ov.overlap_hides if ov.overlap_with_speculation else 0.0)) if spec else 0.0
    n = draft_steps(ov, sequential, draft_len)
    return {"iteration_s": e_it, "sequence_s": e_it * batch, "spec_iteration_s": e_sp,
            "spec_sequence_s": e_sp * batch, "draft_step_s": n, "draft_sequence_s": n * batch}


def host_time_s(ov: Overheads, sequential: bool, batch: int, draft_len: int) -> float:
    """Everything the host terms add to one iteration."""
    c = coefficients(ov, sequential, batch, draft_len)
    return sum(c[k] * getattr(ov, k) for k in TERMS)


def target_host_s(ov: Overheads, batch: int, draft_len: int) -> float:
    """The terms that belong to the target's iteration (per step and speculative step, per sequence)."""
    c = coefficients(ov, True, batch, draft_len)
    return sum(c[k] * getattr(ov, k) for k in TERMS[:4])


def snap_batch(batch: int, captured: Sequence[int]) -> int:
    """The batch a CUDA-graph engine runs: padded up to the smallest captured batch size >= ``batch`` (TensorRT-LLM
    ``cuda_graph_config.enable_padding``; the bundle writes it on); above the largest captured size the engine runs
    eagerly at the real batch. No captured sizes: the batch itself."""
    if not captured:
        return batch
    sizes = sorted(captured)
    i = bisect.bisect_left(sizes, batch)
    return sizes[i] if i < len(sizes) else batch


def term_sources(ov: Overheads, profile: dict | None, calibrated: bool, graph_batch_sizes: Sequence[int] = (),
                 work_source: dict | None = None) -> list[dict]:
    """The plan's term table: every term of the step, its value and where it comes from (the roofline, a release
    prior, a fit on the engine's own runs, or the engine's measured step)."""
    name = (profile or {}).get("name", "the hardware file's overheads")
    identified = set((profile or {}).get("identified") or [])
    w = work_source or {}
    rows = [{"term": "work", "what": "GPU work: the target's verify pass and the drafter's passes",
             "value_s": None,
             "source": ("measured: inside the fitted terms (the engine's own step; the roofline is not used)"
                        if ov.measured_step else
                        f"the target's pass: AIConfigurator {w.get('aiconfigurator')} kernel tables ({w.get('system')}, "
                        f"{w.get('framework')} {w.get('framework_release')}: measured GEMM, attention, MoE and "
                        "communication kernels; trtllm_spec/silicon/aic.py); the drafter's: roofline (planner/cost.py)"
                        if work_source else "roofline (planner/cost.py; a hw probe file's measured curve where "
                        "the hardware is one)" + (f"; GEMMs at the captured CUDA-graph batch sizes "
                                                  f"{list(graph_batch_sizes)} (padded)" if graph_batch_sizes else ""))}]
    for k in TERMS:
        v = getattr(ov, k)
        if calibrated and k in identified:
            src = f"fitted on the engine's own runs ({name})"
        elif calibrated and any(k in i for i in identified):
            src = (f"fitted on the engine's own runs as a sum ({next(i for i in identified if k in i)}), split in "
                   "the prior's ratio")
        elif calibrated:
            src = "not identified by the runs: the prior's value"
        elif k in PER_SEQUENCE and v == 0.0 and (k in ((profile or {}).get("uncertainty_s") or {})
                                                  or not (profile or {}).get("rule")):  # else: a fitted 0
            sd = ((profile or {}).get("uncertainty_s") or {}).get(k)
            src = (f"0: the prior ({name}) has no per-sequence measurements"
                   + (f" (the interval carries +-{sd * 1e6:.1f} us for it)" if sd else "")
                   + "; calibrate at two batch sizes")
        else:
            rule = (profile or {}).get("rule") or {}
            how = "" if rule.get("rule") in (None, "fitted") else f", by the release rule from {rule.get('base')}"
            src = f"release prior ({name}{how})" if rule else f"prior ({name})"
        rows.append({"term": k, "what": TERM_TEXT[k], "value_s": v, "source": src})
    return rows
