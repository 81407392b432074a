"""``trtllm-spec build``: one recipe in, one deployment bundle out (options, scripts, Triton repository).

Stages (each cached by a hash of its inputs; ``--force`` redoes them):
  1 resolve   the target and its shape          5 plan      D and draft_len_schedule
  2 quantize  optional ModelOpt PTQ             6 bundle    TensorRT-LLM options, drafter, scripts
  3 drafter   reuse, convert, or train+export   7 triton    the model repository
  4 measure   acceptance on speed-lite          8 report    the overhead report
                                                 9 trtllm    validate + warm up where TensorRT-LLM exists
The bundle is written into a temporary folder and renamed at the end, under a lock: a failed or concurrent
build never leaves a half-written or mixed bundle, and an existing bundle stays untouched until the new one
is complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.files import atomic_dir, check_output_dir
from trtllm_spec.core.provenance import provenance
from trtllm_spec.core.recipe import Recipe
from trtllm_spec.core.recipe_load import recipe_to_dict
from trtllm_spec.deploy.manifest import redact_text, redact_tree, write_manifest
from trtllm_spec.errors import UserError
from trtllm_spec.stages.bundle import bundle, dump_recipe
from trtllm_spec.stages.cache import StageCache
from trtllm_spec.stages.context import BuildContext, StageResult, timed
from trtllm_spec.stages.drafter import drafter
from trtllm_spec.stages.measure import measure
from trtllm_spec.stages.plan import plan
from trtllm_spec.stages.quantize import quantize
from trtllm_spec.stages.report import report
from trtllm_spec.stages.resolve import resolve
from trtllm_spec.stages.triton import triton
from trtllm_spec.stages.trtllm import trtllm

STAGES = [resolve, quantize, drafter, measure, plan, bundle, triton, report, trtllm]


@dataclass
class BuildResult:
    out: Path
    stages: list[StageResult]
    manifest: dict


def _machine_paths(recipe_file: Path, out: Path, bundle: Path, cache: Path | None) -> dict[str, str]:
    import tempfile

    from trtllm_spec.core.targets import cache_dir

    # only absolute paths: a relative --out such as "bundle" would also rewrite that word in every script
    return {str(bundle): ".", str(out.resolve()): "<bundle>", str(cache or cache_dir()): "<cache>",
            str(recipe_file.resolve().parent): "<recipe-dir>", str(Path.cwd()): "<cwd>", str(Path.home()): "<home>",
            tempfile.gettempdir(): "<tmp>"}


def _input_dirs(recipe: Recipe) -> tuple[Path, ...]:
    """Local folders the build reads (target, drafter checkpoint, draft model): the bundle must not be inside
    one, or --force would replace a checkpoint by a bundle."""
    specs = [recipe.target.model, recipe.drafter.checkpoint, getattr(recipe.drafter, "model", None)]
    paths = (recipe.resolve_path(s) for s in specs if s)
    return tuple(p for p in paths if p is not None and p.is_dir())


def default_bundle_dir(recipe: Recipe) -> Path:
    """Where ``build`` writes without ``--out``: ``output.dir`` (relative to the recipe file), else
    ``out/<recipe name>``."""
    return recipe.resolve_path(recipe.output.dir) if recipe.output.dir else Path("out") / recipe.name


@contextlib.contextmanager
def build_lock(out: Path) -> Iterator[None]:
    """One build per output folder at a time; a second one fails at once with a clear message."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.parent / f".{out.name}.lock"
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"another build is writing {out} (lock {lock}); wait for it or choose another --out") from None
    try:
        # a build killed outright (SIGKILL, power loss) leaves its temporary bundle; only a holder of the lock
        # may remove it (atomic_dir names it .<name>.<8 random chars>.partial)
        for stale in out.parent.glob(f".{glob.escape(out.name)}.????????.partial"):
            shutil.rmtree(stale, ignore_errors=True)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def run_build(recipe: Recipe, recipe_file: Path, out: Path, *, force: bool = False, overwrite: bool = False,
              cache: Path | None = None,
              log: Callable[[str], None] = print,
              on_stage: Callable[[StageResult], None] | None = None,
              on_train_step: Callable[[dict], None] | None = None) -> BuildResult:
    from trtllm_spec.stages.checks import check_buildable

    check_buildable(recipe)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not (force or overwrite):
        raise UserError(f"output {out} exists; pass --overwrite to replace it (cached stages are reused) or --force "
                        "to rebuild everything (it stays untouched until the new bundle is complete)")
    inputs = _input_dirs(recipe)
    check_output_dir(out, force=True, inputs=inputs)  # before the lock file is created next to it
    with build_lock(out), atomic_dir(out, force=True, inputs=inputs) as tmp:
        ctx = BuildContext(recipe=recipe, recipe_file=recipe_file, bundle=tmp, cache=StageCache(cache),
                                  force=force, log=log, on_train_step=on_train_step)
        for stage in STAGES:
            result = timed(stage, ctx)
            ctx.results.append(result)
            if on_stage:
                on_stage(result)
        dump_recipe(ctx)
        body = {
            "recipe": recipe_to_dict(recipe), "recipe_file": recipe_file.name,
            "target": {"spec": recipe.target.model, "hf_id": ctx.target.hf_id, "kind": ctx.target.kind,
                       "served": ctx.model_ref},
            "drafter": {"type": recipe.drafter.type, "kind": ctx.drafter_kind},
            "trtllm_profile": recipe.trtllm_profile, "quantization": recipe.quantization.method,
            "planner_inputs": {"hardware": recipe.hardware.model_dump(), "workload": recipe.workload.model_dump(),
                               "acceptance": "measured" if ctx.profile_path else "assumed"},
            "recommendation": ctx.plan.recommendation.to_json(),
            "stages": [s.as_dict() for s in ctx.results],
            "provenance": provenance(None, [recipe_file]),
        }
        paths = _machine_paths(recipe_file, out, tmp, cache)
        redact_tree(tmp, paths)
        manifest = write_manifest(tmp, json.loads(redact_text(json.dumps(body), paths)))
    return BuildResult(out, ctx.results, manifest)
