import pytest

from tests.conftest import LLAMA_TINY, write_config
from trtllm_spec.core.shape import shape_from_config
from trtllm_spec.core.targets import preset_names, resolve_shape, resolve_target
from trtllm_spec.errors import ShapeError

# Published parameter counts (model cards): Llama-3.1-8B 8.03B, Llama-3.3-70B 70.6B, DeepSeek-V3 671B total /
# 37B active, gpt-oss-120b 117B / 5.1B active, Qwen3-30B-A3B 30.5B / 3.3B active, Mixtral-8x7B 46.7B / 12.9B,
# SmolLM2-135M 135M, Qwen3-8B 8.2B, gemma-3-27b 27B (text).
PUBLISHED = {
    "llama-3.1-8b-instruct": (8.03e9, None), "llama-3.3-70b-instruct": (70.6e9, None),
    "deepseek-v3": (671e9, 37e9), "gpt-oss-120b": (117e9, 5.1e9), "qwen3-30b-a3b": (30.5e9, 3.3e9),
    "mixtral-8x7b-instruct": (46.7e9, 12.9e9), "smollm2-135m-instruct": (135e6, None), "qwen3-8b": (8.2e9, None),
    "gemma-3-27b-it": (27e9, None),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_counts_match_published(name):
    s = resolve_shape(name)
    total, active = PUBLISHED[name]
    assert s.total_params() == pytest.approx(total, rel=0.03)
    if active:
        # active excludes the embedding lookup but includes lm_head; published figures vary by convention
        assert s.active_params_per_token() == pytest.approx(active, rel=0.12)


def test_all_presets_load():
    names = preset_names()
    assert len(names) >= 12
    for n in names:
        assert resolve_shape(n).num_layers > 0


@pytest.mark.parametrize("name,g", [("llama-3.1-8b-instruct", 4), ("llama-3.3-70b-instruct", 8), ("qwen3-8b", 4),
                                    ("smollm2-135m-instruct", 3), ("gpt-oss-120b", 8), ("deepseek-v3", 128)])
def test_group_size(name, g):
    assert resolve_shape(name).group_size() == g


def test_group_size_under_tp():
    s = resolve_shape("llama-3.3-70b-instruct")  # 64 heads / 8 KV heads
    assert s.group_size(4) == 8 and s.kv_heads_per_gpu(4) == 2
    assert s.group_size(16) == 4 and s.kv_heads_per_gpu(16) == 1  # KV heads replicated beyond 8-way TP
    assert resolve_shape("deepseek-v3").group_size(8) == 16  # MLA: all heads on a GPU share one latent


def test_kv_bytes_per_token():
    assert resolve_shape("llama-3.1-8b-instruct").kv_bytes_per_token("bf16") == 32 * 2 * 8 * 128 * 2
    assert resolve_shape("deepseek-v3").kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2
    gemma = resolve_shape("gemma-3-27b-it")
    assert gemma.num_sliding_layers == 52  # 62 layers, 5 local : 1 global
    assert gemma.kv_bytes_per_token("bf16", 32768) < gemma.kv_bytes_per_token("bf16", 1024)


def test_moe_layers():
    ds = resolve_shape("deepseek-v3")
    assert ds.moe.num_moe_layers == 58 and ds.num_dense_layers == 3 and ds.mtp_layers == 1
    oss = resolve_shape("gpt-oss-120b")
    assert oss.moe.num_experts == 128 and oss.moe.top_k == 4 and oss.num_sliding_layers == 18
    assert oss.native_weight_dtype == "mxfp4"


def test_config_folder_and_file(tmp_path):
    folder = write_config(tmp_path / "m", **LLAMA_TINY)
    assert resolve_target(str(folder)).shape.hidden_size == 64
    assert resolve_target(str(folder / "config.json")).kind == "path"


def test_qwen3_moe_sparse_step():
    cfg = dict(resolve_target("qwen3-30b-a3b").config, decoder_sparse_step=2, mlp_only_layers=[1])
    # MoE where (i + 1) % 2 == 0: i = 1, 3, ..., 47 (24 layers); layer 1 is forced dense -> 23
    assert shape_from_config(cfg).moe.num_moe_layers == 23



def test_qwen3_moe_experts_under_the_transformers_5_key():
    """transformers 5 saves a Qwen3-MoE config with num_local_experts instead of num_experts."""
    cfg = dict(resolve_target("qwen3-30b-a3b").config)
    cfg["num_local_experts"] = cfg.pop("num_experts")
    assert shape_from_config(cfg).moe.num_experts == 128


@pytest.mark.parametrize("cfg,match", [
    ({"model_type": "bert"}, "not supported"),
    ({"model_type": "llama", "hidden_size": 64}, "num_hidden_layers"),
    ({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}, "vocab_size"),
    ({"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
      "vocab_size": 10, "intermediate_size": 8}, "num_local_experts"),
])
def test_bad_configs(cfg, match):
    with pytest.raises(ShapeError, match=match):
        shape_from_config(cfg, source="config.json")


def test_bad_target_specs(tmp_path):
    with pytest.raises(ShapeError, match="Presets:"):
        resolve_target("llama-9")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShapeError, match="no config.json"):
        resolve_target(str(tmp_path / "empty"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ShapeError, match="not valid JSON"):
        resolve_target(str(bad))


def test_hf_id_and_prefix_alias():
    assert resolve_target("meta-llama/Llama-3.1-8B-Instruct").shape.name == "llama-3.1-8b-instruct"
    assert resolve_target("smollm2-135m").kind in ("preset", "asset")


@pytest.mark.parametrize("change,match", [
    ({"num_key_value_heads": 7}, "num_key_value_heads = 7 does not divide num_attention_heads = 4"),
    ({"num_attention_heads": 32, "num_key_value_heads": 7}, "does not divide"),
    ({"num_key_value_heads": 0}, "num_key_value_heads = 0 is invalid"),
    ({"num_key_value_heads": -2}, "num_key_value_heads = -2 is invalid"),
    ({"num_attention_heads": 0}, "num_attention_heads = 0 is invalid"),
    ({"num_attention_heads": -4}, "num_attention_heads = -4 is invalid"),
    ({"head_dim": 0}, "head_dim = 0 is invalid"),
    ({"hidden_size": 66}, "hidden_size = 66 is not a multiple of num_attention_heads = 4"),
])
def test_impossible_heads_are_refused(change, match):
    """Issue 17: 0 KV heads used to be read as 'absent' (G silently 1); 7 KV heads for 32 heads was planned."""
    with pytest.raises(ShapeError, match=match):
        shape_from_config({**LLAMA_TINY, **change}, source="config.json")


def test_explicit_head_dim_may_differ_from_hidden_over_heads():
    s = shape_from_config({**LLAMA_TINY, "hidden_size": 66, "head_dim": 16}, source="config.json")
    assert s.head_dim == 16 and s.group_size() == 2
