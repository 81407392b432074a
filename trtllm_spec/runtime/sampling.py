"""Sampling and the rejection-sampling rule that keeps speculative decoding lossless.

Target distribution p = softmax(logits / T) restricted to top-k and top-p (the same processing target-only
sampling uses). A draft token d proposed with probability q(d) is accepted with probability min(1, p(d)/q(d));
on rejection the replacement is drawn from norm(max(0, p - q)). Deterministic drafters (argmax EAGLE, n-gram,
greedy draft model) have q = one-hot(d): accept with probability p(d), resample from p with d removed.
The output distribution is exactly p (Leviathan et al. 2023, Chen et al. 2023).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The target's sampling distribution over the vocabulary (fp32)."""
    x = logits.float() / params.temperature
    if params.top_k and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    p = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        sorted_p, idx = torch.sort(p, dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        drop = cum - sorted_p > params.top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter(-1, idx, sorted_p)
        p = p / p.sum(-1, keepdim=True)
    return p


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> int:
    if params.greedy:
        return int(torch.argmax(logits))
    return int(torch.multinomial(probs(logits, params), 1, generator=generator))


def accept_or_resample(p: torch.Tensor, draft: int, q: torch.Tensor | None,
                       generator: torch.Generator | None) -> tuple[bool, int]:
    """One rejection-sampling step: (accepted, token). ``q`` None means the drafter was deterministic."""
    q_d = 1.0 if q is None else float(q[draft])
    p_d = float(p[draft])
    u = float(torch.rand((), generator=generator, device=p.device))
    if q_d > 0 and u < min(1.0, p_d / q_d):
        return True, draft
    residual = p.clone()
    if q is None:
        residual[draft] = 0.0
    else:
        residual = torch.clamp(p - q, min=0.0)
    total = float(residual.sum())
    if total <= 0:  # p == q (or p concentrated on draft): any sample from p is exact
        return False, int(torch.multinomial(p, 1, generator=generator))
    return False, int(torch.multinomial(residual / total, 1, generator=generator))
