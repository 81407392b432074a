"""benchmarks/planner_vs_aic.py (issue 54): the planner beside NVIDIA AIConfigurator, from AIConfigurator's recorded
answers (benchmarks/planner_vs_aic_aic.json; offline). The record is what the script computes from them, the
kernel-table source prices exactly the families whose calibration points it prices closer, and the host terms and
interval term the planner ships for it are the record's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import planner_vs_aic as pa  # noqa: E402


@pytest.fixture(scope="module")
def computed():
    rec, answers = pa.load_aic()
    fits = pa.silicon_fits(answers)
    points = [pa.point_rows(p, answers, fits) for p in pa.POINTS]
    return rec, answers, fits, points, pa.summary(points)


def test_every_point_aiconfigurator_covers_was_asked_and_answered(computed):
    rec, answers, *_ = computed
    assert rec["aiconfigurator"] == rec["aiconfigurator_core"] == "0.12.0"
    assert {q["id"] for q in rec["queries"]} == {q["id"] for q in pa.queries()}
    assert all("tpot_ms" in r and "error" not in r for r in answers.values())
    covered = {p.name for p in pa.POINTS if pa.covered(p)}
    assert covered and {p.name for p in pa.POINTS} - covered == {"Llama-3.1-8B EAGLE-3 D=2, bs 2-56"}  # RTX 3090
    assert all(q["model_path"].startswith("<cache>/aic/models/") for q in rec["queries"])  # no path of this machine


def test_the_record_is_what_the_script_computes(computed):
    *_, st = computed
    data = json.loads((ROOT / "benchmarks" / "planner_vs_aic.json").read_text())
    assert data["benchmark"] == "planner_vs_aic" and {"date", "commit", "command", "machine"} <= set(data)
    assert data["result"]["summary"] == json.loads(json.dumps(st))
    (row,) = data["readme"]
    held = st["validation"]["aic_covered"]
    assert f"AIConfigurator 0.12.0 {held['aic']['median_abs_error']:.1%}" in row["result"]


def test_the_tables_price_the_families_they_price_closer_on_the_calibration_split(computed):
    *_, st = computed
    closer = {f for f, v in st["calibration"]["by_family"].items()
              if v["silicon"]["median_abs_error"] < v["roofline"]["median_abs_error"]}
    assert closer == set(pa.SILICON_FAMILIES)
    from trtllm_spec.core.host_costs import SILICON_HOST_PROFILES

    assert {f for f, _r in SILICON_HOST_PROFILES} == set(pa.SILICON_FAMILIES)


def test_the_shipped_silicon_host_terms_and_interval_term_are_the_record(computed):
    _rec, _answers, fits, _points, _st = computed
    from trtllm_spec.core.host_costs import HOST_TERMS, SILICON_HOST_PROFILES
    from trtllm_spec.planner import interval as iv

    for key, prof in SILICON_HOST_PROFILES.items():
        for k in HOST_TERMS:
            assert getattr(prof, k) == pytest.approx(fits[key].terms[k], rel=0.02, abs=2e-6), (key, k)
    data = json.loads((ROOT / "benchmarks" / "planner_vs_aic.json").read_text())
    assert data["result"]["intervals"]["silicon_model_log_sd"] == iv.MODEL_LOG_SD_SILICON


def test_aiconfigurator_own_estimate_is_its_tpot_ratio(computed):
    """AIConfigurator's speedup is its TPOT without speculation over its TPOT with --nextn D --nextn-accepted AL - 1
    (its default aggregated mode): checked on one point against the raw answers."""
    _rec, answers, _fits, points, _st = computed
    pt = next(p for p in points if p["point"] == "DeepSeek-R1 MTP D-sweep, bs1")
    r = next(r for r in pt["rows"] if r["draft_len"] == 3)
    own0 = answers["DeepSeek-R1 MTP D-sweep, bs1|own|1|0"]["tpot_ms"]
    own3 = answers["DeepSeek-R1 MTP D-sweep, bs1|own|1|3"]["tpot_ms"]
    assert r["aic"] == pytest.approx(own0 / own3, abs=1e-4)
