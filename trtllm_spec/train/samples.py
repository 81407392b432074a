"""Training samples: tokenized conversations packed into fixed-length chunks with a loss mask.

ModelOpt's EAGLE loss uses ``loss_mask[j]`` to gate the prediction of token j + 1, so the mask is the
assistant mask shifted left by one. Conversations are concatenated and cut into ``seq_len`` chunks (no
padding waste on 2 cores; a chunk may start mid-conversation). The order of chunks per epoch is a seeded
permutation, so step i always sees the same chunks: resume needs only the step number.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass

import torch


@dataclass
class Chunk:
    input_ids: list[int]
    loss_mask: list[int]
    aux: torch.Tensor | None = None  # offline: captured target layers [T, n*H]
    hidden: torch.Tensor | None = None  # offline: target final hidden (post-norm) [T, H]

    def base_outputs(self) -> dict | None:
        """ModelOpt's offline inputs for this chunk (None: the target runs online)."""
        if self.aux is None:
            return None
        return {"aux_hidden_states": self.aux, "base_model_hidden_states": self.hidden}


def is_heldout(conv_id: str, fraction: float) -> bool:
    """Stable held-out split by id hash."""
    h = int.from_bytes(hashlib.sha256(conv_id.encode()).digest()[:8], "big") / 2**64
    return h < fraction


def pack(token_seqs: list[tuple[list[int], list[int]]], seq_len: int, pad_id: int,
         features: list[tuple[torch.Tensor, torch.Tensor]] | None = None, separate: bool = False) -> list[Chunk]:
    """Concatenate (ids, assistant mask) pairs and cut into ``seq_len`` chunks (the last one padded). With
    ``features`` (per sequence: aux, hidden), each chunk carries the matching slices (offline training).
    ``separate``: one chunk per sequence from its first token (held-out scoring: every position sees its whole
    context, so anyone can recompute the same features from the tokens alone)."""
    if separate:
        out: list[Chunk] = []
        for i, seq in enumerate(token_seqs):
            out += pack([(seq[0][:seq_len], seq[1][:seq_len])], seq_len, pad_id,
                        [(f[0][:seq_len], f[1][:seq_len]) for f in features[i:i + 1]] if features else None)
        return out
    ids: list[int] = []
    assistant: list[int] = []
    for toks, mask in token_seqs:
        ids += toks
        assistant += mask
    aux = torch.cat([f[0] for f in features]) if features else None
    hid = torch.cat([f[1] for f in features]) if features else None
    chunks = []
    for s in range(0, len(ids), seq_len):
        c_ids, c_as = ids[s:s + seq_len], assistant[s:s + seq_len]
        loss = c_as[1:] + [0]  # loss_mask[j] gates token j + 1
        pad = seq_len - len(c_ids)
        if sum(loss) == 0:
            continue
        chunk = Chunk(c_ids + [pad_id] * pad, loss + [0] * pad)
        if aux is not None:
            chunk.aux = torch.nn.functional.pad(aux[s:s + seq_len], (0, 0, 0, pad))
            chunk.hidden = torch.nn.functional.pad(hid[s:s + seq_len], (0, 0, 0, pad))
        chunks.append(chunk)
    return chunks


def token_counts(token_seqs: list[tuple[list[int], list[int]]]) -> Counter:
    """Frequencies of assistant tokens (what the drafter must propose)."""
    c: Counter = Counter()
    for toks, mask in token_seqs:
        c.update(t for t, m in zip(toks, mask, strict=True) if m)
    return c


class Schedule:
    """Which chunks each micro-batch of each optimizer step reads: a pure function of (step, micro, rank), so
    an interrupted run resumes on exactly the data it would have seen."""

    def __init__(self, chunks: list[Chunk], batch_size: int, grad_accum: int, seed: int, rank: int = 0,
                 world: int = 1) -> None:
        self.chunks, self.batch_size, self.grad_accum = chunks, batch_size, grad_accum
        self.seed, self.rank, self.world = seed, rank, world
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.chunks)))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._orders = {epoch: order}  # keep one epoch
        return self._orders[epoch]

    def micro_batch(self, step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict | None]:
        """(input_ids, attention_mask, loss_mask, offline base outputs or None) for this rank."""
        per_micro = self.batch_size * self.world
        base = (step * self.grad_accum + micro) * per_micro + self.rank * self.batch_size
        rows = []
        for r in range(self.batch_size):
            epoch, idx = divmod(base + r, len(self.chunks))
            rows.append(self.chunks[self._order(epoch)[idx]])
        ids = torch.tensor([c.input_ids for c in rows])
        loss = torch.tensor([c.loss_mask for c in rows], dtype=torch.float32)
        return ids, torch.ones_like(ids), loss, stack_outputs([c.base_outputs() for c in rows])

    def epoch_of(self, step: int) -> float:
        return step * self.grad_accum * self.batch_size * self.world / max(1, len(self.chunks))


def stack_outputs(outputs: list[dict | None]) -> dict | None:
    """Batch the offline inputs of several chunks (stored bf16; cast like the model's own activations)."""
    if not outputs or outputs[0] is None:
        return None
    return {k: torch.stack([o[k] for o in outputs]).float() for k in outputs[0]}


def with_feature_noise(outputs: dict, scale: float, key: tuple) -> dict:
    """Offline inputs with Gaussian noise on the captured target layers (the drafter's input), ``scale`` x each
    channel's standard deviation over this micro-batch's tokens; the final hidden state, which gives the target's
    next-token distribution (the labels), stays exact. EAGLE's training scripts add noise to the target features
    (SafeAILab/EAGLE ``AddUniformNoise``) so the head tolerates inputs unlike its training data (in EAGLE's account,
    the errors of its own predicted features); here the hope was also less memorising of a small data set
    (``benchmarks/drafter_training.md`` section 5). The spread includes padded positions. Seeded by ``key`` (seed,
    step, micro-batch, rank), so a resumed run draws the same noise."""
    aux = outputs["aux_hidden_states"]
    seed = int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") >> 1
    noise = torch.randn(aux.shape, generator=torch.Generator().manual_seed(seed), dtype=aux.dtype)
    std = aux.flatten(0, -2).std(dim=0)
    return {**outputs, "aux_hidden_states": aux + scale * std * noise}
