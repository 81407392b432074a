"""Stage 4, measure: acceptance of the drafter against its target on real prompts -> speculation profile.
``trtllm-spec measure`` (``run_measure``) and ``build`` (``measure``) both call ``measure_profile``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from trtllm_spec.core.bundle import Bundle
from trtllm_spec.core.files import write_json_atomic
from trtllm_spec.core.recipe_load import recipe_to_dict
from trtllm_spec.errors import UserError
from trtllm_spec.stages.cache import run_cached
from trtllm_spec.stages.context import BuildContext, StageResult, target_hash, tree_hash


def measure_profile(target: str | Path, drafter: str | None, draft_len: int | None, *, engine: str = "pytorch",
                    bundle: Path | Bundle | None = None, suite: str, categories: Sequence[str] | None, num_prompts: int,
                    max_new_tokens: int, temperature: float, seed: int, dtype: str = "fp32", device: str = "auto",
                    chat_template: Path | None = None, block_sweep: Sequence[int] | None = None,
                    out: Path | None = None, progress: Callable[[str], None] | None = None,
                    suite_check: Callable[[list], dict] | None = None, reference_engine: str = "auto",
                    drafter_options: dict | None = None, request_mode=None) -> dict:
    """The speculation profile of ``drafter`` ('ngram' or a folder) at D = ``draft_len``: on the PyTorch
    reference decoder here, or (``engine='trtllm'``) on TensorRT-LLM with the bundle's options. ``suite`` is
    'speed-lite' or a suite file/folder (data/user_suite.py); ``suite_check(items)`` (the overlap check) runs
    before any model loads."""
    common = dict(suite=suite, categories=categories, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                  temperature=temperature, seed=seed, chat_template=chat_template, progress=progress,
                  suite_check=suite_check)
    if engine == "pytorch":
        from trtllm_spec.measure.run import measure

        return measure(target, drafter, draft_len, dtype=dtype, block_sweep=block_sweep, device=device,
                       reference_engine=reference_engine, drafter_options=drafter_options,
                       request_mode=request_mode, **common)
    if drafter_options:
        raise UserError("drafter options (the suffix automaton's settings, --sa-enhancer-threshold) apply to "
                        "'measure reference'; with 'measure trtllm' the bundle's options decide")
    if request_mode is not None and (request_mode.chat_template_kwargs or request_mode.constrained
                                     or request_mode.top_p < 1):
        raise UserError(f"request mode {request_mode.label()}: 'measure trtllm' measures greedy or at --temperature "
                        "only (chat-template arguments, response_format and top_p are not passed to the LLM API "
                        "yet); measure the mode with 'measure reference', 'measure llamacpp' or 'measure served'")
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.measure.trtllm_engine import measure_trtllm

    record = bundle if isinstance(bundle, Bundle) else read_bundle(Path(bundle))
    return measure_trtllm(target, record, draft_len, out=str(out) if out else None, **common)


# measure's drafter flags -> the recipe fields they stand for (the drafter section of a folderless mechanism)
DRAFTER_FLAGS = {"--max-matching-ngram-size": "max_matching_ngram_size", "--global-pool": "enable_global_pool",
                 "--global-pool-size": "global_pool_size"}


def cli_drafter_options(drafter: str | None, *, max_matching_ngram_size: int | None, global_pool: bool,
                        global_pool_size: int | None, sa_enhancer_threshold: int | None) -> dict | None:
    """``measure``'s drafter flags as the descriptor's ``runtime_options``: for a folderless mechanism they fill its
    recipe section (validated by it), for an exported EAGLE-3 / MTP folder ``--sa-enhancer-threshold`` (with
    ``--global-pool``) is the section's ``sa_enhancer``; a flag the drafter does not read is refused naming it."""
    from pydantic import ValidationError

    from trtllm_spec.core.recipe import DRAFTER_CLASS
    from trtllm_spec.core.sa import SAEnhancerConfig
    from trtllm_spec.core.schema import format_validation_error
    from trtllm_spec.drafters.registry import folderless, get

    values = {"--max-matching-ngram-size": max_matching_ngram_size, "--global-pool": global_pool or None,
              "--global-pool-size": global_pool_size, "--sa-enhancer-threshold": sa_enhancer_threshold}
    given = {flag: v for flag, v in values.items() if v is not None}
    if drafter in folderless():
        section = DRAFTER_CLASS[drafter]
        fields = {flag: DRAFTER_FLAGS.get(flag) for flag in given}
        bad = [flag for flag, name in fields.items() if name not in section.model_fields]
        readable = [flag for flag, name in DRAFTER_FLAGS.items() if name in section.model_fields]
    else:  # an exported folder: TensorRT-LLM's SA enhancer (sa_config) is the only drafter setting
        readable = ["--sa-enhancer-threshold", "--global-pool"]
        bad = [flag for flag in given if flag not in readable or (flag == "--global-pool"
                                                                   and sa_enhancer_threshold is None)]
    if bad:
        raise UserError(f"{', '.join(bad)}: not read for --drafter {drafter} (it reads "
                        f"{', '.join(readable) or 'no drafter flag'})")
    try:
        if drafter in folderless():
            cfg = section(**{DRAFTER_FLAGS[flag]: v for flag, v in given.items()})
            return get(drafter).runtime_options(cfg, getattr(cfg, "global_pool_size", None) or 1) or None
        if sa_enhancer_threshold is not None:
            from trtllm_spec.core.sa import enhancer_runtime_options

            enh = SAEnhancerConfig(threshold=sa_enhancer_threshold, enable_global_pool=global_pool)
            return enhancer_runtime_options(enh)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, DRAFTER_CLASS.get(drafter, SAEnhancerConfig),
                                                "measure drafter flags")) from None
    return None


