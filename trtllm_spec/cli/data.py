"""``trtllm-spec data regenerate``: training conversations written by the target (``stages.data``)."""

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
    """Training data: conversations written by the target itself."""


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
@click.option("--timeout", "timeout_s", type=float, help="One request's timeout in seconds (server.timeout_s).")
@click.option("--shard", help="I/N: only the I-th of N slices of the prompts (0 <= I < N), e.g. a SLURM array task.")
@device_options
@set_option
def regenerate_cmd(recipe_file: Path, out: Path | None, backend: str | None, server_urls: tuple[str, ...],
                   concurrency: int | None, timeout_s: float | None, shard: str | None, device: str | None,
                   dtype: str | None, overrides: tuple[str, ...]) -> None:
    """Let the target answer the training prompts (batched; Ctrl-C keeps every finished batch). A budget is
    printed first; a run that cannot fit the disk or memory is refused."""
    from trtllm_spec.core.recipe import load_recipe
    from trtllm_spec.data.backends import parse_shard, server_overrides
    from trtllm_spec.stages.data import regenerate_data

    part = parse_shard(shard)
    overrides = (*overrides, *server_overrides(backend, server_urls, concurrency, timeout_s),
                 *training_overrides(device, dtype))
    convs, path, where = regenerate_data(load_recipe(recipe_file, overrides), out, _log, shard=part)
    click.echo(f"{len(convs)} conversations in {path} ({where.device}, {where.dtype})")
