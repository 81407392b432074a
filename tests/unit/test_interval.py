"""Issue 36: every predicted speedup carries an interval (planner/interval.py), the pick says where the interval
changes the decision, a calibration narrows it, releases without a fitted profile follow a stated rule, and bad
input to the new options gets one line and exit 2."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests import calibration_fakes as fakes
from trtllm_spec.errors import UserError
from trtllm_spec.planner import interval as iv

ARGS = ("plan", "--target", "llama-3.1-8b-instruct", "--drafter", "eagle3", "--gpu", "h100", "--batch-sizes",
        "1,8,64", "--isl", "1024", "--osl", "512")


def plan_json(cli, *extra) -> dict:
    r = cli(*ARGS, *extra, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_every_planned_speedup_has_an_interval_around_it(cli):
    plan = plan_json(cli)
    for r in plan["recommendation"]["by_batch"]:
        if r["draft_len"]:
            assert r["speedup_low"] < r["speedup"] < r["speedup_high"]
    mine = [c for c in plan["candidates"] if c["mechanism"] == "eagle3"]
    assert all("speedup_interval" in c for c in mine)
    assert all(c["speedup_interval"] == [1.0, 1.0] for c in mine if c["draft_len"] == 0)  # D = 0 is the reference
    u = plan["uncertainty"]
    assert u["level"] == 0.8 and u["z"] == pytest.approx(1.2816, abs=1e-4) and u["model_log_sd"] == iv.MODEL_LOG_SD
    assert u["rule"]["rule"] == "nearest fitted release" and u["rule"]["base_release"] == "0.20-1.0rc"
    assert plan["recommendation"]["uncertainty_note"] == u["note"] and u["note"].startswith("speculate up to batch")


def test_the_interval_is_the_stated_formula(cli):
    """sd^2 = sum_k (elasticity_k x host sd_k)^2 + model sd^2, elasticity from the candidates' own step times."""
    plan = plan_json(cli)
    u = plan["uncertainty"]
    cands = {(c["batch_size"], c["draft_len"]): c for c in plan["candidates"] if c["mechanism"] == "eagle3"}
    ov = plan["hardware"]["overheads"]
    b, d = 8, plan["recommendation"]["by_batch"][1]["draft_len"]
    plain, spec = cands[(b, 0)], cands[(b, d)]
    hides = ov["overlap_hides"]
    c0 = {"iteration_s": 1 - hides, "spec_iteration_s": 0.0, "draft_step_s": 0.0,
          "sequence_s": (1 - hides) * b, "spec_sequence_s": 0.0, "draft_sequence_s": 0.0}
    c1 = {"iteration_s": 1 - hides, "spec_iteration_s": 1 - hides, "draft_step_s": d,
          "sequence_s": (1 - hides) * b, "spec_sequence_s": (1 - hides) * b, "draft_sequence_s": d * b}
    g = {k: c0[k] / plain["step_time_s"] - c1[k] / spec["step_time_s"] for k in c0}
    var = sum((g[k] * ov[k] * u["host_log_sd"][k]) ** 2 for k in c0)
    # issue 54: the per-sequence terms the release prior leaves at 0 (no published batch sweep) carry an absolute sd
    assert set(u["host_sd_s"]) == {"sequence_s", "spec_sequence_s", "draft_sequence_s"}
    assert all(ov[k] == 0.0 for k in u["host_sd_s"])
    var += sum((g[k] * v) ** 2 for k, v in u["host_sd_s"].items())
    sd = math.sqrt(var + u["model_log_sd"] ** 2)
    lo, hi = spec["speedup_interval"]
    assert lo == pytest.approx(spec["speedup"] * math.exp(-u["z"] * sd), rel=1e-3)
    assert hi == pytest.approx(spec["speedup"] * math.exp(u["z"] * sd), rel=1e-3)


def test_a_higher_level_widens_and_is_rendered(cli, tmp_path):
    narrow = plan_json(cli, "--interval-level", "0.5")["recommendation"]["by_batch"][0]
    wide = plan_json(cli, "--interval-level", "0.95")["recommendation"]["by_batch"][0]
    assert wide["speedup_low"] < narrow["speedup_low"] < narrow["speedup_high"] < wide["speedup_high"]
    r = cli(*ARGS, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "p" / "plan.md").read_text()
    row = plan_json(cli)["recommendation"]["by_batch"][0]
    assert f"{row['speedup']:.2f}x ({row['speedup_low']:.2f}-{row['speedup_high']:.2f})" in md
    assert "## Uncertainty of the predicted speedups" in md and "Host costs by the release rule" in md
    assert "Inside the uncertainty:" in md


