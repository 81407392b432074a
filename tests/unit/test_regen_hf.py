"""The hf regeneration backend (issue 15 items 1 and 4): any architecture transformers loads; tiny random
Qwen3-MoE, Mixtral, gpt-oss and DeepSeek-V3 targets regenerate (then their features); families ModelOpt cannot convert are refused
by name."""

from __future__ import annotations

import json

import pytest

from trtllm_spec.errors import UserError

PROMPTS = [[1, 7, 8, 9, 10], [1, 11, 12], [1, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22], [1, 20]]
FAMILIES = ("deepseek_v3", "gpt_oss", "mixtral", "qwen3_moe")  # the families of tests/tiny.FAMILIES


@pytest.fixture(scope="module", params=FAMILIES)
def family_target(request, tmp_path_factory):
    from tests.tiny import write_family

    return request.param, write_family(tmp_path_factory.mktemp(request.param) / "target", request.param)


def test_hf_equals_our_decoder_on_a_llama_target(tiny_target):
    """Replies token for token and the captured features agree (fp32), rows finishing early included."""
    import torch

    from trtllm_spec.data.regen_hf import HFEngine
    from trtllm_spec.runtime.generate import generate_batch
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.runtime.sampling import SamplingParams

    hf = HFEngine(tiny_target, dtype="fp32")
    ours = LlamaModel.from_pretrained(tiny_target, dtype=torch.float32)
    free = hf.generate_batch(PROMPTS, 12, (), SamplingParams())
    eos = (free[0][3],)  # a token row 0 writes early: that row finishes and leaves the batch
    f_ours: list[dict] = []
    a = hf.generate_batch(PROMPTS, 12, eos, SamplingParams())
    b = generate_batch(ours, PROMPTS, 12, eos, SamplingParams(), capture=(1, 2), features=f_ours)
    assert a == b and len(a[0]) == free[0].index(eos[0]) + 1 < 12
    # the features step's teacher-forced pass (batched, left-padded) equals our decoder's states over the same tokens
    f_hf = hf.teacher_forced([p + r for p, r in zip(PROMPTS, a, strict=True)], (1, 2))
    for x, y in zip(f_hf, f_ours, strict=True):
        assert x["aux"].shape == y["aux"].shape and x["hidden"].shape == y["hidden"].shape
        assert torch.allclose(x["aux"], y["aux"], atol=1e-4) and torch.allclose(x["hidden"], y["hidden"], atol=1e-4)


def test_moe_families_decode_batched_as_alone(family_target):
    from trtllm_spec.data.regen_hf import HFEngine
    from trtllm_spec.runtime.sampling import SamplingParams

    _, target = family_target
    eng = HFEngine(target, dtype="fp32")
    batch = eng.generate_batch(PROMPTS, 8, (2,), SamplingParams())
    feats = eng.teacher_forced([p + o for p, o in zip(PROMPTS, batch, strict=True)], (1, 2))
    assert batch[2] == eng.generate_batch([PROMPTS[2]], 8, (2,), SamplingParams())[0]  # padding changes nothing
    assert [f["aux"].shape[0] for f in feats] == [len(p) + len(o) for p, o in zip(PROMPTS, batch, strict=True)]
    assert feats[0]["aux"].shape[1] == 2 * 64 and feats[0]["hidden"].shape[1] == 64
    with pytest.raises(UserError, match="outside the target's 4 layers"):
        eng.teacher_forced([PROMPTS[0]], (7,))


def test_family_end_to_end_regenerate_features_train_export_doctor(cli, family_target, tmp_path, tiny_suite):
    """Issue 15 item 4: each tiny family regenerates (hf), gets its features, trains an EAGLE-3 head offline with
    ModelOpt, exports it and passes doctor; no planner shape is needed on the way."""
    mt, target = family_target
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: moe
target: {{model: {target}}}
hardware: {{gpu: l40s}}
workload: {{batch_sizes: [1], isl: 64, osl: 32}}
drafter:
  type: eagle3
  layers_to_capture: [1, 2]
  training: {{max_steps: 1, seq_len: 32, data: {{num_conversations: 3, regen_max_new_tokens: 6,
              regen_batch_size: 2}}}}
""")
    out = tmp_path / "d" / "c.jsonl"
    res = cli("data", "regenerate", recipe, "--out", out)
    assert res.exit_code == 0, res.output
    assert "hf backend" in res.output and "3 conversations in" in res.output
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(len(r["tokens"]) == len(r["assistant"]) for r in recs) and not (out.parent / "features").exists()
    res = cli("data", "features", recipe, "--conversations", out)  # the features step, after regeneration
    assert res.exit_code == 0, res.output
    from trtllm_spec.data.features import FeatureSet

    ids, _, aux, hidden = FeatureSet(out.parent / "features").get(recs[0]["id"])
    assert ids == recs[0]["tokens"] and aux.shape == (len(ids), 128) and hidden.shape == (len(ids), 64)
    res = cli("data", "regenerate", recipe, "--out", out, "--backend", "ours")  # our decoder runs no MoE
    assert res.exit_code == 2 and f"our decoder runs llama, mistral, qwen2, qwen3 models, not '{mt}'" in res.output
    res = cli("train", recipe, "--out", tmp_path / "t", "--set", f"drafter.training.data.path={out}", "--set",
              f"drafter.training.data.features_path={out.parent / 'features'}", "--set", "drafter.draft_vocab_size=64")
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "t/train_summary.json").read_text())
    assert summary["offline_features"] is True and summary["steps"] == 1
    res = cli("doctor", tmp_path / "t/drafter", "--target", target)
    assert res.exit_code == 0, res.output


def test_moe_families_convert_with_modelopt(family_target):
    import torch
    from transformers import AutoModelForCausalLM

    from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
    from trtllm_spec.train import modelopt_setup as ms

    _, target = family_target
    cfg = json.loads((target / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    ms.convert(model, cfg, Eagle3Drafter(), offline=False)
    ids = torch.randint(3, 200, (1, 16))
    assert torch.isfinite(model(input_ids=ids, labels=ids).loss)


@pytest.mark.parametrize("model_type,kw", [("gpt2", dict(n_layer=2, n_embd=64, n_head=4)),
                                           ("opt", dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                        ffn_dim=128, word_embed_proj_dim=64))])
def test_families_modelopt_cannot_convert_are_refused_by_name(model_type, kw):
    from transformers import AutoConfig, AutoModelForCausalLM

    from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
    from trtllm_spec.train import modelopt_setup as ms

    cfg = AutoConfig.for_model(model_type, vocab_size=256, **kw)
    with pytest.raises(UserError, match=f"ModelOpt cannot convert a '{model_type}' target for a eagle3 drafter"):
        ms.convert(AutoModelForCausalLM.from_config(cfg), cfg.to_dict(), Eagle3Drafter(), offline=False)
