"""What a calibrated plan says about its speedup intervals matches its numbers (issue 55 item 5): a calibrated plan
printed "speedup intervals narrowed from 93% to 215%" where they widened (``narrowed_by`` -1.31 in plan.json).
The wording is tested both ways, on the CLI line and in plan.md, with the widths of that plan planted into the
planner's result (what the fit makes of the runs is planner/interval.py's business, tested in test_interval.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests import calibration_fakes as fakes
from tests.unit.test_served_calibration import served
from trtllm_spec.report.host_costs import interval_change, uncertainty_markdown


@pytest.mark.parametrize("before, after, verb, by", [
    (0.6309, 0.1161, "narrowed", "82% narrower"),
    (0.93, 2.15, "widened", "131% wider"),
    (0.40, 0.401, "unchanged", ""),
])
def test_the_change_is_named_by_its_numbers(before, after, verb, by):
    change = interval_change({"median_relative_width_before": before, "median_relative_width_after": after})
    assert change["verb"] == verb and change["by"] == by
    assert bool(change["why"]) is (verb == "widened")  # a widening says where to look
    assert interval_change({"median_relative_width_before": None, "median_relative_width_after": after}) is None


def _plan_with(monkeypatch, before: float, after: float) -> None:
    """The planner's result with the median interval widths of the calibration planted (a FAKE result: the rest of
    the plan is the real one)."""
    import trtllm_spec.stages.plan as stage
    from trtllm_spec.core.artifacts import Plan

    real = stage.compute_plan

    def planted(*a, **kw):
        plan, files = real(*a, **kw)
        data = plan.to_json()
        data["uncertainty"]["calibration"].update(median_relative_width_before=before,
                                                  median_relative_width_after=after,
                                                  narrowed_by=round(1 - after / before, 4))
        return Plan.from_json(data), files

    monkeypatch.setattr(stage, "compute_plan", planted)


@pytest.mark.parametrize("before, after, says, md", [
    (0.93, 2.15, "speedup intervals widened from 93% to 215% of the prediction (median width, 131% wider): the fitted "
                 "runs miss the step model",
     "The calibration widened the median interval from 93% to 215% of the prediction (131% wider). The fitted runs"),
    (0.40, 0.40, "speedup intervals unchanged at 40% of the prediction (median width)",
     "The calibration left the median interval unchanged at 40% of the prediction."),
    (0.63, 0.12, "speedup intervals narrowed from 63% to 12% of the prediction (median width, 81% narrower)",
     "The calibration narrowed the median interval from 63% to 12% of the prediction (81% narrower)."),
])
def test_a_calibrated_plan_says_what_happened_to_its_intervals(cli, tmp_path, monkeypatch, before, after, says, md):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(fakes.recipe_dict()))
    _plan_with(monkeypatch, before, after)
    out = tmp_path / "plan"
    r = cli("plan", "--recipe", recipe, "--out", out, "--calibrate", served(tmp_path, "plain", 0),
            served(tmp_path, "d3", 3))
    assert r.exit_code == 0, r.output
    assert says in r.output, r.output
    text = (out / "plan.md").read_text()
    assert md in text, text
    wrong = {"widened": "narrowed", "narrowed": "widened"}.get(says.split()[2])
    assert wrong is None or (f"intervals {wrong}" not in r.output and f"calibration {wrong}" not in text)
    assert json.loads((out / "plan.json").read_text())["uncertainty"]["calibration"]["narrowed_by"] == pytest.approx(
        1 - after / before, abs=1e-4)


def test_the_markdown_reads_the_same_record():
    plan = {"uncertainty": {"level": 0.8, "how": "h", "host_log_sd": {}, "model_log_sd": 0.045,
                            "median_relative_width": 2.15,
                            "calibration": {"median_relative_width_before": 0.93, "median_relative_width_after": 2.15,
                                            "narrowed_by": -1.3118}}}
    text = "\n".join(uncertainty_markdown(plan))
    assert "widened the median interval from 93% to 215%" in text and "narrowed" not in text
