"""Every recipe shipped in recipes/ validates (schema, target, hardware). Fails if there are none."""

import pytest

from tests.conftest import RECIPES
from trtllm_spec.core.recipe_load import load_recipe
from trtllm_spec.stages.checks import check_recipe_inputs

FILES = sorted(RECIPES.glob("*.yaml"))


def test_recipes_exist():
    assert len(FILES) >= 8, f"expected the shipped recipes in {RECIPES}, found {len(FILES)}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_recipe_validates(path):
    recipe = load_recipe(path)
    check_recipe_inputs(recipe)
    assert recipe.name == path.stem, "a recipe's name matches its file name"


def test_every_base_is_used():
    bases = sorted((RECIPES / "base").glob("*.yaml"))
    used = "\n".join(p.read_text() for p in FILES)
    for b in bases:
        assert f"base/{b.name}" in used, f"{b} is extended by no recipe"
