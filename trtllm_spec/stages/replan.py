"""``trtllm-spec replan`` (what a bundle's ``replan.sh`` runs): the engine's own acceptance -> a new plan and options.

Reads the bundle's ``llm_api_options.yaml`` and ``recipe.resolved.yaml``, turns a trtllm-bench report (or
trtllm-serve iteration stats) into a speculation profile (engine_reports.py), plans again with it, and writes a
new options file in which only what the plan decides changes (``max_draft_len``, ``draft_len_schedule`` /
``max_concurrency``, the CUDA-graph sizes the schedule needs), plus a unified diff against the bundle's file.
Everything goes to a new folder (default ``<bundle>/replan``); the bundle's own files are never written.

The engine reports AL at the D it ran only, so the new plan holds AL flat above that D and interpolates below
it (planner/acceptance.py): a replan can keep or lower D, never raise it past what was measured.
"""

from __future__ import annotations

import copy
import difflib
import json
from pathlib import Path

from trtllm_spec.core.bundle import OPTIONS_FILE, PROFILE_FILE, RECIPE_FILE, Bundle
from trtllm_spec.errors import UserError


def _bundle_recipe(bundle: Bundle, acceptance: Path, calibrating: bool = False):
    """The bundle's resolved recipe, planned with ``acceptance`` (and, when calibrating, without the host costs it
    was planned with), serving the target copied into the bundle where there is one."""
    import copy

    from trtllm_spec.core.recipe_load import recipe_from_dict

    data = copy.deepcopy(bundle.recipe)
    # the release the bundle was built for (its manifest), whatever 'auto' resolves to in this trtllm-spec
    data.setdefault("engine", {})["trtllm_version"] = bundle.profile
    if bundle.target_dir is not None:  # the target the bundle serves, copied into it
        data.setdefault("target", {})["model"] = str(bundle.target_dir.resolve())
    data.setdefault("planner", {})["acceptance"] = str(acceptance)
    if calibrating:  # the reports' host costs replace whatever the bundle was planned with
        data["planner"]["host_costs"] = None
    recipe = recipe_from_dict(data, str(bundle.path / RECIPE_FILE))
    recipe._base_dir = bundle.path.resolve()
    return recipe


def replanned_options(old: dict, rec: dict, profile: str) -> tuple[dict, list[str]]:
    """The bundle's options with the new plan's D and schedule (and nothing else changed), and notes."""
    from trtllm_spec.core.trtllm_gates import cutoff_gate
    from trtllm_spec.deploy.trtllm_options import _cuda_graph_config
    from trtllm_spec.deploy.trtllm_schema import validate_options

    new, notes = copy.deepcopy(old), []
    d = int(rec["max_draft_len"])
    schedule = {int(k): int(v) for k, v in (rec.get("draft_len_schedule") or {}).items()} or None
    if d == 0:
        new.pop("speculative_config", None)
        notes.append("with the engine's acceptance the plan predicts no speedup at any planned batch size: the new "
                     "options serve the target alone (speculative_config removed)")
    else:
        spec = new["speculative_config"]
        if "num_nextn_predict_layers" in spec:  # MTP on 1.2: the layer count sets D
            spec["num_nextn_predict_layers"] = d
        else:
            spec["max_draft_len"] = d
        spec.pop("draft_len_schedule", None)
        spec.pop("max_concurrency", None)
        schedule, gates, reason = cutoff_gate(schedule, d, profile)
        spec.update(gates)
        if reason:
            notes.append(reason)
        if rec.get("max_concurrency"):  # a one-D mechanism (DSpark): the plan's own cut-off, no schedule
            spec["max_concurrency"] = int(rec["max_concurrency"])
            notes.append(rec.get("draft_len_rule") or f"max_concurrency: {rec['max_concurrency']}")
        if schedule:
            spec["draft_len_schedule"] = dict(sorted(schedule.items()))
    graphs = new.get("cuda_graph_config")
    if isinstance(graphs, dict) and graphs.get("batch_sizes"):
        new["cuda_graph_config"] = _cuda_graph_config(graphs["batch_sizes"], schedule if d else None,
                                                      new.get("max_batch_size"), profile)
    validate_options(new, profile)
    return new, notes