@pytest.mark.parametrize("level", ["0", "1", "1.5", "-0.2"])
def test_a_level_outside_0_1_is_one_line_and_exit_2(cli, level):
    r = cli(*ARGS, "--interval-level", level, "--json")
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "--interval-level" in r.output and "(0, 1)" in r.output


def test_check_level_and_the_benchmark_flag():
    assert iv.check_level(0.9) == 0.9
    with pytest.raises(UserError, match="--level 2.0 is outside"):
        iv.check_level(2.0, "--level")


def test_decision_note_names_the_batches_inside_the_uncertainty():
    rows = [{"batch_size": 1, "draft_len": 4, "speedup_low": 1.5, "speedup_high": 2.0},
            {"batch_size": 64, "draft_len": 3, "speedup_low": 1.05, "speedup_high": 1.3},
            {"batch_size": 128, "draft_len": 2, "speedup_low": 0.9, "speedup_high": 1.1},
            {"batch_size": 256, "draft_len": 0, "speedup_low": 1.0, "speedup_high": 1.0}]
    note = iv.decision_note(rows, 0.8, {256: 1.04})
    assert note.startswith("speculate up to batch 64: its 80% interval stays above 1.0x")
    assert "batch 128-256 is inside the uncertainty" in note and "bench.sh" in note
    assert "no speculation is planned" in iv.decision_note(rows[3:], 0.8, {256: 0.97})
    assert "even the interval's top is below" in iv.decision_note(
        [{"batch_size": 8, "draft_len": 2, "speedup_low": 0.7, "speedup_high": 0.95}], 0.8)


def _calibrated(cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(fakes.recipe_dict()))
    F = fakes.FIXTURES
    out = tmp_path / "cal"
    r = cli("plan", "--recipe", recipe, "--out", out, "--calibrate",
            *(F / f[d] for f in (fakes.FILES, fakes.FILES_HIGH) for d in (0, 3, 2)))
    assert r.exit_code == 0, r.output
    assert "speedup intervals narrowed from 64% to 15% of the prediction" in r.output
    return recipe, out


def test_calibration_narrows_the_interval_and_says_by_how_much(cli, tmp_path):
    recipe, out = _calibrated(cli, tmp_path)
    plan = json.loads((out / "plan.json").read_text())
    cal = plan["uncertainty"]["calibration"]
    assert cal["median_relative_width_after"] < cal["median_relative_width_before"]
    assert cal["narrowed_by"] == pytest.approx(1 - cal["median_relative_width_after"]
                                               / cal["median_relative_width_before"], abs=1e-3)
    assert all(v < 0.2 for v in plan["uncertainty"]["host_log_sd"].values())  # two D identify every term
    md = (out / "plan.md").read_text()
    assert "The calibration narrowed the median interval from" in md
    # the same file given back with --host-costs plans with the same (narrow) host uncertainty
    r = cli("plan", "--recipe", recipe, "--host-costs", out / "host_costs.json", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["uncertainty"]["host_log_sd"] == plan["uncertainty"]["host_log_sd"]


def test_one_draft_length_narrows_less_than_two(cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(fakes.recipe_dict()))
    F = fakes.FIXTURES
    r = cli("plan", "--recipe", recipe, "--out", tmp_path / "one", "--calibrate",
            *(F / f[d] for f in (fakes.FILES, fakes.FILES_HIGH) for d in (0, 3)))
    assert r.exit_code == 0, r.output
    one = json.loads((tmp_path / "one" / "plan.json").read_text())["uncertainty"]
    _recipe, out = _calibrated(cli, tmp_path)
    two = json.loads((out / "plan.json").read_text())["uncertainty"]
    assert one["host_log_sd"]["iteration_s"] == two["host_log_sd"]["iteration_s"] < 0.2  # a plain report fixes it
    assert one["host_log_sd"]["draft_step_s"] > 0.5  # the split of the speculative sum is not identified
    assert two["calibration"]["narrowed_by"] > one["calibration"]["narrowed_by"] > 0


def test_a_host_cost_file_without_residuals_is_one_line_and_exit_2(cli, tmp_path):
    recipe, out = _calibrated(cli, tmp_path)
    data = json.loads((out / "host_costs.json").read_text())
    for broken in ({k: v for k, v in data.items() if k != "fit"},
                   data | {"fit": {**data["fit"], "measurements": []}}):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(broken))
        r = cli("plan", "--recipe", recipe, "--host-costs", bad, "--json")
        assert r.exit_code == 2, r.output
        assert r.output.strip().count("\n") == 0 and "calibration residuals" in r.output and "--calibrate" in r.output
