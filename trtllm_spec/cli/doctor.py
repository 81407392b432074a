"""``trtllm-spec doctor``: a drafter folder checked against its target (``stages.drafter.check_drafter``)."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import main
from trtllm_spec.cli.device_options import standalone_device_options


@main.command("doctor")
@click.argument("drafter_dir", type=click.Path(path_type=Path))
@click.option("--target", required=True, help="The target: checkpoint folder, fetched asset or preset.")
@click.option("--heldout", type=click.Path(path_type=Path), help="Held-out chunks for the parity check "
              "(default: heldout_chunks.json next to the drafter folder, written by train).")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON (healthy, placement, each check) instead of lines.")
@click.option("--recipe", "recipe_file", type=click.Path(path_type=Path), help="Also warn when the drafter was "
              "trained in another chat-template mode than the recipe's workload.request_mode.")
@standalone_device_options
def doctor_cmd(drafter_dir: Path, target: str, heldout: Path | None, as_json: bool, device: str | None,
               dtype: str | None, recipe_file: Path | None = None) -> None:
    """Check a drafter folder against its target: layout, shapes, dtypes, d2t, captured layers, mask token,
    and train/serve parity. Exit 0 healthy, 1 findings, 2 bad input."""
    from trtllm_spec.cli.common import echo_json
    from trtllm_spec.errors import CheckFailed
    from trtllm_spec.stages.drafter import check_drafter

    mode = None
    if recipe_file is not None:
        from trtllm_spec.core.recipe_load import load_recipe
        from trtllm_spec.core.request_mode import recipe_mode

        mode = recipe_mode(load_recipe(recipe_file))
    kind, findings, where = check_drafter(drafter_dir, target, heldout, device or "auto", dtype or "auto", mode)
    errors = [f for f in findings if f.level == "error"]
    if as_json:
        echo_json({"drafter": str(drafter_dir), "type": kind, "healthy": not errors,
                   "placement": where.as_dict() if where else None, "findings": [f.as_dict() for f in findings]})
    else:
        marks = {"ok": "ok  ", "warning": "warn", "error": "FAIL", "info": "info"}
        click.echo(f"doctor: {drafter_dir} ({kind}) against {target}" + (f"; {where.describe()}" if where else ""))
        for f in findings:
            click.echo(f"  [{marks[f.level]}] {f.check}: {f.message}")
    if errors:
        raise CheckFailed(f"{len(errors)} check(s) failed: {', '.join(f.check for f in errors)}")
