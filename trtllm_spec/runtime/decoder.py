"""The speculative decoding loop: draft D tokens, verify 1 + D in one target pass, keep the longest agreeing
prefix plus the target's own token. Batch size 1; the target's KV cache rolls back by not advancing.

Greedy verification accepts a draft iff it equals the target's argmax; sampling verification uses rejection
sampling (runtime/sampling.py), so the output follows the target's distribution exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from trtllm_spec.runtime.llama import LlamaModel
from trtllm_spec.runtime.sampling import SamplingParams, accept_or_resample, probs, sample


@dataclass
class DecodeStats:
    """What one generation did, iteration by iteration."""

    accepted: list[int] = field(default_factory=list)  # accepted drafts per iteration
    proposed: list[int] = field(default_factory=list)  # drafts proposed per iteration
    sources: list[str] = field(default_factory=list)  # which source drafted per iteration (enhanced drafters only)
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0

    @property
    def iterations(self) -> int:
        return len(self.accepted)

    def acceptance_length(self) -> float:
        return (sum(self.accepted) + len(self.accepted)) / max(1, len(self.accepted))


class Drafter:
    """Runtime drafter interface (one sequence)."""

    capture: tuple[int, ...] = ()  # target layers whose outputs it reads
    max_draft_len: int | None = None

    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        """Prompt processed by the target (``aux``: captured layer outputs over the prompt) and its first token."""

    def propose(self, n: int) -> tuple[list[int], list[torch.Tensor] | None]:
        """Up to ``n`` draft tokens, and the drafter's distributions if it sampled them (None: deterministic)."""
        raise NotImplementedError

    def use_sampling(self, params: SamplingParams, generator: torch.Generator | None) -> None:
        """The request's sampling parameters and generator, before ``reset``: a drafter that samples its drafts
        (DFlash2's walk) draws with them and returns its distributions from ``propose``; the others ignore it."""

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        """``verified`` tokens (the previous last token + accepted drafts) were checked by the target, whose
        captured layer outputs at their positions are ``aux``; ``next_token`` is the target's own token."""

    def end_request(self, prompt: list[int], output: list[int]) -> None:
        """A request of the run finished with ``output``: a drafter that shares state across requests (the
        suffix automaton's global pool) takes it in; the others ignore it. ``measure`` calls it in suite order."""


def speculative_generate(target: LlamaModel, drafter: Drafter, prompt: list[int], max_new_tokens: int,
                         draft_len: int, params: SamplingParams | None = None, eos_ids: tuple[int, ...] = (),
                         generator: torch.Generator | None = None, constraint=None
                         ) -> tuple[list[int], DecodeStats]:
    """``constraint``: a runtime.constraint.GrammarConstraint (structured output): the target's logits are masked
    at every position, the first token's and each verified one's, so the output is the constrained target's."""
    params = params or SamplingParams()
    matcher = constraint.matcher() if constraint is not None else None
    stats = DecodeStats()
    dev = target.device
    cache = target.new_cache(1, len(prompt) + max_new_tokens + draft_len + 2)
    t0 = time.perf_counter()
    logits, aux, _ = target.forward(torch.tensor([prompt], device=dev), torch.tensor([0], device=dev), cache,
                                    capture=drafter.capture, logits="last")
    first = logits[0, -1] if matcher is None else matcher.mask(logits[0, -1])
    out = [sample(first, params, generator)]
    if matcher is not None:
        matcher.accept(out[0])
    use_sampling = getattr(drafter, "use_sampling", None)  # duck-typed drafters (tests, wrappers) may lack it
    if use_sampling is not None:
        use_sampling(params, generator)
    drafter.reset(prompt, out[0], aux)
    stats.prefill_s = time.perf_counter() - t0
    kv_len = len(prompt)  # target KV holds every token before out[-1]
    while out[-1] not in eos_ids and len(out) < max_new_tokens:
        d = min(draft_len, max_new_tokens - len(out) - 1)
        t0 = time.perf_counter()
        drafts, q = drafter.propose(d) if d > 0 else ([], None)
        t1 = time.perf_counter()
        verify = torch.tensor([[out[-1], *drafts]], device=dev)
        logits, aux, _ = target.forward(verify, torch.tensor([kv_len], device=dev), cache, capture=drafter.capture)
        new = (_accept(logits[0], drafts, q, params, generator) if matcher is None
               else _accept_constrained(logits[0], drafts, q, params, generator, matcher))
        stats.draft_s += t1 - t0
        stats.verify_s += time.perf_counter() - t1
        end = next((i for i, t in enumerate(new) if t in eos_ids), None)
        if end is not None:  # the request ends here: what follows the end token is not output, so not accepted
            new = new[: end + 1]
        k = len(new) - 1  # accepted drafts; an end token counts as the iteration's own token (llama.cpp's rule,
        # common_sampler_sample_and_accept_n: benchmarks/engine_parity.md)
        stats.accepted.append(k)
        stats.proposed.append(len(drafts))
        source = getattr(drafter, "last_source", None)
        if source is not None:
            stats.sources.append(source)
        verified = [out[-1], *drafts[:k]]
        out.extend(new)
        kv_len += 1 + k
        if end is not None:
            break
        t2 = time.perf_counter()
        drafter.commit(verified, new[-1], [a[:, : 1 + k] for a in aux])
        stats.draft_s += time.perf_counter() - t2  # EAGLE/DFlash run their forward here, over the accepted tokens
    return _truncate(out, eos_ids, max_new_tokens), stats


def _accept(logits: torch.Tensor, drafts: list[int], q: list[torch.Tensor] | None, params: SamplingParams,
            generator: torch.Generator | None) -> list[int]:
    """Tokens this iteration yields: the accepted drafts and then the target's correction or bonus token."""
    if params.greedy:
        target_tokens = logits.argmax(-1).tolist()
        out = []
        for i, dtok in enumerate(drafts):
            if target_tokens[i] != dtok:
                return [*out, target_tokens[i]]
            out.append(dtok)
        return [*out, target_tokens[len(drafts)]]
    out = []
    for i, dtok in enumerate(drafts):
        p = probs(logits[i], params)
        ok, tok = accept_or_resample(p, dtok, None if q is None else q[i], generator)
        out.append(tok)
        if not ok:
            return out
    out.append(int(torch.multinomial(probs(logits[len(drafts)], params), 1, generator=generator)))
    return out


def _accept_constrained(logits: torch.Tensor, drafts: list[int], q: list[torch.Tensor] | None,
                        params: SamplingParams, generator: torch.Generator | None, matcher) -> list[int]:
    """``_accept`` under a grammar: position i's logits are masked with the matcher advanced over the tokens
    accepted before it (drafts[:i]); a draft the grammar forbids has masked probability 0, so it is rejected and
    the target's constrained token replaces it. After a stop token ends the grammar nothing more is accepted."""
    out: list[int] = []
    for i in range(len(drafts) + 1):
        row = matcher.mask(logits[i])
        if i == len(drafts):  # every draft accepted: the target's bonus token
            tok = sample(row, params, generator)
            ok = False
        elif params.greedy:
            tok = int(row.argmax())
            ok = tok == drafts[i]
        else:
            ok, tok = accept_or_resample(probs(row, params), drafts[i], None if q is None else q[i], generator)
        out.append(tok)
        matcher.accept(tok)
        if not ok or matcher.finished:
            return out
    return out


def _truncate(tokens: list[int], eos_ids: tuple[int, ...], max_new_tokens: int) -> list[int]:
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[: i + 1]
    return tokens[:max_new_tokens]
