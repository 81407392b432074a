"""One reader of a bundle (issue 46): the ``core.bundle.Bundle`` record answers the drafter folder (under the key
the bundle's release spells it), the plan, the profile and the report paths; its consumers take the record and
name no bundle file by a literal of their own; ``verify`` compares the recipe's two copies."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from trtllm_spec.core import bundle as core_bundle
from trtllm_spec.core import releases

REPO = Path(__file__).resolve().parents[2]

# the modules that read a built bundle (issue 46's list) and the stages that write the files they read
CONSUMERS = ("deploy/triton_worker.py", "deploy/triton_preview.py", "stages/triton.py", "stages/replan.py",
             "report/summary.py", "stages/report.py", "stages/plan.py", "stages/bundle.py", "stages/trtllm.py",
             "stages/calibrate.py", "deploy/data_scripts.py")


def _file_names() -> set[str]:
    """Every bundle file name and path core/bundle.py defines (a value with a dot or a slash)."""
    return {v for k, v in vars(core_bundle).items() if k.isupper() and isinstance(v, str) and ("." in v or "/" in v)}


def test_bundle_file_names_are_defined_once():
    names = _file_names()
    assert {"manifest.json", "recipe.resolved.yaml", "llm_api_options.yaml", "report/plan.json",
            "report/measured/speculation_profile.json", "plan.json", "speculation_profile.json"} <= names
    found = []
    for rel in CONSUMERS:
        path = REPO / "trtllm_spec" / rel
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RECIPE_FILE"
                                                    for t in node.targets):
                found.append(f"{rel}:{node.lineno} defines RECIPE_FILE again")
    assert not found, "bundle file names written outside core/bundle.py: " + "; ".join(found)


@pytest.fixture(scope="module")
def preset_bundles(tmp_path_factory):
    """A bundle per release of a draft-model drafter named by its HF id (preset target and draft: no weights)."""
    from click.testing import CliRunner

    from trtllm_spec.cli import main

    tmp = tmp_path_factory.mktemp("preset-bundles")
    out = {}
    for release in releases.RELEASES:
        recipe = tmp / f"{release}.yaml"
        recipe.write_text(yaml.safe_dump({
            "name": "record", "target": {"model": "llama-3.1-8b-instruct"},
            "drafter": {"type": "draft_model", "model": "llama-3.2-1b-instruct"}, "hardware": {"gpu": "h100"},
            "engine": {"trtllm_version": release}, "draft_len": 3,
            "workload": {"batch_sizes": [1, 8], "isl": 1024, "osl": 256}}))
        r = CliRunner().invoke(main, ["build", str(recipe), "--out", str(tmp / release)], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        out[release] = tmp / release
    return out


def test_record_reads_the_drafter_model_by_the_release_spelling(preset_bundles):
    from trtllm_spec.core.bundle import read_bundle

    for release, folder in preset_bundles.items():
        record = read_bundle(folder)
        key = releases.get(release).spelling["draft_model_key"]
        assert record.main_options["speculative_config"][key] == record.drafter_model, release
        assert record.drafter_model.endswith("Llama-3.2-1B-Instruct"), record.drafter_model
        assert record.drafter_dir is None  # an HF id: no folder in the bundle
        assert record.target_dir is None  # a large target is named, not copied
        assert record.plan_path == folder / "report" / "plan.json" and record.plan() is not None
        assert record.plan()["recommendation"]["max_draft_len"] == 3
        assert record.profile_path == folder / "report/measured/speculation_profile.json"
        assert record.measured_profile() is None  # nothing measured without weights
        assert record.report_dir == folder / "report" and record.overhead()["recommendation"]["max_draft_len"] == 3


def test_verify_compares_the_two_copies_of_the_recipe(cli, preset_bundles, tmp_path):
    import shutil

    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.errors import UserError

    release = next(iter(preset_bundles))
    bundle = tmp_path / "b"
    shutil.copytree(preset_bundles[release], bundle)
    assert cli("verify", bundle).exit_code == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["recipe"]["hardware"]["gpu"] = "b200"  # the manifest's copy edited; recipe.resolved.yaml as built
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    r = cli("verify", bundle)
    assert r.exit_code == 1, r.output
    assert "recipe: hardware.gpu (manifest.json 'b200', recipe.resolved.yaml 'h100')" in r.output, r.output
    assert "differ at 1 keys" in r.output
    as_json = _json_head(cli("verify", bundle, "--json").output)
    assert as_json["recipe"] and not as_json["ok"]
    with pytest.raises(UserError, match=r"does not match its manifest \(recipe: hardware.gpu"):
        read_bundle(bundle)  # every consumer reads the bundle through the record: refused there too
    del manifest["recipe"]["hardware"]  # a key only one copy has
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    assert "recipe: hardware (only in recipe.resolved.yaml)" in cli("verify", bundle).output


def _json_head(output: str) -> dict:
    return json.JSONDecoder().raw_decode(output[output.index("{"):])[0]


def test_build_summary_takes_the_record(preset_bundles):
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.report.summary import build_summary

    lines = build_summary(read_bundle(next(iter(preset_bundles.values()))))
    assert lines[0].startswith("Measured here: nothing") and any(line.startswith("Planned for: ") for line in lines)
