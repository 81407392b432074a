"""DFlash (and DSpark) drafter read from its exported folder (z-lab / ModelOpt layout, what TensorRT-LLM 1.3
loads as ``DFlash`` / ``DSpark``).

Context: for every verified position t, ``c_t = hidden_norm(fc([h^1_t; ...; h^n_t]))`` from the captured target
layers; each drafter layer projects c_t to keys/values (``k_norm(k_proj(c))``, ``v_proj(c)``, RoPE at t),
cached once. Block: [anchor = the target's last token, mask, ..., mask] (block_size tokens, target
embeddings) at positions L..L+B-1; queries, keys and values of the block come from the block itself
(input_layernorm first); the block attends to all context and, bidirectionally (or causally when
``dflash_config.causal``), to itself. Logits = target lm_head(norm(h)) at block positions 1..B-1: D = B - 1 drafts
in one pass (ModelOpt's ``HFDFlashModel.pseudo_speculative_generate``).

DSpark (``projector_type: dspark``) trains with next-token alignment (``dflash_config.shift_label``, true in
every ModelOpt DSpark export): block position k predicts the token after position k, so the anchor's own
position yields the first draft and one block gives D = B drafts (positions 0..B-1). The vanilla Markov head
adds ``markov_w2(markov_w1[prev])`` to the lm_head logits of position k, where prev is the token at block
position k: the anchor for the first draft, then each previously *chosen* draft (left to right), exactly as
ModelOpt's ``HFDSparkModel._apply_markov_head`` (teacher-forced) and ``pseudo_speculative_generate``
(autoregressive) compute it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from trtllm_spec.core.recipe import block_drafts
from trtllm_spec.errors import UserError
from trtllm_spec.runtime.decoder import Drafter
from trtllm_spec.runtime.llama import (
    KVCache,
    LlamaConfig,
    LlamaModel,
    Rope,
    apply_rope,
    attend,
    load_safetensors,
    rms_norm,
)


class DFlashDrafter(Drafter):
    def __init__(self, folder: str | Path, target: LlamaModel, max_len: int = 8192) -> None:
        folder = Path(folder)
        raw = json.loads((folder / "config.json").read_text())
        dc = raw.get("dflash_config") or {}
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
            if key not in raw:
                raise UserError(f"{folder}/config.json lacks {key!r}; not a DFlash export")
        block = raw.get("block_size", dc.get("block_size"))  # z-lab's layout nests it in dflash_config
        if not isinstance(block, int) or isinstance(block, bool) or block < 2:
            raise UserError(f"{folder}/config.json: block_size {block!r} (top level or dflash_config) must be an "
                            "integer >= 2; not a DFlash export")
        if raw["hidden_size"] != target.cfg.hidden_size or raw.get("vocab_size", target.cfg.vocab_size) != \
                target.cfg.vocab_size:
            raise UserError(f"drafter {folder} (hidden {raw['hidden_size']}, vocab {raw.get('vocab_size')}) does not "
                            f"fit the target (hidden {target.cfg.hidden_size}, vocab {target.cfg.vocab_size})")
        heads = raw["num_attention_heads"]
        self.cfg = LlamaConfig(
            num_layers=raw["num_hidden_layers"], hidden_size=raw["hidden_size"], num_heads=heads,
            num_kv_heads=raw.get("num_key_value_heads") or heads, head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            intermediate_size=raw["intermediate_size"], vocab_size=target.cfg.vocab_size,
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(raw.get("rope_theta") or target.cfg.rope_theta), tied_embeddings=False,
        )
        self.block_size = block
        self.raw, self.folder = raw, folder
        # DSpark: next-token alignment (position 0 predicts the first draft); ModelOpt's exporter defaults it on
        self.shift = bool(dc.get("shift_label", dc.get("projector_type") == "dspark"))
        self.max_draft_len = block_drafts(self.block_size, self.shift)[0]
        self.mask_token = int(dc.get("mask_token_id"))
        self.causal = bool(dc.get("causal", raw.get("is_causal", False)))
        self.capture = tuple(dc.get("target_layer_ids") or ())
        if not self.capture:
            raise UserError(f"{folder}/config.json: dflash_config.target_layer_ids is missing")
        self.target, self.max_len = target, max_len
        w = load_safetensors(folder)
        dt, dev = target.dtype, target.device

        def get(name: str) -> torch.Tensor:
            if name not in w:
                raise UserError(f"DFlash drafter in {folder} lacks tensor {name!r}")
            return w[name].to(device=dev, dtype=dt)

        self.fc, self.hidden_norm, self.norm = get("fc.weight"), get("hidden_norm.weight"), get("norm.weight")
        self.layers = []
        for i in range(self.cfg.num_layers):
            p = f"layers.{i}."
            self.layers.append({n: get(p + f"self_attn.{n}.weight") for n in ("q_proj", "k_proj", "v_proj", "o_proj",
                                                                               "q_norm", "k_norm")}
                               | {"ln1": get(p + "input_layernorm.weight"), "ln2": get(p + "post_attention_layernorm.weight"),
                                  "gate_up": torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")]),
                                  "down": get(p + "mlp.down_proj.weight")})
        self.markov = None
        if dc.get("projector_type") == "dspark":
            if dc.get("markov_head_type", "vanilla") != "vanilla":
                raise UserError(f"DSpark markov_head_type {dc.get('markov_head_type')!r}: the reference decoder runs the "
                                "vanilla head only")
            self.markov = (get("markov_w1.weight"), get("markov_w2.weight"))
        self.rope = Rope(self.cfg.head_dim, self.cfg.rope_theta, None, dev)
        self._more_tensors(get)

    def _more_tensors(self, get) -> None:
        """A subclass's own tensors (DFlash2's convolutions and selector), read with ``get(name)``."""

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.cfg.head_dim).transpose(1, 2)

    # ---- context ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _add_context(self, aux: list[torch.Tensor]) -> None:
        c, eps = self.cfg, self.cfg.rms_norm_eps
        ctx = rms_norm(F.linear(torch.cat(aux, dim=-1), self.fc), self.hidden_norm, eps)
        t = ctx.shape[1]
        pos = torch.arange(self.ctx_len, self.ctx_len + t, device=ctx.device)[None]
        cos, sin = self.rope(pos, ctx.dtype)
        for i, layer in enumerate(self.layers):
            k = rms_norm(self._heads(F.linear(ctx, layer["k_proj"]), c.num_kv_heads), layer["k_norm"], eps)
            self.cache.k[i][:, :, self.ctx_len:self.ctx_len + t] = apply_rope(k, cos, sin)
            self.cache.v[i][:, :, self.ctx_len:self.ctx_len + t] = self._heads(F.linear(ctx, layer["v_proj"]),
                                                                               c.num_kv_heads)
        self.ctx_len += t

    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        c = self.cfg
        self.cache = KVCache(c.num_layers, 1, c.num_kv_heads, self.max_len, c.head_dim, self.target.dtype,
                             self.target.device)
        self.ctx_len = 0
        self._add_context(aux)
        self.anchor = first_token

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        self._add_context(aux)
        self.anchor = next_token

    # ---- the block ------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, n: int) -> tuple[list[int], None]:
        c, eps, dev = self.cfg, self.cfg.rms_norm_eps, self.target.device
        b = self.block_size
        block = torch.full((1, b), self.mask_token, device=dev)
        block[0, 0] = self.anchor
        h = F.embedding(block, self.target.embed)
        pos = torch.arange(self.ctx_len, self.ctx_len + b, device=dev)[None]
        cos, sin = self.rope(pos, h.dtype)
        mask = None
        if self.causal:
            ctx_ok = torch.ones(b, self.ctx_len, dtype=torch.bool, device=dev)
            mask = torch.cat([ctx_ok, torch.ones(b, b, dtype=torch.bool, device=dev).tril()], dim=1)[None, None]
        for i, layer in enumerate(self.layers):
            x = rms_norm(h, layer["ln1"], eps)
            q = apply_rope(rms_norm(self._heads(F.linear(x, layer["q_proj"]), c.num_heads), layer["q_norm"], eps), cos, sin)
            k = apply_rope(rms_norm(self._heads(F.linear(x, layer["k_proj"]), c.num_kv_heads), layer["k_norm"], eps),
                           cos, sin)
            v = self._heads(F.linear(x, layer["v_proj"]), c.num_kv_heads)
            keys = torch.cat([self.cache.k[i][:, :, :self.ctx_len], k], dim=2)
            values = torch.cat([self.cache.v[i][:, :, :self.ctx_len], v], dim=2)
            out = attend(q, keys, values, mask)
            h = h + F.linear(out.transpose(1, 2).reshape(1, b, c.num_heads * c.head_dim), layer["o_proj"])
            gate, up = F.linear(rms_norm(h, layer["ln2"], eps), layer["gate_up"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, layer["down"])
        first = 0 if self.shift else 1
        logits = F.linear(rms_norm(h[0, first:first + n], self.norm, eps), self.target.lm_head)
        if self.markov is None:
            return logits.argmax(-1).tolist(), None
        w1, w2 = self.markov
        drafts, prev = [], self.anchor
        for row in logits:  # the Markov bias is sequential: each step sees the token drawn before it
            prev = int((row + F.linear(w1[prev], w2)).argmax())
            drafts.append(prev)
        return drafts, None
