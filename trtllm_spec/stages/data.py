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


def regenerate_data(recipe: Recipe, path: Path | None, log: Callable[[str], None],
                    shard: tuple[int, int] | None = None):
    """Let the target answer the recipe's training prompts into ``path`` (JSONL; existing ids are skipped),
    through the recipe's regeneration backend; ``shard`` (I, N): only every N-th prompt from the I-th.
    Returns (conversations, path, the placement: device and precision by ``runtime.device.choose``)."""
    from trtllm_spec.data.backends import data_target
    from trtllm_spec.train.run import conversations, require_checkpoint

    if getattr(recipe.drafter, "training", None) is None:
        raise UserError(f"drafter.type {recipe.drafter.type} is not trained, so it has no training data to "
                        "regenerate; use a recipe with an eagle3, eagle_mtp, dflash or dspark drafter")
    if recipe.drafter.training.data.path:
        raise UserError(f"drafter.training.data.path is {recipe.drafter.training.data.path}: this recipe trains on "
                        "those conversations, so there is nothing to regenerate; drop data.path to regenerate")
    from trtllm_spec.runtime.device import choose

    target_dir = require_checkpoint(data_target(recipe.target.model, recipe.base_dir), "regeneration")
    tc = recipe.drafter.training
    where = choose(tc.device, tc.precision)  # before anything is written: --device cuda without a GPU exits 2
    name = CONVERSATIONS.name if shard is None else f"conversations.shard-{shard[0]}-of-{shard[1]}.jsonl"
    path = path or default_train_dir(recipe) / CONVERSATIONS.parent / name
    from trtllm_spec.data.regenerate import check_output_file

    check_output_file(path, "--out")  # a file where a folder must be: one line, before the target is loaded
    convs = conversations(recipe, target_dir, path.parent, log, file_name=path.name, shard=shard, placement=where)
    return convs, path, where


def estimate_data(recipe: Recipe, out: Path | None):
    """``train --estimate``: the budget of the recipe's data stage (conversations, tokens, feature bytes vs free
    disk, the regeneration batch's memory vs free memory, predicted times), without starting it."""
    if getattr(recipe.drafter, "training", None) is None or recipe.drafter.training.data.path:
        raise UserError(f"--estimate: drafter {recipe.drafter.type} regenerates no data here (not trained, or "
                        "data.path gives the conversations); nothing to estimate")
    from trtllm_spec.data.backends import data_target, estimate_recipe
    from trtllm_spec.drafters.registry import offline_capture
    from trtllm_spec.runtime.device import choose

    tc = recipe.drafter.training
    where = choose(tc.device, tc.precision)  # the device and precision the run would use
    target = data_target(recipe.target.model, recipe.base_dir)
    return estimate_recipe(recipe, default_train_dir(recipe, out) / CONVERSATIONS.parent, device=where.device,
                           dtype=where.dtype, target=target, capture=offline_capture(recipe.drafter, target.config))


def features_data(recipe: Recipe, conversations: Path | None, out: Path | None, log: Callable[[str], None], *,
                  shard: tuple[int, int] | None = None, features_dtype: str | None = None,
                  batch_size: int | None = None, device_map: str | None = None):
    """The target's hidden states over the regenerated conversations (``data.features.run_features``, the same step
    offline training runs in ``train`` / ``build``) into ``out`` (default: ``features/`` next to the conversations).
    Returns (report, the folder)."""
    from trtllm_spec.data.backends import data_target
    from trtllm_spec.data.features import check_capture, run_features
    from trtllm_spec.data.regenerate import read_conversations
    from trtllm_spec.runtime.device import choose
    from trtllm_spec.train.run import offline_capture, require_checkpoint

    if getattr(recipe.drafter, "training", None) is None:
        raise UserError(f"drafter.type {recipe.drafter.type} is not trained, so it needs no features; use a recipe "
                        "with an eagle3 drafter")
    target_dir = require_checkpoint(data_target(recipe.target.model, recipe.base_dir), "feature capture")
    # the layers the descriptor captures, passed to ``data``; a recipe without features, or a bad layer, is refused
    # before anything is read
    layers = check_capture(recipe, offline_capture(recipe, target_dir), target_dir)
    d = recipe.drafter.training.data
    path = conversations or (recipe.resolve_path(d.path) if d.path else default_train_dir(recipe) / CONVERSATIONS)
    if not path.is_file():
        raise UserError(f"conversations file {path} does not exist; write it first with 'trtllm-spec data "
                        "regenerate RECIPE' (or give --conversations FILE)")
    convs = read_conversations(path, "--conversations" if conversations else "conversations file")
    if not convs:
        raise UserError(f"{path} holds no conversations ({{id, messages}} JSON lines); regenerate them first")
    tc = recipe.drafter.training
    where = choose(tc.device, tc.precision)
    folder = out or path.parent / "features"
    rep = run_features(recipe, convs, target_dir, folder, log, layers=layers, placement=where,
                       features_dtype=features_dtype,
                       batch_size=batch_size, shard=shard, device_map=device_map)
    return rep, folder
