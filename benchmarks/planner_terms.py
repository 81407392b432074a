"""The residual of every published point broken into the step model's terms (issue 36's analysis).

For a point (batch B, draft length D, measured speedup S_m, acceptance AL) the model's plain step T0 and
speculative step T1 are sums of terms x0_k and x1_k: target GEMMs, attention, communication, kernel gaps (per-layer
launch units + sampling), the host terms (iteration_s and spec_iteration_s as exposed, n(D) draft_step_s, and the three
per-sequence ones together, issue 54) and the drafter's GPU work. The predicted speedup is AL T0 / T1. Two readings per term k:

- its share of what speculation adds, (x1_k - x0_k) / (T1 - T0);
- the residual R = T1 - AL T0 / S_m (the model's speculative step minus the one the measurement implies with the
  model's plain step; > 0 is pessimism), and for each term the factor f_k = 1 - R / (x1_k - x0_k) on what that term
  adds to the speculative step that alone closes it. A term that carries a bias needs a plausible f (0 < f, not
  orders of magnitude) of the same direction across the points of a release; the plain step itself is checked
  against the sources that give it (base_step_s).
"""

from __future__ import annotations

from trtllm_spec.core.hardware import Hardware
from trtllm_spec.core.host_costs import HOST_TERMS
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.planner.cost import Precision
from trtllm_spec.planner.search import CostContext, Workload, draft_step, target_step
from trtllm_spec.planner.step import coefficients

TERMS = ("target_gemm", "attention", "communication", "kernel_gaps", "iteration", "spec_iteration", "draft_host",
         "per_sequence", "drafting_gpu")
HOST = HOST_TERMS  # the six host terms of planner/step.py (issue 54): zeroed for the GPU part, added back by name


def _no_host(hw: Hardware) -> Hardware:
    return hw.model_copy(update={"overheads": hw.overheads.model_copy(update=dict.fromkeys(HOST, 0.0))})


def step_terms(p, hw: Hardware, batch: int, draft_len: int) -> dict[str, float]:
    """Seconds per term of one iteration at (batch, draft_len) for point ``p`` (a chain, or SGLang's tree priced as
    benchmarks/planner_validation.tree_candidates does)."""
    shape = resolve_shape(p.target)
    zero = _no_host(hw)
    ctx = CostContext(shape, zero, p.par, Precision(weight=p.weights), Workload((batch,), p.isl, p.osl))
    cost = MECHANISMS[p.drafter.type].cost(shape, p.drafter)
    verify, draft_rows, steps = draft_len, batch, draft_len
    if p.tree and draft_len:
        steps, topk, n_verify = p.tree
        verify, draft_rows = n_verify - 1, batch * topk
    tgt = target_step(ctx, batch, verify)
    drf = draft_step(ctx, cost, draft_rows, steps) if draft_len else None
    ov = hw.overheads
    n = (steps if cost.sequential else 1) if draft_len else 0
    c = coefficients(ov, cost.sequential, batch, draft_len)
    per_seq = c["sequence_s"] * ov.sequence_s + c["spec_sequence_s"] * ov.spec_sequence_s \
        + n * draft_rows * ov.draft_sequence_s
    return {"target_gemm": tgt.gemm_s, "attention": tgt.attention_s, "communication": tgt.comm_s,
            "kernel_gaps": tgt.overhead_s, "iteration": ov.exposed_iteration_s(draft_len > 0),
            "spec_iteration": ov.exposed_spec_iteration_s() if draft_len else 0.0, "draft_host": n * ov.draft_step_s,
            "per_sequence": per_seq, "drafting_gpu": drf.total_s if drf is not None else 0.0}


def decompose(p, hw: Hardware, batch: int, draft_len: int, measured: float) -> dict:
    x0, x1 = step_terms(p, hw, batch, 0), step_terms(p, hw, batch, draft_len)
    t0, t1 = sum(x0.values()), sum(x1.values())
    al = p.al[draft_len]
    predicted = al * t0 / t1
    added = t1 - t0
    out = {"batch": batch, "draft_len": draft_len, "al": al, "measured": measured, "predicted": predicted,
           "error": predicted / measured - 1, "plain_step_ms": t0 * 1e3, "spec_step_ms": t1 * 1e3,
           # the speculative step the measurement implies with the model's plain step
           "implied_spec_step_ms": al * t0 / measured * 1e3, "terms_ms": {}, "share_of_added": {}, "closing_factor": {}}
    residual = t1 - al * t0 / measured  # > 0: the model's speculative step is too slow (pessimistic)
    out["residual_ms"] = residual * 1e3
    for k in TERMS:
        out["terms_ms"][k] = (round(x0[k] * 1e3, 3), round(x1[k] * 1e3, 3))
        delta = x1[k] - x0[k]
        out["share_of_added"][k] = delta / added if added else 0.0
        # the factor on what this term adds to the speculative step that alone closes the residual (the plain
        # step, which sources that give it pin, stays as it is)
        out["closing_factor"][k] = 1 - residual / delta if delta > 1e-7 else None
    return out
