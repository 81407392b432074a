"""bench.sh -> replan.sh: golden scripts, and the loop run for real on a built bundle (trtllm-spec replan through a
shim of the CLI) with a FAKE trtllm-bench that writes a report of the documented schema (it cannot run here).

Regenerate the golden scripts after an intended change: ``UPDATE_GOLDEN=1 pytest tests/unit/test_replan.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trtllm_spec.deploy import scripts
from trtllm_spec.stages.replan import replanned_options

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "scripts"
FIXTURE = REPO / "tests" / "fixtures" / "engine_reports" / "fake_bench_report_c1.json"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not found")

# FAKE trtllm-bench: reads its --extra_llm_api_options and --concurrency, and writes --report_json from the
# fixture with the drafts it would count (max_draft_len per iteration) and the concurrency it ran at
FAKE_BENCH = """#!{python}
import json, sys, yaml
args = sys.argv[1:]
opt = lambda k: args[args.index(k) + 1]
rep = json.load(open({fixture!r}))
d = yaml.safe_load(open(opt("--extra_llm_api_options")))["speculative_config"]["max_draft_len"]
its = rep["request_info"]["avg_output_length"] - rep["decoding_stats"]["num_accepted_draft_tokens_percentiles"]["average"]
rep["decoding_stats"]["num_draft_tokens_percentiles"]["average"] = d * its
rep["request_info"]["avg_num_concurrent_requests"] = float(opt("--concurrency"))
json.dump(rep, open(opt("--report_json"), "w"))
"""


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from {path}; if intended, rerun with UPDATE_GOLDEN=1"


def test_golden_scripts():
    golden("bench.sh", scripts.bench_sh(model="meta-llama/Llama-3.1-8B-Instruct", concurrency=[1, 8, 64]))
    golden("replan.sh", scripts.replan_sh(high_batch=64))
    for text in (scripts.replan_sh(), scripts.replan_sh(high_batch=64),
                 scripts.replan_sh(report="bench_results/report_c4.json", out="replan4", high_batch=32,
                                   calibrate_report="bench_results_calibrate/report_c4.json")):
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


@pytest.fixture
def tools(tmp_path) -> dict:
    """PATH with the fake trtllm-bench and a trtllm-spec shim running this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bench = bin_dir / "trtllm-bench"
    bench.write_text(FAKE_BENCH.format(python=sys.executable, fixture=str(FIXTURE)))
    shim = bin_dir / "trtllm-spec"
    shim.write_text(f'#!/usr/bin/env bash\nPYTHONPATH={REPO} exec {sys.executable} -m trtllm_spec "$@"\n')
    for f in (bench, shim):
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}


@pytest.fixture
def bundle(cli, tmp_path) -> Path:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "loop", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "eagle3"}, "hardware": {"gpu": "h100"},
                                      "workload": {"batch_sizes": [1, 8, 64], "isl": 1024, "osl": 256}}))
    r = cli("build", recipe, "--out", tmp_path / "bundle")
    assert r.exit_code == 0, r.output
    return tmp_path / "bundle"


def run(script: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], cwd=script.parent.parent, env=env, text=True,
                          capture_output=True)


def test_bench_then_replan_loop(cli, bundle, tools):
    before = {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    assert (bundle / "replan.sh").stat().st_mode & 0o111
    res = run(bundle / "bench.sh", tools)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (bundle / "bench_results").iterdir()) == [
        "report_c1.json", "report_c64.json", "report_c8.json"]
    res = run(bundle / "replan.sh", tools)
    assert res.returncode == 0, res.stderr
    out = bundle / "replan"
    for f in ("llm_api_options.yaml", "llm_api_options.diff", "replan.md", "plan/plan.json",
              "measured/speculation_profile.json", "measured/report.md"):
        assert (out / f).is_file(), f
    assert all(p.read_bytes() == b for p, b in before.items())  # the bundle's files are untouched
    prof = json.loads((out / "measured" / "speculation_profile.json").read_text())
    assert prof["source"]["kind"] == "trtllm-bench --report_json"
    assert prof["overall"]["mean_acceptance_length"] == pytest.approx(1 + 120 / 135, abs=1e-6)
    old_plan = json.loads((bundle / "report" / "plan.json").read_text())["recommendation"]
    new_plan = json.loads((out / "plan" / "plan.json").read_text())["recommendation"]
    assert new_plan["by_batch"][0]["acceptance_length"] == pytest.approx(1 + 120 / 135, abs=1e-3)
    assert new_plan["by_batch"][0]["speedup"] < old_plan["by_batch"][0]["speedup"]
    new = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    assert new["speculative_config"]["max_draft_len"] == new_plan["max_draft_len"]
    diff = (out / "llm_api_options.diff").read_text()
    assert diff.startswith("--- bundle/llm_api_options.yaml\n+++ replan/llm_api_options.yaml") or "no change" in diff
    assert "AL **1.889**" in (out / "replan.md").read_text()
    assert cli("verify", bundle).exit_code == 0  # bench_results/ and replan/ are not bundle content
    again = run(bundle / "replan.sh", tools)
    assert again.returncode == 2 and "exists" in again.stderr
    assert run(bundle / "replan.sh", tools, "--force").returncode == 0


