"""The dependency rule (docs/architecture.md), checked by walking every import of the package with ast:
cli -> stages -> components -> core, never upward. Lazy imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "trtllm_spec"
COMPONENTS = {"planner", "drafters", "data", "train", "runtime", "measure", "deploy", "report"}
# package -> the packages of ours it must not import (``errors`` and the top-level ``__version__`` are free)
FORBIDDEN = {
    "core": {"cli", "stages", *COMPONENTS},
    "planner": {"cli", "stages", "drafters", "runtime", "train", "measure", "deploy", "data"},
    "runtime": {"cli", "stages", "train"},
    "deploy": {"cli", "stages"},
    **{c: {"cli", "stages"} for c in COMPONENTS - {"planner", "runtime", "deploy"}},
    "stages": {"cli"},
}


def package_of(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "trtllm_spec":  # from trtllm_spec import cli, ...
                names = [f"trtllm_spec.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("trtllm_spec.")]
    return out


def violations(root: Path = PKG) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        src = package_of(path)
        for line, dst in imports(path):
            if dst != src and dst in FORBIDDEN.get(src, set()):
                found.append(f"{path.relative_to(root.parent)}:{line}: {src} imports {dst}")
    return found


def test_dependencies_point_down_only():
    assert violations() == []


def test_the_walker_catches_a_lazy_upward_import(tmp_path):
    pkg = tmp_path / "trtllm_spec"
    (pkg / "runtime").mkdir(parents=True)
    (pkg / "runtime" / "x.py").write_text("def f():\n    from trtllm_spec.train.doctor import drafter_type\n")
    (pkg / "core").mkdir()
    (pkg / "core" / "y.py").write_text("from trtllm_spec import stages\n")
    global PKG
    saved, PKG = PKG, pkg
    try:
        assert violations(pkg) == ["trtllm_spec/core/y.py:1: core imports stages",
                                   "trtllm_spec/runtime/x.py:2: runtime imports train"]
    finally:
        PKG = saved


@pytest.mark.parametrize("pkg", sorted(FORBIDDEN))
def test_every_ruled_package_exists(pkg):
    assert (PKG / pkg).is_dir()
