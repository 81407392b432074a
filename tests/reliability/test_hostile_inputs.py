"""Hostile files, names and formats (issue 24, classes 4-6): inputs that do not belong together, recipe strings
that would become code or paths, chat templates that do not render, numbers YAML reads as floats, and --force on
a folder that is not ours. Each case runs through CliRunner in a watched folder: the exit code, one ``error:``
line naming the problem and the fix, no traceback, nothing new or changed, and nothing written outside it (the
parent of the watched folder is watched too). SIGTERM during ``build`` is in test_interruption.py."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.reliability.conftest import assert_clean_failure, snapshot

PRESET = "llama-3.1-8b-instruct"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "engine_reports" / "fake_bench_report_c1.json"


def _recipe(w: Path, data: dict | None = None, text: str | None = None) -> Path:
    p = w / "r.yaml"
    p.write_text(text if text is not None else yaml.safe_dump(
        {"name": "hostile", "target": {"model": PRESET}, "drafter": {"type": "eagle3"}, "hardware": {"gpu": "h100"},
         **(data or {})}, sort_keys=False))
    return p


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle of a preset target (no weights), built once: tests copy it before changing it."""
    from trtllm_spec.cli import main

    root = tmp_path_factory.mktemp("hostile-bundle")
    recipe = root / "b.yaml"
    recipe.write_text(yaml.safe_dump({"name": "b", "target": {"model": PRESET}, "drafter": {"type": "eagle3"},
                                      "hardware": {"gpu": "h100"},
                                      "workload": {"batch_sizes": [1, 8], "isl": 1024, "osl": 256}}))
    r = CliRunner().invoke(main, ["build", str(recipe), "--out", str(root / "bundle")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return root / "bundle"


def _copy_bundle(src: Path, w: Path) -> Path:
    dst = w / "bundle"
    shutil.copytree(src, dst)
    return dst


def _report(w: Path, bundle: Path, name: str = "report.json", **changes) -> Path:
    """The documented trtllm-bench report (the fixture) as this bundle's D would produce it, then ``changes``
    (dotted keys)."""
    rep = json.loads(FIXTURE.read_text())
    d = yaml.safe_load((bundle / "llm_api_options.yaml").read_text())["speculative_config"]["max_draft_len"]
    its = rep["request_info"]["avg_output_length"] - rep["decoding_stats"]["num_accepted_draft_tokens_percentiles"][
        "average"]
    rep["decoding_stats"]["num_draft_tokens_percentiles"]["average"] = d * its
    for key, value in changes.items():
        node = rep
        *head, last = key.split("__")
        for k in head:
            node = node[k]
        node[last] = value
    p = w / name
    p.write_text(json.dumps(rep))  # json writes NaN / Infinity as trtllm-bench's Python json.dump would
    return p


@dataclass
class Case:
    id: str
    fault: str
    args: Callable
    names: tuple[str, ...]
    code: int = 2
    needs_bundle: bool = False


CASES: list[Case] = []


def case(id: str, fault: str, *names: str, code: int = 2, bundle: bool = False):
    def register(fn):
        CASES.append(Case(id, fault, fn, names, code, bundle))
        return fn
    return register


# ---- class 5: names and strings that become paths or code ----------------------------------------------------

@case("hf-id-newline", "newline in target.hf_id (written into script comments)", "target.hf_id", "control character",
      "U+000A", "one line")
def _(w, b):
    return ["recipe", "validate", _recipe(w, {"target": {"model": PRESET, "hf_id": "x\ntouch /tmp/pwned"}})]


@case("build-hf-id-newline", "build with a newline in target.hf_id", "target.hf_id", "control character")
def _(w, b):
    return ["build", _recipe(w, {"target": {"model": PRESET, "hf_id": "x\ntouch pwned"}}), "--out", w / "bundle"]


@case("checkpoint-cr", "carriage return in drafter.checkpoint", "drafter.checkpoint", "U+000D")
def _(w, b):
    return ["recipe", "validate", _recipe(w, {"drafter": {"type": "eagle3", "checkpoint": "a\rb"}})]


@case("suite-nul", "NUL byte in measure.suite", "measure.suite", "U+0000")
def _(w, b):
    return ["recipe", "validate", _recipe(w, {"measure": {"suite": "a\x00b"}})]


@case("override-key-newline", "newline in a hardware.overrides key", "hardware.overrides", "control character")
def _(w, b):
    return ["recipe", "validate", _recipe(w, {"hardware": {"gpu": "h100", "overrides": {"a\nb": 1}}})]


@case("name-escapes-out", "recipe name ../../x (data regenerate would write outside out/)", "name", "'../../x'",
      "no path separators")
def _(w, b):
    return ["data", "regenerate", _recipe(w, {"name": "../../x"})]


@case("build-name-escapes", "recipe name ../../x (build would put its lock file outside)", "name", "'../../x'")
def _(w, b):
    return ["build", _recipe(w, {"name": "../../x"})]


@case("name-space", "recipe name with a space (a SLURM job name)", "name", "letters, digits")
def _(w, b):
    return ["recipe", "validate", _recipe(w, {"name": "my job"})]


@case("set-name-slash", "--set name=a/b", "name", "'a/b'")
def _(w, b):
    return ["recipe", "validate", _recipe(w), "--set", "name=a/b"]


# ---- class 6: formats ------------------------------------------------------------------------------------------

@case("trtllm-version-float", "unquoted trtllm_version: 1.5 (a YAML float, not a release)", "engine.trtllm_version",
      "quote it", "'1.3'")
def _(w, b):
    return ["recipe", "validate", _recipe(w, text=f"target: {{model: {PRESET}}}\ndrafter: {{type: eagle3}}\n"
                                                  "engine: {trtllm_version: 1.5}\n")]


def _template(w: Path, text: str) -> Path:
    p = w / "t.jinja"
    p.write_text(text)
    return p


@case("template-syntax", "chat template that does not parse", "t.jinja", "TemplateSyntaxError", "fix the template")
def _(w, b, target=None):
    return ["measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--chat-template",
            _template(w, "{% for m in messages %}{{ m.content }"), "--out", w / "m"]


@case("template-sandbox", "chat template calling what the sandbox blocks", "t.jinja", "SecurityError", "unsafe")
def _(w, b, target=None):
    return ["measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--chat-template",
            _template(w, "{% set x = [] %}{{ x.append(1) }}{{ messages[0].content }}"), "--out", w / "m"]


@case("template-raises", "chat template raising on the conversation", "t.jinja", "roles must alternate")
def _(w, b, target=None):
    return ["measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--chat-template",
            _template(w, "{{ raise_exception('roles must alternate') }}"), "--out", w / "m"]


@case("template-include", "chat template that includes a file (issue 37)", "t.jinja", "include", "/etc/passwd",
      "line 1")
def _(w, b, target=None):
    return ["measure", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--chat-template",
            _template(w, "{% include '/etc/passwd' %}{{ messages[0].content }}"), "--out", w / "m"]


@case("template-import", "chat template that imports macros from another template", "t.jinja", "import from",
      "macros.j2")
def _(w, b, target=None):
    return ["measure", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--chat-template",
            _template(w, "{% for m in messages %}{{ m.content }}{% endfor %}\n"
                         "{% from 'macros.j2' import fmt %}{{ fmt() }}"), "--out", w / "m"]


@case("template-extends", "chat template that extends a computed template name", "t.jinja", "extend",
      "computed template name")
def _(w, b, target=None):
    return ["measure", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--chat-template",
            _template(w, "{% extends messages[0].content %}"), "--out", w / "m"]


def _train_recipe(w: Path, target: Path) -> Path:
    p = w / "train.yaml"
    p.write_text(yaml.safe_dump({
        "name": "hostile", "target": {"model": str(target)}, "hardware": {"gpu": "l40s"},
        "workload": {"batch_sizes": [1], "isl": 64, "osl": 32},
        "drafter": {"type": "eagle3", "training": {"max_steps": 1, "seq_len": 32, "data": {
            "num_conversations": 3, "regen_max_new_tokens": 8}}}}, sort_keys=False))
    return p


@case("features-messages-string", "data features --conversations: a line whose messages is a string (issue 37)",
      "--conversations", "conv.jsonl", "'c1'", "messages is not a list of turns", "got str 'hello there'")
def _(w, b, target=None):
    conv = w / "conv.jsonl"
    conv.write_text(json.dumps({"id": "c1", "messages": "hello there"}) + "\n")
    return ["data", "features", _train_recipe(w, target), "--conversations", conv, "--out", w / "f"]


@case("features-content-number", "data features --conversations: a turn whose content is a number",
      "conv.jsonl", "'c2'", "messages[1].content is not a string", "got int '7'")
def _(w, b, target=None):
    conv = w / "conv.jsonl"
    conv.write_text(json.dumps({"id": "c2", "messages": [{"role": "user", "content": "hi"},
                                                        {"role": "assistant", "content": 7}]}) + "\n")
    return ["data", "features", _train_recipe(w, target), "--conversations", conv, "--out", w / "f"]


@case("force-not-ours", "plan --out FOLDER --force on a folder of the user's files", "not a trtllm-spec output",
      "another --out")
def _(w, b):
    (w / "mine").mkdir()
    (w / "mine" / "thesis.tex").write_text("years of work")
    return ["plan", "--target", PRESET, "--batch-sizes", "1", "--out", w / "mine", "--force"]


@case("build-overwrite-not-ours", "build --out FOLDER --force on a folder of the user's files",
      "not a trtllm-spec output")
def _(w, b):
    (w / "mine").mkdir()
    (w / "mine" / "notes.txt").write_text("x")
    return ["build", _recipe(w), "--out", w / "mine", "--force"]


@case("measure-force-not-ours", "measure --from-trtllm-bench --out FOLDER --force on the user's folder",
      "not a trtllm-spec output", bundle=True)
def _(w, b):
    (w / "mine").mkdir()
    (w / "mine" / "a.csv").write_text("1,2")
    return ["measure", "from-bench", _report(w, b), "--out", w / "mine", "--force"]


# ---- class 4: inputs that do not belong together ----------------------------------------------------------------

@case("dspark-max-draft-len", "plan --drafter dspark --max-draft-len 7 (DSpark runs only at D = block_size 16)",
      "--max-draft-len 7 is below", "drafter.block_size", "16")
def _(w, b):
    return ["plan", "--target", "qwen3-8b", "--drafter", "dspark", "--max-draft-len", "7", "--gpu", "b200", "--json"]


@case("replan-edited-options", "replan of a bundle whose options file was edited", "does not match its manifest",
      "changed: llm_api_options.yaml", "rebuild", bundle=True)
def _(w, b):
    bb = _copy_bundle(b, w)
    rep = _report(w, bb)
    with open(bb / "llm_api_options.yaml", "a") as f:
        f.write("max_batch_size: 4096\n")
    return ["replan", "--bundle", bb, "--from-trtllm-bench", rep, "--out", w / "re"]


@case("replan-corrupt-plan", "replan of a bundle whose report/plan.json is corrupted", "changed: report/plan.json",
      bundle=True)
def _(w, b):
    bb = _copy_bundle(b, w)
    rep = _report(w, bb)
    (bb / "report" / "plan.json").write_text("{not json")
    return ["replan", "--bundle", bb, "--from-trtllm-bench", rep, "--out", w / "re"]


@case("replan-corrupt-manifest", "replan of a bundle whose manifest is corrupted", "manifest.json",
      "not a valid manifest", bundle=True)
def _(w, b):
    bb = _copy_bundle(b, w)
    rep = _report(w, bb)
    (bb / "manifest.json").write_text('{"files": [')
    return ["replan", "--bundle", bb, "--from-trtllm-bench", rep, "--out", w / "re"]


@case("replan-other-model", "replan with a trtllm-bench report of another model", "benchmarked model",
      "'Qwen/Qwen3-8B'", "another model", bundle=True)
def _(w, b):
    bb = _copy_bundle(b, w)
    return ["replan", "--bundle", bb, "--from-trtllm-bench", _report(w, bb, engine__model="Qwen/Qwen3-8B",
                                                                        engine__model_path="qwen"), "--out", w / "re"]


@case("replan-other-mechanism", "replan with a trtllm-bench report of another mechanism (MTP)", "decoding mode",
      "'MTP'", "eagle3", bundle=True)
def _(w, b):
    bb = _copy_bundle(b, w)
    return ["replan", "--bundle", bb, "--from-trtllm-bench", _report(w, bb, decoding_stats__mode="MTP"),
            "--out", w / "re"]


@case("bench-nan-percentile", "a trtllm-bench report with NaN in a percentile", "acceptance_length_percentiles.p50",
      "nan", "finite number", bundle=True)
def _(w, b):
    return ["measure", "from-bench", _report(w, b, decoding_stats__acceptance_length_percentiles__p50=
                                                      float("nan")), "--json"]


@case("bench-negative-percentile", "a trtllm-bench report with a negative accepted-tokens percentile",
      "num_accepted_draft_tokens_percentiles.minimum", "-3", bundle=True)
def _(w, b):
    return ["measure", "from-bench", _report(w, b, decoding_stats__num_accepted_draft_tokens_percentiles__minimum=
                                                      -3), "--json"]


@case("bench-inf-rate", "a trtllm-bench report with an infinite acceptance rate", "draft_acceptance_rate_percentiles",
      "inf", "rate in [0, 1]", bundle=True)
def _(w, b):
    return ["measure", "from-bench", _report(w, b, decoding_stats__draft_acceptance_rate_percentiles__p99=
                                                      float("inf")), "--json"]


@case("bench-al-above-1-plus-d", "engine-reported AL percentile above 1 + D", "acceptance_length_percentiles.maximum",
      "exceeds 1 + D", bundle=True)
def _(w, b):
    return ["measure", "from-bench", _report(w, b, decoding_stats__acceptance_length_percentiles__maximum=
                                                      40.0), "--bundle", b, "--json"]


@case("metrics-al-above-1-plus-d", "iteration stats reporting acceptanceLength above 1 + D", "acceptanceLength 9",
      "--draft-len")
def _(w, b):
    p = w / "stats.json"
    p.write_text(json.dumps([{"specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 3,
                                                    "numRequestsWithDraftTokens": 2, "acceptanceLength": 9.0}}]))
    return ["measure", "from-metrics", p, "--draft-len", "3", "--json"]


@case("measure-bundle-other-model", "measure --from-trtllm-bench --bundle with a report of another model",
      "benchmarked model", "'Qwen/Qwen3-8B'", bundle=True)
def _(w, b):
    return ["measure", "from-bench", _report(w, b, engine__model="Qwen/Qwen3-8B", engine__model_path=None),
            "--bundle", b, "--json"]


# ---- issue 55: the engine's numbers checked before they are believed; a broken file named as broken ---------------

@case("bench-accepted-over-drafted", "a trtllm-bench report whose average request accepts 120 of 100 draft tokens",
      "num_accepted_draft_tokens_percentiles.average = 120", "> decoding_stats.num_draft_tokens_percentiles.average "
      "= 100", "acceptance rate of 1.2", "at most 1", "rerun the benchmark", bundle=True)
def _(w, b):
    return ["measure", "from-bench", _report(w, b, decoding_stats__num_draft_tokens_percentiles__average=100.0),
            "--json"]


@case("calibrate-bench-accepted-over-drafted", "plan --calibrate with a trtllm-bench report accepting more drafts "
      "than it drafted", "fake_bench_eagle3_d3_c1.json", "num_accepted_draft_tokens_percentiles.average",
      "acceptance rate of", "rerun the benchmark")
def _(w, b):
    from tests import calibration_fakes as fakes

    rep = json.loads((fakes.FIXTURES / fakes.FILES[3]).read_text())
    stats = rep["decoding_stats"]
    stats["num_draft_tokens_percentiles"]["average"] = stats["num_accepted_draft_tokens_percentiles"]["average"] - 1
    (w / fakes.FILES[3]).write_text(json.dumps(rep))
    recipe = w / "r.yaml"
    recipe.write_text(yaml.safe_dump(fakes.recipe_dict()))
    return ["plan", "--recipe", recipe, "--out", w / "plan", "--calibrate", fakes.FIXTURES / fakes.FILES[0],
            w / fakes.FILES[3]]


@case("metrics-accepted-over-drafted", "iteration stats accepting 9 of 6 draft tokens",
      "stats.json: entry 0 cannot be true", "specDecodingStats.numAcceptedTokens = 9",
      "specDecodingStats.numDraftTokens = 6", "acceptance rate of 1.5")
def _(w, b):
    p = w / "stats.json"
    p.write_text(json.dumps([{"specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 9,
                                                    "numRequestsWithDraftTokens": 2}}]))
    return ["measure", "from-metrics", p, "--draft-len", "3", "--json"]


