"""Memory feasibility in words: why a batch size does not fit, with the bytes, and what would make it fit.

capacity(B) = floor(free / (kv_per_token * tokens)),  free = (HBM - runtime reserve - weights) * fraction,
tokens = isl + osl + D (the KV of every sequence at its longest). The numbers are the ones
``search.max_feasible_batch`` uses; this module only explains them.
"""

from __future__ import annotations

from trtllm_spec.planner.cost import kv_bytes_per_token_per_gpu, weight_bytes_per_gpu

GIB = 2**30


def memory_budget(ctx) -> dict:
    """Bytes per GPU: HBM, the runtime reserve, the target's weights, what is left for KV, KV per sequence."""
    hw, prec, par, wl = ctx.hw, ctx.prec, ctx.par, ctx.workload
    weights = weight_bytes_per_gpu(ctx.target, prec, par)
    free = (hw.mem_bytes - hw.runtime_reserve_bytes - weights) * ctx.free_gpu_memory_fraction
    tokens = wl.max_context
    per_seq = kv_bytes_per_token_per_gpu(ctx.target, prec, par, tokens) * tokens
    return {"hbm_bytes": hw.mem_bytes, "runtime_reserve_bytes": hw.runtime_reserve_bytes,
            "weight_bytes": weights, "free_gpu_memory_fraction": ctx.free_gpu_memory_fraction,
            "kv_budget_bytes": max(0.0, free), "kv_bytes_per_sequence": per_seq, "tokens_per_sequence": tokens,
            "max_batch_without_speculation": int(max(0.0, free) // per_seq) * par.pp if per_seq > 0 else 0}


def infeasible_note(ctx, infeasible: list[int]) -> str:
    """One paragraph: which batch sizes do not fit, the bytes behind it, and the fixes."""
    m = memory_budget(ctx)
    par, prec = ctx.par, ctx.prec
    head = (f"batch sizes {infeasible} do not fit in memory on {ctx.hw.name}: {_gib(m['hbm_bytes'])} HBM - "
            f"{_gib(m['runtime_reserve_bytes'])} runtime reserve - {_gib(m['weight_bytes'])} of {prec.weight} "
            f"weights per GPU (tp {par.tp}, pp {par.pp})")
    if m["kv_budget_bytes"] <= 0:
        body = " leaves nothing for the KV cache: the target's weights alone do not fit"
    else:
        body = (f" leaves {_gib(m['kv_budget_bytes'])} for KV (free_gpu_memory_fraction "
                f"{ctx.free_gpu_memory_fraction} of the rest); one sequence of "
                f"{m['tokens_per_sequence']} tokens needs {_gib(m['kv_bytes_per_sequence'])}, so at most "
                f"{m['max_batch_without_speculation']} sequences fit")
    fixes = [f"more tensor parallelism (--tp {par.tp * 2})"]
    if prec.weight in ("bf16", "fp16", "fp32"):
        fixes.append("fp8 weights (--dtype fp8)")
    if prec.kv in ("bf16", "fp16", "fp32") and m["kv_budget_bytes"] > 0:
        fixes.append("an fp8 KV cache (--kv-dtype fp8)")
    if m["kv_budget_bytes"] > 0:
        fixes.append("fewer tokens per sequence (--isl/--osl) or smaller --batch-sizes")
    return head + body + ". Fix: " + ", ".join(fixes) + "."


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"
