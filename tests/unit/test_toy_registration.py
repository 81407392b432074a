"""Releases are data: a toy TensorRT-LLM release "1.5" added with ONE registration (``core.releases.register``) is
accepted end to end: recipe and ``plan --trtllm-version``, the bundle's options (rendered with the release's
spellings, validated by the mirror through ``mirror_base``), and ``replan`` of a bundle built for it
(docs/architecture.md, "Adding a TensorRT-LLM release")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.bundle_fakes import bench_report_for
from trtllm_spec.core import releases

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy_release():
    """The one registration: a release whose option fields are 1.4's, with its own image and rules."""
    import trtllm_spec.deploy.trtllm_schema  # noqa: F401 -- its import-time tables hold the built-in releases
    from trtllm_spec.core.host_costs import TRTLLM_HOST_PROFILES

    rec = releases.register(releases.Release(
        "1.5", image="nvcr.io/nvidia/tensorrt-llm/release:1.5.0rc0", read_from="a toy record (tests)",
        final=False, stable=False, mirror_base="1.4", schedule_switches_off=False,
        renamed=releases.get("1.4").renamed, removed=releases.get("1.4").removed))
    yield rec
    releases.unregister("1.5")
    TRTLLM_HOST_PROFILES.pop("1.5", None)


def test_a_registered_release_orders_numerically_and_is_a_choice(toy_release, cli):
    assert releases.names()[-1] == "1.5" and releases.newest() == "1.5"
    assert releases.newest(stable_only=True) == "1.3"  # not stable: auto does not pick it
    with pytest.raises(Exception, match="newer than any release"):
        releases.get("1.10")
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--drafter", "eagle3", "--gpu", "h100",
            "--batch-sizes", "1,8,64", "--trtllm-version", "1.5", "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])
    assert plan["recommendation"]["trtllm_profile"] == "1.5"
    assert plan["host_costs"]["release"] == "1.5"


def test_plan_bundle_options_mirror_and_replan_for_a_registered_release(toy_release, cli, tmp_path):
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.deploy.trtllm_schema import validate_options

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "toy15", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "eagle3"}, "hardware": {"gpu": "h100"},
                                      "engine": {"trtllm_version": "1.5"},
                                      "workload": {"batch_sizes": [1, 8, 64], "isl": 1024, "osl": 256}}))
    bundle = tmp_path / "bundle"
    r = cli("build", recipe, "--out", bundle)
    assert r.exit_code == 0, r.output
    b = read_bundle(bundle)
    assert b.profile == "1.5" and b.drafter == "eagle3"
    spec = b.main_options["speculative_config"]
    assert spec["decoding_type"] == "Eagle3" and spec["speculative_model"] == "drafter"  # 1.5's spellings
    validate_options(b.main_options, "1.5")  # the mirror, through mirror_base
    with pytest.raises(Exception, match="eagle3_one_model"):  # and the release's own removals
        validate_options({**b.main_options, "speculative_config": {**spec, "eagle3_one_model": False}}, "1.5")
    # bench with a fake trtllm-bench (the report of the fixture at the bundle's D), then replan in-process
    report = bench_report_for(tmp_path / "report_c1.json", spec["max_draft_len"])
    r = cli("replan", "--bundle", bundle, "--from-trtllm-bench", report, "--out", tmp_path / "re")
    assert r.exit_code == 0, r.output
    new = yaml.safe_load((tmp_path / "re" / "llm_api_options.yaml").read_text())
    validate_options(new, "1.5")
    plan = json.loads((tmp_path / "re" / "plan" / "plan.json").read_text())
    assert plan["host_costs"]["release"] == "1.5"


# ---- a toy mechanism ------------------------------------------------------------------------------------


@pytest.fixture
def toy_mechanism():
    """The one registration: a trivial model-free drafter (n-gram lookup under a name and decoding tag of its own,
    "Toy", from 1.3), its recipe section, its tag and its mirrored fields named on the descriptor."""
    from typing import Literal

    from trtllm_spec.core.releases import DecodingTag
    from trtllm_spec.deploy.trtllm_schema import _NGramFields
    from trtllm_spec.drafters import registry
    from trtllm_spec.drafters.ngram import NGram
    from trtllm_spec.drafters.ngram.config import NGramDrafter

    class ToyDrafter(NGramDrafter):
        type: Literal["toy"] = "toy"
        min_trtllm = "1.3"

    class Toy(NGram):
        name, title = "toy", "toy lookup"
        config_class = ToyDrafter
        decoding_types = ("Toy",)
        new_decoding_tags = (DecodingTag("Toy", "toy", "1.3"),)
        trtllm_mirror_fields = _NGramFields

        def default_config(self):
            return ToyDrafter()

        def trtllm_speculative_config(self, cfg, **kw) -> dict:
            return {**super().trtllm_speculative_config(cfg, **kw), "decoding_type": "Toy"}

    mech = registry.register(Toy())
    yield mech
    registry.unregister("toy")


def test_a_registration_missing_a_required_field_is_one_line():
    from trtllm_spec.drafters import registry
    from trtllm_spec.drafters.ngram import NGram
    from trtllm_spec.errors import UserError

    class NoSection(NGram):
        name, title, config_class = "nosection", "no section", None

    with pytest.raises(UserError, match=r"drafter registration 'nosection': 'config_class' is missing") as exc:
        registry.register(NoSection())
    assert "\n" not in str(exc.value) and "nosection" not in registry.MECHANISMS


