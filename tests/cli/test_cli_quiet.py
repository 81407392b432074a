"""A first run that talks (training progress at least every 30 s) and stays quiet otherwise: a real ``build``
process, its stderr a log file as in CI, run through the check for the third-party noise a newcomer saw."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

# what a fresh clone's main job printed around its work (issue 34), and the fix that keeps each out
NOISE = {
    "\r": "carriage-return progress bars in a log (HF_HUB_DISABLE_PROGRESS_BARS off a terminal)",
    "Found base_model": "ModelOpt's conversion lines (kept for --verbose)",
    "`torch_dtype` is deprecated": "transformers' deprecation (dtype=; ModelOpt's exporter read filtered)",
    "clean_up_tokenization": "the BPE cleanup warning (the asset's tokenizer config is written without the flag)",
    "project.license": "setuptools' license table deprecation (an SPDX string in pyproject.toml)",
    "By 2027-Feb-18": "setuptools' license table deprecation (an SPDX string in pyproject.toml)",
}


def noise_in(text: str) -> list[str]:
    """The known third-party noise found in captured output (setup.sh's or a build's), each with its fix."""
    return [f"{marker!r}: {why}" for marker, why in NOISE.items() if marker in text]


def test_noise_check_finds_each_marker():
    assert noise_in("ok\n") == []
    assert len(noise_in("Loading weights: 0%\rLoading weights: 100%\nFound base_model_path at model\n")) == 2


def test_build_prints_training_progress_and_no_third_party_noise(tmp_path):
    from tests.tiny import write_conversations, write_model

    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"prompt": "w1 w2 w3 w4 w1 w2 w3 w4", "category": "coding"}\n')
    target = write_model(tmp_path / "target")
    data = write_conversations(tmp_path / "c.jsonl", 16)
    recipe = {"name": "quiet", "target": {"model": str(target)}, "draft_len": 2,
              "drafter": {"type": "eagle3", "draft_vocab_size": 64, "training": {
                  "max_steps": 3, "batch_size": 2, "seq_len": 64, "precision": "fp32", "checkpoint_every": 3,
                  "data": {"path": str(data), "eval_fraction": 0.25}}},
              "hardware": {"gpu": "l40s"}, "workload": {"batch_sizes": [1, 8], "isl": 64, "osl": 32},
              "measure": {"num_prompts": 1, "max_new_tokens": 8, "suite": str(suite)}}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRTLLM_SPEC_CACHE": str(tmp_path / "cache")}
    for var in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):  # what the CLI sets itself off a terminal
        env.pop(var, None)
    with open(tmp_path / "build.log", "w") as log:  # stderr a file, as in CI or `| tee`
        rc = subprocess.run([sys.executable, "-m", "trtllm_spec", "build", str(tmp_path / "r.yaml"), "--out",
                             str(tmp_path / "bundle")], stdout=log, stderr=subprocess.STDOUT, env=env,
                            timeout=600).returncode
    text = (tmp_path / "build.log").read_text()
    assert rc == 0, text
    assert noise_in(text) == [], text
    progress = [ln for ln in text.splitlines() if "train: step" in ln]
    assert progress and "train: step 1/3" in progress[0] and "train: step 3/3" in progress[-1], text
    assert "train acc per position [" in progress[0] and "elapsed" in progress[0] and "left" in progress[0]


def test_progress_prints_at_least_every_30_s():
    from trtllm_spec.cli.progress import TrainingProgress

    now = {"t": 0.0}
    lines: list[str] = []
    progress = TrainingProgress(lines.append, every_s=30, clock=lambda: now["t"])
    for step in range(1, 101):  # 100 steps of 7 s
        now["t"] = step * 7.0
        progress({"step": step, "max_steps": 100, "tokens": step * 1000, "tokens_per_s": 140.0, "loss": 2.0,
                  "train_acc": [0.5, 0.3], "elapsed_s": step * 7.0, "time_budget_s": None})
    assert "step 1/100" in lines[0] and "step 100/100" in lines[-1]
    steps = [int(ln.split("step ")[1].split("/")[0]) for ln in lines]
    assert all((b - a) * 7 <= 35 for a, b in zip(steps, steps[1:], strict=False))  # never more than 30 s (+ one step) apart
    assert "~11m33s left" in lines[0] and "100.0k tokens" in lines[-1]


def test_progress_time_left_takes_the_time_budget():
    from trtllm_spec.cli.progress import remaining_s

    assert remaining_s({"step": 10, "max_steps": 1000, "elapsed_s": 10.0, "time_budget_s": 60.0}) == 50.0
    assert remaining_s({"step": 10, "max_steps": 20, "elapsed_s": 10.0, "time_budget_s": None}) == 10.0


def test_packaging_metadata():
    import pytest

    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(meta["project"]["license"], str)  # SPDX, not the deprecated table
    assert any(d.startswith("scipy") for d in meta["project"]["optional-dependencies"]["dev"])
    for pattern in meta["tool"]["setuptools"]["package-data"]["trtllm_spec"]:
        assert list((ROOT / "trtllm_spec").glob(pattern)), f"package data {pattern!r} matches no file"


def test_converted_asset_tokenizer_config_has_no_bpe_cleanup(tmp_path):
    import json

    from trtllm_spec.data.model_assets import _drop_bpe_cleanup

    p = tmp_path / "tokenizer_config.json"
    p.write_text(json.dumps({"clean_up_tokenization_spaces": True, "eos_token": "<|im_end|>"}))
    _drop_bpe_cleanup(p)
    assert json.loads(p.read_text()) == {"eos_token": "<|im_end|>"}


def test_modelopt_prints_go_to_a_logger_shown_with_verbose(capsys, caplog):
    import logging

    from trtllm_spec.train.quiet import modelopt_quiet

    with caplog.at_level(logging.INFO, logger="trtllm_spec.thirdparty"), modelopt_quiet():
        print("Found base_model_path at model")
        logging.getLogger("transformers.configuration_utils").warning("`torch_dtype` is deprecated! Use `dtype`")
    assert "Found base_model" not in capsys.readouterr().out
    assert [r.getMessage() for r in caplog.records] == ["modelopt: Found base_model_path at model"]
