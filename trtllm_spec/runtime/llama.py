"""A small, readable Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) over HF safetensors.

Why our own: speculative decoding needs a KV cache that can be rolled back for free, verification of 1+D
tokens in one pass, and the hidden states of chosen layers -- with as little Python per layer as possible on
a 2-core CPU. The cache is preallocated; "rolling back" is just not advancing a sequence's length.

Numerics follow transformers' Llama: RMSNorm in fp32 then cast, rotate-half RoPE, SiLU-gated MLP, GQA.
A test checks logits against transformers on the same weights.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from trtllm_spec.errors import UserError

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")


@dataclass
class LlamaConfig:
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    tied_embeddings: bool
    model_type: str = "llama"
    attention_bias: bool = False
    qk_norm: bool = False
    rope_scaling: dict | None = None
    eos_token_ids: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_hf(cls, cfg: dict, where: str = "config.json") -> LlamaConfig:
        mt = cfg.get("model_type")
        if mt not in SUPPORTED:
            raise UserError(f"{where}: the reference decoder runs {', '.join(SUPPORTED)} models, not {mt!r}")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        theta = cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0
        rope_type = rope.get("rope_type") or rope.get("type") or "default"
        if rope_type not in ("default", "llama3"):
            raise UserError(f"{where}: rope type {rope_type!r} is not supported by the reference decoder "
                            "(default, llama3)")
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        return cls(
            num_layers=cfg["num_hidden_layers"], hidden_size=cfg["hidden_size"], num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            intermediate_size=cfg["intermediate_size"], vocab_size=cfg["vocab_size"],
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=float(theta),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), model_type=mt,
            attention_bias=bool(cfg.get("attention_bias", mt == "qwen2")), qk_norm=mt == "qwen3",
            rope_scaling=rope if rope_type == "llama3" else None,
            eos_token_ids=tuple(eos if isinstance(eos, list) else ([eos] if eos is not None else [])),
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm: normalise in fp32, cast back, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    if not scaling:
        return inv
    # Llama 3 frequency-dependent scaling (wavelengths between the low/high bands are interpolated)
    factor = scaling["factor"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_ctx = scaling.get("original_max_position_embeddings", 8192)
    wavelen = 2 * math.pi / inv
    smooth = (old_ctx / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > old_ctx / low, inv / factor, inv)
    mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
    return torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE. x: [B, heads, T, hd]; cos/sin: [B, 1, T, hd]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """Preallocated K/V for ``layers`` layers, ``batch`` rows, up to ``max_len`` positions."""

    def __init__(self, layers: int, batch: int, kv_heads: int, max_len: int, head_dim: int, dtype, device) -> None:
        shape = (batch, kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.max_len = max_len

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only batch ``rows`` (in that order): finished sequences stop costing compute."""
        self.k = [k.index_select(0, rows) for k in self.k]
        self.v = [v.index_select(0, rows) for v in self.v]


