"""Training data: conversations the target writes itself (``trtllm-spec data regenerate``); the drafter
stage's training step reads the same file (``train.run.conversations``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trtllm_spec.core.recipe import Recipe
from trtllm_spec.errors import UserError

CONVERSATIONS = Path("data") / "conversations.jsonl"  # under the training folder


def default_train_dir(recipe: Recipe, out: Path | None = None) -> Path:
    return out or Path("out") / recipe.name / "train"


def regenerate_data(recipe: Recipe, path: Path | None, log: Callable[[str], None]) -> tuple[list[dict], Path]:
    """Let the target answer the recipe's training prompts into ``path`` (JSONL; existing ids are skipped).
    Returns (conversations, path)."""
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.train.run import conversations, require_checkpoint

    if getattr(recipe.drafter, "training", None) is None:
        raise UserError(f"drafter.type {recipe.drafter.type} is not trained, so it has no training data to "
                        "regenerate; use a recipe with an eagle3, mtp, dflash or dspark drafter")
    if recipe.drafter.training.data.path:
        raise UserError(f"drafter.training.data.path is {recipe.drafter.training.data.path}: this recipe trains on "
                        "those conversations, so there is nothing to regenerate; drop data.path to regenerate")
    target_dir = require_checkpoint(resolve_target(recipe.target.model, recipe.base_dir), "regeneration")
    path = path or default_train_dir(recipe) / CONVERSATIONS
    return conversations(recipe, target_dir, path.parent, log, file_name=path.name), path