def test_replan_sh_ignores_an_ambient_out_and_takes_replan_out(bundle, tools, tmp_path):
    """A job runner's or CI's exported ``OUT`` (a common name for its own output folder) does not redirect the
    re-plan: replan.sh reads ``REPLAN_OUT`` only (it read ``OUT`` and refused a busy runner's non-empty folder)."""
    ambient = tmp_path / "runner_out"
    ambient.mkdir()
    (ambient / "theirs.txt").write_text("a runner's file")
    assert run(bundle / "bench.sh", tools).returncode == 0
    res = run(bundle / "replan.sh", {**tools, "OUT": str(ambient)})
    assert res.returncode == 0, res.stderr
    assert (bundle / "replan" / "plan" / "plan.json").is_file() and sorted(p.name for p in ambient.iterdir()) == [
        "theirs.txt"]
    res = run(bundle / "replan.sh", {**tools, "REPLAN_OUT": "replan_b"})
    assert res.returncode == 0, res.stderr
    assert (bundle / "replan_b" / "plan" / "plan.json").is_file()


def test_replan_refusals(cli, bundle, tools, tmp_path):
    res = run(bundle / "replan.sh", tools)
    assert res.returncode == 2 and "run bash bench.sh first" in res.stderr
    assert run(bundle / "bench.sh", tools).returncode == 0
    opts = yaml.safe_load((bundle / "llm_api_options.yaml").read_text())
    if opts["speculative_config"].get("draft_len_schedule"):  # a schedule lowers D at 64: the AL mixes lengths
        res = subprocess.run(["bash", str(bundle / "replan.sh")], env={**tools, "REPORT": "bench_results/report_c64.json"},
                             text=True, capture_output=True)
        assert res.returncode == 2 and "draft_len_schedule" in res.stderr
    r = cli("replan", "--bundle", bundle, "--from-trtllm-bench", bundle / "bench_results" / "report_c1.json",
            "--out", bundle)
    assert r.exit_code == 2 and "would replace the bundle" in r.output
    r = cli("replan", "--bundle", tmp_path / "nope", "--from-trtllm-bench", FIXTURE)
    assert r.exit_code == 2 and "is not a folder" in r.output
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "llm_api_options.yaml").write_text((bundle / "llm_api_options.yaml").read_text())
    r = cli("replan", "--bundle", tmp_path / "half", "--from-trtllm-bench", bundle / "bench_results" / "report_c1.json",
            "--out", tmp_path / "r")
    assert r.exit_code == 2 and "manifest.json" in r.output and not (tmp_path / "r").exists()


def test_replanned_options_change_only_the_plan():
    old = {"max_batch_size": 64, "cuda_graph_config": {"batch_sizes": [1, 8, 64], "max_batch_size": 64,
                                                       "enable_padding": True},
           "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 5, "speculative_model": "drafter",
                                  "draft_len_schedule": {1: 5, 64: 4}}}
    new, notes = replanned_options(old, {"max_draft_len": 3, "draft_len_schedule": {"1": 3, "32": 2}}, "1.2")
    assert new["speculative_config"] == {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "drafter",
                                         "draft_len_schedule": {1: 3, 32: 2}}
    assert new["cuda_graph_config"]["batch_sizes"] == [1, 8, 32, 64] and new["max_batch_size"] == 64
    new, notes = replanned_options(old, {"max_draft_len": 4, "draft_len_schedule": {"16": 4}}, "1.4")
    assert new["speculative_config"]["max_concurrency"] == 16 and "draft_len_schedule" not in new["speculative_config"]
    new, notes = replanned_options(old, {"max_draft_len": 0, "draft_len_schedule": None}, "1.2")
    assert "speculative_config" not in new and "target alone" in notes[0]