def _diff(old_text: str, new_text: str, old_name: str, new_name: str) -> str:
    lines = list(difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                      fromfile=old_name, tofile=new_name))
    return "".join(lines) if lines else "# no change: the engine's acceptance leads to the same options\n"


def _sched(rec: dict) -> str:
    s = rec.get("draft_len_schedule")
    return f"max_draft_len {rec['max_draft_len']}" + (f", draft_len_schedule {s}" if s else "")


def summary_markdown(prof: dict, old_plan: dict | None, new_plan: dict, notes: list[str], diff_name: str) -> str:
    ov, src = prof["overall"], prof["source"]
    new = new_plan["recommendation"]
    lines = ["# Re-plan from the engine's own acceptance", "",
             f"- source: {src['kind']} `{src.get('file') or src.get('url')}`"
             + (f" (TensorRT-LLM {src['trtllm_version']})" if src.get("trtllm_version") else ""),
             f"- measured by the engine: AL **{ov['mean_acceptance_length']:.3f}** at D = {prof['drafter']['draft_len']}"
             f" over {ov['num_prompts']} requests"
             + (f", draft acceptance rate {ov['draft_acceptance_rate']:.3f}" if ov.get("draft_acceptance_rate") else "")]
    if old_plan is not None:
        old = old_plan["recommendation"]
        old_al = {r["batch_size"]: r["acceptance_length"] for r in old["by_batch"]}
        lines.append(f"- the bundle was planned with {old_plan['drafter']['acceptance'].get('source')}: "
                     f"{_sched(old)}")
        lines += ["", "| batch | planned D | planned AL | planned speedup | new D | new AL | new speedup |",
                  "|---|---|---|---|---|---|---|"]
        old_by = {r["batch_size"]: r for r in old["by_batch"]}
        for r in new["by_batch"]:
            o = old_by.get(r["batch_size"], {})
            lines.append(f"| {r['batch_size']} | {o.get('draft_len', '-')} | "
                         f"{old_al.get(r['batch_size'], float('nan')):.2f} | {o.get('speedup', float('nan')):.2f}x | "
                         f"{r['draft_len']} | {r['acceptance_length']:.2f} | {r['speedup']:.2f}x |")
    lines += ["", f"**New:** {_sched(new)}" if new["max_draft_len"] else "**New:** no speculation", ""]
    lines += [f"- {n}" for n in notes]
    lines += ["", f"Options: `llm_api_options.yaml` here, changes in `{diff_name}`; plan in `plan/`, the engine's "
              "profile in `measured/`. The bundle's own files are unchanged: to adopt the new options, copy "
              "`llm_api_options.yaml` over the bundle's (and into triton/*/1/model.yaml) and run bench.sh again.",
              "", "The engine reports AL at the D it ran only: the plan holds AL flat above it, so D can only stay or "
              "go down here; to try a larger D, bench a bundle built with it.", ""]
    return "\n".join(lines)


def check_replan_inputs(bundle: Path) -> Bundle:
    """The inputs of a replan belong together before anything is read: the bundle matches its manifest (an edited
    options file, a corrupted report/plan.json or manifest, an extra or linked file: refused, naming the first
    difference), and its manifest and files agree on the release and drafter. That the engine's report measured
    this bundle (its model and mechanism) is checked where the report is read
    (``measure.engine_reports.check_report_belongs``)."""
    from trtllm_spec.core.bundle import read_bundle

    return read_bundle(bundle)