def check_measure_args(engine: str, drafter: str | None, draft_len: int | None, bundle: Path | None,
                       sweep: Sequence[int] | None) -> None:
    if engine == "pytorch":
        if bundle is not None:
            raise UserError("--bundle is read by 'measure trtllm' only")
        if drafter is None or draft_len is None:
            raise UserError("'measure reference' needs --drafter (folder, 'ngram' or 'suffix') and --draft-len D")
    elif bundle is None:
        raise UserError("'measure trtllm' needs --bundle DIR (a 'trtllm-spec build' folder with llm_api_options.yaml)")
    elif drafter is not None or sweep:
        raise UserError("'measure trtllm' measures the bundle's drafter at its max_draft_len; a drafter or block "
                        "sweep is not read")


def _input_files(target: Path | None, drafter: str | None) -> list[Path]:
    files: list[Path] = []
    for folder in (target, Path(drafter) if drafter else None):
        if folder is not None and folder.is_dir():
            files += sorted(p for p in folder.iterdir() if p.suffix in (".json", ".safetensors", ".jinja"))
    return files


def write_profile(profile: dict, out: Path | None, force: bool, args: dict, files: list[Path],
                  inputs: tuple[Path, ...]) -> None:
    """Write profile, report and provenance to ``out`` (atomically); nothing without ``out``."""
    from trtllm_spec.core.files import atomic_dir
    from trtllm_spec.core.provenance import provenance
    from trtllm_spec.measure import write_measure_outputs

    if out is None:
        return
    prov = provenance(args, files, {"settings": profile["settings"], "suite": profile["suite"],
                                    **({"source": profile["source"]} if "source" in profile else {})})
    with atomic_dir(out, force=force, inputs=inputs) as tmp:
        write_measure_outputs(profile, tmp, prov)


def run_engine_report(*, bench_report: Path | None, metrics: str | None, bundle: Path | None,
                      draft_len: int | None, temperature: float, out: Path | None, force: bool) -> dict:
    """``trtllm-spec measure from-bench / from-metrics``: the engine's own acceptance as a
    speculation profile marked with its source, written like a measured one."""
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.core.files import check_output_dir
    from trtllm_spec.measure.engine_reports import profile_from_engine

    if out is not None:
        check_output_dir(out, force, ())
    record = read_bundle(bundle) if bundle is not None else None
    profile, files = profile_from_engine(bench_report=bench_report, metrics=metrics, bundle=record,
                                         draft_len=draft_len, temperature=temperature)
    args = {"measure": {"from_trtllm_bench": str(bench_report) if bench_report else None,
                        "from_trtllm_metrics": metrics, "bundle": str(bundle) if bundle else None,
                        "draft_len": draft_len, "temperature": temperature}}
    write_profile(profile, out, force, args, files, ())
    return profile


