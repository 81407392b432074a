"""``hw probe``: measure this machine so the cost model can be checked where we can run it.

- GEMM throughput F(M) per dtype at several M, with weights too big for cache (as real model weights are):
  the curve replaces ``peak x efficiency`` in the planner, so a memory-bound small-M GEMM is predicted from
  its measured time. Generic probe: one K=N square matrix. ``--target``: the target's own linear layers
  (fused QKV, O, fused gate/up, down per layer, then the lm_head), run in sequence as our decoder runs a
  forward. Small matrices behave differently from a 4096-square one: on the 2-core CPU of
  benchmarks/ecosystem.md the square fp32 curve is flat for M = 1..4 and prices a 6-token GEMM pass at ~3.3
  single-token ones, while SmolLM2-135M's own layers take ~1.3 (bf16: ~1.15).
- Memory bandwidth: a large tensor copy (read + write).
- ``--target``: decode attention at the target's heads (G query heads per KV head, one token over a long
  context): the KV streaming rate replaces the memory bandwidth in the planner's attention term. On CUDA the
  entry also records the SM count (GEMM wave quantisation). Same code on CPU and GPU, device as a parameter.
- Per-forward overheads of the code path our decoder runs (runtime/llama.py with its KV cache):
  t(L layers) = iteration + L * per_layer, solved from two tiny models where arithmetic is negligible.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

from trtllm_spec.core.hardware import Efficiency, Hardware, Overheads
from trtllm_spec.core.shape import ModelShape
from trtllm_spec.errors import DependencyMissing, UserError


def _torch():
    try:
        import torch
    except ImportError:
        raise DependencyMissing("hw probe needs torch: pip install 'trtllm-spec[train]'") from None
    return torch


def _timeit(fn: Callable[[], None], sync: Callable[[], None], reps: int, min_s: float = 0.05,
            best: bool = False) -> float:
    """Median (``best``: the fastest) of at least ``reps`` timed calls, repeated for at least ``min_s``."""
    fn()
    sync()
    times = []
    deadline = time.perf_counter() + max(min_s, 0.0)
    while len(times) < reps or (time.perf_counter() < deadline and len(times) < 50 * reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times) if best else statistics.median(times)


def gemm_curve(torch, device: str, dtype, ms: list[int], k: int, n: int, reps: int, sync) -> dict[int, float]:
    import torch.nn.functional as F

    w = torch.randn(n, k, device=device).to(dtype)  # [out, in], as F.linear and our decoder hold weights
    out = {}
    for m in ms:
        x = torch.randn(m, k, device=device).to(dtype)
        t = _timeit(lambda x=x: F.linear(x, w), sync, reps)
        out[m] = 2.0 * m * k * n / t
    return out


def target_matrices(shape: ModelShape) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """([out, in] of each linear of one decoder layer, fused as runtime/llama.py fuses them), [vocab, hidden])."""
    if shape.moe is not None or shape.mla is not None:
        raise UserError(f"hw probe --target measures dense attention + FFN layers; {shape.name} is "
                        f"{'MoE' if shape.moe is not None else 'MLA'}: probe without --target")
    h, q, kv = shape.hidden_size, shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    inter = shape.intermediate_size
    return [(q + 2 * kv, h), (h, q), (2 * inter, h), (h, inter)], (shape.vocab_size, h)


def target_gemm_curve(torch, device: str, dtype, ms: list[int], shape: ModelShape, reps: int, sync,
                      max_weight_bytes: int) -> dict[int, float]:
    """FLOP/s by M over the target's own linear layers, run in sequence like one forward, with distinct
    weights per layer (up to ``max_weight_bytes``; beyond that the layers cycle, still streaming from memory)."""
    import torch.nn.functional as F

    mats, (vocab, hidden) = target_matrices(shape)
    elem = torch.tensor([], dtype=dtype).element_size()
    layer_params = sum(o * i for o, i in mats)
    distinct = max(1, min(shape.num_layers, max_weight_bytes // (layer_params * elem)))
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(*size: int):
        return (torch.randn(*size, generator=gen) * 0.02).to(device=device, dtype=dtype)

    layers = [[rand(o, i) for o, i in mats] for _ in range(distinct)]
    head = rand(vocab, hidden)
    flops_per_row = 2.0 * (shape.num_layers * layer_params + vocab * hidden)
    out = {}
    for m in ms:
        xs = [rand(m, i) for _o, i in mats]
        xh = rand(m, hidden)

        def forward(xs=xs, xh=xh) -> None:
            for j in range(shape.num_layers):
                for w, x in zip(layers[j % distinct], xs, strict=True):
                    F.linear(x, w)
            F.linear(xh, head)

        out[m] = flops_per_row * m / _timeit(forward, sync, reps)
    return out


def memory_bandwidth(torch, device: str, nbytes: int, reps: int, sync) -> float:
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    t = _timeit(lambda: dst.copy_(src), sync, reps)
    return 2.0 * nbytes / t


def attention_kv_rate(torch, device: str, dtype, shape: ModelShape, batch: int, context: int, reps: int,
                      sync) -> float:
    """Decode attention at the target's own head shapes (its G query heads per KV head, one new token per
    sequence over ``context`` cached tokens, torch's SDPA with grouped KV): KV bytes streamed per second. It
    replaces the memory bandwidth in the planner's attention term (``Hardware.attention_kv_bytes_per_s``)."""
    import torch.nn.functional as F

    d, kvh, g = shape.head_dim, shape.num_kv_heads, shape.group_size()
    gen = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(batch, kvh * g, 1, d, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(batch, kvh, context, d, generator=gen).to(device=device, dtype=dtype)
    v = torch.randn(batch, kvh, context, d, generator=gen).to(device=device, dtype=dtype)
    t = _timeit(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=g > 1), sync, reps)
    return 2.0 * batch * kvh * context * d * k.element_size() / t


