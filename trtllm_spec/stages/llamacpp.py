"""llama.cpp, the second engine: the native build and the GGUF conversions every llama.cpp command starts from.
``trtllm-spec assets build-llamacpp`` calls ``build_llamacpp``; ``measure llamacpp`` and ``assets serve
--drafter`` call ``llamacpp_inputs``, which builds and converts on first use and reuses the caches after;
``assets serve`` without a drafter serves the asset's own GGUF (``plain_server``). One build serves all of them:
native ``llama-server`` replaced llama-cpp-python's Python server (measured faster here, and one compile of
llama.cpp in setup and CI instead of two)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.errors import UserError


def build_llamacpp(cache: Path | None = None, *, source: Path | None = None, jobs: int = 2, force: bool = False,
                   download: bool = True, log: Callable[[str], None] = lambda _m: None):
    """The cached native build for this machine (built when absent). Returns (LlamaCppBuild, built). Only
    ``assets build-llamacpp`` downloads (the sdist, from PyPI); the other commands build from the kept sdist."""
    from trtllm_spec.llamacpp.build import ensure_build

    return ensure_build(cache, source=source, jobs=jobs, force=force, download=download, log=log)


@dataclass(frozen=True)
class LlamaCppInputs:
    build: object  # llamacpp.build.LlamaCppBuild
    target_gguf: Path
    draft_gguf: Path | None
    spec_type: str | None
    drafter_type: str | None
    conversions: dict


def spec_type_of(drafter_type: str) -> str:
    """The descriptor's llama.cpp speculative type; a drafter llama.cpp cannot run is refused, naming why."""
    from trtllm_spec.drafters.registry import MECHANISMS, get

    mech = get(drafter_type)
    if mech.llamacpp_spec_type is None:
        runs = sorted(n for n, m in MECHANISMS.items() if m.llamacpp_spec_type)
        raise UserError(f"a {drafter_type} drafter cannot run on llama.cpp: {mech.llamacpp_refusal}; llama.cpp runs "
                        f"these of our drafter types: {', '.join(runs)}")
    return mech.llamacpp_spec_type


def drafter_type_of(drafter_dir: Path) -> str:
    import json

    from trtllm_spec.drafters.registry import exported_type

    cfg_path = drafter_dir / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"--drafter {drafter_dir}: no config.json; give an exported drafter folder (EAGLE-3, DFlash) "
                        "or a draft model checkpoint")
    cfg = json.loads(cfg_path.read_text())
    kind = exported_type(cfg)
    if kind is None:
        from trtllm_spec.drafters.registry import folder_refusal

        raise UserError(folder_refusal(cfg, f"--drafter {cfg_path}")
                        or f"--drafter {drafter_dir}: config.json is not a drafter layout trtllm-spec knows")
    return kind


def _gguf(cache_obj, stage: str, inputs: dict, force: bool, convert: Callable[[Path, Path], dict]
          ) -> tuple[Path, dict]:
    """A cached GGUF: ``convert(work_folder, out_file) -> record``; the file lands as ``model.gguf``."""
    from trtllm_spec.stages.cache import run_cached

    def work(folder: Path) -> dict:
        tmp = folder / "model.gguf.partial"
        record = convert(folder, tmp)
        tmp.replace(folder / "model.gguf")
        return record

    folder, record, _ = run_cached(cache_obj, stage, inputs, force, work)
    return folder / "model.gguf", record


def llamacpp_inputs(target_dir: Path, drafter_dir: Path | None, dtype: str, *, cache: Path | None = None,
                    force: bool = False, jobs: int = 2, download: bool = False,
                    log: Callable[[str], None] = lambda _m: None) -> LlamaCppInputs:
    """Build (first use), then convert the target and the drafter to GGUF, each cached by its inputs' hash, the
    converter's commit and the precision. ``download``: the first build may fetch the sdist (the ``assets``
    commands, which fetch from PyPI anyway); ``measure`` does not."""
    from trtllm_spec.llamacpp import convert
    from trtllm_spec.stages.cache import StageCache
    from trtllm_spec.stages.context import tree_hash

    kind = drafter_type_of(drafter_dir) if drafter_dir is not None else None
    spec_type = spec_type_of(kind) if kind is not None else None  # refused before minutes of building
    build, _ = build_llamacpp(cache, jobs=jobs, download=download, log=log)
    conv = build.converter
    stages = StageCache(cache)
    base = {"commit": build.record["commit"], "dtype": dtype}
    target_gguf, t_rec = _gguf(stages, "llamacpp-gguf-target", {**base, "target": tree_hash(target_dir)}, force,
                               lambda _f, out: convert.convert_target(conv, target_dir, out, dtype, log))
    records = {"target": t_rec}
    draft_gguf = None
    if drafter_dir is not None:
        from trtllm_spec.drafters.registry import get

        mech = get(kind)  # the descriptor runs its converter (Mechanism.llamacpp_convert)
        draft_gguf, records["drafter"] = _gguf(
            stages, "llamacpp-gguf-drafter", {**base, "drafter": tree_hash(drafter_dir),
                                              "target": tree_hash(target_dir), "spec_type": spec_type},
            force, lambda _f, out: mech.llamacpp_convert(conv, drafter_dir, target_dir, out, dtype, log))
    return LlamaCppInputs(build, target_gguf, draft_gguf, spec_type, kind, records)


