"""DFlash2 in the reference decoder (imports torch; the descriptor in ``__init__`` does not).

DFlash's context and block (``drafters.dflash.runtime``) with, per layer, a grouped dynamic causal convolution
around each sublayer, and a top-K candidate selector walked left to right over the drafted rows. The equations are
docs/dflash2.md's ("How a DFlash2 block is computed"), written from the sources listed there (z-lab's
``dflash/model.py``, vLLM 0.32's ``qwen3_dflash2.py``, llama.cpp's ``src/models/dflash.cpp``); no code is copied.

- Block rows R = 1 + D (the anchor and D masks), as vLLM (conv block = 1 + ``num_speculative_tokens``) and llama.cpp
  (n_max + 1) run it, so our drafts are theirs at the same D; z-lab's own generator runs R = ``block_size``.
- Convolution of sublayer input ``x`` (after its RMSNorm): coefficients ``base_kernel[s, t, c] + delta[i, s, t,
  c // g]`` with ``delta = kernel_projection(x_i)`` viewed as [2, k, G]; side 0 filters the sublayer's input, side 1
  its output, each a causal depthwise filter over block rows (taps before row 0 are empty).
- Selector: unary scores ``u`` = the top-K of ``softcap(output_multiplier * lm_head(norm(h_j)))``; the transition
  of candidate c after predecessor token p is ``sum_r A[p, r] z_j[r] B[c, r]`` with ``z_j = hidden_projection(
  norm(h_j))``; the walk starts at the anchor; greedy takes the argmax, sampling draws from softmax(s / T) over the
  K candidates and returns that q (on the full vocabulary, zero outside the candidates) for rejection sampling.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from trtllm_spec.drafters.dflash.runtime import DFlashDrafter
from trtllm_spec.drafters.dflash2.layout import field, layout_refusal
from trtllm_spec.errors import UserError
from trtllm_spec.runtime.llama import LlamaModel, apply_rope, attend, rms_norm


class DFlash2Runtime(DFlashDrafter):
    def __init__(self, folder: str | Path, target: LlamaModel, max_len: int = 8192) -> None:
        folder = Path(folder)
        raw_cfg = json.loads((folder / "config.json").read_text())
        why = layout_refusal(raw_cfg, f"{folder}/config.json")
        if why is not None:
            raise UserError(why)
        self.k, self.g = field(raw_cfg, "conv_kernel_size"), field(raw_cfg, "conv_group_size")
        self.top_k, self.rank = field(raw_cfg, "selector_top_k"), field(raw_cfg, "selector_rank")
        self.groups = raw_cfg["hidden_size"] // self.g
        super().__init__(folder, target, max_len=max_len)  # calls _more_tensors
        if self.shift:
            raise UserError(f"{folder}/config.json: dflash_config.shift_label is set; DFlash2 drafts block rows "
                            "1..D (z-lab, vLLM, llama.cpp), not next-token aligned")
        self.embed_scale = float(field(self.raw, "input_embedding_scale") or 1.0)
        self.logit_scale = float(field(self.raw, "output_multiplier") or 1.0)
        cap = field(self.raw, "final_logit_softcapping")
        self.softcap = float(cap) if cap else 0.0  # vLLM / llama.cpp: absent or <= 0 is off
        # non-causal sliding window on the layers the config marks (z-lab: |query - key| < window both ways)
        window = self.raw.get("sliding_window") if self.raw.get("use_sliding_window", True) else None
        types = self.raw.get("layer_types") or []
        self.windows = [int(window) if window and i < len(types) and types[i] == "sliding_attention" else None
                        for i in range(self.cfg.num_layers)]
        self.params, self.generator = None, None

    def _more_tensors(self, get) -> None:
        h, v = self.cfg.hidden_size, self.cfg.vocab_size

        def shaped(name: str, shape: tuple[int, ...]) -> torch.Tensor:
            t = get(name)
            if tuple(t.shape) != shape:
                raise UserError(f"DFlash2 drafter in {self.folder}: {name} has shape {list(t.shape)}, expected "
                                f"{list(shape)}")
            return t

        for i, layer in enumerate(self.layers):
            for conv in ("attention_conv", "mlp_conv"):
                layer[conv] = (shaped(f"layers.{i}.{conv}.base_kernel", (2, self.k, h)),
                               shaped(f"layers.{i}.{conv}.kernel_projection.weight", (2 * self.k * self.groups, h)))
        self.hidden_projection = shaped("candidate_selector.hidden_projection.weight", (self.rank, h))
        self.predecessor = shaped("candidate_selector.predecessor_codebook", (v, self.rank))
        self.successor = shaped("candidate_selector.successor_codebook", (v, self.rank))

    def use_sampling(self, params, generator) -> None:
        self.params, self.generator = params, generator

    # ---- the convolution ----------------------------------------------------------------------------------------
    def _coefficients(self, x: torch.Tensor, conv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """[2, R, k, H]: each side's taps for each block row, from the sublayer's normed input ``x`` [1, R, H]."""
        base, proj = conv
        rows = x.shape[1]
        delta = F.linear(x[0].float(), proj.float()).view(rows, 2, self.k, self.groups)
        delta = delta.repeat_interleave(self.g, dim=-1)  # group -> its g channels
        return (base.float()[None] + delta).transpose(0, 1)

    def _filter(self, u: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """Row i of the result: sum over t of taps[i, t] * u[i - t] (rows before 0 contribute nothing); fp32."""
        rows = u.shape[1]
        u32, out = u[0].float(), torch.zeros(rows, u.shape[2], dtype=torch.float32, device=u.device)
        for t in range(min(self.k, rows)):
            out[t:] += taps[t:, t] * u32[:rows - t]
        return out.to(u.dtype)[None]

    def _mask(self, rows: int, window: int | None) -> torch.Tensor | None:
        if not self.causal and window is None:
            return None
        dev = self.target.device
        q = torch.arange(self.ctx_len, self.ctx_len + rows, device=dev)[:, None]
        k = torch.arange(self.ctx_len + rows, device=dev)[None]
        ok = torch.ones(rows, self.ctx_len + rows, dtype=torch.bool, device=dev)
        if self.causal:
            ok &= k <= q
        if window is not None:
            ok &= (q - k).abs() < window
        return ok[None, None]

    # ---- the block ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, n: int) -> tuple[list[int], list[torch.Tensor] | None]:
        n = min(n, self.max_draft_len)
        if n <= 0:
            return [], None
        c, eps, dev = self.cfg, self.cfg.rms_norm_eps, self.target.device
        rows = 1 + n
        block = torch.full((1, rows), self.mask_token, device=dev)
        block[0, 0] = self.anchor
        h = F.embedding(block, self.target.embed) * self.embed_scale
        pos = torch.arange(self.ctx_len, self.ctx_len + rows, device=dev)[None]
        cos, sin = self.rope(pos, h.dtype)
        for i, layer in enumerate(self.layers):
            x = rms_norm(h, layer["ln1"], eps)
            taps = self._coefficients(x, layer["attention_conv"])
            x = self._filter(x, taps[0])
            q = apply_rope(rms_norm(self._heads(F.linear(x, layer["q_proj"]), c.num_heads), layer["q_norm"], eps),
                           cos, sin)
            k = apply_rope(rms_norm(self._heads(F.linear(x, layer["k_proj"]), c.num_kv_heads), layer["k_norm"], eps),
                           cos, sin)
            v = self._heads(F.linear(x, layer["v_proj"]), c.num_kv_heads)
            keys = torch.cat([self.cache.k[i][:, :, :self.ctx_len], k], dim=2)
            values = torch.cat([self.cache.v[i][:, :, :self.ctx_len], v], dim=2)
            out = attend(q, keys, values, self._mask(rows, self.windows[i]))
            o = F.linear(out.transpose(1, 2).reshape(1, rows, c.num_heads * c.head_dim), layer["o_proj"])
            h = h + self._filter(o, taps[1])
            m = rms_norm(h, layer["ln2"], eps)
            taps = self._coefficients(m, layer["mlp_conv"])
            gate, up = F.linear(self._filter(m, taps[0]), layer["gate_up"]).chunk(2, dim=-1)
            h = h + self._filter(F.linear(F.silu(gate) * up, layer["down"]), taps[1])
        hn = rms_norm(h[0, 1:], self.norm, eps)  # the drafted rows 1..n
        logits = F.linear(hn, self.target.lm_head).float() * self.logit_scale
        if self.softcap > 0:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        unary, cand = logits.topk(min(self.top_k, logits.shape[-1]), dim=-1)  # [n, K]
        z = F.linear(hn, self.hidden_projection).float()  # [n, r]
        sampled = self.params is not None and not self.params.greedy
        drafts, qs, prev = [], [], self.anchor
        for j in range(n):
            scores = unary[j] + (self.predecessor[prev].float() * z[j]) @ self.successor[cand[j]].float().T
            if sampled:
                q = torch.softmax(scores / self.params.temperature, dim=-1)
                e = int(torch.multinomial(q, 1, generator=self.generator))
                full = torch.zeros(logits.shape[-1], dtype=torch.float32, device=dev)
                full[cand[j]] = q
                qs.append(full)
            else:
                e = int(scores.argmax())
            prev = int(cand[j, e])
            drafts.append(prev)
        return drafts, (qs if sampled else None)
