"""TensorRT-LLM's SA draft enhancer on a neural drafter (EAGLE-3 / MTP), for the reference decoder.

Upstream ``tensorrt_llm/_torch/speculative/sa_enhancer.py`` @1a487b3f (``SADraftEnhancer``): the automaton is
extended with the accepted tokens and searched for the longest suffix match (``extend``, or ``extend_global``
with the pool) beside the neural draft loop, which always runs; afterwards ``maybe_override_all_draft_tokens``
replaces all K draft positions of a request by the automaton's where ``match_len >= threshold``. Here the same:
the neural drafter proposes every iteration, the suffix match (longest, never fixed-size: the enhancer has no
``max_matching_ngram_size``) replaces it where it reaches the threshold. Upstream fills the K positions from a
buffer even when the continuation is shorter than K; we propose only the continuation (the positions past it
hold no suffix drafts to verify).

Which source drafted each iteration is kept in ``last_source`` ("sa" | "neural") for the decoder's stats, and
the time spent in the automaton in ``sa_s`` (reset per request) for the overhead report.
"""

from __future__ import annotations

import time

import torch

from trtllm_spec.core.sa import SA_THRESHOLD_DEFAULT
from trtllm_spec.drafters.suffix.runtime import SuffixDrafter
from trtllm_spec.runtime.decoder import Drafter

SOURCES = ("sa", "neural")


class SAEnhancedDrafter(Drafter):
    def __init__(self, neural: Drafter, threshold: int = SA_THRESHOLD_DEFAULT, enable_global_pool: bool = False,
                 pool_slots: int | None = None) -> None:
        if threshold < 1:
            raise ValueError(f"threshold {threshold}: must be >= 1")
        self.neural, self.threshold = neural, threshold
        self.sa = SuffixDrafter(-1, enable_global_pool, pool_slots)
        self.capture = neural.capture
        self.max_draft_len = neural.max_draft_len
        self.last_source = "neural"
        self.sa_s = 0.0

    def end_request(self, prompt: list[int], output: list[int]) -> None:
        self.sa.end_request(prompt, output)

    def use_sampling(self, params, generator) -> None:
        self.neural.use_sampling(params, generator)

    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        self.neural.reset(prompt, first_token, aux)
        t0 = time.perf_counter()
        self.sa.reset(prompt, first_token, aux)
        self.sa_s = time.perf_counter() - t0

    def propose(self, n: int) -> tuple[list[int], list[torch.Tensor] | None]:
        drafts, q = self.neural.propose(n)
        t0 = time.perf_counter()
        length, sa_drafts = self.sa.match(n)
        self.sa_s += time.perf_counter() - t0
        if length >= self.threshold and sa_drafts:
            self.last_source = "sa"
            return sa_drafts, None  # deterministic drafts: rejection sampling treats them as a point mass
        self.last_source = "neural"
        return drafts, q

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        self.neural.commit(verified, next_token, aux)
        t0 = time.perf_counter()
        self.sa.commit(verified, next_token, aux)
        self.sa_s += time.perf_counter() - t0
