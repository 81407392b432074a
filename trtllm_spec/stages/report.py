"""Stage 8, report: the overhead report (markdown + json), the plan's files and the measured profile's."""

from __future__ import annotations

import json

from trtllm_spec.core.bundle import MEASURED_DIR, OVERHEAD_JSON, OVERHEAD_MD, REPORT_DIR
from trtllm_spec.core.files import write_text_atomic
from trtllm_spec.stages.context import BuildContext, StageResult, write_json


def report(ctx: BuildContext) -> StageResult:
    from trtllm_spec.core.trtllm_gates import gate_reasons
    from trtllm_spec.report.overhead import overhead_json, overhead_markdown
    from trtllm_spec.stages.bundle import ALT_OPTIONS_FILE
    from trtllm_spec.stages.plan import write_plan_files

    rep = ctx.bundle / REPORT_DIR
    rep.mkdir(parents=True, exist_ok=True)
    write_plan_files(ctx.plan, rep)
    profile = json.loads(ctx.profile_path.read_text()) if ctx.profile_path else None
    if ctx.profile_path:
        from trtllm_spec.measure import write_measure_outputs

        measured = ctx.bundle / MEASURED_DIR
        measured.mkdir(exist_ok=True)
        write_measure_outputs(profile, measured)
    stages = [s.as_dict() for s in ctx.results]
    plan = ctx.plan.to_json()
    data = overhead_json(plan, profile, stages)
    data["recommendation"]["speculation_gates"] = gate_reasons(ctx.options, ctx.recipe.trtllm_profile)
    if (ctx.bundle / ALT_OPTIONS_FILE).is_file():
        data["recommendation"]["speculative_alternative"] = {"options": ALT_OPTIONS_FILE,
                                                             "bench": "bench_speculative.sh"}
    write_json(ctx.bundle / OVERHEAD_JSON, data)
    write_text_atomic(ctx.bundle / OVERHEAD_MD, overhead_markdown(data, plan))
    return StageResult("report", "done", detail="report/overhead.md, overhead.json, plan.*, plots")
