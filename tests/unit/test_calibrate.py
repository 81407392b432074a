"""plan --calibrate: host costs fitted from FAKE trtllm-bench reports with known host costs (tests/calibration_fakes.py),
the refusals of reports that belong to something else, the release profiles and the robustness table."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests import calibration_fakes as fakes
from trtllm_spec.core.host_costs import TRTLLM_HOST_PROFILES, HostProfile
from trtllm_spec.planner.calibrate import nonneg_least_squares, split_speculative

F = fakes.FIXTURES
PLAIN, D3, D2 = (F / fakes.FILES[d] for d in (0, 3, 2))
PLAIN8, D3_8, D2_8 = (F / fakes.FILES_HIGH[d] for d in (0, 3, 2))
KNOWN = fakes.KNOWN_TERMS_S


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(fakes.recipe_dict()))
    return path


def test_fixtures_are_the_generators():
    """The committed reports are what the generator writes (regenerate: UPDATE_GOLDEN=1)."""
    if os.environ.get("UPDATE_GOLDEN") == "1":
        fakes.write_fixtures()
    for name, rep in fakes.expected_files().items():
        assert json.loads((F / name).read_text()) == json.loads(json.dumps(rep)), f"{name}: UPDATE_GOLDEN=1"


def plan_calibrated(cli, recipe, tmp_path, *reports):
    out = tmp_path / "plan"
    r = cli("plan", "--recipe", recipe, "--out", out, "--calibrate", *reports)
    assert r.exit_code == 0, r.output
    return r, json.loads((out / "host_costs.json").read_text()), json.loads((out / "plan.json").read_text())


def test_two_concurrencies_one_d_recover_what_they_identify_and_every_tpot(cli, recipe, tmp_path):
    r, host, plan = plan_calibrated(cli, recipe, tmp_path, PLAIN, PLAIN8, D3, D3_8)
    assert host["iteration_s"] == pytest.approx(KNOWN["iteration_s"], rel=0.10)
    assert host["sequence_s"] == pytest.approx(KNOWN["sequence_s"], rel=0.10)
    # one D identifies what the step waits for: the exposed share of spec_iteration_s (the release's overlap
    # scheduler hides the rest) plus 3 draft steps, and the same sum per sequence
    c = 1 - TRTLLM_HOST_PROFILES["1.2"].overlap_hides
    spec_sum = c * host["spec_iteration_s"] + 3 * host["draft_step_s"]
    assert spec_sum == pytest.approx(c * KNOWN["spec_iteration_s"] + 3 * KNOWN["draft_step_s"], rel=0.10)
    seq_sum = c * host["spec_sequence_s"] + 3 * host["draft_sequence_s"]
    assert seq_sum == pytest.approx(c * KNOWN["spec_sequence_s"] + 3 * KNOWN["draft_sequence_s"], rel=0.10)
    for row in host["fit"]["measurements"]:  # every measured TPOT reproduced by the step model
        assert row["fitted_tpot_s"] == pytest.approx(row["measured_tpot_s"], rel=0.01)
    assert any(abs(row["prior_tpot_s"] / row["measured_tpot_s"] - 1) > 0.05 for row in host["fit"]["measurements"])
    assert "one draft length, D = 3" in host["note"] and "spec_iteration_s + n draft_step_s" in host["fit"]["identified"]
    assert plan["host_costs"]["name"].startswith("calibrated: TensorRT-LLM 1.2.1 on NVIDIA H100")
    assert plan["host_costs"]["terms_s"]["iteration_s"] == pytest.approx(host["iteration_s"])
    assert "host costs fitted" in r.output and len(host["fitted_on"]) == 4 and host["fit"]["files"][0]["sha256"]
    terms = {t["term"]: t for t in plan["step_terms"]}  # the plan's term table names every term's source
    assert terms["sequence_s"]["source"].startswith("fitted on the engine's own runs")
    assert terms["work"]["source"].startswith("roofline") and "captured CUDA-graph batch sizes" in terms["work"]["source"]


def test_two_concurrencies_two_d_recover_every_term(cli, recipe, tmp_path):
    _r, host, _plan = plan_calibrated(cli, recipe, tmp_path, PLAIN, PLAIN8, D3, D3_8, D2, D2_8)
    for term, value in KNOWN.items():
        assert host[term] == pytest.approx(value, rel=0.10), term
    assert host["note"] == "" and host["fit"]["identified"] == [
        "iteration_s", "sequence_s", "spec_iteration_s", "draft_step_s", "spec_sequence_s", "draft_sequence_s"]


def test_one_concurrency_is_refused_naming_what_to_bench(cli, recipe, tmp_path):
    out = tmp_path / "plan"
    r = cli("plan", "--recipe", recipe, "--out", out, "--calibrate", PLAIN, D3, D2)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "every run is at batch size (concurrency) 1" in r.output and "second concurrency" in r.output
    assert len([ln for ln in r.output.splitlines() if ln.startswith("error:")]) == 1 and not out.exists()


def test_a_design_without_a_swept_draft_length_leaves_the_speculative_per_sequence_terms_to_the_prior(
        cli, recipe, tmp_path):
    """D = 3 only at concurrency 1 and D = 2 only at 8: no draft length at two batch sizes, so the per-sequence
    speculative terms stay the prior's (0), and the note says what to run; a design that requires them is refused."""
    from trtllm_spec.planner.calibrate import DesignError, StepMeasurement, design

    _r, host, _plan = plan_calibrated(cli, recipe, tmp_path, PLAIN, PLAIN8, D3, D2_8)
    assert host["spec_sequence_s"] == host["draft_sequence_s"] == 0.0 and "no draft length ran at two" in host["note"]
    from trtllm_spec.core.hardware import load_hardware
    from trtllm_spec.planner.mechanism import DraftCost

    runs = [StepMeasurement(b, d, 1.5 if d else 1.0, 100, 100, 0.01, "x") for b, d in ((1, 0), (8, 0), (1, 3), (8, 2))]
    with pytest.raises(DesignError, match="cannot fit spec_sequence_s"):
        design(runs, load_hardware("h100"), DraftCost((), 1, 0.0, None), require=("spec_sequence_s",))


