"""``trtllm-spec train`` and ``trtllm-spec data regenerate``."""

from __future__ import annotations

import os
from pathlib import Path

import click

from trtllm_spec.cli.common import main, set_option
from trtllm_spec.cli.device_options import device_options, training_overrides


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _default_out(recipe, out: Path | None, what: str) -> Path:
    return out or Path("out") / recipe.name / what


@main.command("train")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="Training folder (default out/<recipe>/train).")
@click.option("--max-steps", type=int, help="Stop after this step (continue later with --resume); the "
              "learning-rate schedule still spans drafter.training.max_steps.")
@click.option("--resume", is_flag=True, help="Continue the run in --out exactly where it stopped.")
@click.option("--force", is_flag=True, help="Delete --out and start over.")
@click.option("--dry-run", is_flag=True, help="Print the launch (nodes, processes, strategy) and a per-rank memory "
              "estimate; loads nothing, writes nothing.")
@device_options
@set_option
def train_cmd(recipe_file: Path, out: Path | None, max_steps: int | None, resume: bool, force: bool, dry_run: bool,
              device: str | None, dtype: str | None, overrides: tuple[str, ...]) -> None:
    """Train (or convert, or record) the recipe's drafter with NVIDIA ModelOpt and export it in the layout
    TensorRT-LLM loads (OUT/drafter). Regenerates training data with the target first (resumable). Distributed
    (drafter.training.distributed: ddp / fsdp) under torchrun; see --dry-run for the launch line."""
    from trtllm_spec.core.recipe import load_recipe
    from trtllm_spec.errors import UserError

    recipe = load_recipe(recipe_file, overrides + training_overrides(device, dtype))
    if dry_run:
        from trtllm_spec.train.launch import dry_run as plan_launch

        click.echo("\n".join(plan_launch(recipe, str(recipe_file))))
        return
    if max_steps is not None and max_steps < 1:
        raise UserError(f"--max-steps {max_steps}: must be at least 1")
    from trtllm_spec.train_stage import run_train

    folder = _default_out(recipe, out, "train")
    last = {"t": 0.0}

    def on_step(rec: dict) -> None:
        import time

        if time.monotonic() - last["t"] > 10 or rec["step"] == 1:
            last["t"] = time.monotonic()
            acc = ", ".join(f"{a:.3f}" for a in rec["train_acc"])
            _log(f"step {rec['step']}: loss {rec['loss']:.3f}, train_acc [{acc}], {rec['tokens_per_s']:.0f} tok/s, "
                 f"epoch {rec['epoch']:.2f}")

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


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if no file was written under it (empty sub-folders only)."""
    import shutil

    if folder.is_dir() and not any(p.is_file() or p.is_symlink() for p in folder.rglob("*")):
        shutil.rmtree(folder, ignore_errors=True)


@main.group("data")
def data_group() -> None:
    """Training data: conversations written by the target itself."""


@data_group.command("regenerate")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="JSONL file (default out/<recipe>/train/data/"
              "conversations.jsonl); existing ids are skipped, so a rerun resumes.")
@device_options
@set_option
def regenerate_cmd(recipe_file: Path, out: Path | None, device: str | None, dtype: str | None,
                   overrides: tuple[str, ...]) -> None:
    """Let the target answer the training prompts (batched; Ctrl-C keeps every finished batch)."""
    from trtllm_spec.core.recipe import load_recipe
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.errors import UserError
    from trtllm_spec.train_stage import conversations, require_checkpoint

    recipe = load_recipe(recipe_file, overrides)
    if getattr(recipe.drafter, "training", None) is None:
        raise UserError(f"drafter.type {recipe.drafter.type} is not trained, so it has no training data to "
                        "regenerate; use a recipe with an eagle3, mtp, dflash or dspark drafter")
    recipe = load_recipe(recipe_file, overrides + training_overrides(device, dtype))
    if recipe.drafter.training.data.path:
        raise UserError(f"drafter.training.data.path is {recipe.drafter.training.data.path}: this recipe trains on "
                        "those conversations, so there is nothing to regenerate; drop data.path to regenerate")
    target_dir = require_checkpoint(resolve_target(recipe.target.model, recipe.base_dir), "regeneration")
    from trtllm_spec.runtime.device import choose

    tc = recipe.drafter.training
    where = choose(tc.device, tc.precision)  # before anything is written: --device cuda without a GPU exits 2
    path = out or _default_out(recipe, None, "train") / "data" / "conversations.jsonl"
    convs = conversations(recipe, target_dir, path.parent, _log, file_name=path.name, placement=where)
    click.echo(f"{len(convs)} conversations in {path} ({where.device}, {where.dtype})")


@main.command("doctor")
@click.argument("drafter_dir", type=click.Path(path_type=Path))
@click.option("--target", required=True, help="The target: checkpoint folder, fetched asset or preset.")
@click.option("--heldout", type=click.Path(path_type=Path), help="Held-out chunks for the parity check "
              "(default: heldout_chunks.json next to the drafter folder, written by train).")
@click.option("--json", "as_json", is_flag=True)
@device_options
def doctor_cmd(drafter_dir: Path, target: str, heldout: Path | None, as_json: bool, device: str | None,
               dtype: str | None) -> None:
    """Check a drafter folder against its target: layout, shapes, dtypes, d2t, captured layers, mask token,
    and train/serve parity. Exit 0 healthy, 1 findings, 2 bad input."""
    from trtllm_spec.cli.common import echo_json
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.errors import CheckFailed, UserError
    from trtllm_spec.train.doctor import run_doctor

    if not drafter_dir.is_dir():
        raise UserError(f"{drafter_dir} is not a folder; give the exported drafter folder")
    t = resolve_target(target)
    target_dir = t.path if t.path is not None and t.path.is_dir() and any(t.path.glob("*.safetensors")) else None
    from trtllm_spec.cli.device_options import placement

    where = placement(device, dtype) if target_dir is not None else None  # the parity check runs the target
    kind, findings = run_doctor(drafter_dir, target_dir, t.config, heldout, placement=where)
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
