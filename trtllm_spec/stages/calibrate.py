"""``plan --calibrate`` / ``replan --calibrate``: host costs fitted from the engine's own trtllm-bench reports.

Table of contents: what the reports must match (``recipe_expectation`` / ``bundle_expectation``), the reports as
step times (measure/calibration.py), the fit (planner/calibrate.py), the fitted profile with its provenance
(core/host_costs.HostProfile, written as ``host_costs.json``).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import get_args

from trtllm_spec.core.artifacts import SERVED_FILE
from trtllm_spec.core.bundle import (
    CALIBRATE_MAIN_OPTIONS_FILE,
    CALIBRATE_OPTIONS_FILE,
    CALIBRATE_RESULTS,
    OPTIONS_FILE,
    PLAIN_OPTIONS_FILE,
    SPECULATIVE_OPTIONS_FILE,
    TARGET_DIR,
    Bundle,
)
from trtllm_spec.core.host_costs import SERVED_RELEASE, Framework, HostProfile
from trtllm_spec.core.recipe import Recipe
from trtllm_spec.errors import UserError
from trtllm_spec.measure.calibration import RunExpectation, RunOptions, options_of, read_measurements

HOST_COSTS_FILE = "host_costs.json"


def _model_ids(recipe: Recipe, target_id: str, *extra: str) -> tuple[str, ...]:
    ids = [recipe.target.hf_id, recipe.target.model, Path(recipe.target.model).name, target_id, *extra]
    return tuple(dict.fromkeys(i for i in ids if i))


def _identity(recipe: Recipe):
    """What the recipe's target resolves to (a checkpoint's config hash, or a preset): served runs are compared on
    it (measure/served_calibration.same_target)."""
    from trtllm_spec.core.targets import target_identity

    return target_identity(recipe.target.model, base_dir=recipe.base_dir)


def recipe_expectation(recipe: Recipe, target_id: str, where: str) -> RunExpectation:
    """Without a bundle: the runs must match the recipe's model, GPU count and the engine settings a bundle of it
    writes (max_batch_size, free_gpu_memory_fraction); any D."""
    batch = recipe.engine.max_batch_size or max(recipe.workload.all_batch_sizes())
    opts = RunOptions("the recipe's engine settings", batch, recipe.engine.free_gpu_memory_fraction)
    return RunExpectation(where, _model_ids(recipe, target_id), recipe.hardware.tp * recipe.hardware.pp,
                          recipe.trtllm_profile, recipe.drafter.type, opts, opts, identity=_identity(recipe))


def bundle_expectation(bundle: Bundle, recipe: Recipe, target_id: str) -> RunExpectation:
    """A bundle's runs: the plain one with its plain options (llm_api_options.yaml without speculation, or
    llm_api_options.plain.yaml beside a speculative one), the speculative ones with its speculative options (and,
    for a chain drafter, llm_api_options.calibrate.yaml: the same at a second D, which separates the per-iteration
    and per-draft-step terms). The release and drafter are the bundle's own (its manifest)."""

    def load(name: str) -> dict:
        if name not in bundle.options:
            raise UserError(f"bundle {bundle.path} has no {name}; rebuild it with this trtllm-spec ('trtllm-spec build')")
        return bundle.options[name]

    main = load(OPTIONS_FILE)
    if main.get("speculative_config"):
        spec, plain = options_of(OPTIONS_FILE, main), options_of(PLAIN_OPTIONS_FILE, load(PLAIN_OPTIONS_FILE))
    else:
        spec, plain = options_of(SPECULATIVE_OPTIONS_FILE, load(SPECULATIVE_OPTIONS_FILE)), options_of(
            OPTIONS_FILE, main)
    others = tuple(options_of(name, load(name), CALIBRATE_RESULTS[name])
                   for name in (CALIBRATE_OPTIONS_FILE, CALIBRATE_MAIN_OPTIONS_FILE) if name in bundle.options)
    extra = (TARGET_DIR,) if (bundle.path / TARGET_DIR).is_dir() else ()
    built = str((bundle.recipe.get("target") or {}).get("model") or "")  # the name it was built from
    return RunExpectation(f"bundle {bundle.path}", _model_ids(recipe, target_id, *extra, built, Path(built).name),
                          recipe.hardware.tp * recipe.hardware.pp, bundle.profile, bundle.drafter,
                          plain, spec, others, identity=_identity(recipe))