def test_host_costs_file_plans_again(cli, recipe, tmp_path):
    _r, host, plan = plan_calibrated(cli, recipe, tmp_path, PLAIN, PLAIN8, D3, D3_8, D2, D2_8)
    r = cli("plan", "--recipe", recipe, "--host-costs", tmp_path / "plan" / "host_costs.json", "--json")
    assert r.exit_code == 0, r.output
    again = json.loads(r.output[r.output.index("{"):])
    assert again["host_costs"]["terms_s"] == plan["host_costs"]["terms_s"]
    assert again["recommendation"] == plan["recommendation"]
    bad = dict(host, release="1.3")
    (tmp_path / "h13.json").write_text(json.dumps(bad))
    r = cli("plan", "--recipe", recipe, "--host-costs", tmp_path / "h13.json", "--json")
    assert r.exit_code == 2 and "fitted on TensorRT-LLM 1.3" in r.output


def write_variant(tmp_path, name, **changes):
    path = tmp_path / f"v_{len(list(tmp_path.glob('v_*')))}.json"
    path.write_text(json.dumps(fakes.variant(name, **changes)))
    return path


@pytest.mark.parametrize("which,changes,match", [
    ("spec", {"engine": {"model": "Qwen/Qwen3-8B"}}, "ran model 'Qwen/Qwen3-8B'"),
    ("plain", {"world_info": {"world_size": 2, "tp_size": 2}}, "ran on 2 GPU(s)"),
    ("plain", {"world_info": {"kv_cache_percentage": 0.8}}, "kv_cache_percentage = 0.8"),
    ("spec", {"world_info": {"max_batch_size": 32}}, "max_batch_size = 32"),
    ("spec", {"engine": {"version": "1.3.0rc5"}}, "ran TensorRT-LLM 1.3.0rc5"),
    ("spec", {"decoding_stats": {"mode": "MTP"}}, "decoding mode 'MTP'"),
    ("plain", {"streaming_metrics": None}, "streaming_metrics.avg_tpot_ms"),
])
def test_calibrate_refuses_reports_of_something_else(cli, recipe, tmp_path, which, changes, match):
    if which == "spec":
        spec, plain = write_variant(tmp_path, fakes.FILES[3], **changes), PLAIN
    else:
        spec, plain = D3, write_variant(tmp_path, fakes.FILES[0], **changes)
    out = tmp_path / "out"
    r = cli("plan", "--recipe", recipe, "--out", out, "--calibrate", plain, PLAIN8, spec, D3_8)
    assert r.exit_code == 2, r.output
    assert match in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_calibrate_flag_and_reports_go_together(cli, recipe):
    r = cli("plan", "--recipe", recipe, "--json", PLAIN)
    assert r.exit_code == 2 and "only with --calibrate" in r.output
    r = cli("plan", "--recipe", recipe, "--json", "--calibrate")
    assert r.exit_code == 2 and "needs trtllm-bench reports" in r.output
    r = cli("plan", "--recipe", recipe, "--json", "--calibrate", D3, D2)
    assert r.exit_code == 2 and "no plain report" in r.output
    r = cli("plan", "--recipe", recipe, "--json", "--calibrate", PLAIN, PLAIN)
    assert r.exit_code == 2 and "no speculative report" in r.output


