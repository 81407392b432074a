"""Suffix decoding through the CLI: measure --drafter suffix and its flags, a suffix bundle with TensorRT-LLM 1.3
SA options, the EAGLE-3 + SA enhancer options, and the refusals."""

import json

import pytest
import yaml

from tests.cli.test_cli_build import _recipe


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_measure_suffix_with_the_pool(cli, tmp_path, tiny_target, tiny_suite):
    out = tmp_path / "m"
    r = cli("measure", "reference", "--target", tiny_target, "--drafter", "suffix", "--global-pool", "--global-pool-size", "16",
            "--draft-len", "3", "--max-new-tokens", "10", "--out", out)
    assert r.exit_code == 0, r.output
    profile = json.loads((out / "speculation_profile.json").read_text())
    assert profile["drafter"]["type"] == "suffix"
    assert profile["drafter"]["options"] == {"max_matching_ngram_size": -1, "enable_global_pool": True,
                                             "pool_slots": 16}
    assert profile["overall"]["identical_outputs"] == profile["overall"]["num_prompts"] == 2
    prov = json.loads((out / "provenance.json").read_text()) if (out / "provenance.json").exists() else None
    if prov is not None:
        assert "drafter_options" in json.dumps(prov)


@pytest.mark.parametrize("args,match", [
    (["--drafter", "ngram", "--global-pool"], "--global-pool: not read for --drafter ngram"),
    (["--drafter", "suffix", "--max-matching-ngram-size", "0"], "0 is invalid"),
    (["--drafter", "suffix", "--global-pool-size", "8"], "needs drafter.enable_global_pool"),
    (["--drafter", "suffix", "--sa-enhancer-threshold", "4"], "--sa-enhancer-threshold: not read"),
    (["--drafter", "nosuch"], "neither 'ngram' nor 'suffix' nor an existing folder"),
])
def test_measure_suffix_flag_refusals(cli, tmp_path, tiny_target, tiny_suite, args, match):
    r = cli("measure", "reference", "--target", tiny_target, *args, "--draft-len", "2", "--out", tmp_path / "m")
    assert r.exit_code == 2, r.output
    assert match in r.output
    assert not (tmp_path / "m").exists()


def test_build_suffix_bundle_has_sa_options(cli, tmp_path, tiny_target, tiny_suite, cache):
    recipe = _recipe(tmp_path, tiny_target, {"type": "suffix", "enable_global_pool": True}, draft_len=3)
    out = tmp_path / "bundle"
    r = cli("build", recipe, "--out", out)
    assert r.exit_code == 0, r.output
    opts = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    assert opts["speculative_config"] == {"decoding_type": "SA", "max_draft_len": 3, "max_matching_ngram_size": -1,
                                          "enable_global_pool": True}
    assert (out / "llm_api_options.yaml").read_text().startswith("# TensorRT-LLM 1.3")
    manifest = json.loads((out / "manifest.json").read_text())
    assert {s["name"]: s["status"] for s in manifest["stages"]}["measure"] == "done"
    profile = json.loads((out / "report/measured/speculation_profile.json").read_text())
    assert profile["drafter"]["options"]["enable_global_pool"] is True
    assert cli("verify", out).exit_code == 0


def test_build_refuses_suffix_on_12(cli, tmp_path, tiny_target, cache):
    recipe = _recipe(tmp_path, tiny_target, {"type": "suffix"}, engine={"trtllm_version": "1.2"})
    r = cli("build", recipe, "--out", tmp_path / "b")
    assert r.exit_code == 2
    assert "not in TensorRT-LLM 1.2" in r.output and "'1.3'" in r.output


def test_plan_compares_suffix_on_measured_acceptance(cli, tmp_path):
    """guideline 5 ranks suffix beside the others; with --compare-acceptance it uses the measured numbers."""
    acc = tmp_path / "suffix.json"
    acc.write_text(json.dumps({"acceptance_length": {"1": 1.9, "2": 2.6, "3": 3.1, "4": 3.4}}))
    base = ("plan", "--target", "llama-3.1-8b-instruct", "--gpu", "h100-sxm", "--drafter", "ngram", "--batch-sizes",
            "1,8", "--json")
    r = cli(*base)
    assert r.exit_code == 0, r.output
    table = json.loads(r.output)["guidelines"][4]["details"]["table"]
    rows = {x["mechanism"]: x for x in table if x["batch_size"] == 1}
    assert "suffix" in rows and rows["suffix"]["acceptance_measured"] is False
    r = cli(*base, "--compare-acceptance", f"suffix={acc}")
    assert r.exit_code == 0, r.output
    g5 = json.loads(r.output)["guidelines"][4]
    rows = {x["mechanism"]: x for x in g5["details"]["table"] if x["batch_size"] == 1}
    assert rows["suffix"]["acceptance_measured"] is True and rows["suffix"]["acceptance_length"] > 1.8
    assert rows["suffix"]["speedup"] > rows["ngram"]["speedup"]  # measured suffix AL above n-gram's default
    r = cli(*base, "--compare-acceptance", f"nosuch={acc}")
    assert r.exit_code == 2 and "nosuch" in r.output
    r = cli(*base, "--compare-acceptance", "suffix")
    assert r.exit_code == 2 and "NAME=FILE" in r.output


def test_build_eagle3_with_the_sa_enhancer(cli, tmp_path, tiny_target, tiny_suite, cache):
    """The enhancer end to end: sa_config in the 1.3 options, per-source counts in the profile and the overhead
    report's enhancer section."""
    from tests.tiny import write_conversations

    data = write_conversations(tmp_path / "c.jsonl", 16)
    drafter = {"type": "eagle3", "draft_vocab_size": 64, "sa_enhancer": {"threshold": 2}, "training": {
        "max_steps": 2, "batch_size": 2, "seq_len": 64, "precision": "fp32", "checkpoint_every": 2,
        "data": {"path": str(data), "eval_fraction": 0.25}}}
    out = tmp_path / "bundle"
    r = cli("build", _recipe(tmp_path, tiny_target, drafter, draft_len=2), "--out", out)
    assert r.exit_code == 0, r.output
    text = (out / "llm_api_options.yaml").read_text()
    spec = yaml.safe_load(text)["speculative_config"]
    assert text.startswith("# TensorRT-LLM 1.3") and spec["decoding_type"] == "Eagle3"
    assert spec["sa_config"] == {"threshold": 2, "enable_global_pool": False}
    profile = json.loads((out / "report/measured/speculation_profile.json").read_text())
    sources = profile["overall"]["sources"]
    assert sum(v["iterations"] for v in sources.values()) == profile["overall"]["iterations"]
    assert profile["overall"]["identical_outputs"] == profile["overall"]["num_prompts"]
    report = json.loads((out / "report/overhead.json").read_text())
    assert report["measured_acceptance"]["sources"] == sources
    assert "## SA enhancer" in (out / "report/overhead.md").read_text()
