"""x @ W.T two ways on this CPU, for the weight shapes of SmolLM2-135M: ``F.linear(x, W)`` and ``(W @ x.T).T``
(made contiguous), median of 30 runs each, at the row counts our decoder runs (1 = batch-1 decode, 1 + D =
verification, 16-64 = the regeneration batch). ``model-step`` weighs 30 layers' projections plus one lm_head.
``runtime/llama.linear`` picks the second form where this measured faster. ``--forward`` instead times whole
SmolLM2-135M decode steps (a 250-token prefill at batch B, then the median of 10 one-token steps with layers
1/14/26 captured, as regeneration runs) with ``linear`` as it is and with plain ``F.linear``, side by side.
Results: benchmarks/decisions/small_gemm.md.

    .venv/bin/python benchmarks/decisions/small_gemm.py
    PYTHONPATH=$PWD .venv/bin/python benchmarks/decisions/small_gemm.py --forward   # needs 'trtllm-spec assets fetch smollm2-135m'
"""

import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {"lm_head": (49152, 576), "gate_up": (3072, 576), "down": (576, 1536), "qkv": (960, 576), "o": (576, 576)}
ROWS = (1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 24, 32, 48, 64)


def median_ms(fn, n: int = 30) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2] * 1e3


def main() -> None:
    weights = {k: torch.randn(*v) for k, v in SHAPES.items()}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("rows  " + "  ".join(f"{k:>15s}" for k in SHAPES) + "   (F.linear / (W @ x.T).T, ms)")
    for m in ROWS:
        cells, total_a, total_b = [], 0.0, 0.0
        for name, w in weights.items():
            x = torch.randn(m, w.shape[1])
            a = median_ms(lambda x=x, w=w: F.linear(x, w))
            b = median_ms(lambda x=x, w=w: (w @ x.t()).t().contiguous())
            per_step = 1 if name == "lm_head" else 30
            total_a, total_b = total_a + a * per_step, total_b + b * per_step
            cells.append(f"{a:6.2f}/{b:6.2f}")
        print(f"{m:4d}  " + "  ".join(cells) + f"   model-step {total_a:6.1f}/{total_b:6.1f}", flush=True)


def forward(batches=(32, 16), ctx: int = 250) -> None:
    import trtllm_spec.runtime.llama as llama
    from trtllm_spec.data.model_assets import model_dir

    model = llama.LlamaModel.from_pretrained(model_dir("smollm2-135m"), dtype=torch.float32)
    ours = llama.linear
    for b in batches:
        for name, fn in (("linear", ours), ("F.linear", F.linear)):
            llama.linear = fn  # the module-level name every projection calls
            cache = model.new_cache(b, ctx + 16)
            g = torch.Generator().manual_seed(0)
            model.forward(torch.randint(0, 49152, (b, ctx), generator=g), torch.zeros(b, dtype=torch.long), cache,
                          logits="last", capture=(1, 14, 26))
            steps = []
            for s in range(12):
                t0 = time.perf_counter()
                model.forward(torch.randint(0, 49152, (b, 1), generator=g), torch.full((b,), ctx + s), cache,
                              logits="last", capture=(1, 14, 26))
                steps.append(time.perf_counter() - t0)
            med = sorted(steps[2:])[5]
            print(f"batch {b:2d}, {name:8s}: decode step {med * 1e3:.0f} ms ({b / med:.0f} tok/s)", flush=True)
    llama.linear = ours


if __name__ == "__main__":
    forward() if "--forward" in sys.argv[1:] else main()
