"""Offline EAGLE-3 training: the features step keeps the target's hidden states, training skips the target pass."""

import contextlib
import json

import pytest
import torch

from trtllm_spec.core.recipe_load import recipe_from_dict


def _recipe(target, offline: bool, **training):
    t = {"max_steps": 3, "batch_size": 2, "seq_len": 48, "precision": "fp32", "checkpoint_every": 3,
         "data": {"num_conversations": 10, "regen_max_new_tokens": 12, "regen_batch_size": 4,
                  "offline_features": offline, "eval_fraction": 0.2}} | training
    return recipe_from_dict({"name": "off", "target": {"model": str(target)},
                             "drafter": {"type": "eagle3", "draft_vocab_size": 64, "training": t}})


def test_features_step_keeps_exact_tokens_and_features(tiny_target, tiny_suite, tmp_path):
    """Regeneration keeps the exact token ids and (our decoder) the features over them, as a fresh pass gives."""
    from trtllm_spec.runtime.device import choose
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.train.run import capture_offline, conversations, offline_capture, open_offline

    recipe = _recipe(tiny_target, True)
    convs = conversations(recipe, tiny_target, tmp_path / "data", lambda m: None)
    capture = offline_capture(recipe, tiny_target)
    assert capture == (1, 3, 4)
    kept = json.loads((tmp_path / "data/features/index.json").read_text())["conversations"]
    assert set(kept) == {c["id"] for c in convs}  # our decoder kept them while decoding
    logs: list[str] = []
    capture_offline(recipe, tiny_target, convs, tmp_path / "data", logs.append, choose("cpu", "fp32"))
    assert "features: 0 new, 10 already there" in logs[-1]  # so the features step has nothing left to do
    capture_offline(recipe, tiny_target, convs, tmp_path / "data", lambda m: None, choose("cpu", "fp32"))
    feats = open_offline(recipe, tiny_target, convs, tmp_path / "data")
    assert feats.folder == tmp_path / "data/features" and len(feats.entries) == len(convs)
    model = LlamaModel.from_pretrained(tiny_target)
    for c in convs[:3]:
        ids, mask, aux, hidden = feats.get(c["id"])
        assert ids == c["tokens"] and mask == c["assistant"]
        assert aux.shape == (len(c["tokens"]), 3 * 64) and hidden.shape == (len(c["tokens"]), 64)
        assert sum(c["assistant"]) >= 1 and c["assistant"][-1] == 1
        _, ref_aux, ref_hidden = model.forward(torch.tensor([c["tokens"]]), torch.tensor([0]),
                                               model.new_cache(1, 256), capture=capture)
        # stored bf16 (the default features_dtype): they match a fresh fp32 pass of our decoder to bf16 precision
        assert torch.allclose(aux, torch.cat(ref_aux, -1)[0], atol=0.05, rtol=0.02)
        assert torch.allclose(hidden, ref_hidden[0], atol=0.05, rtol=0.02)


def test_offline_training_exports_a_drafter_doctor_accepts(tiny_target, tiny_suite, tmp_path):
    from trtllm_spec.stages.drafter import run_train
    from trtllm_spec.train.doctor import run_doctor

    res = run_train(_recipe(tiny_target, True), tmp_path / "t", log=lambda m: None)
    assert res.summary["offline_features"] is True
    kind, findings = run_doctor(res.drafter_dir, tiny_target, json.loads((tiny_target / "config.json").read_text()))
    assert not [f for f in findings if f.level == "error"], findings
    # the same run online (the target recomputed in every step) learns from the same tokens
    online = run_train(_recipe(tiny_target, False), tmp_path / "o", log=lambda m: None)
    assert online.summary["offline_features"] is False
    assert online.summary["train_acc"] and res.summary["train_acc"]


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_offline_resume_equals_uninterrupted(tiny_target, tiny_suite, tmp_path, noise):
    """Also with feature noise: a resumed run draws the same noise as an uninterrupted one."""
    from safetensors.torch import load_file

    from trtllm_spec.stages.drafter import run_train

    a = run_train(_recipe(tiny_target, True, feature_noise=noise), tmp_path / "a", log=lambda m: None)
    run_train(_recipe(tiny_target, True, feature_noise=noise), tmp_path / "b", max_steps=1, log=lambda m: None)
    b = run_train(_recipe(tiny_target, True, feature_noise=noise), tmp_path / "b", resume=True, log=lambda m: None)
    ta, tb = load_file(str(a.drafter_dir / "model.safetensors")), load_file(str(b.drafter_dir / "model.safetensors"))
    assert all(torch.equal(ta[k], tb[k]) for k in ta)
    if noise:  # and the noise reaches training: the same data and seed without it train other weights
        c = run_train(_recipe(tiny_target, True), tmp_path / "c", log=lambda m: None)
        tc = load_file(str(c.drafter_dir / "model.safetensors"))
        assert not all(torch.equal(ta[k], tc[k]) for k in ta if ta[k].is_floating_point())


