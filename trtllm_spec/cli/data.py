"""``trtllm-spec data regenerate`` (training conversations written by the target) and ``data features`` (the
target's hidden states over them): ``stages.data``."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import field_choices, main, set_option
from trtllm_spec.cli.device_options import device_options, training_overrides
from trtllm_spec.core.recipe import DataConfig


def _log(msg: str) -> None:
    click.echo(msg, err=True)


@main.group("data")
def data_group() -> None:
    """Training data: conversations written by the target itself, and its hidden states over them."""


@data_group.command("regenerate")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="JSONL file (default out/<recipe>/train/data/"
              "conversations.jsonl, or conversations.shard-I-of-N.jsonl); existing ids are skipped, so a rerun "
              "resumes.")
@click.option("--backend", type=click.Choice(field_choices(DataConfig, "regen_backend")),
              help="Who writes the replies (default: drafter.training.data.regen_backend).")
@click.option("--server-url", "server_urls", multiple=True, help="An OpenAI-compatible server (repeatable: "
              "several spread the work); implies --backend openai.")
@click.option("--concurrency", type=int, help="Requests in flight over all servers (server.concurrency).")
@click.option("--timeout", "timeout_s", type=float, help="One request's wall-clock deadline in seconds, the whole request, not each read "
              "(server.timeout_s).")
@click.option("--shard", help="I/N: only the I-th of N slices of the prompts (0 <= I < N), e.g. a SLURM array task.")
@device_options
@set_option
def regenerate_cmd(recipe_file: Path, out: Path | None, backend: str | None, server_urls: tuple[str, ...],
                   concurrency: int | None, timeout_s: float | None, shard: str | None, device: str | None,
                   dtype: str | None, overrides: tuple[str, ...]) -> None:
    """Let the target answer the training prompts (batched; Ctrl-C keeps every finished batch). A budget is
    printed first; a run that cannot fit the disk or memory is refused."""
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.data.backends import parse_shard, server_overrides
    from trtllm_spec.stages.data import regenerate_data

    part = parse_shard(shard)
    overrides = (*overrides, *server_overrides(backend, server_urls, concurrency, timeout_s),
                 *training_overrides(device, dtype))
    convs, path, where = regenerate_data(load_recipe(recipe_file, overrides), out, _log, shard=part)
    click.echo(f"{len(convs)} conversations in {path} ({where.device}, {where.dtype})")


@data_group.command("features")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--conversations", type=click.Path(path_type=Path), help="The regenerated JSONL (default: "
              "drafter.training.data.path, else out/<recipe>/train/data/conversations.jsonl).")
@click.option("--out", type=click.Path(path_type=Path), help="Features folder (default: features/ next to the "
              "conversations); ids already there are skipped, so a rerun resumes.")
@click.option("--features-dtype", type=click.Choice(field_choices(DataConfig, "features_dtype")),
              help="Storage (default drafter.training.data.features_dtype; fp8 = e4m3 with a per-row scale).")
@click.option("--batch-size", type=click.IntRange(min=1), help="Conversations per forward and per shard (default "
              "drafter.training.data.regen_batch_size).")
@click.option("--shard", help="I/N: only the I-th of N slices of the conversations (with torchrun, each rank takes "
              "its own slice of that).")
@click.option("--device-map", type=click.Choice(["auto"]), help="Spread a target larger than one GPU over the "
              "visible GPUs (accelerate); refused on a CPU run.")
@device_options
@set_option
def features_cmd(recipe_file: Path, conversations: Path | None, out: Path | None, features_dtype: str | None,
                 batch_size: int | None, shard: str | None, device_map: str | None, device: str | None,
                 dtype: str | None, overrides: tuple[str, ...]) -> None:
    """Capture the target's hidden states over the regenerated conversations (one teacher-forced forward per batch;
    offline EAGLE-3 training reads them). A budget is printed first; a run the disk cannot hold is refused."""
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.data.backends import parse_shard
    from trtllm_spec.stages.data import features_data

    part = parse_shard(shard)
    recipe = load_recipe(recipe_file, (*overrides, *training_overrides(device, dtype)))
    rep, folder = features_data(recipe, conversations, out, _log, shard=part, features_dtype=features_dtype,
                                batch_size=batch_size, device_map=device_map)
    click.echo(f"features of {rep.done} conversations ({rep.skipped} already there, {rep.tokens} tokens) in {folder}")
