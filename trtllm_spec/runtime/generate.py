"""Plain (non-speculative) generation with the reference decoder: one sequence, or a left-padded batch."""

from __future__ import annotations

from collections.abc import Callable

import torch

from trtllm_spec.runtime.llama import LlamaModel
from trtllm_spec.runtime.sampling import SamplingParams, sample


def generate(model: LlamaModel, prompt: list[int], max_new_tokens: int, eos_ids: tuple[int, ...] = (),
             params: SamplingParams | None = None, generator: torch.Generator | None = None,
             constraint=None) -> list[int]:
    """Target-only decoding, one token per forward: the reference every speculative run must reproduce.
    ``constraint`` (runtime.constraint.GrammarConstraint): each step's logits masked by the grammar."""
    params = params or SamplingParams()
    matcher = constraint.matcher() if constraint is not None else None
    cache = model.new_cache(1, len(prompt) + max_new_tokens + 1)
    tokens = torch.tensor([prompt], device=model.device)
    logits, _, _ = model.forward(tokens, torch.tensor([0], device=model.device), cache, logits="last")
    out: list[int] = []
    pos = len(prompt)
    while len(out) < max_new_tokens:
        row = logits[0, -1] if matcher is None else matcher.mask(logits[0, -1])
        tok = sample(row, params, generator)
        out.append(tok)
        if matcher is not None:
            matcher.accept(tok)
        if tok in eos_ids or len(out) >= max_new_tokens or (matcher is not None and matcher.finished):
            break
        logits, _, _ = model.forward(torch.tensor([[tok]], device=model.device),
                                     torch.tensor([pos], device=model.device), cache, logits="last")
        pos += 1
    return out


def generate_batch(model: LlamaModel, prompts: list[list[int]], max_new_tokens: int, eos_ids: tuple[int, ...],
                   params: SamplingParams | None = None, generator: torch.Generator | None = None,
                   on_token: Callable[[int], None] | None = None, capture: tuple[int, ...] = (),
                   features: list[dict] | None = None, drop_finished: bool = True) -> list[list[int]]:
    """Left-padded batched decoding; rows stop at EOS. With ``drop_finished``, finished rows leave the batch (cache
    and all) once a quarter of it has finished, so short answers stop costing compute (outputs are identical
    either way; benchmarks/decisions/regen_speed.py measures both).

    With ``capture`` and a ``features`` list, also returns, per row, the target's hidden states over
    prompt + generated tokens (what offline drafter training needs, at no extra cost): ``aux`` [T, n*H] (the
    captured layers' outputs, concatenated) and ``hidden`` [T, H] (after the final norm)."""
    params = params or SamplingParams()
    b = len(prompts)
    width = max(len(p) for p in prompts)
    pad = torch.tensor([width - len(p) for p in prompts], device=model.device)
    tokens = torch.zeros((b, width), dtype=torch.long, device=model.device)
    for i, p in enumerate(prompts):
        tokens[i, width - len(p):] = torch.tensor(p)
    cache = model.new_cache(b, width + max_new_tokens + 2)
    start = torch.zeros(b, dtype=torch.long, device=model.device)
    unpadded = not bool(pad.any())  # no row padded (one prompt, or equal lengths): the causal prefill kernel, no mask
    logits, aux, normed = model.forward(tokens, start, cache, logits="last", pad_left=None if unpadded else pad,
                                        capture=capture)
    keep = features is not None and bool(capture)
    rows: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(b)]
    if keep:
        cat = torch.cat(aux, dim=-1)
        for i in range(b):
            rows[i].append((cat[i, int(pad[i]):], normed[i, int(pad[i]):]))
    outs: list[list[int]] = [[] for _ in range(b)]
    done = [False] * b
    live = list(range(b))  # the prompt index of each row still in the batch
    pos = width
    for step_i in range(max_new_tokens):
        appended = [not done[i] for i in live]
        # greedy: one argmax over the batch (the same first-maximum rule as ``sample``), not a call per row
        picks = logits[:, -1].argmax(-1).tolist() if params.greedy else None
        for j, i in enumerate(live):
            if appended[j]:
                t = picks[j] if picks is not None else sample(logits[j, -1], params, generator)
                outs[i].append(t)
                done[i] = t in eos_ids
        if on_token:
            on_token(sum(1 for d in done if not d))
        finished = all(done) or step_i == max_new_tokens - 1
        if finished and not keep:
            break
        # feed the new tokens; with ``keep`` this also yields the features of the tokens just generated
        step = torch.tensor([[outs[i][-1] if outs[i] else 0] for i in live], device=model.device)
        logits, aux, normed = model.forward(step, torch.full((len(live),), pos, device=model.device), cache,
                                            logits="last", pad_left=None if unpadded else pad, capture=capture)
        pos += 1
        if keep:
            cat = torch.cat(aux, dim=-1)
            for j, i in enumerate(live):
                if appended[j]:
                    rows[i].append((cat[j], normed[j]))
        if finished:
            break
        alive = [j for j, i in enumerate(live) if not done[i]]
        if drop_finished and len(alive) <= 3 * len(live) // 4:
            sel = torch.tensor(alive, device=model.device)
            cache.keep_rows(sel)
            pad, logits = pad[sel], logits[sel]
            live = [live[j] for j in alive]
    if keep:
        for i in range(b):
            features.append({"aux": torch.cat([r[0] for r in rows[i]]), "hidden": torch.cat([r[1] for r in rows[i]])})
    return outs