def test_replanned_dspark_options_keep_one_draft_len():
    """A one-D mechanism's plan has no schedule and ends speculation with max_concurrency: the replan writes that."""
    old = {"max_batch_size": 64, "speculative_config": {"decoding_type": "DSpark", "max_draft_len": 8,
                                                         "speculative_model": "drafter", "max_concurrency": 64}}
    rec = {"max_draft_len": 8, "draft_len_schedule": None, "max_concurrency": 16,
           "draft_len_rule": "TensorRT-LLM runs DSpark only at D = 8 (no draft_len_schedule): ..."}
    new, notes = replanned_options(old, rec, "1.3")
    spec = new["speculative_config"]
    assert spec["max_draft_len"] == 8 and spec["max_concurrency"] == 16 and "draft_len_schedule" not in spec
    assert notes == [rec["draft_len_rule"]]


def test_relative_out_keeps_the_scripts_intact(cli, tmp_path, monkeypatch):
    """Regression: redacting the relative --out 'bundle' rewrote the word in every script ('--<bundle> .')."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"target": {"model": "llama-3.1-8b-instruct"},
                                                     "drafter": {"type": "ngram"}}))
    assert cli("build", "r.yaml", "--out", "bundle").exit_code == 0
    assert "--bundle . --from-trtllm-bench" in (tmp_path / "bundle" / "replan.sh").read_text()


# FAKE trtllm-bench for host-cost calibration: the report of tests/calibration_fakes.py (TPOT from the step model
# with KNOWN host costs) for the D its --extra_llm_api_options set (no speculative_config: a plain run)
CALIBRATION_BENCH = """#!{python}
import json, sys, yaml
sys.path.insert(0, {repo!r})
from tests.calibration_fakes import fake_report
args = sys.argv[1:]
opt = lambda k: args[args.index(k) + 1]
spec = yaml.safe_load(open(opt("--extra_llm_api_options"))).get("speculative_config") or {{}}
rep = fake_report(spec.get("max_draft_len", 0), float(opt("--concurrency")))
if spec:  # trtllm-bench names the decoding mode of the options it ran
    rep["decoding_stats"]["mode"] = spec["decoding_type"]
rep["world_info"]["max_batch_size"] = yaml.safe_load(open(opt("--extra_llm_api_options")))["max_batch_size"]
# the engine is the container of the bundle's release (it runs from the bundle's root)
import os
from trtllm_spec.core.releases import get
if os.path.exists("manifest.json"):
    rep["engine"]["version"] = get(json.load(open("manifest.json"))["trtllm_profile"]).image.rsplit(":", 1)[1]