class Rope:
    def __init__(self, head_dim: int, theta: float, scaling: dict | None, device) -> None:
        self.inv_freq = rope_inv_freq(head_dim, theta, scaling).to(device)

    def __call__(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


class Attention:
    """GQA self-attention reading/writing a KVCache; ``fused_qkv`` is [q; k; v] rows."""

    def __init__(self, w: dict, cfg: LlamaConfig, in_features: int | None = None) -> None:
        self.qkv = w["qkv"]
        self.qkv_bias = w.get("qkv_bias")
        self.o = w["o"]
        self.q_norm, self.k_norm = w.get("q_norm"), w.get("k_norm")
        self.cfg = cfg
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim

    def __call__(self, x: torch.Tensor, cos, sin, cache_k: torch.Tensor, cache_v: torch.Tensor,
                 start: torch.Tensor, s0: int | None, mask: torch.Tensor | None, kv_len: int,
                 causal: bool = False) -> torch.Tensor:
        """``s0``: the common start position when every row starts at the same place (slice writes).
        ``causal``: a prefill from position 0 with no padding (``mask`` is then None)."""
        cfg = self.cfg
        b, t, _ = x.shape
        qkv = linear(x, self.qkv, self.qkv_bias)
        q, k, v = qkv.split((self.q_size, self.kv_size, self.kv_size), dim=-1)
        q = q.view(b, t, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = k.view(b, t, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = v.view(b, t, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q = rms_norm(q, self.q_norm, cfg.rms_norm_eps)
            k = rms_norm(k, self.k_norm, cfg.rms_norm_eps)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if s0 is not None:
            cache_k[:, :, s0:s0 + t] = k
            cache_v[:, :, s0:s0 + t] = v
        else:
            idx = (start[:, None] + torch.arange(t, device=x.device))[:, None, :, None]
            idx = idx.expand(b, cfg.num_kv_heads, t, cfg.head_dim)
            cache_k.scatter_(2, idx, k)
            cache_v.scatter_(2, idx, v)
        out = attend(q, cache_k[:, :, :kv_len], cache_v[:, :, :kv_len], mask, causal)
        return linear(out.transpose(1, 2).reshape(b, t, self.q_size), self.o)


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ w.T (+ bias)``. On the CPU, for the shapes where it measured faster, computed as ``(w @ x.T).T``:
    the same dot products, another MKL kernel. 2-core AVX2 EPYC, fp32, ms per product (``benchmarks/decisions/small_gemm.py``,
    ``benchmarks/decisions/small_gemm.md``): SmolLM2's 49,152 x 576 lm_head at 4 / 5 / 32 rows 22.6 / 27.3 / 36.8 -> 9.1 /
    12.0 / 26.9 (verification runs 1 + D rows, regeneration 32); its layers' projections at 16 and 32 rows (the
    regeneration batch) 1.2-1.7x faster, at 5-12 rows slower (kept on ``F.linear``), at 1 row the same. Measured in
    fp32 only, so bf16 keeps ``F.linear``."""
    m = x.numel() // x.shape[-1]
    if x.device.type == "cpu" and w.dtype == torch.float32 and bias is None and \
            (m >= 2 if w.shape[0] >= 16384 else 13 <= m <= 40):
        return (w @ x.reshape(m, x.shape[-1]).t()).t().contiguous().reshape(*x.shape[:-1], w.shape[0])
    return F.linear(x, w, bias)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool = False
           ) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v with grouped KV heads. q [B, H, T, d]; k, v [B, KVH, S, d]; mask bool
    [B, 1, T, S]. Few queries (decode, verification): one batched GEMM per KV head group, no K/V copies.
    Many queries (prefill): PyTorch's fused kernel; ``causal`` (T == S, no mask) lets it skip the masked half
    instead of reading a [T, S] mask (a 3,353-token bf16 prefill of SmolLM2-135M on 2 cores: 7.6 s -> 5.55 s;
    transformers' SDPA path 5.5 s; benchmarks/ecosystem.md)."""
    b, h, t, d = q.shape
    kvh = k.shape[1]
    if causal:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=h != kvh)
    if t > 64:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=h != kvh)
    g = h // kvh
    qg = q.reshape(b, kvh, g * t, d)  # heads kv*g .. kv*g+g-1 share KV head kv
    # k is a slice of the preallocated cache: matmul's own copy of a transposed strided slice is ~5x slower
    # at long contexts than a plain row copy followed by BLAS's transposed GEMM
    scores = torch.matmul(qg, k.contiguous().transpose(-1, -2)).float() * d**-0.5  # [B, KVH, G*T, S]
    if mask is not None:
        allowed = mask[:, :, None].expand(b, 1, g, t, mask.shape[-1]).reshape(b, 1, g * t, mask.shape[-1])
        scores = scores.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(scores, dim=-1).to(q.dtype)
    return torch.matmul(p, v).reshape(b, h, t, d)


def attention_mask(start: torch.Tensor, t: int, kv_len: int, pad_left: torch.Tensor | None = None
                   ) -> torch.Tensor | None:
    """Boolean [B, 1, T, kv_len]: query i of row b sees keys at positions <= start_b + i (and >= pad_left_b)."""
    if t == 1 and pad_left is None and start.numel() == 1:
        return None  # one query attends to everything cached up to itself
    kpos = torch.arange(kv_len, device=start.device)
    qpos = start[:, None] + torch.arange(t, device=start.device)  # [B, T]
    allowed = kpos[None, None, :] <= qpos[:, :, None]
    if pad_left is not None:  # padding queries see only themselves: finite garbage, never NaN K/V
        allowed = allowed & ((kpos[None, None, :] >= pad_left[:, None, None]) | (kpos[None, None, :] == qpos[:, :, None]))
    return allowed[:, None]


class LlamaModel:
    """Inference-only forward over a preallocated KV cache. Weights are plain tensors (no nn.Module)."""

    def __init__(self, cfg: LlamaConfig, weights: dict[str, torch.Tensor], dtype=torch.float32,
                 device: str = "cpu") -> None:
        self.cfg, self.dtype, self.device = cfg, dtype, device
        shapes = expected_shapes(cfg)

        def get(name: str) -> torch.Tensor:
            if name not in weights:
                raise UserError(f"checkpoint lacks tensor {name!r}; is it a complete {cfg.model_type} checkpoint?")
            want = shapes.get(name)
            if want is not None and tuple(weights[name].shape) != want:  # else an obscure torch error later
                raise UserError(f"checkpoint tensor {name!r} has shape {list(weights[name].shape)}, but config.json "
                                f"implies {list(want)}; the weights do not match config.json (re-export it)")
            return weights[name].to(device=device, dtype=dtype)

        self.embed = get("model.embed_tokens.weight")
        self.lm_head = self.embed if cfg.tied_embeddings or "lm_head.weight" not in weights else get("lm_head.weight")
        self.norm = get("model.norm.weight")
        self.layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            attn = {"qkv": torch.cat([get(p + f"self_attn.{n}_proj.weight") for n in "qkv"]),
                    "o": get(p + "self_attn.o_proj.weight")}
            if cfg.attention_bias:
                attn["qkv_bias"] = torch.cat([get(p + f"self_attn.{n}_proj.bias") for n in "qkv"])
            if cfg.qk_norm:
                attn["q_norm"], attn["k_norm"] = get(p + "self_attn.q_norm.weight"), get(p + "self_attn.k_norm.weight")
            self.layers.append({
                "attn": Attention(attn, cfg),
                "ln1": get(p + "input_layernorm.weight"), "ln2": get(p + "post_attention_layernorm.weight"),
                "gate_up": torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")]),
                "down": get(p + "mlp.down_proj.weight"),
            })
        self.rope = Rope(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, device)

    # ---- loading --------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, folder: str | Path, dtype=torch.float32, device: str = "cpu") -> LlamaModel:
        folder = Path(folder)
        cfg_path = folder / "config.json"
        if not cfg_path.is_file():
            raise UserError(f"{folder} has no config.json; give an HF checkpoint folder")
        cfg = LlamaConfig.from_hf(json.loads(cfg_path.read_text()), str(cfg_path))
        return cls(cfg, load_safetensors(folder), dtype, device)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        c = self.cfg
        return KVCache(c.num_layers, batch, c.num_kv_heads, max_len, c.head_dim, self.dtype, self.device)

    # ---- forward ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor, cache: KVCache, *,
                capture: tuple[int, ...] = (), logits: str = "all", pad_left: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor | None, list[torch.Tensor], torch.Tensor]:
        """Run ``tokens`` [B, T] at positions ``start[b] + i``; write their K/V into ``cache``.

        Returns (logits [B, T or 1, V] or None, captured layer outputs [B, T, H] for ``capture`` layer ids,
        final normed hidden [B, T, H]).
        """
        b, t = tokens.shape
        kv_len = int(start.max()) + t
        if kv_len > cache.max_len:
            raise UserError(f"sequence of {kv_len} tokens exceeds the cache ({cache.max_len}); raise max_len")
        positions = start[:, None] + torch.arange(t, device=tokens.device)
        cos, sin = self.rope(positions, self.dtype)
        s0 = int(start[0]) if b == 1 or bool((start == start[0]).all()) else None
        causal = s0 == 0 and pad_left is None and t > 1
        mask = None if causal else attention_mask(start, t, kv_len, pad_left)
        h = F.embedding(tokens, self.embed)
        eps = self.cfg.rms_norm_eps
        captured = []
        for i, layer in enumerate(self.layers):
            h = h + layer["attn"](rms_norm(h, layer["ln1"], eps), cos, sin, cache.k[i], cache.v[i], start, s0,
                                  mask, kv_len, causal)
            gate, up = linear(rms_norm(h, layer["ln2"], eps), layer["gate_up"]).chunk(2, dim=-1)
            h = h + linear(F.silu(gate) * up, layer["down"])
            if i in capture:
                captured.append(h)
        normed = rms_norm(h, self.norm, eps)
        if logits == "none":
            return None, captured, normed
        last = normed[:, -1:] if logits == "last" else normed
        return linear(last, self.lm_head), captured, normed


def expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """The tensor shapes config.json implies for a Llama-family checkpoint."""
    h, q, kv, inter = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, \
        cfg.intermediate_size
    out = {"model.embed_tokens.weight": (cfg.vocab_size, h), "lm_head.weight": (cfg.vocab_size, h),
           "model.norm.weight": (h,)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                    p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                    p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
                    p + "post_attention_layernorm.weight": (h,)})
    return out


def check_checkpoint(folder: Path) -> None:
    """Header-only check of a checkpoint's safetensors: readable, not truncated, and (Llama family) tensor shapes
    as config.json implies. A clear error before anything (transformers, ModelOpt) loads the weights."""
    from trtllm_spec.core.files import safetensors_shapes

    shapes: dict[str, list[int]] = {}
    for f in sorted(folder.glob("*.safetensors")):
        shapes.update(safetensors_shapes(f))
    try:
        cfg = LlamaConfig.from_hf(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    except (UserError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return  # not a shape the reference decoder reads: the loader checks it
    for name, want in expected_shapes(cfg).items():
        if name in shapes and tuple(shapes[name]) != want:
            raise UserError(f"checkpoint tensor {name!r} in {folder} has shape {shapes[name]}, but config.json implies "
                            f"{list(want)}; the weights do not match config.json (re-export it)")


def load_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a (possibly sharded) safetensors checkpoint. Never unpickles anything."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(f"{folder} has no *.safetensors weights (only safetensors are loaded, never pickles)")
    out: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            out.update(load_file(str(f)))
        except (SafetensorError, OSError, ValueError) as exc:
            raise UserError(f"{f} is not a readable safetensors file ({exc}); re-export or re-fetch it") from None
    return out
