"""Decode-step time of SmolLM2-135M (fp32, our decoder) with 1 and 2 OpenMP threads, interleaved in one process,
under the OpenMP wait policy this process was started with. Run it once per policy, on a shared machine and a
quiet one, to see what spinning threads cost when other processes hold the cores:

    .venv/bin/python benchmarks/decisions/omp_wait.py --batch 1 --rounds 4                 # libgomp default: spin
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/decisions/omp_wait.py --batch 1 --rounds 4
    GOMP_SPINCOUNT=10000 .venv/bin/python benchmarks/decisions/omp_wait.py --batch 1 --rounds 4

Results: benchmarks/build.md (2026-12-01, issue 15 item 5).
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    import torch

    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.runtime.llama import LlamaModel

    m = LlamaModel.from_pretrained(model_dir("smollm2-135m"), dtype=torch.float32)
    b = args.batch
    cache = m.new_cache(b, 64 + args.rounds * 2 * (args.steps + 1) + 8)
    step, pad = torch.randint(0, m.cfg.vocab_size, (b, 1)), torch.zeros(b, dtype=torch.long)
    m.forward(torch.randint(0, m.cfg.vocab_size, (b, 50)), torch.zeros(b, dtype=torch.long), cache, logits="last",
              pad_left=pad)
    pos, res = 50, {1: [], 2: []}
    for _ in range(args.rounds):
        for th in (1, 2):
            torch.set_num_threads(th)
            m.forward(step, torch.full((b,), pos), cache, logits="last", pad_left=pad)
            t0 = time.perf_counter()
            for i in range(args.steps):
                m.forward(step, torch.full((b,), pos + 1 + i), cache, logits="last", pad_left=pad)
            res[th].append((time.perf_counter() - t0) / args.steps * 1e3)
            pos += args.steps + 1
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')} "
          f"batch {b}: step ms, 1 thread {[round(x) for x in res[1]]}, 2 threads {[round(x) for x in res[2]]}; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
