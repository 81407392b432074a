"""An external draft model (same tokenizer), drafting greedily with its own KV cache."""

from __future__ import annotations

import torch

from trtllm_spec.runtime.decoder import Drafter
from trtllm_spec.runtime.llama import LlamaModel


class DraftModelDrafter(Drafter):
    def __init__(self, model: LlamaModel, max_len: int = 8192) -> None:
        self.model = model
        self.max_len = max_len
        self.tokens: list[int] = []
        self.valid = 0  # tokens[:valid] have correct K/V in the draft cache

    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        self.cache = self.model.new_cache(1, self.max_len)
        self.tokens = [*prompt, first_token]
        self.valid = 0

    def _feed(self, toks: list[int], start: int) -> torch.Tensor:
        dev = self.model.device
        logits, _, _ = self.model.forward(torch.tensor([toks], device=dev), torch.tensor([start], device=dev),
                                          self.cache, logits="last")
        return logits[0, -1]

    def propose(self, n: int) -> tuple[list[int], None]:
        logits = self._feed(self.tokens[self.valid:], self.valid)
        pos = len(self.tokens)
        drafts = []
        for i in range(n):
            drafts.append(int(logits.argmax()))
            if i + 1 < n:
                logits = self._feed([drafts[-1]], pos)
                pos += 1
        self._fed = len(self.tokens) + max(0, n - 1)  # K/V computed for tokens + drafts[:-1]
        return drafts, None

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        accepted = verified[1:]
        self.tokens.extend(accepted)
        self.valid = min(len(self.tokens), self._fed)
        self.tokens.append(next_token)
