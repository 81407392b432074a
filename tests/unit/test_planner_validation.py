"""benchmarks/planner_validation.py (issue 36): the split is fixed before fitting, every within-source trend is
checked, statistics per split / framework / source with interval coverage, the benchmark JSON convention, and the
interval's model term is the calibration split's residual (never the held-out one's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import planner_stats as ps  # noqa: E402
import planner_validation as pv  # noqa: E402

from trtllm_spec.planner import interval as iv  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return [pv.predict(p) for p in pv.POINTS]


def test_new_sources_are_held_out_whole_and_unfitted_releases_use_the_rule(results):
    new = [r for r in results if "PR #16035" in r["source"]]
    assert new and all(r["split"] == "validation" for r in new)
    assert all(r["profile"].startswith("vllm-0.8.4 (rule: nearest fitted 0.8.5") for r in new)
    fitted = {(p.framework, p.release) for p in pv.POINTS if p.split == "calibration"}
    assert ("vLLM", "0.8.4") not in fitted  # nothing was fitted on the release the new source ran
    assert {e["points"].split(" ")[0] for e in pv.EXCLUDED} == {"B1,", "F1", "H1-H6"}


def test_model_term_of_the_interval_is_the_calibration_residual(results):
    # after a calibration: the in-sample residual of the calibration split
    assert ps.model_log_sd(results) == pytest.approx(iv.MODEL_LOG_SD_CALIBRATED, abs=0.005)
    moved = [dict(r, rows=[dict(x, error=x["error"] * 5) for x in r["rows"]]) if r["split"] == "validation" else r
             for r in results]
    assert ps.model_log_sd(moved) == ps.model_log_sd(results)  # held-out errors never set it


def test_model_term_of_an_uncalibrated_plan_is_calibrated_out_of_sample():
    """Each calibration source priced without itself (its release re-fitted on the others, or by the release rule):
    the recorded term is the smallest that puts the default level of those residuals inside their intervals."""
    import planner_loso as pl

    loso = pv.out_of_sample()
    assert {r["split"] for r in loso} == {"calibration"}  # the held-out split never sets it
    assert len(pl._rows(loso)) == sum(len(p.speedup) for p in pv.POINTS if p.split == "calibration")
    assert any("release rule" in r["loso"] for r in loso) and any("re-fitted" in r["loso"] for r in loso)
    sd = pl.calibrated_sd(loso, iv.DEFAULT_LEVEL)
    assert sd == pytest.approx(iv.MODEL_LOG_SD, abs=0.0051)
    assert pl.coverage(loso, iv.DEFAULT_LEVEL, sd) >= iv.DEFAULT_LEVEL > pl.coverage(loso, iv.DEFAULT_LEVEL, sd - 0.005)
    assert iv.MODEL_LOG_SD > iv.MODEL_LOG_SD_CALIBRATED  # out of sample is wider than in sample


def test_every_row_has_its_interval_and_the_stats_count_it(results):
    for r in results:
        for x in r["rows"]:
            assert x["low"] < x["predicted"] < x["high"]
    st = ps.all_stats(results)
    for split in ps.SPLITS:
        s = st[split]["all"]
        rows = [x for r in results if r["split"] == split for x in r["rows"]]
        inside = sum(x["low"] <= x["measured"] <= x["high"] for x in rows) / len(rows)
        assert s["points"] == len(rows) and s["inside_interval"] == pytest.approx(inside, abs=1e-4)
        assert set(st[split]["by_framework"]) == {r["framework"] for r in results if r["split"] == split}
        assert sum(v["points"] for v in st[split]["by_source"].values()) == len(rows)


def test_trend_signs_cover_batch_and_draft_len_sweeps(results):
    tr = ps.all_stats(results)["trends"]
    axes = {t["axis"] for t in tr}
    assert {"batch", "draft_len"} <= axes
    sglang = next(t for t in tr if t["point"].startswith("Llama-3.1-8B EAGLE-3 D=3") and t["axis"] == "batch")
    assert (sglang["from"], sglang["to"], sglang["measured"]) == (2, 64, pytest.approx(-0.43))
    flat = [t for t in tr if t["flat"]]
    assert all(t["right"] is None and abs(t["measured"]) < 0.02 * 2 for t in flat)
    # a sweep whose D moves with the batch (the concurrency sweep) is a trend too
    fake = {"point": "x", "source_id": "s", "split": "validation",
            "rows": [{"batch": 4, "draft_len": 5, "measured": 1.6, "predicted": 1.5},
                     {"batch": 32, "draft_len": 3, "measured": 1.3, "predicted": 1.55}]}
    (t,) = ps.trends(fake)
    assert t["axis"] == "batch (D as run)" and t["right"] is False


def test_benchmark_json_follows_the_convention(results):
    st = ps.all_stats(results)
    data = ps.benchmark_json(results, st, 0.8, "PYTHONPATH=$PWD .venv/bin/python benchmarks/planner_validation.py",
                             pv.EXCLUDED, {"model_log_sd": 0.19, "model_log_sd_in_sample": ps.model_log_sd(results),
                                           "loso": {"sweeps": []}})
    assert {"benchmark", "date", "commit", "command", "machine", "result", "readme"} <= set(data)
    assert data["result"]["model_log_sd"] == 0.19 and data["result"]["model_log_sd_in_sample"] < 0.19
    assert data["benchmark"] == "planner_validation" and "/work" not in data["command"]
    assert {"cpu", "cores", "python"} <= set(data["machine"])
    (row,) = data["readme"]
    assert set(row) == {"what", "result", "where"} and row["where"] == "benchmarks/planner_validation.md"
    held = st["validation"]["all"]
    assert f"median |error| {held['median_abs_error']:.1%}" in row["result"]


def test_terms_close_the_residual_exactly():
    p = next(p for p in pv.POINTS if p.name.startswith("Llama-3.1-8B EAGLE-1 K-sweep"))
    hw = pv.hardware_for(p, pv.GEMM_OVERLAP, pv.profile_of(p)[0])
    r = pv.decompose(p, hw, 1, 4, p.speedup[(1, 4)])
    assert r["residual_ms"] > 0  # pessimistic
    delta = r["terms_ms"]["draft_host"][1] - r["terms_ms"]["draft_host"][0]
    f = r["closing_factor"]["draft_host"]
    assert r["spec_step_ms"] - (1 - f) * delta == pytest.approx(r["implied_spec_step_ms"], abs=0.01)


def test_a_bad_level_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "planner_validation.py"), "--level", "1.5"],
                         capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.returncode == 2 and "--level 1.5 is outside (0, 1)" in out.stderr
    assert out.stderr.strip().count("\n") == 0
