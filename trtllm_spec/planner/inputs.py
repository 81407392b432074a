"""Turn a recipe into planner inputs: target shape, hardware, parallelism, precision, acceptance."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.hardware import Hardware, apply_overrides, load_hardware
from trtllm_spec.core.host_costs import (
    HOST_TERMS,
    HostProfile,
    load_host_profile,
    release_host_profile,
    trtllm_host_profile,
    with_host_costs,
)
from trtllm_spec.core.recipe import Recipe
from trtllm_spec.core.targets import ResolvedTarget, resolve_target
from trtllm_spec.errors import UserError
from trtllm_spec.planner.acceptance import AcceptanceModel, load_acceptance
from trtllm_spec.planner.cost import Parallelism, Precision
from trtllm_spec.planner.plan import PlanRequest
from trtllm_spec.planner.search import Workload


@dataclass
class PlanInputs:
    request: PlanRequest
    target: ResolvedTarget
    input_files: list[Path]


def precision_for(recipe: Recipe, target: ResolvedTarget, hw: Hardware) -> Precision:
    method = recipe.quantization.method
    if method != "none":
        weight = method
    elif recipe.target.dtype in ("fp32", "fp16", "bf16"):
        weight = recipe.target.dtype
    else:
        weight = "fp32" if hw.kind == "cpu" and "bf16" not in hw.peak_flops_per_s else target.shape.native_weight_dtype
    if weight in ("fp8",) and "fp8" not in hw.peak_flops_per_s:
        raise UserError(f"quantization fp8 needs fp8 tensor cores; {hw.name} has none "
                        f"({', '.join(hw.peak_flops_per_s)}); choose another GPU or quantization.method: none")
    if weight == "nvfp4" and "fp4" not in hw.peak_flops_per_s:
        raise UserError(f"quantization nvfp4 needs fp4 tensor cores (Blackwell); {hw.name} has none; "
                        "use fp8 or int4_awq")
    kv = recipe.quantization.kv_cache_dtype
    if kv == "auto":
        kv = "fp32" if weight == "fp32" else "bf16"
    act = 4.0 if weight == "fp32" else 2.0
    return Precision(weight=weight, kv=kv, act_bytes=act)


def engine_profile(recipe: Recipe) -> HostProfile:
    """The release profile of the engine the plan prices: ``engine.serving`` (vLLM / SGLang and a version) when
    set, else TensorRT-LLM's ``engine.trtllm_version`` (core/host_costs: fitted, or by the release rule)."""
    work = recipe.planner.work
    if recipe.engine.serving is None:
        return trtllm_host_profile(recipe.trtllm_profile, work)
    return release_host_profile(*recipe.serving_engine, work)


def host_profile_for(recipe: Recipe, hw: Hardware, calibrated: HostProfile | None, files: list[Path],
                     hw_file: Path | None = None) -> HostProfile | None:
    """The host-cost profile to plan with: a calibrated one (``--calibrate`` or ``planner.host_costs``), else the
    release profile of the engine the plan prices (``engine.serving``, else ``engine.trtllm_version``); None for a
    hardware file (``hw probe`` or your own), whose overheads are its own."""
    path = recipe.resolve_path(recipe.planner.host_costs)
    if calibrated is not None and path is not None:
        raise UserError(f"--calibrate and planner.host_costs ({path}) both give host costs; drop one")
    if path is not None:
        calibrated = load_host_profile(path)
        files.append(path)
    if calibrated is not None and recipe.planner.work != "roofline":
        raise UserError(f"planner.work: {recipe.planner.work} with fitted host costs ({calibrated.name!r}): the fit "
                        "priced the GPU work by the roofline; set planner.work: roofline or drop the calibration")
    if calibrated is not None:
        from trtllm_spec.core.host_costs import SERVED_RELEASE

        if calibrated.release == SERVED_RELEASE:  # fitted on another engine's served runs: that engine's costs
            return calibrated
        framework, release = recipe.serving_engine
        if (calibrated.framework, calibrated.release) != (framework, release):
            field = "engine.serving" if recipe.engine.serving is not None else "engine.trtllm_version"
            raise UserError(f"host costs {calibrated.name!r} were fitted on {calibrated.framework} "
                            f"{calibrated.release}; this recipe plans for {framework} {release} ({field}): "
                            "calibrate with reports of that release")
        return calibrated
    return None if hw_file is not None else engine_profile(recipe)