json.dump(rep, open(opt("--report_json"), "w"))
"""


@pytest.fixture
def calibration_tools(tools, tmp_path) -> dict:
    bench = tmp_path / "bin" / "trtllm-bench"
    bench.write_text(CALIBRATION_BENCH.format(python=sys.executable, repo=str(REPO)))
    return {**tools, "CONCURRENCY": "1 64"}  # the calibration's two concurrencies (smallest and largest planned)


def test_bench_calibrate_sh_separates_every_host_term(cli, bundle, calibration_tools):
    """A chain drafter's bundle also ships its drafter at a second D (llm_api_options.calibrate.yaml) and at its own
    D without the draft_len_schedule (llm_api_options.calibrate_main.yaml: at the second concurrency that run is
    one D's), both run by bench_calibrate.sh at the smallest and the largest planned batch: with the plain runs at
    both, replan.sh fits all six host terms, not only spec_iteration_s + D x draft_step_s at one batch."""
    from tests.calibration_fakes import KNOWN_TERMS_S as known

    main = yaml.safe_load((bundle / "llm_api_options.yaml").read_text())["speculative_config"]
    second = yaml.safe_load((bundle / "llm_api_options.calibrate.yaml").read_text())
    assert second["speculative_config"]["max_draft_len"] not in (main["max_draft_len"], 0)
    assert "draft_len_schedule" not in second["speculative_config"]  # one fixed D: its TPOT is one D's
    assert {k: v for k, v in second.items() if k not in ("speculative_config", "max_seq_len")} == {
        k: v for k, v in yaml.safe_load((bundle / "llm_api_options.yaml").read_text()).items()
        if k not in ("speculative_config", "max_seq_len")}
    script = (bundle / "bench_calibrate.sh").read_text()
    assert "llm_api_options.calibrate.yaml" in script and 'CONCURRENCY="${CONCURRENCY:-1 64}"' in script
    res = run(bundle / "replan.sh", {**calibration_tools})
    assert res.returncode == 2  # no reports yet
    for name in ("bench.sh", "bench_plain.sh"):
        assert run(bundle / name, calibration_tools).returncode == 0
    res = run(bundle / "replan.sh", calibration_tools)
    assert res.returncode == 0 and "bench_calibrate.sh writes them" in res.stderr  # says what the third run adds
    assert run(bundle / "bench_calibrate.sh", calibration_tools).returncode == 0
    res = run(bundle / "replan.sh", calibration_tools, "--force")
    assert res.returncode == 0, res.stderr
    host = json.loads((bundle / "replan" / "host_costs.json").read_text())
    for term, value in known.items():
        assert host[term] == pytest.approx(value, rel=0.10), term
    assert host["fit"]["identified"] == ["iteration_s", "sequence_s", "spec_iteration_s", "draft_step_s",
                                         "spec_sequence_s", "draft_sequence_s"] and not host.get("note")
    assert len(host["fit"]["measurements"]) == 6
    for row in host["fit"]["measurements"]:
        assert row["fitted_tpot_s"] == pytest.approx(row["measured_tpot_s"], rel=0.01)
    assert cli("verify", bundle).exit_code == 0  # bench_results_calibrate/ is not bundle content


def test_replan_sh_calibrates_host_costs_from_plain_and_speculative_runs(cli, bundle, calibration_tools):
    from tests.calibration_fakes import KNOWN_TERMS_S as known

    assert (bundle / "bench_plain.sh").is_file() and (bundle / "llm_api_options.plain.yaml").is_file()
    assert "speculative_config" not in yaml.safe_load((bundle / "llm_api_options.plain.yaml").read_text())
    for script in ("bench.sh", "bench_plain.sh"):
        assert run(bundle / script, calibration_tools).returncode == 0
    res = run(bundle / "replan.sh", calibration_tools)
    assert res.returncode == 0, res.stderr
    host = json.loads((bundle / "replan" / "host_costs.json").read_text())
    d = yaml.safe_load((bundle / "llm_api_options.yaml").read_text())["speculative_config"]["max_draft_len"]
    assert host["iteration_s"] == pytest.approx(known["iteration_s"], rel=0.10)
    c = 1 - host["overlap_hides"]  # one D at one batch fixes what the step waits for there: the exposed
    # spec_iteration_s + D steps, with that batch's per-sequence speculative cost (no D ran at a second batch)
    assert c * host["spec_iteration_s"] + d * host["draft_step_s"] == pytest.approx(
        c * (known["spec_iteration_s"] + known["spec_sequence_s"])
        + d * (known["draft_step_s"] + known["draft_sequence_s"]), rel=0.10)
    assert host["sequence_s"] == pytest.approx(known["sequence_s"], rel=0.10)  # two concurrencies fix it
    for row in host["fit"]["measurements"]:
        assert row["fitted_tpot_s"] == pytest.approx(row["measured_tpot_s"], rel=0.01)
    plan = json.loads((bundle / "replan" / "plan" / "plan.json").read_text())
    assert plan["host_costs"]["name"].startswith("calibrated") and "robustness" in plan
    assert "## Host costs fitted from the reports" in (bundle / "replan" / "replan.md").read_text()
    overhead = (bundle / "report" / "overhead.md").read_text()  # the bundle's own report: profile and robustness
    assert "## Host costs" in overhead and "tensorrt-llm-1.3" in overhead and "## Robustness to host costs" in overhead
    # every predicted speedup of the overhead report carries its interval, and the report says how it is made
    assert "## Uncertainty of the predicted speedups" in overhead and "Host costs by the release rule" in overhead
    rows = json.loads((bundle / "report" / "overhead.json").read_text())["recommendation"]["by_batch"]
    assert any(r["draft_len"] for r in rows)
    for r in (r for r in rows if r["draft_len"]):
        assert f"{r['speedup']:.2f}x ({r['speedup_low']:.2f}-{r['speedup_high']:.2f})" in overhead
    replan_plan = (bundle / "replan" / "plan" / "plan.md").read_text()
    assert "The calibration narrowed the median interval from" in replan_plan
    assert "speedup intervals narrowed from" in res.stdout + res.stderr
    assert json.loads((bundle / "report" / "overhead.json").read_text())["robustness"]["rows"]
    assert cli("verify", bundle).exit_code == 0  # bench_results_plain/ is not bundle content
    # the plain run of another options file is refused, naming it
    opts = yaml.safe_load((bundle / "llm_api_options.plain.yaml").read_text())
    opts["kv_cache_config"]["free_gpu_memory_fraction"] = 0.5
    other_opts = bundle.parent / "other.yaml"  # outside the bundle: an extra file inside is refused before
    other_opts.write_text(yaml.safe_dump(opts))
    other = bundle / "bench_results_plain" / "other.json"
    subprocess.run([str(bundle.parent / "bin" / "trtllm-bench"), "--extra_llm_api_options", str(other_opts),
                    "--concurrency", "1", "--report_json", str(other)], check=True, env=calibration_tools, cwd=bundle)
    rep = json.loads(other.read_text())
    rep["world_info"]["kv_cache_percentage"] = 0.5
    other.write_text(json.dumps(rep))
    res = subprocess.run(["bash", str(bundle / "replan.sh"), "--force"], env={**calibration_tools,
                         "PLAIN_REPORT": "bench_results_plain/other.json"}, text=True, capture_output=True)
    assert res.returncode == 2 and "llm_api_options.plain.yaml" in res.stderr and "kv_cache_percentage" in res.stderr


def test_a_bundle_left_without_speculation_replans_from_its_speculative_alternative(cli, tmp_path,
                                                                                   calibration_tools):
    """The planner found no D that pays at batch 128 (n-gram, assumed acceptance): llm_api_options.yaml has no
    speculation, llm_api_options.speculative.yaml keeps the drafter at its best D. bench.sh (plain) and
    bench_speculative.sh are then the two runs replan.sh reads: it re-plans from the speculative one (whose
    options are the drafter's) and calibrates with both."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "nospec", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "ngram"}, "hardware": {"gpu": "h100"},
                                      "engine": {"max_batch_size": 256},
                                      "workload": {"batch_sizes": [128], "isl": 1024, "osl": 256}}))
    bundle = tmp_path / "bundle"
    assert cli("build", recipe, "--out", bundle).exit_code == 0
    assert "speculative_config" not in yaml.safe_load((bundle / "llm_api_options.yaml").read_text())
    assert (bundle / "llm_api_options.speculative.yaml").is_file()
    assert not (bundle / "llm_api_options.calibrate.yaml").exists()  # n-gram: no per-draft-step model cost
    env = {**calibration_tools, "CONCURRENCY": "128 256"}  # the calibration's second concurrency: 8 x 128, capped
    for script in ("bench.sh", "bench_speculative.sh"):
        assert run(bundle / script, env).returncode == 0
    res = run(bundle / "replan.sh", env)
    assert res.returncode == 0, res.stderr
    assert (bundle / "replan" / "host_costs.json").is_file()
    diff = (bundle / "replan" / "llm_api_options.diff").read_text()
    assert "-# No speculation" in diff
    new = yaml.safe_load((bundle / "replan" / "llm_api_options.yaml").read_text())
    plan = json.loads((bundle / "replan" / "plan" / "plan.json").read_text())
    assert bool(new.get("speculative_config")) == (plan["recommendation"]["max_draft_len"] > 0)


