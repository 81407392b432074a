"""Model shape from an HF ``config.json``: the numbers the cost model needs, and what follows from them.

Families: Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, DeepSeek-V3 (MLA + MoE + MTP), gpt-oss
(MoE + alternating sliding-window layers), Gemma 3 (5 local : 1 global sliding-window pattern), Llama 4
(interleaved MoE with a shared expert, chunked attention).
Parameter counts are per layer and in elements; bytes follow from a weight dtype.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from trtllm_spec.core.files import read_text
from trtllm_spec.core.schema import StrictModel
from trtllm_spec.errors import ShapeError

# bytes per weight element, including block scales (nvfp4: fp8 scale per 16; int4_awq: fp16 scale per 128;
# mxfp4: e8m0 scale per 32)
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4_awq": 0.5 + 2 / 128,
                "nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}
KV_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}

FAMILIES = {
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama",
    "qwen3_moe": "moe", "mixtral": "moe", "deepseek_v3": "deepseek", "gpt_oss": "moe",
    "gemma3": "gemma3", "gemma3_text": "gemma3", "llama4": "llama4", "llama4_text": "llama4",
}
_ARCH_TO_TYPE = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe", "MixtralForCausalLM": "mixtral",
    "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss",
    "Gemma3ForCausalLM": "gemma3_text", "Gemma3ForConditionalGeneration": "gemma3",
    "Llama4ForConditionalGeneration": "llama4", "Llama4ForCausalLM": "llama4_text",
}


class MoE(StrictModel):
    num_experts: int = Field(ge=1)
    top_k: int = Field(ge=1)
    num_shared_experts: int = Field(0, ge=0)
    expert_intermediate_size: int = Field(ge=1)
    num_moe_layers: int = Field(ge=0)


class MLA(StrictModel):
    """DeepSeek-V3 multi-head latent attention; decode uses absorbed weights over one shared latent."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class ModelShape(StrictModel):
    name: str
    model_type: str
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int = Field(ge=1, description="dense FFN width (dense layers)")
    vocab_size: int = Field(ge=1)
    tied_embeddings: bool = False
    moe: MoE | None = None
    mla: MLA | None = None
    mtp_layers: int = Field(0, ge=0, description="native multi-token-prediction layers")
    sliding_window: int | None = None
    num_sliding_layers: int = Field(0, ge=0)
    native_weight_dtype: str = "bf16"
    max_position_embeddings: int | None = None
    source: str = ""

    @model_validator(mode="after")
    def _gqa(self) -> ModelShape:
        if self.mla is None and self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads = {self.num_kv_heads} must divide num_heads = {self.num_heads}")
        return self

    # ---- derived -------------------------------------------------------------------------------------
    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - (self.moe.num_moe_layers if self.moe else 0)

    def group_size(self, tp: int = 1) -> int:
        """G = query heads per KV head on one GPU. MLA decode with absorbed weights: all heads share one latent."""
        heads = max(1, self.num_heads // tp)
        if self.mla is not None:
            return heads
        kv = max(1, self.num_kv_heads // tp)
        return max(1, heads // kv)

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        return 1 if self.mla is not None else max(1, self.num_kv_heads // tp)

    def attn_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = (h * m.q_lora_rank + m.q_lora_rank * self.num_heads * qk) if m.q_lora_rank else h * self.num_heads * qk
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
            kv_b = m.kv_lora_rank * self.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
            o = self.num_heads * m.v_head_dim * h
            return q + kv_a + kv_b + o
        q = h * self.num_heads * self.head_dim
        kv = 2 * h * self.num_kv_heads * self.head_dim
        o = self.num_heads * self.head_dim * h
        return q + kv + o

    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size  # gated FFN: gate, up, down

    def expert_params(self) -> int:
        assert self.moe is not None
        return 3 * self.hidden_size * self.moe.expert_intermediate_size

    def shared_expert_params(self) -> int:
        return self.expert_params() * self.moe.num_shared_experts if self.moe else 0

    def router_params(self) -> int:
        return self.hidden_size * self.moe.num_experts if self.moe else 0

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        """Stored parameters (embeddings counted once when tied; MTP layers excluded)."""
        n = self.num_layers * self.attn_params_per_layer() + self.num_dense_layers * self.dense_mlp_params()
        if self.moe:
            n += self.moe.num_moe_layers * (self.moe.num_experts * self.expert_params()
                                            + self.shared_expert_params() + self.router_params())
        n += self.embedding_params() * (1 if self.tied_embeddings else 2)
        return n

    def active_params_per_token(self) -> int:
        """Parameters one token multiplies through (embedding lookup excluded, lm_head included)."""
        n = self.num_layers * self.attn_params_per_layer() + self.num_dense_layers * self.dense_mlp_params()
        if self.moe:
            n += self.moe.num_moe_layers * (self.moe.top_k * self.expert_params()
                                            + self.shared_expert_params() + self.router_params())
        return n + self.embedding_params()

    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements one token stores in one layer (K and V; MLA: latent + rope key)."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype: str = "bf16", context_len: int | None = None) -> float:
        """KV bytes per token averaged over a sequence of ``context_len`` (sliding layers keep a window)."""
        per_layer = self.kv_elems_per_token_layer() * KV_BYTES[kv_dtype]
        full = self.num_layers - self.num_sliding_layers
        if self.num_sliding_layers and self.sliding_window and context_len:
            frac = min(1.0, self.sliding_window / max(1, context_len))
            return per_layer * (full + self.num_sliding_layers * frac)
        return per_layer * self.num_layers

    def flops_per_token(self, context_len: int = 0) -> float:
        """2 FLOPs per active weight plus attention (QK^T and PV) over ``context_len``."""
        return 2.0 * self.active_params_per_token() + self.attention_flops_per_token(context_len)

    def attention_flops_per_token(self, context_len: int) -> float:
        if self.mla is not None:  # absorbed: scores and values over the latent (+rope) per head
            per_head = 2 * (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) + 2 * self.mla.kv_lora_rank
        else:
            per_head = 4 * self.head_dim
        total = 0.0
        for n_layers, ctx in self.layer_contexts(context_len):
            total += n_layers * self.num_heads * per_head * ctx
        return total

    def layer_contexts(self, context_len: int) -> list[tuple[int, int]]:
        """(number of layers, attended context) pairs: sliding layers see at most their window."""
        full = self.num_layers - self.num_sliding_layers
        out = [(full, context_len)] if full else []
        if self.num_sliding_layers:
            out.append((self.num_sliding_layers, min(context_len, self.sliding_window or context_len)))
        return out


# ---- reading config.json ---------------------------------------------------------------------------

def load_config_json(path: str | Path) -> tuple[dict, Path]:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
        if not p.exists():
            raise ShapeError(f"{p.parent} has no config.json; point --target at an HF checkpoint folder, a "
                             "config.json, or a preset name")
    try:
        data = json.loads(read_text(p, "config file", ShapeError))
    except json.JSONDecodeError as exc:
        raise ShapeError(f"{p} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ShapeError(f"{p} must hold a JSON object (an HF config.json)")
    return data, p


def shape_from_config(cfg: dict, name: str = "model", source: str = "") -> ModelShape:
    """Read an HF config dict into a ModelShape; errors name the missing field and the file."""
    where = source or name
    model_type = cfg.get("model_type") or next(
        (_ARCH_TO_TYPE[a] for a in cfg.get("architectures") or [] if a in _ARCH_TO_TYPE), None)
    if model_type == "llama4" and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "model_type": "llama4_text",
               "quantization_config": cfg.get("quantization_config")}
        model_type = "llama4_text"
    if model_type == "gemma3" and isinstance(cfg.get("text_config"), dict):
        cfg = {**_GEMMA3_TEXT_DEFAULTS, **cfg["text_config"], "model_type": "gemma3_text"}
        model_type = "gemma3_text"
    elif model_type == "gemma3_text":
        cfg = {**_GEMMA3_TEXT_DEFAULTS, **cfg}
    if model_type not in FAMILIES:
        raise ShapeError(f"{where}: model_type {model_type!r} is not supported; supported families: "
                         f"{', '.join(sorted(FAMILIES))}. Use a preset or a config.json of one of these")

    def need(key: str, *alts: str):
        for k in (key, *alts):
            if cfg.get(k) is not None:
                return cfg[k]
        raise ShapeError(f"{where}: config.json lacks '{key}' (needed for a {model_type} shape); "
                         "is this the model's full config.json?")

    layers, hidden, heads = int(need("num_hidden_layers")), int(need("hidden_size")), int(need("num_attention_heads"))
    kv_heads, head_dim = _heads(cfg, where, hidden, heads, model_type)
    fields = dict(
        name=name, model_type=model_type, num_layers=layers, hidden_size=hidden, num_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=int(need("vocab_size")),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", model_type.startswith("gemma3"))),
        max_position_embeddings=cfg.get("max_position_embeddings"), source=source,
    )
    family = FAMILIES[model_type]
    if family == "deepseek":
        fields.update(_deepseek(cfg, where, model_type, layers))
    elif family == "llama4":
        fields.update(_llama4(cfg, need, where, layers))
    elif family == "moe":
        fields.update(_moe(cfg, where, model_type, layers))
    else:
        fields["intermediate_size"] = int(need("intermediate_size"))
    if family != "llama4":
        fields.update(_sliding(cfg, model_type, layers))
    qc = cfg.get("quantization_config") or {}
    method = str(qc.get("quant_method", "")).lower()
    fields["native_weight_dtype"] = {"fp8": "fp8", "mxfp4": "mxfp4"}.get(method, "bf16")
    try:
        return ModelShape(**fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))} = {e.get('input')!r}: {e['msg']}" for e in exc.errors())
        raise ShapeError(f"{where}: config.json values are invalid: {problems}; fix config.json") from None
    except ValueError as exc:
        raise ShapeError(f"{where}: config.json values are invalid: {exc}") from None


def _positive(cfg: dict, key: str, where: str) -> int | None:
    """A config integer that must be >= 1 when present (None when absent): 0 is a value, not 'absent'."""
    v = cfg.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v or v < 1:
        raise ShapeError(f"{where}: config.json {key} = {v!r} is invalid; it must be a whole number >= 1; "
                         "fix config.json")
    return int(v)


def _heads(cfg: dict, where: str, hidden: int, heads: int, model_type: str) -> tuple[int, int]:
    """(num_kv_heads, head_dim), refusing shapes no attention kernel can run: KV heads that are 0 or do not
    divide the query heads (GQA shares each KV head among heads / kv_heads query heads), and, where the family
    derives head_dim (no ``head_dim`` key), a hidden size the heads do not divide."""
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads"):
        _positive(cfg, key, where)
    kv = _positive(cfg, "num_key_value_heads", where)
    kv_heads = heads if kv is None else kv
    if FAMILIES[model_type] != "deepseek" and heads % kv_heads:
        raise ShapeError(f"{where}: config.json num_key_value_heads = {kv_heads} does not divide "
                         f"num_attention_heads = {heads}; grouped-query attention needs heads to be a multiple of "
                         "KV heads (e.g. 8 for 32 heads); fix config.json")
    head_dim = _positive(cfg, "head_dim", where)
    if head_dim is None:
        if hidden % heads:
            raise ShapeError(f"{where}: config.json has no head_dim and hidden_size = {hidden} is not a multiple "
                             f"of num_attention_heads = {heads} ({model_type} derives head_dim = hidden / heads); "
                             "add head_dim or fix the sizes")
        head_dim = hidden // heads
    return kv_heads, head_dim


def _count(cfg: dict, where: str, model_type: str, key: str, *alts: str, minimum: int = 1) -> int:
    """A required whole-number config field (the first of ``key``, ``alts`` present), >= ``minimum``; errors name the
    field the file holds (or lacks)."""
    for k in (key, *alts):
        v = cfg.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v or v < minimum:
            raise ShapeError(f"{where}: config.json {k} = {v!r} is invalid; it must be a whole number >= {minimum}; "
                             "fix config.json")
        return int(v)
    names = " / ".join(repr(k) for k in (key, *alts))
    raise ShapeError(f"{where}: config.json lacks {names} (needed for a {model_type} shape); is this the model's "
                     "full config.json?")


def _optional_count(cfg: dict, where: str, model_type: str, key: str, default, minimum: int = 1):
    """``_count`` for a field with a default when absent (null counts as absent, 0 is a value)."""
    return default if cfg.get(key) is None else _count(cfg, where, model_type, key, minimum=minimum)


def _routed(cfg: dict, where: str, model_type: str, experts_key: tuple[str, ...], top_k_key: tuple[str, ...]
            ) -> tuple[int, int]:
    """(routed experts, experts per token), refusing a top-k the experts cannot supply."""
    experts = _count(cfg, where, model_type, *experts_key)
    top_k = _count(cfg, where, model_type, *top_k_key)
    if top_k > experts:
        raise ShapeError(f"{where}: config.json {next(k for k in top_k_key if k in cfg)} = {top_k} exceeds "
                         f"{next(k for k in experts_key if k in cfg)} = {experts}; a token cannot pick more experts "
                         "than there are; fix config.json")
    return experts, top_k


def _deepseek(cfg: dict, where: str, model_type: str, layers: int) -> dict:
    def count(key: str, minimum: int = 1) -> int:
        return _count(cfg, where, model_type, key, minimum=minimum)

    dense = int(cfg.get("first_k_dense_replace") or 0)
    if not 0 <= dense <= layers:
        raise ShapeError(f"{where}: config.json first_k_dense_replace = {dense} must be in 0..num_hidden_layers = "
                         f"{layers}; fix config.json")
    experts, top_k = _routed(cfg, where, model_type, ("n_routed_experts",), ("num_experts_per_tok",))
    return dict(
        intermediate_size=count("intermediate_size"),
        moe=MoE(num_experts=experts, top_k=top_k,
                num_shared_experts=_optional_count(cfg, where, model_type, "n_shared_experts", 0, minimum=0),
                expert_intermediate_size=count("moe_intermediate_size"), num_moe_layers=layers - dense),
        mla=MLA(q_lora_rank=_optional_count(cfg, where, model_type, "q_lora_rank", None), kv_lora_rank=count("kv_lora_rank"),
                qk_nope_head_dim=count("qk_nope_head_dim"), qk_rope_head_dim=count("qk_rope_head_dim"),
                v_head_dim=count("v_head_dim")),
        mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),
    )


def _moe(cfg: dict, where: str, model_type: str, layers: int) -> dict:
    if model_type == "qwen3_moe":  # Qwen3MoeConfig: num_experts, moe_intermediate_size, decoder_sparse_step
        step = _optional_count(cfg, where, model_type, "decoder_sparse_step", 1)
        dense_only = cfg.get("mlp_only_layers") or []
        if not isinstance(dense_only, list) or any(not isinstance(i, int) or not 0 <= i < layers for i in dense_only):
            raise ShapeError(f"{where}: config.json mlp_only_layers = {dense_only!r} must list layer indices in "
                             f"0..{layers - 1}; fix config.json")
        moe_layers = sum(1 for i in range(layers) if i not in set(dense_only) and (i + 1) % step == 0)
        expert = _count(cfg, where, model_type, "moe_intermediate_size")
        # the Hub's Qwen3-MoE config.json says num_experts; transformers 5's Qwen3MoeConfig writes num_local_experts
        experts, top_k = _routed(cfg, where, model_type, ("num_experts", "num_local_experts"), ("num_experts_per_tok",))
        dense_width = _optional_count(cfg, where, model_type, "intermediate_size", expert)
    else:  # MixtralConfig / GptOssConfig: every layer is MoE, intermediate_size is the expert width
        moe_layers = layers
        expert = _count(cfg, where, model_type, "intermediate_size")
        experts, top_k = _routed(cfg, where, model_type, ("num_local_experts", "num_experts"),
                                 ("num_experts_per_tok", "experts_per_token"))
        dense_width = expert
    return dict(intermediate_size=dense_width,
                moe=MoE(num_experts=experts, top_k=top_k, expert_intermediate_size=expert,
                        num_shared_experts=0, num_moe_layers=moe_layers))


def _llama4(cfg: dict, need, where: str, layers: int) -> dict:
    """Llama 4: MoE every ``interleave_moe_layer_step`` layers (top-1 routed + one shared expert); dense layers
    use ``intermediate_size_mlp``; 3 of 4 layers use chunked attention (``attention_chunk_size``), modelled
    as a sliding window of the chunk size (an upper bound on what they attend)."""
    step = int(cfg.get("interleave_moe_layer_step") or 1)
    moe_layers = sum(1 for i in range(layers) if (i + 1) % step == 0)
    experts, top_k = _routed(cfg, where, "llama4", ("num_local_experts",), ("num_experts_per_tok",))
    out = dict(
        intermediate_size=int(cfg.get("intermediate_size_mlp") or need("intermediate_size")),
        moe=MoE(num_experts=experts, top_k=top_k, num_shared_experts=1,
                expert_intermediate_size=int(need("intermediate_size")), num_moe_layers=moe_layers),
    )
    chunk = cfg.get("attention_chunk_size")
    if chunk:
        nope = cfg.get("no_rope_layers")
        chunked = sum(1 for x in nope if x) if isinstance(nope, list) and nope else layers - layers // 4
        out.update(sliding_window=int(chunk), num_sliding_layers=chunked)
    return out


def _sliding(cfg: dict, model_type: str, layers: int) -> dict:
    types = cfg.get("layer_types")
    window = cfg.get("sliding_window")
    if isinstance(types, list) and types:
        n = sum(1 for t in types if "sliding" in str(t))
        return {"sliding_window": window, "num_sliding_layers": n} if n and window else {}
    if model_type.startswith("gemma3") and window:
        pattern = int(cfg.get("sliding_window_pattern") or 6)  # 5 local : 1 global
        n_global = layers // pattern
        return {"sliding_window": int(window), "num_sliding_layers": layers - n_global}
    if model_type in ("qwen2", "qwen3", "qwen3_moe") and not cfg.get("use_sliding_window"):
        return {}
    if window and model_type in ("mistral", "mixtral", "qwen2", "qwen3"):
        return {"sliding_window": int(window), "num_sliding_layers": layers}
    return {}


# Gemma3TextConfig defaults (transformers), needed because gemma-3 configs list only non-default keys.
_GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262208, "head_dim": 256, "num_key_value_heads": 4,
                         "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": True,
                         "max_position_embeddings": 131072}


def text_value(cfg: dict, key: str):
    """A field of a checkpoint's config.json, or of its ``text_config`` where a multimodal wrapper nests the text
    model's (Llama-4, Gemma-3): the one place that fallback is written."""
    value = cfg.get(key)
    if value is None and isinstance(cfg.get("text_config"), dict):
        value = cfg["text_config"].get(key)
    return value


def default_capture_layers(num_layers: int) -> list[int]:
    """TensorRT-LLM's and ModelOpt's default captured target layers for EAGLE-3 (layer outputs, 0-based): the inputs
    of layers 2, L//2 and L-3 (SafeAILab EAGLE ``modeling_llama_kv.py``; TensorRT-LLM ``Eagle3SpecMetadata``). A
    fact of the target's depth that the descriptor, the reference decoder and both converters read; here, below
    them all, so that none imports another for it."""
    return sorted({1, max(0, num_layers // 2 - 1), max(0, num_layers - 4)})


def text_config(cfg: dict) -> dict:
    """The text model's config: the config itself, or its ``text_config`` when the top level has no hidden_size."""
    nested = cfg.get("text_config")
    return cfg if "hidden_size" in cfg or not isinstance(nested, dict) else nested