def calibrate_host_costs(recipe: Recipe, reports: list[Path], bundle: Bundle | None = None) -> HostProfile:
    """Fit iteration_s, spec_iteration_s and draft_step_s to the reports' TPOTs (which must belong to ``bundle``,
    else to the recipe); the result, with provenance."""
    from trtllm_spec import __version__
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.measure.served_calibration import read_served_measurements, served_file
    from trtllm_spec.planner.calibrate import TERMS, DesignError, fit_host_costs
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import plan_context

    if recipe.planner.work != "roofline":
        raise UserError(f"--calibrate fits the host terms beside the roofline's work; planner.work is "
                        f"{recipe.planner.work!r}: set planner.work: roofline to calibrate")
    req = plan_inputs(recipe, mechanisms=MECHANISMS).request  # the prior: the release's profile
    exp = (bundle_expectation(bundle, recipe, req.target_id) if bundle is not None else
           recipe_expectation(recipe, req.target_id, f"recipe {recipe.name!r}"))
    served = [served_file(p) is not None for p in reports]
    engine, release = "TensorRT-LLM", recipe.trtllm_profile
    if any(served):
        if not all(served):
            from trtllm_spec.measure.calibration import read_run_report

            bad = next(p for p, s in zip(reports, served, strict=True) if not s)
            if Path(bad).is_dir():
                raise UserError(f"--calibrate {bad}: the folder holds no {SERVED_FILE} ('trtllm-spec measure served "
                                "... --out DIR' writes one); give the --out folders of 'measure served'")
            read_run_report(bad)  # a file that is no report at all says so (unreadable JSON: where it breaks)
            raise UserError(f"--calibrate {bad}: a trtllm-bench report, beside served measurements; give one "
                            "kind: 'measure served' files of one engine, or trtllm-bench reports")
        measurements, files, engine = read_served_measurements(reports, exp.model_ids, exp.drafter_type, exp.where,
                                                               exp.identity)
        release = SERVED_RELEASE
    else:
        measurements, files = read_measurements(reports, exp)
    ctx = plan_context(req)
    cost = req.mechanism(req.drafter.type).cost(req.target, req.drafter)
    prior = {k: getattr(req.hardware.overheads, k) for k in TERMS}
    try:
        fit = fit_host_costs(ctx, cost, measurements, prior)
    except DesignError as exc:
        raise UserError(f"--calibrate: {exc}") from None
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if release == SERVED_RELEASE:
        versions = [f"served runs ({len(files)} files)"]
        name = (f"calibrated: {engine} served runs on {req.hardware.name} (the plan predicts {engine}'s step "
                "times, not TensorRT-LLM's)")
    else:
        versions = sorted({str(f["trtllm_version"]) for f in files})
        machines = sorted({str(f["machine"]) for f in files if f["machine"]}) or ["an unnamed GPU"]
        name = f"calibrated: TensorRT-LLM {', '.join(versions)} on {', '.join(machines)}"
    return HostProfile(
        name=name, framework=engine if engine in get_args(Framework) else "an OpenAI-compatible server",
        release=release, **fit.terms, moe_layer_units=req.hardware.overheads.moe_layer_units,
        per_expert_s=req.hardware.overheads.per_expert_s, overlap_hides=req.hardware.overheads.overlap_hides,
        overlap_with_speculation=req.hardware.overheads.overlap_with_speculation,
        measured_release=", ".join(versions),
        fitted_on=[f"{r['source']} (B = {r['batch_size']}, D = {r['draft_len']}, AL {r['acceptance_length']:.3f}, "
                   f"TPOT {r['measured_tpot_s'] * 1e3:.3f} ms)" for r in fit.rows],
        fitted=f"{now}, trtllm-spec {__version__} {'replan' if bundle else 'plan'} --calibrate (least squares, "
               "terms >= 0)",
        note=fit.split_note or "",
        fit={"prior": (req.host_costs or {}).get("name"), "prior_terms_s": prior, "identified": fit.identified,
             "measurements": fit.rows, "files": files, "target": req.target_id, "gpu": req.hardware.name})


def speculative_report(reports: list[Path]) -> Path | None:
    """The first report of a speculative run (it has decoding_stats): the acceptance source when none is given."""
    from trtllm_spec.measure.calibration import read_run_report
    from trtllm_spec.measure.served_calibration import served_file

    return next((p for p in reports if served_file(p) is None and "decoding_stats" in read_run_report(p)), None)


def fit_markdown(profile: HostProfile) -> list[str]:
    """replan.md's host-cost section: fitted terms and measured vs modelled TPOT before and after."""
    from trtllm_spec.planner.step import TERM_TEXT

    t = profile.terms()
    lines = ["## Host costs fitted from the reports", "",
             ", ".join(f"{t[k] * 1e3:.3f} ms {TERM_TEXT[k]}" for k in t)
             + f" (prior: {profile.fit['prior']}; identified: {', '.join(profile.fit.get('identified') or [])}); in "
             f"`{HOST_COSTS_FILE}`.", "",
             "| report | batch | D | AL | measured TPOT ms | prior model ms | fitted model ms |", "|---|---|---|---|---|---|---|"]
    for r in profile.fit["measurements"]:
        lines.append(f"| `{Path(r['source']).name}` | {r['batch_size']} | {r['draft_len']} | "
                     f"{r['acceptance_length']:.3f} | {r['measured_tpot_s'] * 1e3:.3f} | {r['prior_tpot_s'] * 1e3:.3f} | "
                     f"{r['fitted_tpot_s'] * 1e3:.3f} |")
    return lines + ([""] + [profile.note] if profile.note else []) + [""]


def write_host_costs(profile: HostProfile, folder: Path) -> Path:
    from trtllm_spec.core.files import write_json_atomic

    path = folder / HOST_COSTS_FILE
    write_json_atomic(path, profile.model_dump(mode="json", by_alias=True, exclude_none=True))
    return path
