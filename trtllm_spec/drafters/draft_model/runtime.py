"""An external draft model (same tokenizer) with its own KV cache: greedy drafts, or -- with sampling ``params``
-- drafts sampled from its own distribution q (the same temperature / top-k / top-p processing as the target's
p, ``runtime/sampling.probs``), returned with the q vectors so rejection sampling accepts d with
min(1, p(d) / q(d)) and resamples from norm(max(0, p - q)): the output still follows the target exactly."""

from __future__ import annotations

import torch

from trtllm_spec.runtime.decoder import Drafter
from trtllm_spec.runtime.llama import LlamaModel
from trtllm_spec.runtime.sampling import SamplingParams, probs


class DraftModelDrafter(Drafter):
    def __init__(self, model: LlamaModel, max_len: int = 8192, params: SamplingParams | None = None,
                 generator: torch.Generator | None = None) -> None:
        self.model = model
        self.max_len = max_len
        self.params = params
        self.generator = generator
        self.tokens: list[int] = []
        self.valid = 0  # tokens[:valid] have correct K/V in the draft cache

    @property
    def sampling(self) -> bool:
        return self.params is not None and not self.params.greedy

    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        self.cache = self.model.new_cache(1, self.max_len)
        self.tokens = [*prompt, first_token]
        self.valid = 0
        self._fed = 0  # commit() may come before any propose() (an iteration with no room for drafts)

    def _feed(self, toks: list[int], start: int) -> torch.Tensor:
        dev = self.model.device
        logits, _, _ = self.model.forward(torch.tensor([toks], device=dev), torch.tensor([start], device=dev),
                                          self.cache, logits="last")
        return logits[0, -1]

    def _draw(self, logits: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        if not self.sampling:
            return int(logits.argmax()), None
        q = probs(logits, self.params)
        return int(torch.multinomial(q, 1, generator=self.generator)), q

    def propose(self, n: int) -> tuple[list[int], list[torch.Tensor] | None]:
        logits = self._feed(self.tokens[self.valid:], self.valid)
        pos = len(self.tokens)
        drafts: list[int] = []
        qs: list[torch.Tensor] = []
        for i in range(n):
            tok, q = self._draw(logits)
            drafts.append(tok)
            if q is not None:
                qs.append(q)
            if i + 1 < n:
                logits = self._feed([tok], pos)
                pos += 1
        self._fed = len(self.tokens) + max(0, n - 1)  # K/V computed for tokens + drafts[:-1]
        return drafts, (qs if self.sampling else None)

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        accepted = verified[1:]
        self.tokens.extend(accepted)
        self.valid = min(len(self.tokens), self._fed)
        self.tokens.append(next_token)
