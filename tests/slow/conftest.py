"""Fixtures the slow tier's engine modules share: the real SmolLM2-135M with the prompts they measure, and one
short-trained EAGLE-3 head for the session (llama.cpp and vLLM run the same head: trained once)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2_hf():
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.data.prompts import fetch_prompts

    fetch_prompts(sources=["humaneval", "mt_bench"])
    return fetch_model("smollm2-135m")


@pytest.fixture(scope="session")
def head(smollm2_hf, tmp_path_factory):
    """A short ModelOpt EAGLE-3 run (lm_head start, as the CPU default): enough to have drafts accepted."""
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.stages.drafter import run_train

    recipe = recipe_from_dict({"name": "t", "target": {"model": str(smollm2_hf)}, "drafter": {
        "type": "eagle3", "draft_vocab_size": 4096, "training": {
            "max_steps": 30, "batch_size": 2, "seq_len": 256, "lr": 0.002, "warmup_steps": 4, "checkpoint_every": 30,
            "init_from_target": "lm_head",
            "data": {"num_conversations": 12, "regen_max_new_tokens": 48, "regen_batch_size": 12,
                     "max_prompt_tokens": 96, "eval_fraction": 0.125, "loss_on": "all"}}}})
    return run_train(recipe, tmp_path_factory.mktemp("eagle3") / "train", log=lambda m: None).drafter_dir
