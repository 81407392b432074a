"""The house's dependency rule (docs/architecture.md: cli -> stages -> components -> core): the CLI reaches the
torch-heavy components (``runtime``, ``train``) only through a stage, so a command's module imports none of them."""

from __future__ import annotations

import ast
from pathlib import Path

import trtllm_spec

CLI = Path(trtllm_spec.__file__).parent / "cli"
HEAVY = ("trtllm_spec.runtime", "trtllm_spec.train")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def test_the_cli_imports_no_runtime_or_train_module():
    files = sorted(CLI.glob("*.py"))
    assert len(files) > 5  # the walk found the commands
    bad = [f"{f.name}:{line} imports {mod}" for f in files for line, mod in imported_modules(f)
           if mod == HEAVY[0] or mod == HEAVY[1] or mod.startswith(tuple(h + "." for h in HEAVY))]
    assert not bad, "the CLI calls stages only:\n" + "\n".join(bad)


def test_the_rule_finds_a_violation(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from trtllm_spec.train.launch import dry_run\n")
    assert (2, "trtllm_spec.train.launch") in imported_modules(f)