def replan(bundle: Path, *, bench_report: Path | None, metrics: str | None, draft_len: int | None,
           out: Path | None, force: bool, temperature: float = 0.0, calibrate: list[Path] | None = None) -> dict:
    """Write ``out`` (default ``bundle/replan``); returns {profile, plan, options, notes, out, host_costs}.
    ``calibrate``: trtllm-bench reports (a plain and a speculative run of this bundle) to fit the host costs to."""
    from trtllm_spec.core.artifacts import Plan
    from trtllm_spec.core.files import atomic_dir, read_text, write_text_atomic
    from trtllm_spec.core.provenance import provenance
    from trtllm_spec.deploy.trtllm_options import render_yaml
    from trtllm_spec.measure import write_measure_outputs
    from trtllm_spec.measure.engine_reports import profile_from_engine
    from trtllm_spec.stages.plan import compute_plan, write_plan_files

    if not bundle.is_dir():
        raise UserError(f"--bundle {bundle} is not a folder; give the output folder of 'trtllm-spec build'")
    record = check_replan_inputs(bundle)
    out = out if out is not None else bundle / "replan"
    if out.resolve() == bundle.resolve() or (out.resolve() in bundle.resolve().parents):
        raise UserError(f"--out {out} would replace the bundle {bundle}; the re-plan goes to a new folder "
                        "(default <bundle>/replan)")
    if calibrate and bench_report is None and metrics is None:
        from trtllm_spec.stages.calibrate import speculative_report

        bench_report = speculative_report(calibrate)  # the acceptance comes from the speculative run
    prof, files = profile_from_engine(bench_report=bench_report, metrics=metrics, bundle=record, draft_len=draft_len,
                                      temperature=temperature)
    old_options, profile = record.speculative_options(absolute_paths=True), record.profile
    old_plan = record.plan()
    with atomic_dir(out, force=force) as tmp:
        measured = tmp / "measured"
        measured.mkdir()
        write_measure_outputs(prof, measured, provenance({"replan": {"bundle": str(bundle)}}, files,
                                                         {"source": prof["source"]}))
        final_profile = out / "measured" / PROFILE_FILE
        host = _calibrated(record, calibrate, measured / PROFILE_FILE)
        recipe = _bundle_recipe(record, measured / PROFILE_FILE, calibrating=host is not None)
        typed, _ = compute_plan(recipe, host_profile=host)
        plan = json.loads(json.dumps(typed.to_json()).replace(str(measured / PROFILE_FILE), str(final_profile)))
        (tmp / "plan").mkdir()
        write_plan_files(Plan.from_json(plan), tmp / "plan")
        options, notes = replanned_options(old_options, plan["recommendation"], profile)
        new_text = render_yaml(options, profile=profile)
        old_text = read_text(record.path / OPTIONS_FILE, "bundle options", UserError)
        write_text_atomic(tmp / OPTIONS_FILE, new_text)
        diff_name = "llm_api_options.diff"
        write_text_atomic(tmp / diff_name, _diff(old_text, new_text, f"{bundle.resolve().name}/{OPTIONS_FILE}",
                                                 f"{out.name}/{OPTIONS_FILE}"))
        md = summary_markdown(prof, old_plan, plan, notes, diff_name)
        if host is not None:
            from trtllm_spec.stages.calibrate import fit_markdown, write_host_costs

            write_host_costs(host, tmp)
            md += "\n".join(fit_markdown(host))
        write_text_atomic(tmp / "replan.md", md)
    return {"profile": prof, "plan": plan, "options": options, "notes": notes, "out": out, "host_costs": host}


def _calibrated(bundle: Bundle, reports: list[Path] | None, acceptance: Path):
    """The host costs fitted to the bundle's plain and speculative reports (None without reports)."""
    if not reports:
        return None
    from trtllm_spec.stages.calibrate import calibrate_host_costs

    recipe = _bundle_recipe(bundle, acceptance, calibrating=True)
    return calibrate_host_costs(recipe, reports, bundle=bundle)
