"""``trtllm-spec build``, ``verify`` and ``triton``."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, main, set_option, verbose_option


@main.command("build")
@click.argument("recipe_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="Bundle folder (default: the recipe's output.dir, "
              "else out/<recipe name>).")
@click.option("--overwrite", is_flag=True, help="Replace an existing bundle, reusing cached stages.")
@click.option("--force", is_flag=True, help="Replace an existing bundle and redo every stage.")
@click.option("--cache", type=click.Path(path_type=Path), help="Stage cache (default $TRTLLM_SPEC_CACHE).")
@verbose_option
@set_option
def build_cmd(recipe_file: Path, out: Path | None, overwrite: bool, force: bool, cache: Path | None,
              overrides: tuple[str, ...]) -> None:
    """Build a runnable TensorRT-LLM bundle from RECIPE_FILE: drafter, measured acceptance, planned D and
    schedule, LLM API options, serve/bench scripts, Triton repository, overhead report and manifest."""
    from rich.console import Console
    from rich.table import Table

    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.stages.pipeline import default_bundle_dir, run_build

    recipe = load_recipe(recipe_file, overrides)
    folder = out or default_bundle_dir(recipe)
    console = Console(stderr=True)
    console.print(f"planning for GPU {recipe.hardware.gpu} (the recipe's hardware.gpu; TensorRT-LLM serves on a "
                  "GPU: another with --set hardware.gpu=NAME, names from 'trtllm-spec hw list')", markup=False,
                  highlight=False, soft_wrap=True)

    def on_stage(s) -> None:
        console.print(f"[bold]{s.name:9}[/bold] {s.status:8} {s.seconds:7.1f}s  {s.detail}", soft_wrap=True)

    def log(m: str) -> None:
        console.print(f"  {m}", markup=False, highlight=False, soft_wrap=True)  # one line per update in a log

    from trtllm_spec.cli.progress import TrainingProgress

    result = run_build(recipe, recipe_file, folder, force=force, overwrite=overwrite, cache=cache, log=log,
                       on_stage=on_stage, on_train_step=TrainingProgress(log, every_s=30))
    table = Table("stage", "status", "seconds", "detail / deferred command", title=f"bundle: {folder}")
    for s in result.stages:
        table.add_row(s.name, s.status, f"{s.seconds:.1f}", s.detail + (f"\n-> {s.command}" if s.command else ""))
    Console(stderr=True, width=140).print(table)
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.report.summary import build_summary

    for line in build_summary(read_bundle(folder, "bundle")):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    rec = result.manifest["recommendation"]
    click.echo(f"{folder}: max_draft_len {rec['max_draft_len']}"
               + (f", draft_len_schedule {rec['draft_len_schedule']}" if rec["draft_len_schedule"] else ""))


@main.command("verify")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result (changed, missing, extra files) as JSON.")
def verify_cmd(bundle: Path, as_json: bool) -> None:
    """Recompute the sha256 of every file of BUNDLE against its manifest, and compare the manifest's copy of the
    recipe with recipe.resolved.yaml. Exit 1 on any changed, missing or extra file, any symlink (to a file or a
    folder), or a recipe key the two copies disagree on."""
    from trtllm_spec.deploy.manifest import verify_bundle
    from trtllm_spec.errors import CheckFailed

    res = verify_bundle(bundle)
    if as_json:
        echo_json(res)
    else:
        for key in ("changed", "missing", "extra", "symlinks", "recipe"):
            for f in res[key]:
                click.echo(f"{'symlink' if key == 'symlinks' else key}: {f}")
        click.echo(f"{bundle}: {'ok' if res['ok'] else 'MODIFIED'} ({res['files']} files in the manifest)")
    if not res["ok"]:
        links = f", {len(res['symlinks'])} symlinks (a bundle holds plain files only)" if res["symlinks"] else ""
        recipe = (f", the manifest's recipe and recipe.resolved.yaml differ at {len(res['recipe'])} keys"
                  if res["recipe"] else "")
        raise CheckFailed(f"{bundle} does not match its manifest: {len(res['changed'])} changed, "
                          f"{len(res['missing'])} missing, {len(res['extra'])} extra{links}{recipe}")


@main.command("triton")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Model repository folder to write.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder (only one trtllm-spec wrote).")
@click.option("--model-name", default="tensorrt_llm", show_default=True, help="The Triton model name (its folder "
              "in the repository and the name clients request).")
@click.option("--preview", type=click.Choice(["reference"]), help="Also write a model.py that serves the llmapi "
              "tensor contract on this CPU through the reference decoder with the bundle's drafter (a preview of "
              "the GPU node; start it with 'assets serve-triton'). config.pbtxt is unchanged.")
@click.option("--threads", type=int, default=0, show_default=True, help="With --preview: torch threads of the "
              "preview's worker (0: torch's default).")
def triton_cmd(bundle: Path, out: Path, force: bool, model_name: str, preview: str | None, threads: int) -> None:
    """Write a Triton model repository for BUNDLE (llmapi layout for the PyTorch backend, the inflight-batcher
    ensemble for TensorRT engines), parsed back with tritonclient's ModelConfig."""
    from trtllm_spec.errors import UserError
    from trtllm_spec.stages.triton import triton_from_bundle

    if threads < 0 or (threads and not preview):
        raise UserError(f"--threads {threads}: a setting of --preview's worker (>= 0); add --preview or drop it")
    files, backend = triton_from_bundle(bundle, out, force=force, model_name=model_name, preview=preview,
                                        threads=threads)
    what = f"; CPU preview ({preview}): 'trtllm-spec assets serve-triton {bundle} --repo {out}'" if preview else ""
    click.echo(f"{out}: {len(files)} files ({backend} backend); see {out}/README.md to launch{what}")
