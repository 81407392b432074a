"""Every built-in mechanism is one package (issue 45 item 2; docs/architecture.md, "Adding a drafting mechanism"):
its recipe section, descriptor, runtime drafter and doctor checks live in ``drafters/<name>/`` and it is registered
through the same ``registry.register`` call as a mechanism from elsewhere; the recipe union in ``core`` is empty
until then and says so in one line."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

from tests.conftest import REPO


def _package(obj) -> str:
    """drafters/<name> of the module that defines ``obj`` (a class or a function)."""
    parts = inspect.getmodule(obj).__name__.split(".")
    assert parts[:2] == ["trtllm_spec", "drafters"] and len(parts) >= 3, f"{obj!r} is defined outside a package"
    return parts[2]


def test_each_builtin_mechanism_is_its_own_package():
    from trtllm_spec.drafters import BUILTIN
    from trtllm_spec.drafters.base import Mechanism
    from trtllm_spec.drafters.registry import MECHANISMS

    assert tuple(MECHANISMS)[:len(BUILTIN)] == tuple(cls.name for cls in BUILTIN)
    for cls in BUILTIN:
        m = MECHANISMS[cls.name]
        assert type(m) is cls and _package(cls) == cls.name
        # its recipe section is in its own package's config.py
        assert inspect.getmodule(m.config_class).__name__ == f"trtllm_spec.drafters.{cls.name}.config"
        assert (REPO / "trtllm_spec" / "drafters" / cls.name / "config.py").is_file()
        # the hooks it (or the mechanism it builds on) implements come from a drafters/ package, never a table
        for hook in ("load_runtime", "load_builtin", "doctor_checks", "doctor_parity", "llamacpp_convert",
                     "modelopt_config"):
            impl = getattr(type(m), hook)
            if impl is not getattr(Mechanism, hook):
                _package(impl)


def test_the_recipe_union_is_filled_by_registration_only():
    from trtllm_spec.core import recipe
    from trtllm_spec.drafters.registry import MECHANISMS

    assert tuple(MECHANISMS) == recipe.DRAFTER_TYPES
    assert all(recipe.DRAFTER_CLASS[n] is m.config_class for n, m in MECHANISMS.items())
    assert recipe.DEFAULT_DRAFTER == "eagle3" and recipe.DEFAULT_DRAFTER in MECHANISMS


def test_core_alone_refuses_a_recipe_in_one_line_and_registers_on_importing_drafters():
    """In a fresh interpreter, core.recipe (which imports no mechanism) has an empty union: validating a recipe
    says what to import; after ``import trtllm_spec.drafters`` the same dict validates."""
    code = """
import json, sys
from pydantic import ValidationError
from trtllm_spec.core.recipe import DRAFTER_CLASS, Recipe
data = {"target": {"model": "smollm2-135m"}, "drafter": {"type": "ngram"}}
out = {"modules": sorted(m for m in sys.modules if m.startswith("trtllm_spec.drafters")), "empty": not DRAFTER_CLASS}
try:
    Recipe.model_validate(data)
except ValidationError as exc:
    out["error"] = [e["msg"] for e in exc.errors()]
import trtllm_spec.drafters
out["after"] = Recipe.model_validate(data).drafter.type
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["modules"] == [] and out["empty"]
    assert len(out["error"]) == 1 and "no drafting mechanism is registered" in out["error"][0]
    assert "import trtllm_spec.drafters" in out["error"][0] and "\n" not in out["error"][0]
    assert out["after"] == "ngram"
