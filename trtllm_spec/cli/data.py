"""``trtllm-spec data regenerate``: training conversations written by the target (``stages.data``)."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import main, set_option


def _log(msg: str) -> None:
    click.echo(msg, err=True)


@main.group("data")
def data_group() -> None:
    """Training data: conversations written by the target itself."""


@data_group.command("regenerate")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="JSONL file (default out/<recipe>/train/data/"
              "conversations.jsonl); existing ids are skipped, so a rerun resumes.")
@set_option
def regenerate_cmd(recipe_file: Path, out: Path | None, overrides: tuple[str, ...]) -> None:
    """Let the target answer the training prompts (batched; Ctrl-C keeps every finished batch)."""
    from trtllm_spec.core.recipe import load_recipe
    from trtllm_spec.stages.data import regenerate_data

    convs, path = regenerate_data(load_recipe(recipe_file, overrides), out, _log)
    click.echo(f"{len(convs)} conversations in {path}")