def test_calibration_refuses_an_override_of_a_fitted_term(cli, recipe, tmp_path):
    r = cli("plan", "--recipe", recipe, "--json", "--set", "hardware.overrides={overheads: {iteration_s: 0.001}}",
            "--calibrate", PLAIN, PLAIN8, D3, D3_8)
    assert r.exit_code == 2 and "which the calibration" in r.output


# ---- the math ----------------------------------------------------------------------------------------------

def test_nonneg_least_squares_pins_negative_terms():
    assert nonneg_least_squares([[1, 0], [0, 1]], [2.0, -1.0]) == pytest.approx([2.0, 0.0])
    assert nonneg_least_squares([[1, 1], [1, 2], [1, 3]], [3.0, 5.0, 7.0]) == pytest.approx([1.0, 2.0])


def test_split_follows_the_prior_ratio():
    a, b = split_speculative(1.0, {"spec_iteration_s": 1.0, "draft_step_s": 1.0}, 3)
    assert (a, b) == pytest.approx((0.25, 0.25))  # 0.25 + 3 x 0.25 = 1
    assert split_speculative(1.0, {"spec_iteration_s": 0.0, "draft_step_s": 0.0}, 3) == (1.0, 0.0)
    a, b = split_speculative(1.0, {"spec_iteration_s": 1.0, "draft_step_s": 1.0}, 3, c_spec=0.5)  # half hidden
    assert a == pytest.approx(b) and 0.5 * a + 3 * b == pytest.approx(1.0)


# ---- profiles and robustness in every plan ---------------------------------------------------------------

def test_release_profiles_and_their_provenance(cli):
    for release in ("1.2", "1.3", "1.4"):
        r = cli("plan", "--target", "llama-3.1-8b-instruct", "--gpu", "h100", "--trtllm-version", release, "--json")
        plan = json.loads(r.output[r.output.index("{"):])
        hc = plan["host_costs"]
        assert hc["name"] == f"tensorrt-llm-{release}" and hc["fitted_on"] and hc["measured_release"]
        assert f"host-cost profile: tensorrt-llm-{release}" in " ".join(plan["assumptions"])
    assert all(isinstance(p, HostProfile) for p in TRTLLM_HOST_PROFILES.values())


def test_recipe_override_is_recorded(cli):
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--gpu", "h100", "--json",
            "--set", "hardware.overrides={overheads: {draft_step_s: 0.0001}}")
    hc = json.loads(r.output[r.output.index("{"):])["host_costs"]
    assert hc["overridden_by_recipe"] == ["draft_step_s"] and hc["terms_s"]["draft_step_s"] == 1e-4


def test_robustness_table_in_every_plan(cli, tmp_path):
    out = tmp_path / "p"
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--gpu", "h100", "--batch-sizes", "1,8,64", "--out", out)
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "plan.json").read_text())
    rob, rec = plan["robustness"], plan["recommendation"]
    assert [(x["term"], x["factor"]) for x in rob["rows"]] == [
        (t, f) for t in ("iteration_s", "spec_iteration_s", "draft_step_s") for f in (0.5, 2.0)]
    assert rob["pick"] == {"max_draft_len": rec["max_draft_len"], "draft_len_schedule": rec["draft_len_schedule"],
                           "max_concurrency": rec["max_concurrency"]}
    for row in rob["rows"]:
        same = (row["max_draft_len"], row["draft_len_schedule"]) == (rec["max_draft_len"], rec["draft_len_schedule"])
        assert row["pick_changes"] == (not same)
        base = {x["batch_size"]: x["speedup"] for x in rec["by_batch"]}
        assert set(row["speedup_change_by_batch"]) == {str(b) for b in base}
    it_half = rob["rows"][0]  # a cheaper host step makes the plain step faster: speculation gains less
    assert all(v < 0 for v in it_half["speedup_change_by_batch"].values())
    ds_double = rob["rows"][5]
    assert all(v < 0 for v in ds_double["speedup_change_by_batch"].values())
    md = (out / "plan.md").read_text()
    assert "## Robustness to host costs" in md and "## Host costs" in md and rob["note"] in md