def _served_pair(w: Path) -> tuple[Path, str, str]:
    """A recipe and two FAKE 'measure served' folders that calibrate it (tests/unit/test_served_calibration.py)."""
    from tests import calibration_fakes as fakes
    from tests.unit.test_served_calibration import served

    recipe = w / "r.yaml"
    recipe.write_text(yaml.safe_dump(fakes.recipe_dict()))
    return recipe, served(w, "plain", 0), served(w, "d3", 3)


@case("calibrate-served-truncated", "plan --calibrate with a served folder whose served_measurement.json was cut "
      "short", "d3/served_measurement.json", "is not readable JSON", "at line 1, column", "cut short or damaged",
      "trtllm-spec measure served", "measure again")
def _(w, b):
    recipe, plain, spec = _served_pair(w)
    f = Path(spec) / "served_measurement.json"
    f.write_text(f.read_text()[:300])
    return ["plan", "--recipe", recipe, "--out", w / "plan", "--calibrate", plain, spec]


@case("calibrate-served-counters-lie", "plan --calibrate with a served file recording 400 accepted of 300 drafted",
      "d3/served_measurement.json: levels[0]", "server_acceptance.num_accepted_tokens = 400",
      "server_acceptance.num_draft_tokens = 300", "measure again")
def _(w, b):
    recipe, plain, spec = _served_pair(w)
    f = Path(spec) / "served_measurement.json"
    data = json.loads(f.read_text())
    data["levels"][0]["server_acceptance"]["num_accepted_tokens"] = 400
    f.write_text(json.dumps(data))
    return ["plan", "--recipe", recipe, "--out", w / "plan", "--calibrate", plain, spec]


