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


def triton_from_bundle(bundle: Path, out: Path, *, force: bool, model_name: str, preview: str | None = None,
                       threads: int = 0) -> tuple[list[Path], str]:
    """``trtllm-spec triton``: the repository of an existing bundle (checked against its manifest), written
    atomically to ``out``. Returns (files, backend). ``preview`` ('reference'): add the CPU preview's model.py
    (deploy/triton_preview.py), served by ``assets serve-triton``."""
    import os

    from trtllm_spec.core.bundle import MANIFEST, read_bundle
    from trtllm_spec.core.files import atomic_dir

    record = read_bundle(bundle, "bundle")  # verified against its manifest; manifest and files agree
    options, profile, served = record.main_options, record.profile, record.served
    if not isinstance(served, str) or not served:
        raise UserError(f"{bundle / MANIFEST} lacks target.served; rebuild the bundle with 'trtllm-spec build'")
    recipe = record.recipe_model()  # recipe.resolved.yaml, validated when the bundle was read
    backend, batches, hw = recipe.engine.backend, recipe.workload.all_batch_sizes(), recipe.hardware
    with atomic_dir(out, force=force, inputs=(bundle,)) as tmp:
        root = os.path.relpath(bundle.resolve(), out.resolve())  # the launch script runs from the repository
        files = write_repository(tmp, options=options, backend=backend, model=served, batch_sizes=batches, tp=hw.tp,
                                 pp=hw.pp, profile=profile, model_name=model_name, bundle_root=root)
        if preview:
            from trtllm_spec.deploy.triton_preview import add_preview

            files += add_preview(tmp, mode=preview, model_name=model_name, bundle=bundle, threads=threads)
    return files, backend


def preview_server(bundle: Path, repo: Path | None, *, http_port: int | None, grpc_port: int | None,
                   log_file: Path | None, threads: int = 0, model_name: str = "tensorrt_llm"):
    """``assets serve-triton``: (a TritonServer not started yet, the temporary folder to remove or None). Without
    ``repo`` a preview repository of ``bundle`` is written to a temporary folder first."""
    import shutil
    import tempfile

    from trtllm_spec.deploy.triton import check_triton_repo
    from trtllm_spec.deploy.triton_preview import preview_paths_ok
    from trtllm_spec.serve.triton import TritonServer, find_triton

    install = find_triton()  # before writing anything: the wheel's venv must be there
    tmp = None
    if repo is None:
        tmp = Path(tempfile.mkdtemp(prefix="trtllm-spec-preview-"))
        repo = tmp / "triton"
        try:
            triton_from_bundle(bundle, repo, force=False, model_name=model_name, preview="reference", threads=threads)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    problems = check_triton_repo(repo) + ([] if not (repo / model_name / "1" / "preview.json").is_file()
                                          else preview_paths_ok(repo, model_name))
    if problems:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{repo}: {problems[0]}")
    return TritonServer(repo, install=install, http_port=http_port, grpc_port=grpc_port, log_file=log_file), tmp
