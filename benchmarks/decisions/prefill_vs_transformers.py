"""Prefill and one verification forward at long contexts: our reference model vs transformers (SDPA), SmolLM2-135M
on CPU, on the speed-lite rag and multilingual prompts (the long ones). Prints seconds per prefill and ms per
forward of 1 and 6 query tokens over the prompt's KV cache (5 repeats each, after one warm-up prefill).

Run:  .venv/bin/python benchmarks/decisions/prefill_vs_transformers.py [bf16|fp32]
"""

from __future__ import annotations

import sys
import time

import torch


def main() -> None:
    from transformers import AutoModelForCausalLM

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.data.suite import build_suite
    from trtllm_spec.runtime.llama import LlamaModel

    dtype = torch.float32 if sys.argv[1:] == ["fp32"] else torch.bfloat16
    d = fetch_model("smollm2-135m")
    tok = load_tokenizer(d)
    ours = LlamaModel.from_pretrained(d, dtype=dtype)
    hf = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype).eval()
    for it in build_suite(categories=["rag", "multilingual"], num_prompts=2):
        ids = prompt_ids(tok, it.messages)
        x, n = torch.tensor([ids]), len(ids)
        with torch.inference_mode():
            for _ in range(2):  # the second round is timed
                cache = ours.new_cache(1, n + 16)
                t0 = time.perf_counter()
                ours.forward(x, torch.tensor([0]), cache, logits="last")
                t1 = time.perf_counter()
                out = hf(x, use_cache=True, logits_to_keep=1)
                t2 = time.perf_counter()
            pkv, step = out.past_key_values, {}
            for q in (1, 6):
                toks = torch.full((1, q), 5)
                s0 = time.perf_counter()
                for _ in range(5):
                    ours.forward(toks, torch.tensor([n]), cache)
                s1 = time.perf_counter()
                for _ in range(5):
                    hf(toks, past_key_values=pkv, use_cache=True)
                    pkv.crop(n)
                s2 = time.perf_counter()
                step[q] = ((s1 - s0) / 5 * 1e3, (s2 - s1) / 5 * 1e3)
        print(f"{it.category} {n} tokens: prefill ours {t1 - t0:.2f} s, transformers {t2 - t1:.2f} s | 1 token "
              f"{step[1][0]:.1f} vs {step[1][1]:.1f} ms | 6 tokens {step[6][0]:.1f} vs {step[6][1]:.1f} ms")


if __name__ == "__main__":
    main()
