"""DFlash2 training: a plugin on ModelOpt's DFlash mode (imports torch; the descriptor in ``__init__`` does not).

ModelOpt 0.47 trains DFlash (``mtsp.convert(model, [("dflash", ...)])``, ``plugins/hf_dflash.HFDFlashModel``) but has
no DFlash2 mode. Issue 45 item 3 allows two ways: ModelOpt's DFlash mode with the convolution and the selector
added as a plugin, or a maintained peer trainer. We take the plugin: our trainer stays as it is (data, DDP / FSDP2,
resume, the CPU path; DFlash trains on the live target, and so does this), and DFlash and DFlash2 then train on the
same data, steps and code, so their comparison is about the mechanism. The peer that ships DFlash2, ``speculators``
0.9.0, was tried here: on a CPU it trains only after two run-time patches of its trainer (it moves tensors to
accelerator 0 and synchronises an accelerator unconditionally), single-process (no gloo), from hidden states
precomputed in its own layout (docs/dflash2.md, open question 5).

What the plugin adds to a model ModelOpt converted in its ``dflash`` mode (``extend``):

- per draft layer, ``attention_conv`` and ``mlp_conv`` (``GroupedDynamicConv``, z-lab's tensor names: a bare
  ``base_kernel`` [2, k, H] and ``kernel_projection`` Linear(H -> 2kG), no bias), and the layer's forward with the
  convolutions around each sublayer (the equations of docs/dflash2.md and ``runtime.py``: coefficients from the
  sublayer's normed input, side 0 filters that input, side 1 the sublayer's output, causal inside each block);
- ``candidate_selector`` on the draft module (``hidden_projection`` [r, H], bare ``predecessor_codebook`` and
  ``successor_codebook`` [V, r]);
- the selector's loss beside DFlash's: at every drafted slot the K candidates are the top-K of the draft's logits
  (the same logits the runtime walks), the score of candidate c after the true previous token p is
  ``u_c + sum_r A[p, r] z[r] B[c, r]``, and the loss is the cross-entropy of the true token among the K
  (teacher-forced predecessor; a slot whose true token is not a candidate is skipped, as SpecForge does). It is
  weighted by DFlash's own slot mask (valid block, in range, not the anchor, the data's loss mask) and scaled by
  ``drafter.selector_loss_alpha``. The unary scores and the hidden state are detached in it (our choice): the
  selector learns transitions on top of the backbone DFlash's cross-entropy trains, never pulls it.

Initialisation is the trainers' (SpecForge; docs/dflash2.md "Initialisation"): tap 0 of every base kernel 1, the
other taps and the projections 0, the successor codebook 0, so a DFlash2 head at step 0 drafts exactly what its
DFlash backbone does. ModelOpt's DFlash exporter writes every ``dflash_module.*`` tensor without the prefix, so the
new tensors land under z-lab's names; ``exported_config`` turns its DFlash ``config.json`` into DFlash2's.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class GroupedDynamicConv(nn.Module):
    """One sublayer's convolution: both sides' taps from one projection of the sublayer's normed input."""

    def __init__(self, hidden: int, k: int, g: int) -> None:
        super().__init__()
        self.k, self.g = k, g
        self.base_kernel = nn.Parameter(torch.zeros(2, k, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * k * (hidden // g), bias=False)
        with torch.no_grad():
            self.base_kernel[:, 0] = 1.0  # identity: the head starts as its DFlash backbone
            self.kernel_projection.weight.zero_()

    def taps(self, x: torch.Tensor, block: int) -> torch.Tensor:
        """[2, B, N, block, k, H] for ``x`` [B, N * block, H]: base kernel plus row i's own per-group delta."""
        b, length, h = x.shape
        delta = self.kernel_projection(x).view(b, length, 2, self.k, h // self.g).repeat_interleave(self.g, dim=-1)
        taps = self.base_kernel + delta  # [B, L, 2, k, H]
        return taps.permute(2, 0, 1, 3, 4).reshape(2, b, length // block, block, self.k, h)

    def filter(self, u: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """Row i of each block: sum over t of taps[i, t] * u[i - t]; taps that reach before the block are empty."""
        b, length, h = u.shape
        block = taps.shape[2]
        v = u.view(b, length // block, block, h)
        out = taps[:, :, :, 0] * v
        for t in range(1, min(self.k, block)):
            out = out + F.pad(taps[:, :, t:, t] * v[:, :, :block - t], (0, 0, t, 0))
        return out.reshape(b, length, h)


class CandidateSelector(nn.Module):
    def __init__(self, hidden: int, vocab: int, rank: int, std: float) -> None:
        super().__init__()
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        self.predecessor_codebook = nn.Parameter(torch.randn(vocab, rank) * std)
        self.successor_codebook = nn.Parameter(torch.zeros(vocab, rank))
        with torch.no_grad():
            nn.init.normal_(self.hidden_projection.weight, std=std)

    def scores(self, unary: torch.Tensor, cand: torch.Tensor, prev: torch.Tensor, hidden: torch.Tensor):
        """[..., K]: unary [..., K] plus the bilinear transition of each candidate after ``prev`` [...]."""
        z = self.hidden_projection(hidden)  # [..., r]
        return unary + torch.einsum("...r,...kr->...k", self.predecessor_codebook[prev] * z,
                                    self.successor_codebook[cand])


def _layer_forward(self, hidden_states, target_hidden, position_embeddings, attention_mask=None):
    """ModelOpt's DFlashDecoderLayer.forward with the two convolutions (plugins/modeling_dflash.py)."""
    block = self.dflash2_block
    x = self.input_layernorm(hidden_states)
    taps = self.attention_conv.taps(x, block)
    o = self.self_attn(self.attention_conv.filter(x, taps[0]), target_hidden, position_embeddings, attention_mask)
    h = hidden_states + self.attention_conv.filter(o, taps[1])
    m = self.post_attention_layernorm(h)
    taps = self.mlp_conv.taps(m, block)
    return h + self.mlp_conv.filter(self.mlp(self.mlp_conv.filter(m, taps[0])), taps[1])


def selector_loss(selector: CandidateSelector, hidden: torch.Tensor, logits: torch.Tensor, input_ids: torch.Tensor,
                  anchor_positions: torch.Tensor, block_keep_mask: torch.Tensor, loss_mask: torch.Tensor,
                  block: int, top_k: int) -> tuple[torch.Tensor, float]:
    """(the selector's cross-entropy over its K candidates, the share of scored slots it ranks first), over the
    slots DFlash's own loss weighs. ``hidden`` [B, N * block, H] is the draft's normed output, ``logits`` the
    target's LM head on it."""
    bsz, seq_len = input_ids.shape
    n_blocks, dev = anchor_positions.shape[1], input_ids.device
    offsets = torch.arange(block, device=dev).view(1, 1, -1)
    idx = anchor_positions.unsqueeze(-1) + offsets  # [B, N, block]: slot j's true token is at anchor + j
    valid = (idx < seq_len) & block_keep_mask.unsqueeze(-1) & (offsets > 0)
    idx = idx.clamp(max=seq_len - 1)
    rows = input_ids.unsqueeze(1).expand(-1, n_blocks, -1)
    target = torch.gather(rows, 2, idx)
    prev = torch.gather(rows, 2, (idx - 1).clamp(min=0))  # slot 1's predecessor is the anchor
    weight = valid.float() * torch.gather(loss_mask.unsqueeze(1).expand(-1, n_blocks, -1), 2, idx)
    unary, cand = logits.detach().float().topk(top_k, dim=-1)  # [B, L, K]
    hit = cand == target.view(bsz, -1).unsqueeze(-1)
    weight = weight.view(bsz, -1) * hit.any(-1).float()
    scores = selector.scores(unary, cand, prev.view(bsz, -1), hidden.detach().to(unary.dtype))
    ce = F.cross_entropy(scores.reshape(-1, top_k), hit.float().argmax(-1).reshape(-1), reduction="none")
    total = weight.sum()
    if float(total) < 1.0:
        return scores.sum() * 0.0, 0.0
    with torch.no_grad():
        first = (scores.argmax(-1) == hit.float().argmax(-1)).float()
        acc = float((first * weight).sum() / total)
    return (ce * weight.reshape(-1)).sum() / total, acc


def extend(model, cfg) -> None:
    """Turn a model ModelOpt converted in its ``dflash`` mode into a DFlash2 trainer, in place (``cfg``: the
    recipe's ``DFlash2Drafter``)."""
    module = model.dflash_module
    hidden = module.fc.out_features
    vocab = model._base_model_lm_head.weight.shape[0]
    block = int(model.dflash_block_size)
    std = float(getattr(module.config, "initializer_range", 0.02))
    device = module.fc.weight.device
    for layer in module.layers:
        layer.attention_conv = GroupedDynamicConv(hidden, cfg.conv_kernel_size, cfg.conv_group_size).to(device)
        layer.mlp_conv = GroupedDynamicConv(hidden, cfg.conv_kernel_size, cfg.conv_group_size).to(device)
        layer.dflash2_block = block
        layer.forward = _layer_forward.__get__(layer)
    module.candidate_selector = CandidateSelector(hidden, vocab, cfg.selector_rank, std).to(device)
    captured: dict[str, torch.Tensor] = {}  # the draft module's output, read by the selector's loss
    module.register_forward_hook(lambda mod, args, out: captured.__setitem__("hidden", out))
    dflash_loss = model._compute_loss
    alpha, top_k = float(cfg.selector_loss_alpha), int(cfg.selector_top_k)

    def compute_loss(logits, input_ids, anchor_positions, block_keep_mask, loss_mask, base_logits=None):
        loss, acc = dflash_loss(logits, input_ids, anchor_positions, block_keep_mask, loss_mask, base_logits)
        sel, _ = selector_loss(module.candidate_selector, captured.pop("hidden"), logits, input_ids,
                                     anchor_positions, block_keep_mask, loss_mask, block, top_k)
        return loss + alpha * sel, acc

    model._compute_loss = compute_loss


def exported_config(config: dict, cfg) -> dict:
    """ModelOpt's DFlash ``config.json`` (DFlashExporter) as z-lab's DFlash2: the architecture, ``block_size``
    nested in ``dflash_config`` with the four DFlash2 integers."""
    out = dict(config, architectures=["DFlash2DraftModel"])
    nested = dict(out.get("dflash_config") or {})
    nested["block_size"] = out.pop("block_size", nested.get("block_size"))
    nested.update(conv_kernel_size=cfg.conv_kernel_size, conv_group_size=cfg.conv_group_size,
                  selector_rank=cfg.selector_rank, selector_top_k=cfg.selector_top_k)
    out["dflash_config"] = nested
    return out