def test_a_registration_whose_section_is_another_type_changes_nothing():
    """A descriptor whose config_class is another mechanism's section (here n-gram's, inherited) is refused before
    anything is registered: the recipe union, the registry and the tag table are as they were."""
    from trtllm_spec.core import recipe, releases
    from trtllm_spec.drafters import registry
    from trtllm_spec.drafters.ngram import NGram
    from trtllm_spec.errors import UserError

    class Inherits(NGram):
        name, title = "inherits", "inherits n-gram's section"

    union, tags = dict(recipe.DRAFTER_CLASS), dict(releases.DECODING_TAGS)
    with pytest.raises(UserError, match=r"'inherits': its config_class's type is 'ngram'; they must match"):
        registry.register(Inherits())
    assert union == recipe.DRAFTER_CLASS and tags == releases.DECODING_TAGS and "inherits" not in registry.MECHANISMS


def test_plan_bundle_options_mirror_and_replan_for_a_registered_mechanism(toy_mechanism, cli, tmp_path):
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.core.releases import tag_type
    from trtllm_spec.deploy.trtllm_schema import validate_options
    from trtllm_spec.errors import UserError

    assert tag_type("Toy") == "toy"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "toy", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "toy"}, "hardware": {"gpu": "h100"},
                                      "workload": {"batch_sizes": [1, 8], "isl": 1024, "osl": 256}}))
    r = cli("plan", "--recipe", recipe, "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])
    assert plan["recommendation"]["mechanism"] == "toy" and plan["recommendation"]["trtllm_profile"] == "1.3"
    bundle = tmp_path / "bundle"
    r = cli("build", recipe, "--out", bundle, "--set", "planner.compare_mechanisms=false")
    assert r.exit_code == 0, r.output
    b = read_bundle(bundle)
    assert b.drafter == "toy" and b.profile == "1.3"
    options = b.speculative_options()
    assert options["speculative_config"]["decoding_type"] == "Toy"
    validate_options(options, "1.3")  # the mirror built the Toy class from the descriptor's fields
    with pytest.raises(UserError, match="is not in TensorRT-LLM 1.2; it arrives in TensorRT-LLM 1.3"):
        validate_options(options, "1.2")
    with pytest.raises(UserError, match="max_matching_ngram_sise"):
        validate_options({**options, "speculative_config": {**options["speculative_config"],
                                                            "max_matching_ngram_sise": 2}}, "1.3")
    report = bench_report_for(tmp_path / "report_c1.json", options["speculative_config"]["max_draft_len"], "Toy")
    r = cli("replan", "--bundle", bundle, "--from-trtllm-bench", report, "--out", tmp_path / "re")
    assert r.exit_code == 0, r.output
    prof = json.loads((tmp_path / "re" / "measured" / "speculation_profile.json").read_text())
    assert prof["drafter"]["type"] == "toy"
    new = yaml.safe_load((tmp_path / "re" / "llm_api_options.yaml").read_text())
    if new.get("speculative_config"):
        validate_options(new, "1.3")


def test_the_architecture_doc_lists_files_and_fields_that_exist():
    """docs/architecture.md, 'Adding a TensorRT-LLM release' / 'Adding a drafting mechanism': every file it names
    exists, and every registration field it names is a field of the record or descriptor the tests above use."""
    import dataclasses
    import re

    from trtllm_spec.drafters.base import Mechanism

    text = (REPO / "docs" / "architecture.md").read_text()
    release = text[text.index("## Adding a TensorRT-LLM release"):text.index("## Adding a drafting mechanism")]
    mechanism = text[text.index("## Adding a drafting mechanism"):]
    for section in (release, mechanism):
        paths = set(re.findall(r"`((?:core|drafters|deploy|stages|runtime|train|planner|measure)/[\w/<>.]+\.py)",
                               section))
        paths |= set(re.findall(r"`(tests/[\w/]+\.py|docs/[\w.]+\.md|Dockerfile)`", section))
        assert len(paths) >= 5
        for p in paths:
            if "<" in p:
                continue
            root = REPO / p if p.startswith(("tests/", "docs/", "Dockerfile")) else REPO / "trtllm_spec" / p
            assert root.exists(), f"docs/architecture.md names {p}, which does not exist"
    from trtllm_spec.deploy import trtllm_schema

    for table in ("BASE_FIELDS", "TAG_FIELDS"):  # the mirror's field table, which the sections say to extend
        assert hasattr(trtllm_schema, table) and f"`{table}`" in release and f"`{table}`" in mechanism + release
    fields = {f.name for f in dataclasses.fields(releases.Release)}
    for name in ("image", "read_from", "final", "stable", "mirror_base", "removed", "renamed", "upper_thresholds",
                 "max_concurrency", "schedule_switches_off", "host_costs", "tensorrt_backend", "spelling", "refs"):
        assert name in fields and f"`{name}`" in release
    for name in ("config_class", "new_decoding_tags", "trtllm_mirror_fields", "obtain", "dynamic_draft_len_since",
                 "llamacpp_convert", "doctor_checks", "draft_vocabulary", "sa_enhanced", "trtllm_extras",
                 "bundle_drafter", "served_drafter_dir"):
        assert hasattr(Mechanism, name) and name in mechanism, name
