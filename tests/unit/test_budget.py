"""The data budget (issue 15 item 3): numbers, refusals before anything starts, measured rates, the CLI."""

from __future__ import annotations

import json

import pytest

from tests.conftest import RECIPES
from trtllm_spec.core.recipe_load import load_recipe
from trtllm_spec.core.targets import resolve_target
from trtllm_spec.data import budget as bmod
from trtllm_spec.data.budget import BudgetError, estimate

CPU = RECIPES / "smollm2-135m-eagle3-cpu.yaml"
OOM = ("drafter.training.data.num_conversations=1000000", "drafter.training.data.regen_max_new_tokens=32768")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))


N = load_recipe(CPU).drafter.training.data.num_conversations  # the CLI test reads the recipe as it is


def _budget(tmp_path, overrides=(), **kw):
    # 512 conversations of at most 128 prompt tokens whatever the recipe says, so the arithmetic below stays readable
    r = load_recipe(CPU, ["drafter.training.data.num_conversations=512", "drafter.training.data.max_prompt_tokens=128",
                          *overrides])
    t = resolve_target("smollm2-135m-instruct")
    return estimate(r, t, tmp_path / "data", capture=(1, 14, 26), **kw)


def test_numbers_follow_the_recipe_and_the_shape(tmp_path):
    b = _budget(tmp_path)
    assert (b.conversations, b.prompt_tokens, b.new_tokens) == (512, 512 * 128, 512 * 160)
    # features: tokens x (3 captured + final) x 576 x 2 bytes (bf16)
    assert b.feature_bytes == 512 * (128 + 160) * 4 * 576 * 2
    # KV: 30 layers x 2 x 3 KV heads x 64 x 2 bytes per token, for 32 rows of 128 + 160 (+2) tokens
    assert b.kv_bytes_per_token == 30 * 2 * 3 * 64 * 2
    assert b.batch_kv_bytes == 32 * 290 * b.kv_bytes_per_token
    assert b.fits and b.free_disk_bytes > 0 and b.free_memory_bytes > 0
    assert any("features" in line for line in b.lines())


def test_done_conversations_are_not_counted_again(tmp_path):
    assert _budget(tmp_path, done=500).new_tokens == 12 * 160


def test_the_issues_oom_example_is_refused_with_numbers_and_fixes(tmp_path):
    b = _budget(tmp_path, OOM)
    assert not b.fits
    with pytest.raises(BudgetError) as e:
        b.check()
    msg = str(e.value)
    assert "TB" in msg and "free" in msg and "KV cache" in msg
    assert "num_conversations" in msg and "regen_batch_size=" in msg and "offline_features=false" in msg


def test_disk_and_memory_refusals_are_separate(tmp_path, monkeypatch):
    monkeypatch.setattr(bmod, "free_disk", lambda p: 1e6)  # 1 MB free: the features cannot fit
    b = _budget(tmp_path)
    assert len(b.problems) == 1 and "features need" in b.problems[0]
    monkeypatch.setattr(bmod, "free_disk", lambda p: 1e15)
    monkeypatch.setattr(bmod, "free_device_memory", lambda d: 0.4e9)  # less than weights + KV
    b = _budget(tmp_path)
    assert len(b.problems) == 1 and "regeneration batch needs" in b.problems[0]


def test_online_training_and_servers_need_no_disk_or_local_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(bmod, "free_device_memory", lambda d: 1.0)
    r = load_recipe(CPU, ["drafter.training.data.offline_features=false", "drafter.training.data.regen_backend=openai"])
    b = estimate(r, resolve_target("smollm2-135m-instruct"), tmp_path / "data", backend="openai")
    assert b.fits and b.feature_bytes == 0 and b.memory_kind == "server"


def test_a_measured_rate_predicts_the_time(tmp_path):
    cfg = resolve_target("smollm2-135m-instruct").config
    key = bmod.rate_key("regen", cfg, backend="ours", device="cpu", dtype="bf16", batch=32)
    assert _budget(tmp_path).regen_seconds is None
    bmod.record_rate(key, tokens=4000, seconds=100.0)  # 40 tok/s
    assert bmod.measured_rate(key) == 40.0
    assert _budget(tmp_path).regen_seconds == pytest.approx(512 * 160 / 40.0)
    bmod.record_rate(key, tokens=10, seconds=0.1)  # too short to teach anything: kept as before
    assert bmod.measured_rate(key) == 40.0


def test_gpu_prediction_from_the_catalogue(tmp_path, monkeypatch):
    monkeypatch.setattr(bmod, "free_device_memory", lambda d: 80e9)  # no CUDA device here
    b = _budget(tmp_path, device="cuda", gpu="h100")
    assert "h100" in b.regen_rate_source.lower() and b.regen_seconds > 0
    # memory-bound: weights once per step plus half the KV cache, over the achievable bandwidth
    assert b.regen_seconds == pytest.approx(b.new_tokens / bmod._roofline_decode_rate(
        "h100", b.weight_bytes, b.kv_bytes_per_token, 290, 32)[0])


def test_unknown_family_gets_a_budget_from_config_keys():
    cfg = {"model_type": "somethingnew", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 256}
    assert bmod._kv_per_token_elems(cfg, None) == 4 * 2 * 2 * 16
    mla = {**cfg, "kv_lora_rank": 32, "qk_rope_head_dim": 8}
    assert bmod._kv_per_token_elems(mla, None) == 4 * 40


def test_cli_estimate_text_json_and_refusal(cli, tmp_path):
    r = cli("train", CPU, "--estimate", "--out", tmp_path / "t")
    assert r.exit_code == 0, r.output
    assert f"budget: {N} conversations" in r.output and "free RAM" in r.output
    r = cli("train", CPU, "--estimate", "--json", "--out", tmp_path / "t")
    data = json.loads(r.output)
    assert data["fits"] and data["conversations"] == N and data["captured_layers"] == [1, 14, 26]
    args = [a for o in OOM for a in ("--set", o)]
    r = cli("train", CPU, "--estimate", "--out", tmp_path / "t", *args)
    assert r.exit_code == 2 and "error: the features need up to" in r.output
    assert not (tmp_path / "t").exists()
    r = cli("train", CPU, "--json", "--out", tmp_path / "t")
    assert r.exit_code == 2 and "--json goes with --estimate" in r.output


def test_cli_train_refuses_the_oom_example_before_regenerating(cli, tmp_path, tiny_target, tiny_suite):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: tiny
target: {{model: {tiny_target}}}
hardware: {{gpu: l40s}}
workload: {{batch_sizes: [1], isl: 64, osl: 32}}
drafter:
  type: eagle3
  training: {{max_steps: 1, seq_len: 32, data: {{num_conversations: 1000000, regen_max_new_tokens: 32768,
              regen_batch_size: 4096}}}}
""")
    r = cli("train", recipe, "--out", tmp_path / "run")
    assert r.exit_code == 2, r.output
    assert "regeneration batch needs" in r.output and "regen_batch_size=" in r.output
    assert not (tmp_path / "run" / "data" / "conversations.jsonl").exists()