def device_facts(torch, device: str) -> dict:
    """What the probed entry records about the device itself: CUDA properties on a GPU, the host otherwise."""
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return {"name": "probed-cuda", "kind": "gpu", "description": f"{props.name} (probed)",
                "mem_bytes": float(props.total_memory), "sm_count": int(props.multi_processor_count)}
    return {"name": "probed-cpu", "kind": "cpu", "sm_count": 0,
            "description": f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads "
                           "(probed)", "mem_bytes": float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))}


def forward_overheads(torch, device: str, reps: int, sync, attempts: int = 3) -> tuple[float, float]:
    """(iteration_s, per_layer_s) of one decode step of trtllm-spec's reference decoder (the code path whose
    speed the CPU plan is checked against), from tiny models where arithmetic is negligible.

    The 1-layer and 8-layer steps are timed interleaved (one of each per round, the fastest of each over >= 0.2 s of
    rounds), so that other work on the machine slows both alike: timed one after the other, a busy spell during the
    1-layer run once put 8 layers below 1 (per_layer_s 0, under `stress-ng --cpu 2` beside the test suite). If 8 layers
    still time no slower than 1, the pair is measured again; after ``attempts`` the machine is too busy to measure a
    per-layer cost and that is said, never recorded as 0."""
    from trtllm_spec.errors import UserError
    from trtllm_spec.runtime.llama import LlamaConfig, LlamaModel

    def make_step(layers: int) -> Callable[[], None]:
        cfg = LlamaConfig(num_layers=layers, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=256, rms_norm_eps=1e-6, rope_theta=10000.0,
                          tied_embeddings=True)
        g = torch.Generator().manual_seed(0)
        w = {"model.embed_tokens.weight": torch.randn(256, 64, generator=g), "model.norm.weight": torch.ones(64)}
        for i in range(layers):
            p = f"model.layers.{i}."
            for name, shape in (("self_attn.q_proj", (64, 64)), ("self_attn.k_proj", (32, 64)),
                                ("self_attn.v_proj", (32, 64)), ("self_attn.o_proj", (64, 64)),
                                ("mlp.gate_proj", (128, 64)), ("mlp.up_proj", (128, 64)), ("mlp.down_proj", (64, 128))):
                w[p + name + ".weight"] = torch.randn(*shape, generator=g) * 0.05
            w[p + "input_layernorm.weight"] = torch.ones(64)
            w[p + "post_attention_layernorm.weight"] = torch.ones(64)
        model = LlamaModel(cfg, w, device=device)
        cache = model.new_cache(1, 64)
        model.forward(torch.randint(0, 256, (1, 16), device=device), torch.tensor([0], device=device), cache)
        tok, start = torch.tensor([[5]], device=device), torch.tensor([16], device=device)
        return lambda: model.forward(tok, start, cache, logits="last")

    steps = (make_step(1), make_step(8))
    for _attempt in range(attempts):
        t1, t8 = _timeit_interleaved(steps, sync, reps, min_s=0.2)
        if t8 > t1:
            per_layer = (t8 - t1) / 7
            return max(0.0, t1 - per_layer), per_layer
    raise UserError(f"hw probe: 8 decoder layers timed no slower than 1 in {attempts} interleaved attempts "
                    f"({t8 * 1e6:.0f} vs {t1 * 1e6:.0f} us): this machine is too busy to measure a per-layer cost; "
                    "rerun 'trtllm-spec hw probe' when it is idle")


