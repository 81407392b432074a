"""Stage 7, triton: the Triton model repository for the bundle (llmapi layout for the PyTorch backend, the
inflight-batcher ensemble for TensorRT engines), parsed back with tritonclient's ModelConfig. ``build`` and
``trtllm-spec triton`` both call ``write_repository``, so they agree on every value."""

from __future__ import annotations

from pathlib import Path

from trtllm_spec.errors import UserError
from trtllm_spec.stages.context import BuildContext, StageResult


def write_repository(out: Path, *, options: dict, backend: str, model: str, batch_sizes: list[int], tp: int,
                     pp: int, profile: str, model_name: str = "tensorrt_llm", bundle_root: str = "..") -> list[Path]:
    """``batch_sizes``: the workload's, concurrency included (``WorkloadConfig.all_batch_sizes``)."""
    from trtllm_spec.deploy.triton import check_triton_repo, write_triton_repo

    world = tp * pp
    kw: dict = {}
    if backend == "tensorrt":
        kw = dict(engine_dir="engines/target", draft_engine_dir="engines/draft", tokenizer_dir="target",
                  decoding_mode=None)
    files = write_triton_repo(out, options=options, backend=backend, max_batch_size=max(batch_sizes), model=model,
                              gpu_device_ids=[list(range(world))] if world > 1 else None, profile=profile,
                              model_name=model_name, bundle_root=bundle_root, **kw)
    problems = check_triton_repo(out, profile=profile)
    if problems:
        raise UserError(f"generated Triton repository failed its own check: {problems[0]}")
    return files


def triton(ctx: BuildContext) -> StageResult:
    r = ctx.recipe
    files = write_repository(ctx.bundle / "triton", options=ctx.options, backend=r.engine.backend, model=ctx.model_ref,
                             batch_sizes=r.workload.all_batch_sizes(), tp=r.hardware.tp, pp=r.hardware.pp,
                             profile=r.trtllm_profile)
    layout = "llmapi" if r.engine.backend == "pytorch" else "inflight batcher"
    return StageResult("triton", "done", detail=f"{len(files)} files ({layout} layout)")


def triton_from_bundle(bundle: Path, out: Path, *, force: bool, model_name: str) -> tuple[list[Path], str]:
    """``trtllm-spec triton``: the repository of an existing bundle (checked against its manifest), written
    atomically to ``out``. Returns (files, backend)."""
    import os

    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.core.files import atomic_dir
    from trtllm_spec.core.recipe import HardwareConfig, WorkloadConfig

    record = read_bundle(bundle, "bundle")  # verified against its manifest; manifest and files agree
    manifest, options, profile = record.manifest, record.main_options, record.profile
    try:
        recipe = manifest["recipe"]
        backend = recipe["engine"]["backend"]
        served = manifest["target"]["served"]
        batches = WorkloadConfig.model_validate(recipe["workload"]).all_batch_sizes()
        hw = HardwareConfig.model_validate(recipe.get("hardware", {}))  # a recipe's defaults where absent
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{bundle / 'manifest.json'} lacks {exc} (recipe, target.served, trtllm_profile); "
                        "rebuild the bundle with 'trtllm-spec build'") from None
    with atomic_dir(out, force=force, inputs=(bundle,)) as tmp:
        root = os.path.relpath(bundle.resolve(), out.resolve())  # the launch script runs from the repository
        files = write_repository(tmp, options=options, backend=backend, model=served, batch_sizes=batches, tp=hw.tp,
                                 pp=hw.pp, profile=profile, model_name=model_name, bundle_root=root)
    return files, backend