def test_feature_noise_perturbs_the_drafter_input_only():
    from trtllm_spec.train.samples import with_feature_noise

    g = torch.Generator().manual_seed(0)
    aux = torch.randn(2, 300, 6, generator=g) * torch.tensor([1.0, 10.0, 0.1, 1.0, 1.0, 0.0])
    hidden = torch.randn(2, 300, 4, generator=g)
    out = with_feature_noise({"aux_hidden_states": aux, "base_model_hidden_states": hidden}, 0.2, (0, 5, 0, 0))
    assert out["base_model_hidden_states"] is hidden  # the labels stay exact
    delta = out["aux_hidden_states"] - aux
    # noise per channel: 0.2 x that channel's spread (a constant channel is left alone)
    ratio = delta.flatten(0, 1).std(0) / aux.flatten(0, 1).std(0).clamp_min(1e-9)
    assert torch.allclose(ratio[:5], torch.full((5,), 0.2), rtol=0.15) and delta[..., 5].abs().max() == 0
    again = with_feature_noise({"aux_hidden_states": aux, "base_model_hidden_states": hidden}, 0.2, (0, 5, 0, 0))
    other = with_feature_noise({"aux_hidden_states": aux, "base_model_hidden_states": hidden}, 0.2, (0, 6, 0, 0))
    assert torch.equal(again["aux_hidden_states"], out["aux_hidden_states"])
    assert not torch.equal(other["aux_hidden_states"], out["aux_hidden_states"])


def test_plain_conversations_train_offline_too(tiny_target, tmp_path):
    """A data.path file written without token ids (any backend, multi-turn too) still trains offline: the features
    step tokenizes it with the chat template and captures the target over it."""
    from tests.tiny import write_conversations
    from trtllm_spec.stages.drafter import run_train

    recipe = _recipe(tiny_target, True, feature_noise=0.1)
    recipe.drafter.training.data.path = str(write_conversations(tmp_path / "plain.jsonl", 8))
    res = run_train(recipe, tmp_path / "t", log=lambda m: None)
    # features/ next to the conversations file (multi-turn or text: the features step, not the decoder, wrote them)
    assert res.summary["offline_features"] is True and (tmp_path / "features/index.json").is_file()


def test_training_reuses_an_earlier_regeneration_through_data_path(tiny_target, tiny_suite, tmp_path):
    """`data regenerate --out FILE` once, then any number of training runs with data.path=FILE: the features next
    to the file are reused, and the drafter equals the one trained on its own regeneration."""
    from safetensors.torch import load_file

    from trtllm_spec.stages.drafter import run_train
    from trtllm_spec.train.run import conversations

    own = run_train(_recipe(tiny_target, True), tmp_path / "own", log=lambda m: None)
    conversations(_recipe(tiny_target, True), tiny_target, tmp_path / "shared", lambda m: None, file_name="c.jsonl")
    assert (tmp_path / "shared/c.jsonl").is_file() and (tmp_path / "shared/features/index.json").is_file()
    recipe = _recipe(tiny_target, True)
    recipe.drafter.training.data.path = str(tmp_path / "shared/c.jsonl")
    reused = run_train(recipe, tmp_path / "reused", log=lambda m: None)
    assert reused.summary["offline_features"] is True
    assert not (tmp_path / "reused/data/conversations.jsonl").exists()
    ta = load_file(str(own.drafter_dir / "model.safetensors"))
    tb = load_file(str(reused.drafter_dir / "model.safetensors"))
    assert all(torch.equal(ta[k], tb[k]) for k in ta)


def test_draft_vocab_logits_equal_modelopts_full_product(tiny_target):
    """Offline, the target's logits over the draft vocabulary only give ModelOpt's loss and gradients exactly (they
    are the same lm_head rows); the patch is gone afterwards."""
    from transformers import AutoModelForCausalLM

    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.train import modelopt_setup as ms

    cfg = json.loads((tiny_target / "config.json").read_text())
    drafter = recipe_from_dict({"name": "v", "target": {"model": str(tiny_target)},
                                "drafter": {"type": "eagle3", "draft_vocab_size": 64}}).drafter
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
    ms.convert(model, cfg, drafter, draft_vocab_size=64, offline=True)
    ids = torch.randperm(cfg["vocab_size"], generator=torch.Generator().manual_seed(1))[:64].sort().values
    ms.load_d2t(model, ids - torch.arange(64))
    g = torch.Generator().manual_seed(2)
    b, t, h = 2, 12, cfg["hidden_size"]
    tokens = torch.randint(0, cfg["vocab_size"], (b, t), generator=g)
    outputs = {"aux_hidden_states": torch.randn(b, t, 3 * h, generator=g),
               "base_model_hidden_states": torch.randn(b, t, h, generator=g)}
    model.train()

    def loss_and_grads(patched: bool):
        model.zero_grad(set_to_none=True)
        ctx = ms.target_logits_over_draft_vocab(model) if patched else contextlib.nullcontext()
        with ctx:
            out = model(input_ids=tokens, attention_mask=torch.ones_like(tokens), loss_mask=torch.ones_like(tokens),
                        base_model_outputs=dict(outputs))
        out.loss.backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    full, g_full = loss_and_grads(False)
    cols, g_cols = loss_and_grads(True)
    assert full.logits.shape[-1] == cfg["vocab_size"] and cols.logits.shape[-1] == 64  # it really took the short path
    assert torch.allclose(full.loss, cols.loss, rtol=1e-6, atol=1e-7)
    assert full.train_acc == cols.train_acc and g_full.keys() == g_cols.keys() and g_full
    for n in g_full:
        assert torch.allclose(g_full[n], g_cols[n], rtol=1e-5, atol=1e-7), n
    assert "forward" not in vars(model._base_model_lm_head) and "_map_logits_to_draft_vocab" not in vars(model)