def _timeit_interleaved(fns: tuple[Callable[[], None], ...], sync: Callable[[], None], reps: int,
                        min_s: float) -> tuple[float, ...]:
    """The fastest call of each of ``fns``, timed in rounds (one call of each per round) for at least ``reps`` rounds
    and ``min_s`` seconds."""
    for fn in fns:
        fn()
    sync()
    best = [float("inf")] * len(fns)
    rounds, deadline = 0, time.perf_counter() + min_s
    while rounds < reps or (time.perf_counter() < deadline and rounds < 50 * reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            sync()
            best[i] = min(best[i], time.perf_counter() - t0)
        rounds += 1
    return tuple(best)


def probe_plan(gpu: bool, quick: bool, target: ModelShape | None) -> dict:
    """What a probe measures on this kind of device (the only place GPU and CPU probes differ, so it is tested for
    both without a GPU): GEMM rows M, the K = N of the square GEMMs (> L3 / L2: weights stream from DRAM / HBM),
    repetitions, dtypes (fp16 only where tensor cores run it), the copy size for the bandwidth, the weight budget of
    the target-shaped GEMMs and the decode-attention batch and context."""
    ms = [1, 4, 16, 64, 256] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    if target is not None:  # every verification width a bs-1 plan reads (1 + D), then powers of two
        ms = [1, 2, 4, 8, 64] if quick else [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128, 256]
    return {
        "ms": ms, "k": (8192 if gpu else 4096) if not quick else (2048 if gpu else 1024),
        "reps": 3 if quick else 7,
        "dtypes": {"fp32": "float32", "bf16": "bfloat16"} | ({"fp16": "float16"} if gpu else {}),
        "copy_bytes": (1 << 30 if gpu else 256 << 20) if not quick else 64 << 20,
        "weight_cap_bytes": (64 << 30 if gpu else 1 << 30) if not quick else 64 << 20,
        "attention_batch_context": (2, 256) if quick else ((32, 4096) if gpu else (4, 1024)),
    }


def probe(device: str = "auto", quick: bool = False, log: Callable[[str], None] = lambda _m: None,
          target: ModelShape | None = None) -> Hardware:
    """Measure this machine. ``target``: the GEMM curves are measured on that model's own linear layers."""
    torch = _torch()
    from trtllm_spec.runtime.device import choose

    where = choose(device, "auto", torch)  # what --dtype auto picks on this device, recorded with the curves
    device = where.device
    log(f"probe: {where.describe()}")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    started = time.perf_counter()
    gpu = device == "cuda"
    plan = probe_plan(gpu, quick, target)
    ms, k, n, reps, nbytes = plan["ms"], plan["k"], plan["k"], plan["reps"], plan["copy_bytes"]
    dtypes = {name: getattr(torch, attr) for name, attr in plan["dtypes"].items()}
    curves = {}
    mats = None
    if target is not None:
        mats = target_matrices(target)  # refuses MoE / MLA targets before anything is measured
        cap = plan["weight_cap_bytes"]
    for name, dt in dtypes.items():
        if target is None:
            log(f"probe: GEMM {name} at M in {ms} (K=N={k})")
            curves[name] = gemm_curve(torch, device, dt, ms, k, n, reps, sync)
        else:
            log(f"probe: GEMM {name} at M in {ms} over {target.name}'s linear layers")
            curves[name] = target_gemm_curve(torch, device, dt, ms, target, reps, sync, cap)
    log(f"probe: memory bandwidth (copy of {nbytes >> 20} MiB)")
    bw = memory_bandwidth(torch, device, nbytes, reps, sync)
    log("probe: per-forward overheads (the reference decoder on tiny models, 1 and 8 layers)")
    iteration_s, per_layer_s = forward_overheads(torch, device, reps if not quick else 3, sync)
    facts = device_facts(torch, device)
    desc = facts["description"]
    attention = None
    if target is not None:
        desc = desc[:-1] + f"; GEMMs and attention at {target.name}'s shapes)"
        batch, context = plan["attention_batch_context"]
        log(f"probe: decode attention over {target.name}'s heads (batch {batch}, context {context})")
        attention = attention_kv_rate(torch, device, torch.bfloat16 if gpu else torch.float32, target, batch,
                                      context, reps, sync)
    peaks = {d: max(c.values()) for d, c in curves.items()}
    return Hardware(
        name=facts["name"], kind=facts["kind"], description=desc, sm_count=facts["sm_count"],
        attention_kv_bytes_per_s=attention,
        source="measured by 'trtllm-spec hw probe'", peak_flops_per_s=peaks, mem_bytes_per_s=bw,
        mem_bytes=facts["mem_bytes"], interconnect_bytes_per_s=0.0, attention_tile_rows=128 if gpu else 1,
        runtime_reserve_bytes=(2 * 2**30 if gpu else 0.0),
        efficiency=Efficiency(gemm=1.0, attention=0.5, memory=1.0),
        overheads=Overheads(iteration_s=iteration_s, per_layer_s=per_layer_s, draft_step_s=1e-4 if not gpu else 3e-5,
                            allreduce_latency_s=1e-5),
        gemm_flops_by_m=curves,
        probe={"device": device, "torch": torch.__version__, "threads": torch.get_num_threads(),
               "gemm_k_n": None if target is not None else k,
               "gemm_shapes": (None if mats is None else
                               {"target": target.name, "layers": target.num_layers,
                                "layer_out_in": mats[0], "lm_head": mats[1]}),
               "copy_bytes": nbytes, "seconds": round(time.perf_counter() - started, 2),
               "host": platform.node(), "quick": quick, "placement": where.as_dict()},
    )