def test_an_sa_enhancer_bundle_replans_at_the_release_it_was_built_for(cli, tmp_path, tools):
    """Regression (issue 33): drafter.sa_enhancer raises EAGLE-3 to the release with SAEnhancerConfig (1.3). An
    ``auto`` bundle built that way was re-planned as 1.2, from the drafter's minimum release: replan refused its
    own options (``unknown key 'speculative_config.sa_config'``). The bundle's record (its manifest) is the truth."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "sa", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "eagle3", "sa_enhancer": {"threshold": 4}},
                                      "engine": {"trtllm_version": "auto"}, "hardware": {"gpu": "h100"},
                                      "workload": {"batch_sizes": [1, 8, 64], "isl": 1024, "osl": 256}}))
    bundle = tmp_path / "bundle"
    r = cli("build", recipe, "--out", bundle)
    assert r.exit_code == 0, r.output
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["trtllm_profile"] == "1.3"
    assert "sa_config" in yaml.safe_load((bundle / "llm_api_options.yaml").read_text())["speculative_config"]
    assert run(bundle / "bench.sh", tools).returncode == 0
    res = run(bundle / "replan.sh", tools)
    assert res.returncode == 0, res.stderr
    new = yaml.safe_load((bundle / "replan" / "llm_api_options.yaml").read_text())["speculative_config"]
    assert new["sa_config"]["threshold"] == 4
    from trtllm_spec.core.bundle import read_bundle

    assert read_bundle(bundle).profile == "1.3"


def test_a_bundle_whose_manifest_and_files_disagree_is_refused_in_one_line(cli, bundle, tools):
    """A manifest edited to another release or drafter than its files: one line naming both, exit 2."""
    assert run(bundle / "bench.sh", tools).returncode == 0
    report = bundle / "bench_results" / "report_c1.json"
    manifest = json.loads((bundle / "manifest.json").read_text())
    for key, value, said in (("trtllm_profile", "1.4", "trtllm_profile '1.4'"),
                             ("drafter", {"type": "ngram", "kind": None}, "drafter.type 'ngram'")):
        (bundle / "manifest.json").write_text(json.dumps({**manifest, key: value}))
        r = cli("replan", "--bundle", bundle, "--from-trtllm-bench", report, "--out", bundle.parent / "r")
        assert r.exit_code == 2 and said in r.output and "rebuild the bundle" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and not (bundle.parent / "r").exists()
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "trtllm_profile": "1.9"}))
    r = cli("replan", "--bundle", bundle, "--from-trtllm-bench", report, "--out", bundle.parent / "r")
    assert r.exit_code == 2 and "'1.9' is newer than any release" in r.output


def test_an_auto_bundle_built_when_auto_meant_the_first_release_replans_at_its_own(cli, tmp_path, tools):
    """A bundle's manifest is the truth: an 'auto' EAGLE-3 bundle built when auto resolved to the drafter's first
    release (1.2) re-plans with 1.2's rules and writes 1.2 options, though auto now resolves to 1.3."""
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.deploy.manifest import write_manifest

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "old", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "eagle3"}, "engine": {"trtllm_version": "1.2"},
                                      "hardware": {"gpu": "h100"},
                                      "workload": {"batch_sizes": [1, 8, 64], "isl": 1024, "osl": 256}}))
    bundle = tmp_path / "bundle"
    assert cli("build", recipe, "--out", bundle).exit_code == 0
    resolved = yaml.safe_load((bundle / "recipe.resolved.yaml").read_text())
    resolved["engine"]["trtllm_version"] = "auto"  # what that older trtllm-spec wrote
    (bundle / "recipe.resolved.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    body = {k: v for k, v in json.loads((bundle / "manifest.json").read_text()).items() if k not in ("files", "schema")}
    body["recipe"]["engine"]["trtllm_version"] = "auto"  # both copies of the recipe, as that trtllm-spec wrote them
    write_manifest(bundle, body)
    assert read_bundle(bundle).profile == "1.2"
    assert run(bundle / "bench.sh", tools).returncode == 0
    res = run(bundle / "replan.sh", tools)
    assert res.returncode == 0, res.stderr
    new = yaml.safe_load((bundle / "replan" / "llm_api_options.yaml").read_text())["speculative_config"]
    assert new["decoding_type"] == "Eagle" and "draft_len_schedule" not in new  # 1.2: one D, its spelling
    assert json.loads((bundle / "replan" / "plan" / "plan.json").read_text())["recommendation"]["trtllm_profile"] == "1.2"
