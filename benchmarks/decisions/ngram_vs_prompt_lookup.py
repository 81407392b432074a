"""Per prompt: our n-gram decoder vs transformers' prompt-lookup decoding on SmolLM2-135M (CPU), same prompts,
5 draft tokens, 64 new tokens. Prints tokens, target iterations (ours) / decode forwards (transformers),
drafted tokens, tokens/s and whether the outputs are identical. A finer look than benchmarks/ecosystem.py at
categories where one run's aggregate is within noise.

Run:  .venv/bin/python benchmarks/decisions/ngram_vs_prompt_lookup.py CATEGORY fp32|bf16 [NUM_PROMPTS]
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
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.llama import LlamaModel

    cat, dtype = sys.argv[1], torch.float32 if sys.argv[2] == "fp32" else torch.bfloat16
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    d = fetch_model("smollm2-135m")
    tok = load_tokenizer(d)
    ours = LlamaModel.from_pretrained(d, dtype=dtype)
    hf = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype).eval()
    widths: list[int] = []
    forward = hf.forward

    def counted(*a, **k):
        ids = k["input_ids"] if "input_ids" in k else a[0]
        widths.append(ids.shape[1])
        return forward(*a, **k)

    hf.forward = counted
    for it in build_suite(categories=[cat], num_prompts=n):
        ids = prompt_ids(tok, it.messages)
        t0 = time.perf_counter()
        out, st = speculative_generate(ours, NGramDrafter(3), ids, 64, 5, eos_ids=(2,))
        t1 = time.perf_counter()
        widths.clear()
        inp = torch.tensor([ids])
        with torch.inference_mode():
            o = hf.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=64, do_sample=False,
                            eos_token_id=2, pad_token_id=2, prompt_lookup_num_tokens=5)
        t2 = time.perf_counter()
        h = o[0, len(ids):].tolist()
        print(f"{it.id}: ours {len(out)} tok, {st.iterations} iterations, {sum(st.proposed)} drafted, "
              f"{len(out) / (t1 - t0):.1f} t/s | transformers {len(h)} tok, {len(widths) - 1} decode forwards, "
              f"{sum(widths[1:]) - (len(widths) - 1)} drafted, {len(h) / (t2 - t1):.1f} t/s | identical {out == h}")


if __name__ == "__main__":
    main()
