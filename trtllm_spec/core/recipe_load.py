"""Reading a recipe: the YAML file, ``extends: base.yaml`` for shared defaults, ``--set a.b=value`` overrides
applied before validation, and validation into ``core.recipe.Recipe`` (errors as one line naming the field).
The schema itself is ``core/recipe.py``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trtllm_spec.core.files import parse_yaml, read_structured
from trtllm_spec.core.recipe import Recipe
from trtllm_spec.core.schema import format_validation_error
from trtllm_spec.errors import RecipeError


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], yaml-parsed value)."""
    if "=" not in item:
        raise RecipeError(f"--set {item!r}: expected KEY=VALUE, e.g. --set workload.isl=2048")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not key.strip() or any(not p for p in parts):
        raise RecipeError(f"--set {item!r}: the key path is empty or has an empty part")
    value = parse_yaml(raw, f"--set {key}", RecipeError) if raw.strip() else ""
    return parts, value


def set_path(data: dict, parts: list[str], value: Any, what: str) -> None:
    """Set ``data[a][b][c] = value`` creating sections; a new drafter type replaces the drafter section."""
    node = data
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise RecipeError(f"{what}: '{'.'.join(parts[:i + 1])}' is a value, not a section")
        node = nxt
    if parts == ["drafter", "type"] and node.get("type") not in (None, value):
        node.clear()
    node[parts[-1]] = value


def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    data = copy.deepcopy(data)
    for item in overrides:
        parts, value = parse_override(item)
        set_path(data, parts, value, f"--set {item!r}")
    return data


def _load_raw(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    data = read_structured(path, "recipe", RecipeError)
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path} must be a YAML mapping (sections target, drafter, ...), "
                          f"got {type(data).__name__}")
    base = data.pop("extends", None)
    if base is None:
        return data
    base_path = (path.parent / str(base)).resolve()
    if base_path in seen:
        raise RecipeError(f"recipe {path}: 'extends' forms a cycle through {base_path}")
    return deep_merge(_load_raw(base_path, (*seen, base_path)), data)


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not (k == "drafter" and "type" in v
                                                                          and v["type"] != out[k].get("type")):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    p = Path(path)
    real = p.resolve() if p.exists() else p  # a missing path (or a symlink loop) is reported by the reader
    data = apply_overrides(_load_raw(real, (real,)), overrides)
    recipe = recipe_from_dict(data, str(p))
    recipe._base_dir = p.resolve().parent
    return recipe


def recipe_from_dict(data: dict, source: str = "recipe") -> Recipe:
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(format_validation_error(exc, Recipe, source)) from None


def recipe_to_dict(recipe: Recipe) -> dict:
    return recipe.model_dump(mode="json")