def test_published_profiles_per_release_and_inheritance():
    from trtllm_spec.core.host_costs import PUBLISHED_HOST_PROFILES, published_host_profile
    from trtllm_spec.errors import UserError

    trt = PUBLISHED_HOST_PROFILES[("TensorRT-LLM", "0.20-1.0rc")]
    for p in TRTLLM_HOST_PROFILES.values():  # derived by the release rule from the newest measured release
        assert p.terms() == trt.terms() and p.rule["base_release"] == "0.20-1.0rc" and p.fitted_on == trt.fitted_on
        assert [f["feature"] for f in p.rule["features"]] == ["overlap_with_speculation"]
        assert p.overlap_with_speculation and p.overlap_hides == 0.43 and "release rule" in p.note
        assert all(p.uncertainty[k] > trt_sd for k in p.terms() for trt_sd in [0.25])
    # issue 54: vLLM 0.9.2's profile (fitted on a held-out source) is retired; 0.8.5 is vLLM's fitted release
    prof, how = published_host_profile("vLLM", "0.10.1")  # no own measurements: the nearest fitted, by the rule
    assert prof.rule["base_release"] == "0.8.5" and how == "rule: nearest fitted 0.8.5, 2.0 minor away"
    assert prof.overlap_hides is None  # async scheduling with speculation is on by default only from 0.14
    new = published_host_profile("vLLM", "0.19.1")[0]
    assert [f["feature"] for f in new.rule["features"]] == ["async_scheduling_with_speculation"]
    assert new.overlap_with_speculation and "31998" in new.rule["features"][0]["source"]
    assert prof.terms() == PUBLISHED_HOST_PROFILES[("vLLM", "0.8.5")].terms() and prof.release == "0.10.1"
    assert prof.uncertainty["iteration_s"] == pytest.approx((0.25 ** 2 + (2 * 0.47) ** 2) ** 0.5)
    retired = published_host_profile("vLLM", "0.9.2")[0]  # its only step times are held out: the rule, said so
    assert retired.rule["base_release"] == "0.8.5" and "#20780" in retired.note
    # no per-sequence measurement: 0, with an absolute uncertainty the interval carries (the rule keeps it)
    assert prof.sequence_s == 0 and prof.uncertainty_s == {"sequence_s": 2e-5, "spec_sequence_s": 2e-5,
                                                           "draft_sequence_s": 6.5e-6}
    sgl = published_host_profile("SGLang", "0.5.2")[0]  # SGLang 0.4.4's sweep fits them: no absolute term
    assert sgl.rule["base_release"] == "0.4.4" and sgl.uncertainty_s is None and sgl.spec_sequence_s > 0
    older = published_host_profile("vLLM", "0.8.4")[0]  # earlier than every fitted one: the nearest, 0.8.5
    assert older.rule["base_release"] == "0.8.5" and older.rule["distance"] == 0.5
    far = published_host_profile("vLLM", "0.19.1")[0]  # ten minors away: capped at a factor 4 either way
    assert far.uncertainty["iteration_s"] == pytest.approx(1.39)
    assert published_host_profile("vLLM", "0.8.5")[1] == "its own"
    with pytest.raises(UserError, match="no host-cost profile for TensorRT-LLM"):
        published_host_profile("TensorRT-LLM", "latest")
    assert all(p.fitted_on and p.fitted for p in PUBLISHED_HOST_PROFILES.values())


def test_a_hardware_file_keeps_its_own_overheads(cli, tmp_path):
    from trtllm_spec.core.hardware import load_hardware

    data = load_hardware("h100").model_dump()
    data["overheads"]["iteration_s"] = 7e-4
    (tmp_path / "gpu.json").write_text(json.dumps(data))
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--gpu", tmp_path / "gpu.json", "--json")
    hc = json.loads(r.output[r.output.index("{"):])["host_costs"]
    assert hc["name"].startswith("the hardware file's overheads") and hc["terms_s"]["iteration_s"] == 7e-4
