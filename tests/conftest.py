"""Shared fixtures. Tests never touch the network (HF_HUB_OFFLINE) and use a private asset cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"


@pytest.fixture
def runner():
    from click.testing import CliRunner

    return CliRunner()


@pytest.fixture
def cli(runner):
    """Invoke ``trtllm-spec ARGS``; returns the click Result."""
    from trtllm_spec.cli import main

    def invoke(*args: str, **kw):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False, **kw)

    return invoke


def write_config(folder: Path, **cfg) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


LLAMA_TINY = dict(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=4, hidden_size=64,
                  num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, vocab_size=256,
                  tie_word_embeddings=True, max_position_embeddings=512)


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    return write_config(tmp_path / "tiny-llama", **LLAMA_TINY)


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    from tests.tiny import write_model

    return write_model(tmp_path_factory.mktemp("tiny") / "target")


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory) -> Path:
    from tests.tiny import write_model

    return write_model(tmp_path_factory.mktemp("tiny") / "draft", layers=2, seed=1)
