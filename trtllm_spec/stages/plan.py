"""Stage 5, plan: recipe (+ the measured profile) -> plan.json, plan.md, plots and provenance, written
atomically. ``trtllm-spec plan`` (``run_plan``) and ``build`` (``plan``) both call ``compute_plan``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.artifacts import Plan
from trtllm_spec.core.bundle import PLAN_FILE
from trtllm_spec.core.files import atomic_dir, write_json_atomic, write_text_atomic
from trtllm_spec.core.provenance import provenance
from trtllm_spec.core.recipe import Recipe
from trtllm_spec.core.recipe_load import recipe_from_dict, recipe_to_dict
from trtllm_spec.stages.context import BuildContext, StageResult


@dataclass
class PlanResult:
    plan: Plan
    out: Path | None
    host_costs: object | None = None  # the HostProfile fitted by --calibrate


def compute_plan(recipe: Recipe, category: str | None = None, host_profile=None,
                 interval_level: float | None = None) -> tuple[Plan, list[Path]]:
    """``host_profile``: host costs fitted by ``--calibrate`` (core/host_costs.HostProfile), else the recipe's;
    ``interval_level``: the coverage of the speedup intervals (default 0.8)."""
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import make_plan

    steps = None
    if recipe.planner.work == "aiconfigurator":  # AIConfigurator's kernel tables (its own venv): imported only then
        from trtllm_spec.silicon.aic import target_steps as steps
    inputs = plan_inputs(recipe, category, mechanisms=MECHANISMS, host_profile=host_profile,
                         interval_level=interval_level, target_steps=steps)
    return Plan.from_json(make_plan(inputs.request)), inputs.input_files


def run_plan(recipe: Recipe, out: Path | None, force: bool = False, category: str | None = None,
             calibrate: list[Path] | None = None, interval_level: float | None = None) -> PlanResult:
    """``calibrate``: trtllm-bench reports (a plain and a speculative run) to fit the host costs from first."""
    if interval_level is not None:  # refused before anything runs
        from trtllm_spec.planner.interval import check_level

        check_level(interval_level)
    host = None
    if calibrate:
        from trtllm_spec.stages.calibrate import calibrate_host_costs

        host = calibrate_host_costs(recipe, calibrate)
    plan, files = compute_plan(recipe, category, host, interval_level)
    if out is None:
        return PlanResult(plan, None, host)
    with atomic_dir(out, force=force) as tmp:
        write_plan_files(plan, tmp)
        if host is not None:
            from trtllm_spec.stages.calibrate import write_host_costs

            write_host_costs(host, tmp)
        write_json_atomic(tmp / "provenance.json", provenance(recipe_to_dict(recipe), files + list(calibrate or [])))
    return PlanResult(plan, out, host)


def write_plan_files(plan: Plan, folder: Path) -> None:
    from trtllm_spec.report.plan_report import render_markdown, write_plots

    data = plan.to_json()
    write_json_atomic(folder / PLAN_FILE, data)
    write_text_atomic(folder / "plan.md", render_markdown(data))
    write_plots(data, folder)


def plan(ctx: BuildContext) -> StageResult:
    """The build's plan stage: the recipe, with the measured profile as its acceptance when there is one."""
    recipe = ctx.recipe
    if ctx.profile_path is not None:
        data = recipe_to_dict(recipe)
        data["planner"]["acceptance"] = str(ctx.profile_path)
        recipe = recipe_from_dict(data)
        recipe._base_dir = ctx.recipe.base_dir
    ctx.plan, _ = compute_plan(recipe)
    rec = ctx.plan.recommendation
    src = "measured" if ctx.profile_path else "assumed"
    gate = f", max_concurrency {rec.max_concurrency}" if rec.max_concurrency else ""
    return StageResult("plan", "done", detail=f"max_draft_len {rec.max_draft_len}, schedule "
                       f"{rec.draft_len_schedule}{gate} ({src} acceptance)")
