"""The package as users install it: a non-editable wheel in a fresh virtual environment with only the core
dependencies (no torch), its CLI run from outside the source tree. A data file missing from the wheel, a path
that exists only in a checkout, or a core command that needs an optional dependency fails here, without Docker.

The wheel is built from the files the Dockerfile's `wheel` stage receives (.dockerignore's allow-list), the way
that stage builds it; the dependencies come from pip's usual index settings (and its cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# what .dockerignore lets into the image build (test_docker.py pins the allow-list)
BUILD_INPUTS = ("pyproject.toml", "README.md", "trtllm_spec")


def _run(cmd: list, *, cwd: Path, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["TRTLLM_SPEC_CACHE"] = str(tmp / "cache")
    pip = [sys.executable, "-m", "pip"]
    try:
        import setuptools  # noqa: F401  (build with this interpreter's setuptools: no download, as in CI)

        isolation = ["--no-build-isolation"]
    except ImportError:
        isolation = []
    _run([*pip, "wheel", "--no-deps", *isolation, "--wheel-dir", tmp / "dist", src], cwd=tmp, env=env)
    wheels = list((tmp / "dist").glob("trtllm_spec-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp, env=env)
    python = venv / "bin" / "python"
    # this interpreter's pip installs into the new environment (--python): the wheel and its core dependencies
    _run([*pip, "--python", python, "install", "-q", wheels[0]], cwd=tmp, env=env, timeout=600)
    return wheels[0], venv, env


def test_wheel_holds_the_package_data(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    presets = sorted(p.name for p in (REPO / "trtllm_spec/core/presets").glob("*.json"))
    assert presets and all(f"trtllm_spec/core/presets/{p}" in names for p in presets)
    tracked = subprocess.run(["git", "ls-files", "trtllm_spec"], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode == 0:  # every file of the package in git is in the wheel (not only the .py files)
        missing = [f for f in tracked.stdout.split() if f not in names]
        assert not missing, f"files of the package missing from the wheel: {missing}"


def test_installed_cli_runs_outside_the_source_tree(installed, tmp_path):
    _, venv, env = installed
    bin_ = venv / "bin"
    # installed, not imported from a checkout, and without torch: the core commands never import it
    where = _run([bin_ / "python", "-c", "import importlib.util as u, trtllm_spec; print(trtllm_spec.__file__); "
                  "print(u.find_spec('torch'))"], cwd=tmp_path, env=env).stdout.split()
    assert where[0].startswith(str(venv)) and where[1] == "None", where
    version = _run([bin_ / "trtllm-spec", "--version"], cwd=tmp_path, env=env).stdout
    assert "0." in version and "version" in version
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes)
    for name in ("smollm2-135m-ngram-cpu.yaml", "llama-3.1-8b-eagle3-h100.yaml"):
        out = _run([bin_ / "trtllm-spec", "recipe", "validate", recipes / name], cwd=tmp_path, env=env).stdout
        assert out.startswith("ok:"), out
    plan = json.loads(_run([bin_ / "trtllm-spec", "plan", "--recipe", recipes / "smollm2-135m-ngram-cpu.yaml",
                            "--json"], cwd=tmp_path, env=env).stdout)
    assert plan["schema"] == "trtllm-spec/plan/v1" and plan["target"]["name"] == "smollm2-135m-instruct"
    plan = json.loads(_run([bin_ / "trtllm-spec", "plan", "--target", "llama-3.1-8b-instruct", "--drafter", "eagle3",
                            "--gpu", "h100", "--batch-sizes", "1,8", "--json"], cwd=tmp_path, env=env).stdout)
    assert plan["target"]["name"] == "llama-3.1-8b-instruct"
    assert "h100" in _run([bin_ / "trtllm-spec", "hw", "list"], cwd=tmp_path, env=env).stdout.lower()