def _llamacpp_budget(settings: dict, compare_reference: bool, allow_long: bool, log) -> None:
    """The estimate-first rule of every measure (data.user_suite.measure_budget): llama.cpp decodes each prompt
    with speculation and alone (its own target-only greedy), and with the comparison our decoder does both too."""
    from trtllm_spec.data.user_suite import measure_budget, select_suite

    items, _ = select_suite(settings["suite"], settings["categories"], settings["num_prompts"], settings["seed"])
    runs = 4 if compare_reference else 2
    measure_budget(len(items) * runs, settings["max_new_tokens"],
                   f"{len(items)} prompts x {runs} decodes (llama.cpp" + (" and ours" if compare_reference else "")
                   + ": speculative and target alone)", allow_long, log)


def run_measure_llamacpp(target: str, drafter: str | None, draft_len: int | None, *, out: Path | None,
                         force: bool, compare_reference: bool = True, suite: str, categories, num_prompts: int,
                         max_new_tokens: int, temperature: float, seed: int, dtype: str, device: str,
                         chat_template: Path | None = None, training_data: Path | None = None,
                         allow_overlap: bool = False, threads: int | None = None, port: int | None = None,
                         cache: Path | None = None, allow_long: bool = False,
                         progress: Callable[[str], None] | None = None, request_mode=None) -> dict:
    """``trtllm-spec measure llamacpp``: llama.cpp's speculative decoding of ``drafter`` over the suite,
    and (``compare_reference``) our reference decoder on the same prompts beside it, both in ``request_mode``
    (at temperature > 0 the two samplers draw different numbers: ALs are compared, outputs only when greedy).
    Writes the profile
    (``engine: llamacpp``, with ``comparison``), report.md and provenance to ``out`` atomically."""
    from trtllm_spec.core.files import check_output_dir
    from trtllm_spec.data.user_suite import suite_checker
    from trtllm_spec.measure.run import check_settings, inspect_drafter, target_checkpoint, target_summary
    from trtllm_spec.stages.measure import _input_files, write_profile

    log = progress or (lambda _m: None)
    if drafter is None or draft_len is None:
        raise UserError("'measure llamacpp' needs --drafter DIR (an exported EAGLE-3 / DFlash folder or a draft model) "
                        "and --draft-len D")
    if dtype == "auto":
        dtype = "fp32"  # the comparison needs one precision on both engines; fp32 is exact on every CPU
    if dtype not in ("fp32", "bf16"):
        raise UserError(f"--dtype {dtype}: 'measure llamacpp' runs fp32 or bf16 GGUFs (the reference run's precision)")
    if device not in ("auto", "cpu"):
        raise UserError(f"--device {device}: llama.cpp is built for this CPU here; the reference runs beside it on "
                        "the CPU (drop --device or give cpu)")
    check_settings(draft_len, max_new_tokens, temperature, dtype)
    drafter_dir = Path(drafter)
    if not drafter_dir.is_dir():
        raise UserError(f"--drafter {drafter}: not a folder; 'measure llamacpp' runs an exported drafter folder")
    target_dir, target_cfg = target_checkpoint(target)
    info = inspect_drafter(str(drafter_dir), target_cfg, draft_len)
    check = suite_checker(suite, training_data, allow_overlap, log)
    inputs_paths = (target_dir, drafter_dir)
    if out is not None:
        check_output_dir(out, force, inputs_paths)
    settings = dict(suite=suite, categories=categories, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                    temperature=temperature, seed=seed, chat_template=chat_template)
    _llamacpp_budget(settings, compare_reference, allow_long, log)  # estimate first, before any build or model
    li = llamacpp_inputs(target_dir, drafter_dir, dtype, cache=cache, log=log)
    import os

    from trtllm_spec.measure.llamacpp_engine import measure_llamacpp
    from trtllm_spec.serve.llamacpp import free_port

    threads = threads or os.cpu_count() or 1
    port = port or free_port()
    llama_runs: list = []
    profile = measure_llamacpp(
        li.build.binary("llama-server"), li.target_gguf, li.draft_gguf, li.spec_type, target_dir, draft_len,
        drafter={"type": info.kind, "path": str(drafter_dir.resolve()), "max_draft_len": info.max_draft_len},
        target=target_summary(target, target_dir, target_cfg),
        llamacpp={"version": li.build.version, "commit": li.build.record["commit"],
                  "package_version": li.build.record["package_version"], "conversions": li.conversions},
        dtype=dtype, threads=threads, port=port, progress=log, suite_check=check, runs_out=llama_runs,
        request_mode=request_mode, **settings)
    if compare_reference:
        from trtllm_spec.measure.engine_compare import compare
        from trtllm_spec.measure.run import measure

        log("reference decoder: the same prompts on our PyTorch decoder")
        ref_runs: list = []
        ref = measure(target_dir, str(drafter_dir), draft_len, dtype=dtype, device="cpu", progress=log,
                      runs_out=ref_runs, request_mode=request_mode, **settings)
        profile["comparison"] = compare(llama_runs, ref_runs, draft_len, {
            "engine": "pytorch", "mean_acceptance_length": ref["overall"]["mean_acceptance_length"],
            "dtype": ref["settings"]["dtype"], "machine": ref["settings"]["machine"]})
        for key in ("structured_output", "greedy_comparison"):  # the reference's, beside llama.cpp's
            if key in ref:
                profile["comparison"][f"{key}_reference"] = ref[key]
    if out is not None:
        args = {"target": target, "drafter": drafter, "draft_len": draft_len, "engine": "llamacpp",
                "compare_reference": compare_reference, "dtype": dtype, "threads": threads, **{
                    k: (str(v) if isinstance(v, Path) else v) for k, v in settings.items()},
                "training_data": str(training_data) if training_data else None, "allow_overlap": allow_overlap,
                "request_mode": request_mode.as_dict() if request_mode is not None else None}
        write_profile(profile, out, force, {"measure": args}, _input_files(target_dir, str(drafter_dir)),
                      inputs_paths)
    return profile


