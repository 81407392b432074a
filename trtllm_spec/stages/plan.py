"""The plan stage: recipe -> plan.json, plan.md, plots and provenance, written atomically."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.files import atomic_dir, write_json_atomic, write_text_atomic
from trtllm_spec.core.provenance import provenance
from trtllm_spec.core.recipe import Recipe, recipe_to_dict


@dataclass
class PlanResult:
    plan: dict
    out: Path | None


def compute_plan(recipe: Recipe, category: str | None = None) -> tuple[dict, list[Path]]:
    from trtllm_spec.planner.inputs import plan_inputs
    from trtllm_spec.planner.plan import make_plan

    inputs = plan_inputs(recipe, category)
    return make_plan(inputs.request), inputs.input_files


def run_plan(recipe: Recipe, out: Path | None, force: bool = False, category: str | None = None) -> PlanResult:
    plan, files = compute_plan(recipe, category)
    if out is None:
        return PlanResult(plan, None)
    with atomic_dir(out, force=force) as tmp:
        write_plan_files(plan, tmp)
        write_json_atomic(tmp / "provenance.json", provenance(recipe_to_dict(recipe), files))
    return PlanResult(plan, out)


def write_plan_files(plan: dict, folder: Path) -> None:
    from trtllm_spec.report.plan_report import render_markdown, write_plots

    write_json_atomic(folder / "plan.json", plan)
    write_text_atomic(folder / "plan.md", render_markdown(plan))
    write_plots(plan, folder)
