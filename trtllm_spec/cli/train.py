"""``trtllm-spec train``: the drafter stage (``stages.drafter.run_train``), as ``build`` runs it."""

from __future__ import annotations

import os
from pathlib import Path

import click

from trtllm_spec.cli.common import main, set_option, verbose_option
from trtllm_spec.cli.device_options import device_options, training_overrides


def _log(msg: str) -> None:
    click.echo(msg, err=True)


@main.command("train")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="Training folder (default out/<recipe>/train).")
@click.option("--max-steps", type=int, help="Stop after this step (continue later with --resume); the "
              "learning-rate schedule still spans drafter.training.max_steps.")
@click.option("--resume", is_flag=True, help="Continue the run in --out exactly where it stopped.")
@click.option("--force", is_flag=True, help="Delete --out and start over.")
@click.option("--estimate", is_flag=True, help="Print the budget (conversations, tokens, feature bytes vs free "
              "disk, the regeneration batch's memory vs free memory, predicted times) and stop; exit 2 if it "
              "cannot fit.")
@click.option("--json", "as_json", is_flag=True, help="With --estimate: the budget as JSON.")
@click.option("--dry-run", is_flag=True, help="Print the launch (nodes, processes, strategy) and a per-rank memory "
              "estimate; loads nothing, writes nothing.")
@device_options
@verbose_option
@set_option
def train_cmd(recipe_file: Path, out: Path | None, max_steps: int | None, resume: bool, force: bool,
              estimate: bool, as_json: bool, dry_run: bool, device: str | None, dtype: str | None,
              overrides: tuple[str, ...]) -> None:
    """Train (or convert, or record) the recipe's drafter with NVIDIA ModelOpt and export it in the layout
    TensorRT-LLM loads (OUT/drafter). Regenerates training data with the target first (resumable). Distributed
    (drafter.training.distributed: ddp / fsdp) under torchrun; see --dry-run for the launch line."""
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.errors import UserError

    recipe = load_recipe(recipe_file, overrides + training_overrides(device, dtype))
    if dry_run:
        from trtllm_spec.stages.drafter import launch_plan

        click.echo("\n".join(launch_plan(recipe, str(recipe_file))))
        return
    if max_steps is not None and max_steps < 1:
        raise UserError(f"--max-steps {max_steps}: must be at least 1")
    if as_json and not estimate:
        raise UserError("--json goes with --estimate (a training run reports on stderr and in train_summary.json)")
    if estimate:
        return _estimate(recipe, out, as_json)
    from trtllm_spec.stages.data import default_train_dir
    from trtllm_spec.stages.drafter import run_train

    folder = default_train_dir(recipe, out)
    from trtllm_spec.cli.progress import TrainingProgress

    on_step = TrainingProgress(_log, every_s=10)

    created = folder  # the topmost folder this run creates (None: --out exists already)
    while not created.parent.exists():
        created = created.parent
    created = None if created.exists() else created
    try:
        result = run_train(recipe, folder, max_steps=max_steps, resume=resume, force=force, log=_log,
                           on_step=on_step)
    except UserError:
        if created is not None:
            _remove_if_empty(created)  # a bad input leaves no folder behind; regenerated data is kept
        raise
    if os.environ.get("RANK", "0") != "0":
        return  # under torchrun, rank 0 reports for all
    if result.drafter_dir is None:
        click.echo(f"{recipe.drafter.type}: {result.summary.get('note', 'nothing to train')}")
    else:
        s = result.summary
        extra = (f" (steps {s['steps']}, held-out acc {s.get('heldout_acc')}; {s['placement']['device']} "
                 f"{s['placement']['dtype']}, {s['strategy']} x {s['world_size']})" if result.kind == "trained" else "")
        click.echo(f"{result.kind} drafter: {result.drafter_dir}{extra}")


def _estimate(recipe, out: Path | None, as_json: bool) -> None:
    from trtllm_spec.cli.common import echo_json
    from trtllm_spec.stages.data import estimate_data

    bud = estimate_data(recipe, out)
    if as_json:
        echo_json(bud.as_dict())
    else:
        for line in bud.lines():
            click.echo(line)
    bud.check()


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if no file was written under it (empty sub-folders only)."""
    import shutil

    if folder.is_dir() and not any(p.is_file() or p.is_symlink() for p in folder.rglob("*")):
        shutil.rmtree(folder, ignore_errors=True)
