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
