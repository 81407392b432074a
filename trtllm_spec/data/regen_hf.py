"""The ``hf`` regeneration backend: any architecture transformers loads (Llama, Qwen3-MoE, Mixtral, gpt-oss,
DeepSeek-V3, ...), on the chosen device, batched with left padding, finished rows dropped from the batch (and
from its KV cache, ``DynamicCache.batch_select_indices``) once a quarter of it has finished, as our own decoder
does. Greedy / temperature sampling is the same sampler as ours (``runtime/sampling``), so greedy replies agree
with the reference decoder wherever the two forwards agree.

``teacher_forced``: the target's hidden states over whole sequences from one forward with ``output_hidden_states``:
``aux`` = the captured layers' outputs (hidden_states[i + 1] for layer i), ``hidden`` = the final-norm output
(hidden_states[-1]); the features step (``data/features``) stores them.
"""

from __future__ import annotations

from pathlib import Path

from trtllm_spec.errors import DependencyMissing, UserError


class HFEngine:
    def __init__(self, target_dir: Path, *, dtype: str = "bf16", device: str = "cpu", device_map: str | None = None):
        """``device_map="auto"``: accelerate spreads the target over the visible GPUs (one larger than a GPU); the
        inputs go to the device of its first layers. Refused off CUDA (there is nothing to spread over)."""
        try:
            import torch
        except ImportError:
            raise DependencyMissing("the hf backend needs torch and transformers: pip install 'trtllm-spec[train]'") \
                from None
        from trtllm_spec.runtime.device import resolve_device
        from trtllm_spec.runtime.hf_target import load_causal_lm

        self.torch = torch
        self.device = resolve_device(torch, device)
        tdtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}.get(dtype)
        if tdtype is None:
            raise UserError(f"dtype {dtype!r}: the hf backend runs bf16, fp16 or fp32")
        if device_map is not None:
            if device_map != "auto":
                raise UserError(f"--device-map {device_map!r}: the only choice is auto (accelerate's placement)")
            if self.device != "cuda":
                raise UserError(f"--device-map auto spreads the target over GPUs, but this run is on {self.device}; "
                                "drop --device-map (the whole target runs on the CPU) or run where CUDA is visible")
        self.model, self.eos, text_cfg = load_causal_lm(Path(target_dir), tdtype, self.device, device_map=device_map)
        if device_map is not None:
            self.device = str(self.model.get_input_embeddings().weight.device)
        self.num_layers = text_cfg.num_hidden_layers

    def generate_batch(self, prompts: list[list[int]], max_new_tokens: int, eos_ids: tuple[int, ...], params=None,
                       generator=None, drop_finished: bool = True) -> list[list[int]]:
        torch = self.torch
        from transformers import DynamicCache

        from trtllm_spec.runtime.sampling import SamplingParams, sample

        params = params or SamplingParams()
        b, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.zeros((b, width), dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        outs: list[list[int]] = [[] for _ in range(b)]
        done = [False] * b
        live = list(range(b))
        cache = DynamicCache(config=self.model.config)
        with torch.inference_mode():
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                                use_cache=True, logits_to_keep=1).logits[:, -1].float()
            for step_i in range(max_new_tokens):
                for j, i in enumerate(live):
                    if not done[i]:  # a finished row still in the batch samples nothing more
                        t = sample(logits[j], params, generator)
                        outs[i].append(t)
                        done[i] = t in eos_ids
                if all(done[i] for i in live) or step_i == max_new_tokens - 1:
                    break
                alive = [j for j, i in enumerate(live) if not done[i]]
                if drop_finished and len(alive) <= 3 * len(live) // 4:
                    sel = torch.tensor(alive, device=self.device)
                    cache.batch_select_indices(sel)
                    mask = mask[sel]
                    live = [live[j] for j in alive]
                step = torch.tensor([[outs[i][-1]] for i in live], device=self.device)
                # finished rows still in the batch feed their EOS again until the next drop
                mask = torch.cat([mask, torch.ones((len(live), 1), dtype=mask.dtype, device=self.device)], dim=1)
                pos = mask.sum(-1, keepdim=True) - 1
                logits = self.model(input_ids=step, attention_mask=mask, position_ids=pos, past_key_values=cache,
                                    use_cache=True).logits[:, -1].float()
        return outs

    def teacher_forced(self, seqs: list[list[int]], capture: tuple[int, ...]) -> list[dict]:
        """Per sequence {"aux": [T, n*H], "hidden": [T, H]}: one forward with output_hidden_states."""
        torch = self.torch
        bad = [i for i in capture if not 0 <= i < self.num_layers]
        if bad:
            raise UserError(f"captured layer {bad[0]} is outside the target's {self.num_layers} layers "
                            f"(0..{self.num_layers - 1}); fix drafter.layers_to_capture")
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                             output_hidden_states=True, use_cache=False, logits_to_keep=1)
        hs = out.hidden_states
        res = []
        for i, s in enumerate(seqs):
            p = width - len(s)
            res.append({"aux": torch.cat([hs[k + 1][i, p:] for k in capture], dim=-1).cpu(),
                        "hidden": hs[-1][i, p:].cpu()})
        return res