@case("verify-symlink-file", "verify: a bundle file replaced by a symlink to an identical copy outside",
      "symlink", code=1, bundle=True)
def _(w, b):
    bb = _copy_bundle(b, w)
    outside = w / "outside.yaml"
    shutil.copy(bb / "llm_api_options.yaml", outside)
    (bb / "llm_api_options.yaml").unlink()
    os.symlink(outside, bb / "llm_api_options.yaml")
    return ["verify", bb]


@case("verify-symlink-folder", "verify: a bundle folder replaced by a symlink to an identical copy",
      "1 symlinks", code=1, bundle=True)
def _(w, b):
    bb = _copy_bundle(b, w)
    shutil.copytree(bb / "report", w / "report-copy")
    shutil.rmtree(bb / "report")
    os.symlink(w / "report-copy", bb / "report")
    return ["verify", bb]


@case("measure-over-budget", "measure that would generate 400,000 tokens without --allow-long", "400,000 tokens",
      "--allow-long", "--max-new-tokens")
def _(w, b, target=None):
    return ["measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "200000", "--out", w / "m"]


def test_at_least_30_cases():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_hostile_input(bad: Case, cli, tmp_path, tiny_target, tiny_suite, monkeypatch, request):
    parent = tmp_path / "p"
    w = parent / "w"
    w.mkdir(parents=True)
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(w)
    b = request.getfixturevalue("bundle") if bad.needs_bundle else None
    import inspect

    kw = {"target": tiny_target} if "target" in inspect.signature(bad.args).parameters else {}
    args = bad.args(w, b, **kw)
    before, around = snapshot(w), snapshot(parent)
    r = cli(*args)
    assert_clean_failure(r.output, r.exit_code, bad.code, bad.names, before, snapshot(w))
    assert snapshot(parent) == around, "something was written outside the working folder"
    assert "NaN" not in r.output


def test_unquoted_trtllm_version_is_the_release(cli, tmp_path):
    p = _recipe(tmp_path, text=f"target: {{model: {PRESET}}}\ndrafter: {{type: dflash}}\nengine: {{trtllm_version: 1.3}}\n")
    r = cli("recipe", "show", p)
    assert r.exit_code == 0, r.output
    assert "trtllm_version: '1.3'" in r.output


def test_multi_line_description_is_prose_and_allowed(cli, tmp_path):
    assert cli("recipe", "validate", _recipe(tmp_path, {"description": "line one\nline two"})).exit_code == 0


def test_plan_names_that_the_default_limit_does_not_bind_dspark(cli):
    r = cli("plan", "--target", "qwen3-8b", "--drafter", "dspark", "--gpu", "b200", "--json")
    assert r.exit_code == 0, r.output
    assert "default max_draft_len 8 does not limit it" in json.loads(r.stdout)["recommendation"]["draft_len_rule"]


def test_force_replaces_our_own_output(cli, tmp_path):
    """--force writes the new plan in place of the old one: the files hold the second run's inputs, not the first's
    (two exit codes of 0 would also pass if --force kept the old folder)."""
    out = tmp_path / "plan"
    assert cli("plan", "--target", PRESET, "--batch-sizes", "1", "--out", out).exit_code == 0
    first = json.loads((out / "plan.json").read_text())
    assert [r["batch_size"] for r in first["recommendation"]["by_batch"]] == [1]
    r = cli("plan", "--target", PRESET, "--batch-sizes", "1,8", "--out", out, "--force")
    assert r.exit_code == 0, r.output
    second = json.loads((out / "plan.json").read_text())
    assert [r["batch_size"] for r in second["recommendation"]["by_batch"]] == [1, 8]
    assert second != first


def test_verified_bundle_replans_and_verify_stays_ok(cli, bundle, tmp_path):
    """The checks refuse only what is wrong: this bundle's own report re-plans it."""
    bb = _copy_bundle(bundle, tmp_path)
    r = cli("replan", "--bundle", bb, "--from-trtllm-bench", _report(tmp_path, bb), "--out", tmp_path / "re")
    assert r.exit_code == 0, r.output
    assert cli("verify", bb).exit_code == 0


def test_measure_prints_its_budget_first(cli, tmp_path, tiny_target, tiny_suite):
    r = cli("measure", "reference", "--target", tiny_target, "--drafter", "ngram", "--draft-len", "2", "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "4", "--json")
    assert r.exit_code == 0, r.output
    assert "budget: 2 requests (1 prompts x 2 decodes: the target alone and speculative) x up to 4 new tokens" in r.stderr


def test_one_model_under_two_names_calibrates_its_bundle(cli, tmp_path, tiny_suite, tiny_draft, monkeypatch):
    """Issue 55 item 3: served runs measured with ``--target smollm2-135m`` (a fetched asset; here a tiny model in
    its place) calibrate a bundle built from that asset, whose recipe now names its ``target/`` copy: both resolve
    to the same config.json (was: refused, "another model's runs cannot calibrate it", while the same folders
    calibrated the recipe). Runs of another checkpoint are still refused, naming both resolutions."""
    from tests.tiny import write_model
    from tests.unit.test_served_calibration import served
    from trtllm_spec.core.targets import asset_dir

    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    write_model(tmp_path / "cache" / "models" / "smollm2-135m" / "hf")
    asset = asset_dir("smollm2-135m")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "same", "target": {"model": "smollm2-135m"}, "drafter": {"type": "ngram"},
                                      "draft_len": 3, "hardware": {"gpu": "h100"},
                                      "measure": {"max_new_tokens": 8, "categories": ["coding"], "num_prompts": 1},
                                      "workload": {"batch_sizes": [1, 8], "isl": 64, "osl": 32}}))
    bundle = tmp_path / "bundle"
    r = cli("build", recipe, "--out", bundle)
    assert r.exit_code == 0, r.output
    assert (bundle / "target" / "config.json").is_file()

    def measured(name: str, d: int, target: Path) -> str:
        """A FAKE 'measure served --target smollm2-135m' folder: its target recorded as that command records it."""
        folder = served(tmp_path, name, d, drafter="ngram", target="smollm2-135m")
        f = Path(folder) / "served_measurement.json"
        data = json.loads(f.read_text())
        data["target"] = {"spec": "smollm2-135m", "path": str(target)}
        f.write_text(json.dumps(data))
        return folder

    stats = tmp_path / "stats.json"  # the acceptance at the bundle's D = 3 (trtllm-serve iteration stats)
    stats.write_text(json.dumps([{"specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 3,
                                                        "numRequestsWithDraftTokens": 2}}]))
    runs = [measured("plain", 0, asset), measured("d3", 3, asset)]
    for args in (["plan", "--recipe", recipe], ["replan", "--bundle", bundle, "--from-trtllm-metrics", stats]):
        out = tmp_path / args[0]
        r = cli(*args, "--out", out, "--calibrate", *runs)
        assert r.exit_code == 0, r.output
        assert (out / "host_costs.json").is_file()
    other = measured("other", 3, tiny_draft)  # another checkpoint (2 layers) under the same --target name
    before = snapshot(tmp_path)
    r = cli("replan", "--bundle", bundle, "--from-trtllm-metrics", stats, "--out", tmp_path / "re2", "--calibrate",
            runs[0], other)
    line = assert_clean_failure(r.output, r.exit_code, 2, ("other/served_measurement.json", "another model's runs",
                                                            f"resolves to {tiny_draft} (config.json sha256",
                                                            f"resolves to {bundle.resolve()}/target (config.json "
                                                            "sha256"), before, snapshot(tmp_path))
    assert "smollm2-135m" in line
