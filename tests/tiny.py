"""Tiny random checkpoints (Llama-family target, draft model, tokenizer with a chat template) for the fast tier."""

from __future__ import annotations

import json
import random
from pathlib import Path

CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + ' ' + m['content'] + ' <|im_end|> ' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant ' }}{% endif %}")
SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>", "[UNK]", "user", "assistant", "system"]
VOCAB = 256
WORDS = [f"w{i}" for i in range(VOCAB - len(SPECIALS))]


def write_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<pad>", unk_token="[UNK]")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))


def write_model(folder: Path, *, layers: int = 8, hidden: int = 64, heads: int = 4, kv: int = 2, inter: int = 128,
                seed: int = 0, model_type: str = "llama", tie: bool = True, vocab: int = VOCAB,
                init: float = 0.1) -> Path:
    """A random checkpoint; with ``vocab != VOCAB`` no tokenizer is written (ids only, e.g. sampling tests)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                               num_key_value_heads=kv, intermediate_size=inter, vocab_size=vocab,
                               max_position_embeddings=2048, tie_word_embeddings=tie, head_dim=hidden // heads,
                               eos_token_id=2, bos_token_id=1, pad_token_id=0, rope_theta=10000.0,
                               initializer_range=init)
    model = AutoModelForCausalLM.from_config(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    if vocab == VOCAB:
        write_tokenizer(folder)
    return folder


# tiny random targets of families our own decoder does not run (transformers runs them): MoE routing, sliding
# windows with attention sinks (gpt-oss), MLA (DeepSeek-V3). transformers 5.14's DeepSeek-V3 attention expands
# its keys to every query head and then lets sdpa_attention_forward repeat them heads // num_key_value_heads
# times, so kv heads must equal heads (as in the real config, 128 / 128); and its rotary embedding is sized by
# config.head_dim, which must stay qk_rope_head_dim (the config's own default).
FAMILY_COMMON = dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, max_position_embeddings=512, eos_token_id=2, bos_token_id=1,
                     pad_token_id=0, head_dim=16)
FAMILIES = {
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                    layer_types=["sliding_attention", "full_attention"] * 2),
    "deepseek_v3": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
                        qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1, num_key_value_heads=4,
                        head_dim=8),
}


def write_family(folder: Path, model_type: str, seed: int = 0) -> Path:
    """A random ``model_type`` checkpoint (FAMILIES) with the tiny tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, vocab_size=VOCAB, **{**FAMILY_COMMON, **FAMILIES[model_type]})
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(folder))
    write_tokenizer(folder)
    return folder


def sentence(rng: random.Random, n: int) -> str:
    # a few repeated phrases make n-gram and learned drafters have something to find
    phrases = [" ".join(rng.choice(WORDS[:40]) for _ in range(4)) for _ in range(6)]
    return " ".join(rng.choice(phrases) for _ in range(n))


def write_conversations(path: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            msgs = [{"role": "user", "content": sentence(rng, 3)}, {"role": "assistant", "content": sentence(rng, 8)}]
            f.write(json.dumps({"id": f"c{i}", "messages": msgs}) + "\n")
    return path


def write_dflash2(folder: Path, target: Path, *, layers: int = 1, block: int = 4, kernel: int = 2, group: int = 8,
                  rank: int = 8, top_k: int = 4, seed: int = 0, scale: float = 0.2, identity: bool = False,
                  sliding_window: int | None = None) -> Path:
    """A random DFlash2 drafter for the tiny ``target`` in z-lab's layout (docs/dflash2.md, "Checkpoint layout"):
    ``architectures: ["DFlash2DraftModel"]``, block / layers / mask and the four conv and selector integers nested in
    ``dflash_config``, the two codebooks and each ``base_kernel`` without a ``.weight`` suffix, no embedding or
    lm_head (the target's). ``identity``: the trainers' fresh start (SpecForge: base_kernel tap 0 = 1, others and
    the projections 0, successor codebook 0), which drafts exactly what its DFlash backbone does."""
    import torch
    from safetensors.torch import save_file

    t = json.loads((target / "config.json").read_text())
    h, inter, vocab, n_t = t["hidden_size"], t["intermediate_size"], t["vocab_size"], t["num_hidden_layers"]
    heads, kv = t["num_attention_heads"], t["num_key_value_heads"]
    d = h // heads
    ids = sorted({0, n_t // 2, n_t - 1})
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    w = {"fc.weight": rnd(h, len(ids) * h), "hidden_norm.weight": torch.ones(h), "norm.weight": torch.ones(h),
         "candidate_selector.hidden_projection.weight": rnd(rank, h),
         "candidate_selector.predecessor_codebook": rnd(vocab, rank) * 5,
         "candidate_selector.successor_codebook": torch.zeros(vocab, rank) if identity else rnd(vocab, rank) * 5}
    for i in range(layers):
        p = f"layers.{i}."
        w |= {p + "input_layernorm.weight": torch.ones(h), p + "post_attention_layernorm.weight": torch.ones(h),
              p + "self_attn.q_proj.weight": rnd(heads * d, h), p + "self_attn.k_proj.weight": rnd(kv * d, h),
              p + "self_attn.v_proj.weight": rnd(kv * d, h), p + "self_attn.o_proj.weight": rnd(h, heads * d),
              p + "self_attn.q_norm.weight": torch.ones(d), p + "self_attn.k_norm.weight": torch.ones(d),
              p + "mlp.gate_proj.weight": rnd(inter, h), p + "mlp.up_proj.weight": rnd(inter, h),
              p + "mlp.down_proj.weight": rnd(h, inter)}
        for conv in ("attention_conv", "mlp_conv"):
            base = torch.zeros(2, kernel, h)
            base[:, 0] = 1.0
            if not identity:
                base += rnd(2, kernel, h)
            w[p + conv + ".base_kernel"] = base
            w[p + conv + ".kernel_projection.weight"] = (torch.zeros(2 * kernel * (h // group), h) if identity
                                                         else rnd(2 * kernel * (h // group), h))
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, str(folder / "model.safetensors"))
    cfg = {"architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "hidden_size": h,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": d, "vocab_size": vocab, "rms_norm_eps": 1e-6,
           "rope_theta": t.get("rope_theta", 10000.0), "max_position_embeddings": 2048, "tie_word_embeddings": False,
           "hidden_act": "silu", "attention_bias": False, "is_causal": False, "num_target_layers": n_t,
           "torch_dtype": "float32",
           "dflash_config": {"block_size": block, "target_layer_ids": ids, "mask_token_id": vocab - 1,
                             "conv_kernel_size": kernel, "conv_group_size": group, "selector_rank": rank,
                             "selector_top_k": top_k}}
    if sliding_window is not None:
        cfg |= {"use_sliding_window": True, "sliding_window": sliding_window,
                "layer_types": ["sliding_attention"] * layers}
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return folder