def _budget(settings: dict, block_sweep: Sequence[int] | None, engine: str, allow_long: bool) -> None:
    """The estimate-first rule (``data.user_suite.measure_budget``): the suite is selected (cheap) and the work
    printed, and refused above the limit, before any model loads. Every decode counts: the reference decoder runs
    each prompt with the target alone and with speculation, once per swept D; TensorRT-LLM (``measure_trtllm``,
    ``baseline=True``) the same, at the bundle's D."""
    from trtllm_spec.data.user_suite import measure_budget, select_suite

    items, _ = select_suite(settings["suite"], settings["categories"], settings["num_prompts"], settings["seed"])
    runs = 1 + max(1, len(block_sweep or ()))
    what = f"{len(items)} prompts x {runs} decodes: the target alone and speculative"
    measure_budget(len(items) * runs, settings["max_new_tokens"], what, allow_long,
                   settings.get("progress") or print)


def run_measure(target: str, drafter: str | None, draft_len: int | None, *, engine: str, bundle: Path | None,
                out: Path | None, force: bool, block_sweep: Sequence[int] | None, training_data: Path | None = None,
                allow_overlap: bool = False, allow_long: bool = False, request_mode=None, **settings) -> dict:
    """``trtllm-spec measure reference`` / ``measure trtllm``: check the arguments, measure, and write profile, report and provenance to
    ``out`` (atomically). Returns the profile. With your own suite, prompts found in ``training_data`` or the
    packaged train pools are refused (``allow_overlap``: measured with a warning)."""
    from trtllm_spec.core.files import check_output_dir
    from trtllm_spec.data.user_suite import suite_checker

    check_measure_args(engine, drafter, draft_len, bundle, block_sweep)
    if engine != "pytorch" and settings.get("reference_engine", "auto") != "auto":
        raise UserError(f"--reference-engine {settings['reference_engine']}: it picks what runs the target in the "
                        "PyTorch reference decoder ('measure reference')")
    inputs = tuple(Path(p) for p in (target, drafter) if p and Path(p).is_dir())
    check = suite_checker(settings["suite"], training_data, allow_overlap, settings.get("progress") or print)
    if out is not None:
        check_output_dir(out, force, inputs)  # fail before minutes of decoding, not after
    _budget(settings, block_sweep, engine, allow_long)
    profile = measure_profile(target, drafter, draft_len, engine=engine, bundle=bundle, block_sweep=block_sweep,
                              out=out, suite_check=check, request_mode=request_mode, **settings)
    if out is not None:
        target_path = Path(profile["target"]["path"])
        ct = settings.get("chat_template")
        args = {"target": target, "drafter": drafter, "draft_len": draft_len, "engine": engine,
                "bundle": str(bundle) if bundle else None, "suite": settings["suite"],
                "categories": settings["categories"], "num_prompts": settings["num_prompts"],
                "max_new_tokens": settings["max_new_tokens"], "temperature": settings["temperature"],
                "dtype": settings["dtype"], "seed": settings["seed"], "device": settings["device"],
                "reference_engine": settings.get("reference_engine", "auto"),
                "chat_template": str(ct) if ct else None, "block_sweep": block_sweep,
                "training_data": str(training_data) if training_data else None, "allow_overlap": allow_overlap,
                "drafter_options": settings.get("drafter_options"),
                "request_mode": request_mode.as_dict() if request_mode is not None else None}
        write_profile(profile, out, force, {"measure": args}, _input_files(target_path, drafter), inputs)
    return profile


def recipe_settings(ctx: BuildContext) -> dict:
    """The recipe's measure section (and target.chat_template) as ``measure_profile`` arguments: the build's
    measure and trtllm stages measure with the same settings."""
    from trtllm_spec.data.user_suite import recipe_suite

    m = ctx.recipe.measure
    mode = recipe_request_mode(ctx.recipe)
    return dict(suite=recipe_suite(ctx.recipe), categories=m.categories, num_prompts=m.num_prompts, max_new_tokens=m.max_new_tokens,
                temperature=mode.temperature, seed=m.seed, request_mode=mode,
                chat_template=ctx.recipe.resolve_path(ctx.recipe.target.chat_template))