def hardware_with_host_costs(recipe: Recipe, hw: Hardware, profile: HostProfile | None) -> tuple[Hardware, dict]:
    """The profile's terms, then the recipe's ``hardware.overrides`` (which win, except over a calibration); and
    the plan's ``host_costs`` record."""
    overrides = recipe.hardware.overrides
    if profile is not None:
        hw = with_host_costs(hw, profile.overhead_fields())
    overridden = sorted(set(HOST_TERMS) & set((overrides or {}).get("overheads") or {}))
    if overridden and profile is not None and profile.fit is not None:
        raise UserError(f"hardware.overrides.overheads sets {', '.join(overridden)}, which the calibration "
                        f"{profile.name!r} fitted; drop the override or the calibration")
    if overrides:
        hw = apply_overrides(hw, overrides, source=f"hardware.overrides ({recipe.hardware.gpu})")
    record = profile.summary() if profile is not None else {
        "name": f"the hardware file's overheads ({recipe.hardware.gpu}" + (", measured by hw probe)" if hw.probe else ")")}
    record["terms_s"] = {k: getattr(hw.overheads, k) for k in HOST_TERMS}
    if overridden:
        record["overridden_by_recipe"] = overridden
    return hw, record


def interval_inputs(recipe: Recipe, profile: HostProfile | None
                    ) -> tuple[dict[str, float] | None, dict[str, float] | None, dict[str, float] | None]:
    """(each host term's log sd for the speedup interval, the release profile's before a calibration): a
    calibrated profile's from its residuals (refused without them), a release profile's from the release rule, a
    hardware file's None (the planner's fitted-profile default); third, the release profile's terms before a
    calibration."""
    from trtllm_spec.planner.interval import calibrated_log_sd

    if profile is None:
        return None, None, None
    if profile.fit is not None or profile.rule is None:  # a calibration (--calibrate, planner.host_costs)
        release = engine_profile(recipe)
        data = profile.model_dump(mode="json", by_alias=True) | {"prior_uncertainty": release.uncertainty}
        return calibrated_log_sd(data), release.uncertainty, release.overhead_fields()
    return profile.uncertainty, None, None


def interval_abs_inputs(recipe: Recipe, profile: HostProfile | None
                        ) -> tuple[dict[str, float] | None, dict[str, float] | None]:
    """(the absolute sd, seconds, of each term the profile leaves at 0 unmeasured; the release profile's before a
    calibration): a release profile's ``uncertainty_s`` (per-sequence terms no published sweep identified); after a
    calibration, those of its terms the runs did not identify."""
    if profile is None:
        return None, None
    if profile.fit is not None or profile.rule is None:
        release = engine_profile(recipe).uncertainty_s or {}
        identified = " ".join((profile.fit or {}).get("identified") or [])
        left = {k: v for k, v in release.items() if k not in identified and getattr(profile, k) == 0.0}
        return left or None, release or None
    return profile.uncertainty_s, None


def check_mode(path: Path, recipe: Recipe) -> None:
    """A speculation profile measured in another request mode than ``workload.request_mode`` is refused (one line
    naming both modes); a bare acceptance file records no mode and is not checked."""
    import json

    from trtllm_spec.core.request_mode import check_profile_mode

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return  # load_acceptance read it (YAML too); a file without JSON settings records no mode
    check_profile_mode(data, recipe, f"acceptance profile {path}")


def graph_batch_sizes(recipe: Recipe, hw: Hardware) -> tuple[int, ...]:
    """The batch sizes the bundle captures CUDA graphs for (deploy/trtllm_options._cuda_graph_config: the planned
    batch sizes and max_batch_size, padding on); none on a CPU or with engine.cuda_graphs off."""
    if hw.kind != "gpu" or not recipe.engine.cuda_graphs:
        return ()
    sizes = set(recipe.workload.all_batch_sizes())
    if recipe.engine.max_batch_size:
        sizes = {b for b in sizes if b <= recipe.engine.max_batch_size} | {recipe.engine.max_batch_size}
    return tuple(sorted(sizes))


def silicon_work(recipe: Recipe, target: ResolvedTarget, hw: Hardware, precision: Precision, hw_file: Path | None,
                 target_steps: Callable | None) -> tuple[dict | None, dict | None]:
    """planner.work: aiconfigurator -> (batch, D) -> the target's pass from AIConfigurator's kernel tables, and what
    priced it (``target_steps``: trtllm_spec/silicon/aic.target_steps, passed in by the stage, which imports it only
    then); roofline -> (None, None)."""
    if recipe.planner.work == "roofline":
        return None, None
    if hw_file is not None:
        raise UserError(f"planner.work: aiconfigurator prices the GPUs of its tables, not a hardware file "
                        f"({hw_file}); give hardware.gpu by name or set planner.work: roofline")
    if target_steps is None:
        raise UserError("planner.work: aiconfigurator is priced by 'trtllm-spec plan' and the build's plan stage; "
                        "this command plans with planner.work: roofline only")
    from trtllm_spec.planner.search import CostContext, max_feasible_batch

    h, w = recipe.hardware, recipe.workload
    # the batch sizes the plan prices: the planned ones and the powers of two up to the memory capacity (where
    # speculation stops paying, planner/limits.py)
    ctx = CostContext(target.shape, hw, Parallelism(h.tp, h.pp, h.ep), precision,
                      Workload(tuple(w.all_batch_sizes()), w.isl, w.osl), recipe.engine.free_gpu_memory_fraction)
    cap = max_feasible_batch(ctx, None, 0)
    batches = tuple(sorted(set(w.all_batch_sizes()) | {1 << i for i in range(20) if (1 << i) <= cap}))
    return target_steps(target.config, hw.name, recipe.serving_engine[0], precision.weight, precision.kv, h.tp, h.pp,
                        h.ep, w.isl, w.osl, batches, recipe.planner.max_draft_len, target.shape.num_layers,
                        target.shape.moe is not None)


