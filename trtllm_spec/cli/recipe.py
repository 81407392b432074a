"""``trtllm-spec recipe validate|show``."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from trtllm_spec.cli.common import main, set_option


@main.group("recipe")
def recipe_group() -> None:
    """Validate and show recipes (fully resolved with defaults)."""


@recipe_group.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@set_option
def validate(files: tuple[Path, ...], overrides: tuple[str, ...]) -> None:
    """Check recipe FILES: schema, target, hardware and acceptance file. Exit 2 on the first bad one."""
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.stages.checks import check_recipe_inputs

    for f in files:
        r = load_recipe(f, overrides)
        notes = check_recipe_inputs(r)
        click.echo(f"ok: {f} ({r.name}: {r.drafter.type} for {r.target.model} on "
                   f"{r.hardware.num_gpus}x {r.hardware.gpu})")
        for n in notes:
            click.echo(f"  note: {n}")


@recipe_group.command("show")
@click.argument("file", type=click.Path(path_type=Path))
@set_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def show(file: Path, overrides: tuple[str, ...], as_json: bool) -> None:
    """Print the recipe FILE fully resolved (extends merged, overrides applied, defaults filled)."""
    from trtllm_spec.cli.common import echo_json
    from trtllm_spec.core.recipe_load import load_recipe, recipe_to_dict

    data = recipe_to_dict(load_recipe(file, overrides))
    if as_json:
        echo_json(data)
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
