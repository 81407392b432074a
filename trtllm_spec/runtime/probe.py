"""``hw probe``: measure this machine so the cost model can be checked where we can run it.

- GEMM throughput F(M) per dtype at several M, with weights too big for cache (as real model weights are):
  the curve replaces ``peak x efficiency`` in the planner, so a memory-bound small-M GEMM is predicted from
  its measured time.
- Memory bandwidth: a large tensor copy (read + write).
- Per-forward overheads of the same code path our decoder runs (transformers Llama with a KV cache):
  t(L layers) = iteration + L * per_layer, solved from two tiny models where arithmetic is negligible.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

from trtllm_spec.core.hardware import Efficiency, Hardware, Overheads
from trtllm_spec.errors import DependencyMissing, UserError


def _torch():
    try:
        import torch
    except ImportError:
        raise DependencyMissing("hw probe needs torch: pip install 'trtllm-spec[train]'") from None
    return torch


def _timeit(fn: Callable[[], None], sync: Callable[[], None], reps: int, min_s: float = 0.05) -> float:
    fn()
    sync()
    times = []
    deadline = time.perf_counter() + max(min_s, 0.0)
    while len(times) < reps or (time.perf_counter() < deadline and len(times) < 50 * reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_curve(torch, device: str, dtype, ms: list[int], k: int, n: int, reps: int, sync) -> dict[int, float]:
    w = torch.randn(k, n, device=device).to(dtype)
    out = {}
    for m in ms:
        x = torch.randn(m, k, device=device).to(dtype)
        t = _timeit(lambda x=x: torch.matmul(x, w), sync, reps)
        out[m] = 2.0 * m * k * n / t
    return out


def memory_bandwidth(torch, device: str, nbytes: int, reps: int, sync) -> float:
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    t = _timeit(lambda: dst.copy_(src), sync, reps)
    return 2.0 * nbytes / t


def forward_overheads(torch, device: str, reps: int, sync) -> tuple[float, float]:
    """(iteration_s, per_layer_s) of a transformers Llama decode step with a KV cache."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        raise DependencyMissing("hw probe needs transformers: pip install 'trtllm-spec[train]'") from None

    def step_time(layers: int) -> float:
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=256, max_position_embeddings=512)
        model = LlamaForCausalLM(cfg).to(device).eval()
        ids = torch.randint(0, 256, (1, 16), device=device)
        with torch.inference_mode():
            out = model(ids, use_cache=True)
            cache = out.past_key_values
            tok = ids[:, -1:]

            def one():
                model(tok, past_key_values=cache, use_cache=True)
                cache.crop(16)

            return _timeit(one, sync, reps)

    t1, t8 = step_time(1), step_time(8)
    per_layer = max(0.0, (t8 - t1) / 7)
    return max(0.0, t1 - per_layer), per_layer


def probe(device: str = "auto", quick: bool = False, log: Callable[[str], None] = lambda _m: None) -> Hardware:
    torch = _torch()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is visible; use --device cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    started = time.perf_counter()
    gpu = device == "cuda"
    ms = [1, 4, 16, 64, 256] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    k = n = (8192 if gpu else 4096) if not quick else (2048 if gpu else 1024)  # > L3: weights stream from DRAM
    reps = 3 if quick else 7
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16} | ({"fp16": torch.float16} if gpu else {})
    curves = {}
    for name, dt in dtypes.items():
        log(f"probe: GEMM {name} at M in {ms} (K=N={k})")
        curves[name] = gemm_curve(torch, device, dt, ms, k, n, reps, sync)
    nbytes = (1 << 30 if gpu else 256 << 20) if not quick else 64 << 20
    log(f"probe: memory bandwidth (copy of {nbytes >> 20} MiB)")
    bw = memory_bandwidth(torch, device, nbytes, reps, sync)
    log("probe: per-forward overheads (tiny transformers Llama, 1 and 8 layers)")
    iteration_s, per_layer_s = forward_overheads(torch, device, reps if not quick else 3, sync)
    if gpu:
        props = torch.cuda.get_device_properties(0)
        name, desc, mem = "probed-cuda", f"{props.name} (probed)", float(props.total_memory)
    else:
        name = "probed-cpu"
        desc = f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads (probed)"
        mem = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    peaks = {d: max(c.values()) for d, c in curves.items()}
    return Hardware(
        name=name, kind="gpu" if gpu else "cpu", description=desc,
        source="measured by 'trtllm-spec hw probe'", peak_flops_per_s=peaks, mem_bytes_per_s=bw, mem_bytes=mem,
        interconnect_bytes_per_s=0.0, attention_tile_rows=128 if gpu else 1,
        runtime_reserve_bytes=(2 * 2**30 if gpu else 0.0),
        efficiency=Efficiency(gemm=1.0, attention=0.5, memory=1.0),
        overheads=Overheads(iteration_s=iteration_s, per_layer_s=per_layer_s, draft_step_s=1e-4 if not gpu else 3e-5,
                            allreduce_latency_s=1e-5),
        gemm_flops_by_m=curves,
        probe={"device": device, "torch": torch.__version__, "threads": torch.get_num_threads(),
               "gemm_k_n": k, "copy_bytes": nbytes, "seconds": round(time.perf_counter() - started, 2),
               "host": platform.node(), "quick": quick},
    )
