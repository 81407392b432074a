"""N-gram / prompt lookup drafting: continue the oldest earlier occurrence of the longest matching suffix.

Same idea as TensorRT-LLM's NGram (``max_matching_ngram_size``, ``is_use_oldest``) and transformers'
prompt lookup (``prompt_lookup_num_tokens``; oldest match first). Indexes are updated incrementally, so a
proposal costs a few dictionary lookups, not a scan of the sequence.
"""

from __future__ import annotations

import torch

from trtllm_spec.runtime.decoder import Drafter


class NGramDrafter(Drafter):
    def __init__(self, max_matching_ngram_size: int = 3, use_oldest: bool = True) -> None:
        self.k_max = max_matching_ngram_size
        self.use_oldest = use_oldest
        self.tokens: list[int] = []
        self.index: list[dict[tuple[int, ...], list[int]]] = []

    def _append(self, tok: int) -> None:
        self.tokens.append(tok)
        end = len(self.tokens) - 1
        for k in range(1, self.k_max + 1):
            if end + 1 >= k:
                self.index[k - 1].setdefault(tuple(self.tokens[end + 1 - k:end + 1]), []).append(end)

    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        self.tokens = []
        self.index = [{} for _ in range(self.k_max)]
        for t in [*prompt, first_token]:
            self._append(t)

    def propose(self, n: int) -> tuple[list[int], None]:
        last = len(self.tokens) - 1
        for k in range(min(self.k_max, len(self.tokens)), 0, -1):
            ends = self.index[k - 1].get(tuple(self.tokens[-k:]))
            if not ends:
                continue
            candidates = [e for e in ends if e < last]  # an earlier occurrence with a continuation
            if candidates:
                e = candidates[0] if self.use_oldest else candidates[-1]
                return self.tokens[e + 1:e + 1 + n], None
        return [], None

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        for t in verified[1:]:
            self._append(t)
        self._append(next_token)
