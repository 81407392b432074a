"""``trtllm-spec train`` and ``trtllm-spec data regenerate``."""

from __future__ import annotations

import os
from pathlib import Path

import click

from trtllm_spec.cli.common import main, set_option


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
@click.option("--estimate", is_flag=True, help="Print the budget (conversations, tokens, feature bytes vs free "
              "disk, the regeneration batch's memory vs free memory, predicted times) and stop; exit 2 if it "
              "cannot fit.")
@click.option("--json", "as_json", is_flag=True, help="With --estimate: the budget as JSON.")
@set_option
def train_cmd(recipe_file: Path, out: Path | None, max_steps: int | None, resume: bool, force: bool,
              estimate: bool, as_json: bool, overrides: tuple[str, ...]) -> None:
    """Train (or convert, or record) the recipe's drafter with NVIDIA ModelOpt and export it in the layout
    TensorRT-LLM loads (OUT/drafter). Regenerates training data with the target first (resumable)."""
    from trtllm_spec.core.recipe import load_recipe
    from trtllm_spec.errors import UserError

    recipe = load_recipe(recipe_file, overrides)
    if max_steps is not None and max_steps < 1:
        raise UserError(f"--max-steps {max_steps}: must be at least 1")
    folder = _default_out(recipe, out, "train")
    if as_json and not estimate:
        raise UserError("--json goes with --estimate (a training run reports on stderr and in train_summary.json)")
    if estimate:
        return _estimate(recipe, folder / "data", as_json)
    from trtllm_spec.train_stage import run_train

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
        extra = (f" (steps {s['steps']}, held-out acc {s.get('heldout_acc')})" if result.kind == "trained" else "")
        click.echo(f"{result.kind} drafter: {result.drafter_dir}{extra}")


def _estimate(recipe, data_dir: Path, as_json: bool) -> None:
    from trtllm_spec.cli.common import echo_json
    from trtllm_spec.errors import UserError

    if getattr(recipe.drafter, "training", None) is None or recipe.drafter.training.data.path:
        raise UserError(f"--estimate: drafter {recipe.drafter.type} regenerates no data here (not trained, or "
                        "data.path gives the conversations); nothing to estimate")
    from trtllm_spec.data.backends import estimate_recipe

    bud = estimate_recipe(recipe, data_dir)
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


@main.group("data")
def data_group() -> None:
    """Training data: conversations written by the target itself."""


@data_group.command("regenerate")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="JSONL file (default out/<recipe>/train/data/"
              "conversations.jsonl, or conversations.shard-I-of-N.jsonl); existing ids are skipped, so a rerun "
              "resumes.")
@click.option("--backend", type=click.Choice(["auto", "ours", "hf", "openai"]),
              help="Who writes the replies (default: drafter.training.data.regen_backend).")
@click.option("--server-url", "server_urls", multiple=True, help="An OpenAI-compatible server (repeatable: "
              "several spread the work); implies --backend openai.")
@click.option("--concurrency", type=int, help="Requests in flight over all servers (server.concurrency).")
@click.option("--timeout", "timeout_s", type=float, help="One request's timeout in seconds (server.timeout_s).")
@click.option("--shard", help="I/N: only the I-th of N slices of the prompts (0 <= I < N), e.g. a SLURM array task.")
@set_option
def regenerate_cmd(recipe_file: Path, out: Path | None, backend: str | None, server_urls: tuple[str, ...],
                   concurrency: int | None, timeout_s: float | None, shard: str | None,
                   overrides: tuple[str, ...]) -> None:
    """Let the target answer the training prompts (batched; Ctrl-C keeps every finished batch). A budget is
    printed first; a run that cannot fit the disk or memory is refused."""
    from trtllm_spec.core.recipe import load_recipe
    from trtllm_spec.data.backends import data_target, parse_shard, server_overrides
    from trtllm_spec.errors import UserError
    from trtllm_spec.train_stage import conversations, require_checkpoint

    part = parse_shard(shard)
    overrides = (*overrides, *server_overrides(backend, server_urls, concurrency, timeout_s))
    recipe = load_recipe(recipe_file, overrides)
    if getattr(recipe.drafter, "training", None) is None:
        raise UserError(f"drafter.type {recipe.drafter.type} is not trained, so it has no training data to "
                        "regenerate; use a recipe with an eagle3, mtp, dflash or dspark drafter")
    if recipe.drafter.training.data.path:
        raise UserError(f"drafter.training.data.path is {recipe.drafter.training.data.path}: this recipe trains on "
                        "those conversations, so there is nothing to regenerate; drop data.path to regenerate")
    target_dir = require_checkpoint(data_target(recipe.target.model, recipe.base_dir), "regeneration")
    name = "conversations.jsonl" if part is None else f"conversations.shard-{part[0]}-of-{part[1]}.jsonl"
    path = out or _default_out(recipe, None, "train") / "data" / name
    convs = conversations(recipe, target_dir, path.parent, _log, file_name=path.name, shard=part)
    click.echo(f"{len(convs)} conversations in {path}")


@main.command("doctor")
@click.argument("drafter_dir", type=click.Path(path_type=Path))
@click.option("--target", required=True, help="The target: checkpoint folder, fetched asset or preset.")
@click.option("--heldout", type=click.Path(path_type=Path), help="Held-out chunks for the parity check "
              "(default: heldout_chunks.json next to the drafter folder, written by train).")
@click.option("--json", "as_json", is_flag=True)
def doctor_cmd(drafter_dir: Path, target: str, heldout: Path | None, as_json: bool) -> None:
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
    kind, findings = run_doctor(drafter_dir, target_dir, t.config, heldout)
    errors = [f for f in findings if f.level == "error"]
    if as_json:
        echo_json({"drafter": str(drafter_dir), "type": kind, "healthy": not errors,
                   "findings": [f.as_dict() for f in findings]})
    else:
        marks = {"ok": "ok  ", "warning": "warn", "error": "FAIL", "info": "info"}
        click.echo(f"doctor: {drafter_dir} ({kind}) against {target}")
        for f in findings:
            click.echo(f"  [{marks[f.level]}] {f.check}: {f.message}")
    if errors:
        raise CheckFailed(f"{len(errors)} check(s) failed: {', '.join(f.check for f in errors)}")