def recipe_request_mode(recipe):
    from trtllm_spec.core.request_mode import recipe_mode

    return recipe_mode(recipe)


def measure_draft_len(ctx: BuildContext) -> int:
    """``measure.draft_len``, else the recipe's D, else the one D the mechanism runs at, else the largest the planner
    considers, capped by what the drafter can propose."""
    only = ctx.mechanism.only_draft_len(ctx.recipe.drafter)
    chosen = ctx.recipe.measure.draft_len
    if chosen is not None:
        if only and chosen != only:
            raise UserError(f"measure.draft_len = {chosen}: a {ctx.recipe.drafter.type} drafter runs at D = {only} "
                            "only (its block size); drop measure.draft_len")
        return chosen
    if isinstance(ctx.recipe.draft_len, int):
        return ctx.recipe.draft_len
    if only:
        return only
    own = ctx.mechanism.max_draft_len(ctx.target.shape, ctx.recipe.drafter)
    top = ctx.recipe.planner.max_draft_len
    return min(own, top) if own else top


def measure(ctx: BuildContext) -> StageResult:
    from trtllm_spec.data.user_suite import is_builtin, recipe_suite_check, suite_fingerprint

    m = ctx.recipe.measure
    if m.profile:
        p = ctx.recipe.resolve_path(m.profile)
        if p is None or not p.is_file():
            raise UserError(f"measure.profile {m.profile} does not exist")
        ctx.profile_path = p
        return StageResult("measure", "skipped", detail=f"recipe supplies {m.profile}")
    spec = ctx.mechanism.measure_spec(ctx.drafter_dir)
    if spec is None or ctx.served_target is None:
        return StageResult("measure", "deferred", detail="needs the target's weights and the drafter",
                           command="trtllm-spec measure trtllm --target <checkpoint> --bundle <bundle> --out <dir> "
                           "(GPU node)")
    draft_len = measure_draft_len(ctx)
    options = ctx.mechanism.runtime_options(ctx.recipe.drafter, ctx.recipe.engine.max_batch_size
                                            or max(ctx.recipe.workload.all_batch_sizes()))
    inputs = {"target": target_hash(ctx.target), "served": str(ctx.served_target.name),
              "drafter": tree_hash(Path(spec)),  # a folder's content hash, else the spec itself
              "draft_len": draft_len, "measure": recipe_to_dict(ctx.recipe)["measure"]}
    if options:  # keyed only when there are some: caches of drafters without options stay valid
        inputs["drafter_options"] = options
    settings = recipe_settings(ctx)
    if settings["request_mode"] != type(settings["request_mode"])(temperature=settings["temperature"]):
        inputs["request_mode"] = settings["request_mode"].as_dict()  # keyed only when set: old caches stay valid
    if not is_builtin(m.suite):  # the user's prompts: keyed by their content, not their path
        inputs["suite"] = suite_fingerprint(settings["suite"])
    chat_template = settings["chat_template"]
    if chat_template is not None:  # target.chat_template was not passed to this stage before
        inputs["chat_template"] = tree_hash(chat_template) if chat_template.is_dir() else str(chat_template)
    result: dict = {}

    def work(folder: Path) -> dict:
        result["profile"] = measure_profile(ctx.served_target, spec, draft_len, dtype=m.dtype, device=m.device,
                                            reference_engine=m.reference_engine, drafter_options=options or None,
                                            progress=lambda msg: ctx.log(f"measure: {msg}"),
                                            suite_check=recipe_suite_check(ctx.recipe, ctx.log), **settings)
        write_json_atomic(folder / "speculation_profile.json", result["profile"])
        return {"draft_len": draft_len}

    folder, _, cached = run_cached(ctx.cache, "measure", inputs, ctx.force, work)
    ctx.profile_path = folder / "speculation_profile.json"
    if cached:
        return StageResult("measure", "cached", detail="speculation profile reused")
    o = result["profile"]["overall"]
    return StageResult("measure", "done", detail=f"AL {o['mean_acceptance_length']:.2f} at D={draft_len}, reference "
                       f"decoder speedup {o['speedup']:.2f}x on this machine")
