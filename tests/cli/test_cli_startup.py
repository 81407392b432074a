"""The start-up rule (docs/architecture.md, "The dependency rule"; principle 8): ``--help``, ``recipe validate`` and
``plan`` start without importing torch, modelopt or transformers. Each runs in a fresh interpreter, so what an
earlier test imported cannot hide an import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import RECIPES, REPO

HEAVY = ("torch", "modelopt", "transformers")
COMMANDS = {
    "--help": ["--help"],
    "plan --help": ["plan", "--help"],
    "recipe validate": ["recipe", "validate", *sorted(str(p) for p in RECIPES.glob("*.yaml"))],
    "plan": ["plan", "--target", "qwen3-8b", "--json"],
}


def heavy_imports(args: list[str]) -> tuple[int, list[str], str]:
    """(exit code, the heavy modules loaded, stderr) of ``trtllm-spec ARGS`` in a fresh interpreter."""
    code = ("import sys, json\nfrom trtllm_spec.cli import main\n"
            f"rc = 0\ntry:\n    main({args!r}, standalone_mode=False)\n"
            "except SystemExit as e:\n    rc = e.code or 0\n"
            f"print(json.dumps([rc, sorted(m for m in {HEAVY!r} if m in sys.modules)]), file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import json

    rc, heavy = json.loads(r.stderr.strip().splitlines()[-1])
    return rc, heavy, r.stderr


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_command_starts_without_torch(name):
    rc, heavy, err = heavy_imports(COMMANDS[name])
    assert rc == 0, err
    assert heavy == [], f"trtllm-spec {name} imported {', '.join(heavy)} on start-up"


def test_the_check_sees_a_heavy_import():
    """The check itself: a command that does import torch is seen (``doctor`` loads the runtime's decoder)."""
    code = ("import sys\nimport trtllm_spec.runtime.llama\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "torch" in r.stdout, r.stderr