def speculative_server(asset: str, drafter: Path, draft_len: int, *, host: str, port: int, threads: int, ctx: int,
                       parallel: int, cache: Path | None = None, log: Callable[[str], None] = lambda _m: None):
    """``assets serve NAME --drafter DIR``: native llama-server over the asset's fp32 target GGUF with the
    drafter's GGUF at D (not started: a ``NativeServer`` to use as a context manager)."""
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.serve.llamacpp import DraftSpec, NativeServer

    if not drafter.is_dir():
        raise UserError(f"--drafter {drafter}: not a folder; give an exported drafter folder")
    target_dir = fetch_model(asset, "fp32", cache, log=log)
    li = llamacpp_inputs(target_dir, drafter, "fp32", cache=cache, download=True, log=log)
    server = NativeServer(li.build.binary("llama-server"), li.target_gguf,
                          draft=DraftSpec(li.draft_gguf, li.spec_type, draft_len), host=host, port=port,
                          threads=threads, ctx=ctx, parallel=parallel, alias=asset)
    return server


def plain_server(asset: str, *, host: str, port: int, threads: int, ctx: int, parallel: int,
                 cache: Path | None = None, log_file: Path | None = None,
                 log: Callable[[str], None] = lambda _m: None):
    """``assets serve NAME``: native llama-server over the GGUF the asset ships (its chat template from the GGUF's
    metadata), ``parallel`` request slots of ``ctx`` tokens each; built on first use (not started: a
    ``NativeServer`` to use as a context manager)."""
    from trtllm_spec.data.model_assets import fetch_gguf
    from trtllm_spec.serve.llamacpp import NativeServer

    gguf = fetch_gguf(asset, cache, log=log)
    build, _ = build_llamacpp(cache, download=True, log=log)
    return NativeServer(build.binary("llama-server"), gguf, host=host, port=port, threads=threads, ctx=ctx,
                        parallel=parallel, alias=asset, log_file=log_file)