def plan_inputs(recipe: Recipe, category: str | None = None, *, mechanisms: Mapping,
                host_profile: HostProfile | None = None, interval_level: float | None = None,
                target_steps: Callable | None = None) -> PlanInputs:
    """``mechanisms``: the drafter registry (``trtllm_spec.drafters.registry.MECHANISMS``), passed in;
    ``target_steps``: AIConfigurator's pricing of the target's pass (``trtllm_spec.silicon.aic.target_steps``),
    passed in where ``planner.work: aiconfigurator`` may be planned;
    ``host_profile``: host costs fitted by ``plan --calibrate`` (else the recipe's / the release's);
    ``interval_level``: the speedup interval's coverage (``plan --interval-level``, default 0.8)."""
    from trtllm_spec.planner.interval import DEFAULT_LEVEL, check_level

    level = check_level(interval_level) if interval_level is not None else DEFAULT_LEVEL
    files: list[Path] = []
    target = resolve_target(recipe.target.model, recipe.base_dir)
    if target.path is not None:
        files.append(target.path / "config.json" if target.path.is_dir() else target.path)
    gpu = recipe.hardware.gpu
    gpu_path = recipe.resolve_path(gpu)
    if gpu_path is not None and (gpu_path.suffix.lower() in (".json", ".yaml", ".yml") or gpu_path.is_file()):
        files.append(gpu_path)
        hw = load_hardware(gpu_path)
    else:
        gpu_path = None
        hw = load_hardware(gpu)
    profile = host_profile_for(recipe, hw, host_profile, files, gpu_path)
    host_sd, prior_sd, prior_terms = interval_inputs(recipe, profile)
    host_sd_s, prior_sd_s = interval_abs_inputs(recipe, profile)
    hw, host_record = hardware_with_host_costs(recipe, hw, profile)
    acceptance: AcceptanceModel | None = None
    acc_path = recipe.resolve_path(recipe.planner.acceptance)
    if acc_path is not None:
        acceptance = load_acceptance(acc_path, category)
        check_mode(acc_path, recipe)
        files.append(acc_path)
    compared: dict[str, AcceptanceModel] = {}
    for name, file in sorted(recipe.planner.compare_acceptance.items()):  # guideline 5's other mechanisms, measured
        path = recipe.resolve_path(file)
        compared[name] = load_acceptance(path, category)
        check_mode(path, recipe)
        files.append(path)
    h = recipe.hardware
    if h.tp > 1 and hw.interconnect_bytes_per_s <= 0:
        raise UserError(f"hardware.tp = {h.tp} needs an interconnect; {hw.name} has none; set hardware.tp: 1")
    precision = precision_for(recipe, target, hw)
    target_work, work_source = silicon_work(recipe, target, hw, precision, gpu_path, target_steps)
    req = PlanRequest(
        target=target.shape, hardware=hw, drafter=recipe.drafter,
        workload=Workload(tuple(recipe.workload.all_batch_sizes()), recipe.workload.isl, recipe.workload.osl),
        par=Parallelism(h.tp, h.pp, h.ep), num_gpus=h.num_gpus, precision=precision,
        acceptance=acceptance, max_draft_len=recipe.planner.max_draft_len,
        fixed_draft_len=recipe.draft_len if isinstance(recipe.draft_len, int) else None,
        compare=recipe.planner.compare_mechanisms,
        free_gpu_memory_fraction=recipe.engine.free_gpu_memory_fraction,
        trtllm_profile=recipe.trtllm_profile, max_batch_size=recipe.engine.max_batch_size,
        latency_target_ms=recipe.workload.latency_target_ms, target_id=target.hf_id or recipe.target.model,
        mechanisms=mechanisms, host_costs=host_record, compare_acceptance=compared,
        interval_level=level, host_log_sd=host_sd, prior_host_log_sd=prior_sd, prior_host_costs=prior_terms,
        host_sd_s=host_sd_s, prior_host_sd_s=prior_sd_s, target_work=target_work, work_source=work_source,
        graph_batch_sizes=graph_batch_sizes(recipe, hw),
    )
    return PlanInputs(req, target, files)
