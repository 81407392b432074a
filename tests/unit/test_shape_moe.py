"""MoE and attention layouts read from the standard config keys: tiny configs built with transformers' own config
classes (what ``save_pretrained`` writes) and the Hub's key names; nonsense is refused naming the field."""

import pytest

from trtllm_spec.core.shape import shape_from_config
from trtllm_spec.errors import ShapeError

transformers = pytest.importorskip("transformers")

TINY = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 128}


def _cfg(cls: str, **kw) -> dict:
    return getattr(transformers, cls)(**(TINY | kw)).to_dict()


def test_mixtral():
    s = shape_from_config(_cfg("MixtralConfig", num_local_experts=8, num_experts_per_tok=2, intermediate_size=96))
    assert (s.moe.num_experts, s.moe.top_k, s.moe.expert_intermediate_size, s.moe.num_moe_layers) == (8, 2, 96, 4)
    assert (s.num_kv_heads, s.head_dim, s.group_size()) == (2, 16, 2)


def test_qwen3_moe_transformers_and_hub_keys():
    kw = dict(num_experts_per_tok=4, moe_intermediate_size=32, intermediate_size=128, decoder_sparse_step=2,
              mlp_only_layers=[1], head_dim=32)
    cfg = _cfg("Qwen3MoeConfig", num_experts=16, **kw)
    s = shape_from_config(cfg)
    # layers 0..3, MoE where (i + 1) % 2 == 0 and i not in mlp_only_layers: layer 3 only
    assert (s.moe.num_experts, s.moe.top_k, s.moe.expert_intermediate_size, s.moe.num_moe_layers) == (16, 4, 32, 1)
    assert s.intermediate_size == 128 and s.head_dim == 32  # explicit head_dim wins over hidden / heads
    hub = {k: v for k, v in cfg.items() if k != "num_local_experts"} | {"num_experts": 16}  # Qwen/Qwen3-30B-A3B spelling
    assert shape_from_config(hub).moe == s.moe


def test_gpt_oss_moe_and_alternating_sliding_layers():
    s = shape_from_config(_cfg("GptOssConfig", num_local_experts=8, num_experts_per_tok=2, intermediate_size=64,
                               head_dim=16, sliding_window=32))
    assert (s.moe.num_experts, s.moe.top_k, s.moe.num_moe_layers) == (8, 2, 4)
    assert (s.sliding_window, s.num_sliding_layers) == (32, 2)  # layer_types alternate sliding / full
    assert shape_from_config({**_cfg("GptOssConfig", num_local_experts=8, num_experts_per_tok=2,
                                     intermediate_size=64, head_dim=16), "num_experts_per_tok": None,
                              "experts_per_token": 2}).moe.top_k == 2


def test_deepseek_v3_mla_and_moe():
    s = shape_from_config(_cfg("DeepseekV3Config", n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                               moe_intermediate_size=32, intermediate_size=128, first_k_dense_replace=1,
                               q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                               num_key_value_heads=4))
    assert (s.moe.num_experts, s.moe.top_k, s.moe.num_shared_experts, s.moe.num_moe_layers) == (8, 2, 1, 3)
    assert (s.mla.q_lora_rank, s.mla.kv_lora_rank, s.mla.qk_rope_head_dim) == (24, 16, 8)
    assert s.intermediate_size == 128 and s.kv_elems_per_token_layer() == 16 + 8


MIX = {"model_type": "mixtral", **TINY, "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 96}
QWEN = {"model_type": "qwen3_moe", **TINY, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
DS = {"model_type": "deepseek_v3", **TINY, "n_routed_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 128,
      "moe_intermediate_size": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8}


@pytest.mark.parametrize("cfg,match", [
    ({**MIX, "num_local_experts": 0}, "num_local_experts = 0 is invalid"),
    ({**MIX, "num_experts_per_tok": 9}, "num_experts_per_tok = 9 exceeds num_local_experts = 8"),
    ({**MIX, "num_experts_per_tok": 0}, "num_experts_per_tok = 0 is invalid"),
    ({**MIX, "intermediate_size": -1}, "intermediate_size = -1 is invalid"),
    ({k: v for k, v in MIX.items() if k != "num_local_experts"}, "lacks 'num_local_experts' / 'num_experts'"),
    ({**QWEN, "moe_intermediate_size": 0}, "moe_intermediate_size = 0 is invalid"),
    ({**QWEN, "decoder_sparse_step": 0}, "decoder_sparse_step = 0 is invalid"),
    ({**QWEN, "mlp_only_layers": [7]}, r"mlp_only_layers = \[7\] must list layer indices in 0..3"),
    ({**QWEN, "num_experts": 2.5}, "num_experts = 2.5 is invalid"),
    ({**DS, "first_k_dense_replace": 9}, "first_k_dense_replace = 9 must be in 0..num_hidden_layers = 4"),
    ({**DS, "kv_lora_rank": 0}, "kv_lora_rank = 0 is invalid"),
    ({**DS, "n_shared_experts": -1}, "n_shared_experts = -1 is invalid"),
    ({**DS, "n_routed_experts": 1}, "num_experts_per_tok = 2 exceeds n_routed_experts = 1"),
])
def test_nonsense_moe_fields_are_refused(cfg, match):
    with pytest.raises(ShapeError, match=match):
        shape_from_config(cfg, source="config.json")
