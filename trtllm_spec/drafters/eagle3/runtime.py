"""EAGLE-3 drafter read from its exported folder, with TensorRT-LLM's semantics.

Per position t the drafter sees g_t and the embedding of token t+1, and predicts token t+2:
  g_t = fc([h^a_t; h^b_t; h^c_t])   (outputs of the captured target layers) for positions the target verified,
  g_t = the drafter's own pre-norm output at t-1 for positions it drafted.
First layer (TensorRT-LLM ``Eagle3DecoderLayer``, SafeAILab ``cnets``): residual = g;
  x = [input_layernorm(emb); hidden_norm(g)] (2H) -> attention -> + residual -> post-attention norm -> MLP.
Further layers are regular Llama layers. Logits = lm_head(norm(h)) over the draft vocabulary; a draft id maps
to the target vocabulary as ``id + d2t[id]``. Embeddings are the target's (shared).

The same class reads ModelOpt's EAGLE-1/MTP layout (``EAGLE_MTP_DEFAULT_CFG``: config ``eagle_config.
use_aux_hidden_state: false``, no ``fc``, no ``hidden_norm``; ModelOpt 0.47's exporter requires the final norm,
so its plain EAGLE-1 config, which has none, does not export).
The original SafeAILab EAGLE-1 checkpoints (fc over [embedding; hidden], 2H -> H) are not read: no exporter
we support writes them and TensorRT-LLM's PyTorch backend does not load them. In ModelOpt's Hugging Face flow
the head reads the target's final (post-norm) hidden state alone, g_t = norm_target(h^L_t), through regular
Llama layers, and never sees the next token's embedding (``EagleModule.forward`` stashes embeddings only when
``use_aux_hidden_state``; modelopt 0.47 ``plugins/modeling_eagle.py``). Drafted positions chain on the head's
own pre-norm output, as for EAGLE-3.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from trtllm_spec.core.shape import default_capture_layers
from trtllm_spec.errors import UserError
from trtllm_spec.runtime.decoder import Drafter
from trtllm_spec.runtime.llama import (
    Attention,
    KVCache,
    LlamaConfig,
    LlamaModel,
    Rope,
    load_safetensors,
    rms_norm,
)


def _layer_prefix(weights: dict, i: int, num_layers: int) -> str:
    if f"layers.{i}.self_attn.q_proj.weight" in weights:
        return f"layers.{i}."
    if num_layers == 1 and "midlayer.self_attn.q_proj.weight" in weights:
        return "midlayer."  # SafeAILab/EAGLE single-layer layout
    raise UserError(f"EAGLE-3 weights lack layer {i} (neither 'layers.{i}.' nor 'midlayer.' tensors)")


class Eagle3Weights:
    """Config + tensors of an exported EAGLE-3 folder, checked against the target."""

    def __init__(self, folder: Path, target_cfg: LlamaConfig) -> None:
        cfg_path = folder / "config.json"
        if not cfg_path.is_file():
            raise UserError(f"drafter folder {folder} has no config.json")
        self.raw = json.loads(cfg_path.read_text())
        raw = self.raw
        if "draft_vocab_size" not in raw:
            raise UserError(f"{cfg_path}: not an EAGLE-3 config (no 'draft_vocab_size')")
        rope = raw.get("rope_scaling") or {}
        if (rope.get("rope_type") or rope.get("type") or "default") != "default":
            raise UserError(f"{cfg_path}: rope_scaling {rope} is not supported by the reference decoder; export "
                            "with no rope scaling (our exporter does)")
        self.cfg = LlamaConfig(
            num_layers=raw.get("num_hidden_layers", 1), hidden_size=raw["hidden_size"],
            num_heads=raw["num_attention_heads"], num_kv_heads=raw.get("num_key_value_heads") or
            raw["num_attention_heads"], head_dim=raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"],
            intermediate_size=raw["intermediate_size"], vocab_size=raw["vocab_size"],
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(raw.get("rope_theta") or target_cfg.rope_theta), tied_embeddings=False,
        )
        self.draft_vocab_size = int(raw["draft_vocab_size"])
        eagle = raw.get("eagle_config") or {}
        # False only in ModelOpt's EAGLE-MTP export: the head reads the target's final hidden state
        self.use_aux = eagle.get("use_aux_hidden_state", True) is not False
        ids = eagle.get("eagle_aux_hidden_state_layer_ids")
        if not self.use_aux:
            self.capture = (target_cfg.num_layers - 1,)
        else:
            self.capture = tuple(ids) if ids else tuple(default_capture_layers(target_cfg.num_layers))
        self.tensors = load_safetensors(folder)
        self.prefixes = [_layer_prefix(self.tensors, i, self.cfg.num_layers) for i in range(self.cfg.num_layers)]
        if self.cfg.hidden_size != target_cfg.hidden_size:
            raise UserError(f"drafter {folder} has hidden_size {self.cfg.hidden_size}, the target "
                            f"{target_cfg.hidden_size}: it was trained for another target")
        if self.cfg.vocab_size != target_cfg.vocab_size:
            raise UserError(f"drafter {folder} has vocab_size {self.cfg.vocab_size}, the target "
                            f"{target_cfg.vocab_size}: it was trained for another target")


class Eagle3Drafter(Drafter):
    def __init__(self, folder: str | Path, target: LlamaModel, max_len: int = 8192) -> None:
        w = Eagle3Weights(Path(folder), target.cfg)
        self.capture, self.cfg, self.target, self.max_len = w.capture, w.cfg, target, max_len
        dt, dev = target.dtype, target.device

        def get(name: str) -> torch.Tensor:
            if name not in w.tensors:
                raise UserError(f"EAGLE-3 drafter in {folder} lacks tensor {name!r}")
            return w.tensors[name].to(device=dev, dtype=dt)

        self.use_aux = w.use_aux
        # an EAGLE-MTP head normalises the target's last layer with the target's final norm (refused by name for a
        # transformers target whose norm is not a weighted RMSNorm: runtime/hf_target.HFTarget.norm)
        self.target_norm = None if w.use_aux else target.norm
        self.fc = get("fc.weight") if w.use_aux else None
        if self.fc is not None and self.fc.shape[1] != len(self.capture) * self.cfg.hidden_size:
            raise UserError(f"fc.weight takes {self.fc.shape[1]} inputs; {len(self.capture)} captured layers x "
                            f"hidden {self.cfg.hidden_size} = {len(self.capture) * self.cfg.hidden_size} expected")
        self.norm = get("norm.weight")
        self.lm_head = get("lm_head.weight") if "lm_head.weight" in w.tensors else target.lm_head
        self.d2t = w.tensors["d2t"].to(device=dev, dtype=torch.long) if "d2t" in w.tensors else None
        self.layers = []
        for i, p in enumerate(w.prefixes):
            attn = {"qkv": torch.cat([get(p + f"self_attn.{n}_proj.weight") for n in "qkv"]),
                    "o": get(p + "self_attn.o_proj.weight")}
            first = i == 0 and w.use_aux  # EAGLE-3's 2H-wide first layer; an MTP head's layers are all regular
            norm_in = p + ("input_layernorm.weight" if not first and p + "input_layernorm.weight" in w.tensors
                           else "hidden_norm.weight")
            width = get(p + "self_attn.q_proj.weight").shape[1]
            if width != (2 if first else 1) * self.cfg.hidden_size:
                raise UserError(f"drafter {folder}: layer {i}'s q_proj takes {width} inputs; this layout expects "
                                f"{(2 if first else 1) * self.cfg.hidden_size}")
            self.layers.append({
                "attn": Attention(attn, self.cfg), "first": first,
                "emb_norm": get(p + "input_layernorm.weight") if first else None, "in_norm": get(norm_in),
                "ln2": get(p + "post_attention_layernorm.weight"),
                "gate_up": torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")]),
                "down": get(p + "mlp.down_proj.weight"),
            })
        self.rope = Rope(self.cfg.head_dim, self.cfg.rope_theta, None, dev)

    # ---- the drafter network ----------------------------------------------------------------------------
    def _g(self, aux: list[torch.Tensor]) -> torch.Tensor:
        """The drafter's input at target-verified positions: fc over the captured layers (EAGLE-3), or the
        target's final normed hidden state (EAGLE-MTP)."""
        if self.fc is None:
            return rms_norm(aux[0], self.target_norm, self.target.cfg.rms_norm_eps)
        return F.linear(torch.cat(aux, dim=-1), self.fc)

    def _forward(self, g: torch.Tensor, next_tokens: list[int], start: int, all_logits: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """g [1, T, H] at positions start.., with the embeddings of ``next_tokens`` -> (logits over the draft
        vocab of the last position, or of all with ``all_logits``; pre-norm outputs [1, T, H])."""
        dev, eps = self.target.device, self.cfg.rms_norm_eps
        t = g.shape[1]
        emb = F.embedding(torch.tensor([next_tokens], device=dev), self.target.embed) if self.use_aux else None
        st = torch.tensor([start], device=dev)
        positions = st[:, None] + torch.arange(t, device=dev)
        cos, sin = self.rope(positions, g.dtype)
        from trtllm_spec.runtime.llama import attention_mask

        mask = attention_mask(st, t, start + t)
        h = g
        for i, layer in enumerate(self.layers):
            x = rms_norm(h, layer["in_norm"], eps)
            if layer["first"]:
                x = torch.cat([rms_norm(emb, layer["emb_norm"], eps), x], dim=-1)
            h = h + layer["attn"](x, cos, sin, self.cache.k[i], self.cache.v[i], st, start, mask, start + t)
            gate, up = F.linear(rms_norm(h, layer["ln2"], eps), layer["gate_up"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, layer["down"])
        if all_logits:
            return F.linear(rms_norm(h, self.norm, eps), self.lm_head)[0], h
        logits = F.linear(rms_norm(h[:, -1:], self.norm, eps), self.lm_head)[0, -1]
        return logits, h

    def _to_target(self, draft_id: int) -> int:
        return draft_id + int(self.d2t[draft_id]) if self.d2t is not None else draft_id

    @torch.inference_mode()
    def teacher_forced(self, tokens: list[int], aux: list[torch.Tensor]) -> torch.Tensor:
        """Draft-vocabulary logits at every position of a known sequence (position t predicts token t + 2),
        the first-step prediction EAGLE training scores. ``aux``: captured target outputs over ``tokens``."""
        c = self.cfg
        self.cache = KVCache(c.num_layers, 1, c.num_kv_heads, len(tokens) + 1, c.head_dim, self.target.dtype,
                             self.target.device)
        g = self._g(aux)[:, :-1]
        logits, _ = self._forward(g, tokens[1:], 0, all_logits=True)
        return logits

    # ---- Drafter protocol --------------------------------------------------------------------------------------
    @torch.inference_mode()
    def reset(self, prompt: list[int], first_token: int, aux: list[torch.Tensor]) -> None:
        c = self.cfg
        self.cache = KVCache(c.num_layers, 1, c.num_kv_heads, self.max_len, c.head_dim, self.target.dtype,
                             self.target.device)
        self.pos = 0
        self._ingest([*prompt[1:], first_token], aux)

    @torch.inference_mode()
    def _ingest(self, next_tokens: list[int], aux: list[torch.Tensor]) -> None:
        self.logits, h = self._forward(self._g(aux), next_tokens, self.pos)
        self.last_h = h[:, -1:]
        self.pos += len(next_tokens)

    @torch.inference_mode()
    def propose(self, n: int) -> tuple[list[int], None]:
        drafts = [self._to_target(int(self.logits.argmax()))]
        h, pos = self.last_h, self.pos
        for _ in range(n - 1):
            logits, out = self._forward(h, [drafts[-1]], pos)
            drafts.append(self._to_target(int(logits.argmax())))
            h, pos = out, pos + 1
        return drafts, None

    def commit(self, verified: list[int], next_token: int, aux: list[torch.Tensor]) -> None:
        self._ingest([*verified[1:], next_token], aux)
