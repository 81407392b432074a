"""A decoding tag shared by several mechanisms (TensorRT-LLM runs DFlash and DFlash2 under ``decoding_type: DFlash``,
told apart by the checkpoint's architecture): a toy mechanism that shares the ``DFlash`` tag is added with ONE
registration, a bundle is matched to its mechanism by the bundle's record (never by the tag alone), an engine
report whose tag is shared and that comes without a bundle is refused in one line, and with one mechanism per tag
nothing changes. The toy is unregistered after each test (``drafters/registry.unregister``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests import calibration_fakes as fakes
from tests.bundle_fakes import seal_bundle
from trtllm_spec.core import releases
from trtllm_spec.errors import UserError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_reports"
BENCH = FIXTURES / "fake_bench_report_c1.json"  # a FAKE trtllm-bench report (test_engine_reports.py), D = 3
SPEC = {"decoding_type": "DFlash", "max_draft_len": 3, "speculative_model": "drafter"}


def _toy_class():
    from typing import Literal

    from trtllm_spec.drafters.dflash import DFlash
    from trtllm_spec.drafters.dflash.config import DFlashDrafter

    class ToyFlashDrafter(DFlashDrafter):
        type: Literal["toyflash"] = "toyflash"

    class ToyFlash(DFlash):
        """Shares DFlash's tag: ``decoding_types`` is DFlash's (inherited), it introduces no tag of its own."""

        name, title = "toyflash", "toy DFlash sharer"
        config_class = ToyFlashDrafter

        def default_config(self):
            return ToyFlashDrafter()

        def recognises(self, cfg: dict) -> bool:  # what tells it from DFlash in a checkpoint: its architecture
            return (cfg.get("architectures") or [""])[0] == "ToyFlashDraftModel"

    return ToyFlash


@pytest.fixture
def toyflash():
    from trtllm_spec.drafters import registry

    mech = registry.register(_toy_class()())
    yield mech
    registry.unregister("toyflash")


def bench_report(tmp_path: Path, mode: str = "DFlash") -> Path:
    rep = json.loads(BENCH.read_text())
    rep["decoding_stats"]["mode"] = mode
    path = tmp_path / f"report_{mode}.json"
    path.write_text(json.dumps(rep))
    return path


def bundle(tmp_path: Path, drafter: str, spec: dict = SPEC, name: str | None = None) -> Path:
    b = tmp_path / (name or f"bundle_{drafter}")
    b.mkdir()
    (b / "llm_api_options.yaml").write_text("# TensorRT-LLM 1.3 LLM API options\n"
                                            + yaml.safe_dump({"speculative_config": spec}))
    return seal_bundle(b, drafter, "1.3")


def test_one_registration_shares_the_tag(toyflash):
    from trtllm_spec.drafters import registry

    assert releases.DECODING_TAGS["DFlash"].drafters == ("dflash", "dflash2", "toyflash")
    assert releases.tag_types("DFlash") == registry.decoding_types("DFlash") == ("dflash", "dflash2", "toyflash")
    assert releases.DECODING_TAGS["DFlash"].since == "1.3"  # the tag's own record is unchanged
    assert "DFlash" in releases.get("1.3").tags and "DFlash" not in releases.get("1.2").tags
    with pytest.raises(UserError, match=r"'DFlash': 3 drafter types share .*\(dflash, dflash2, toyflash\).*name the "
                                        r"drafter type") as exc:
        releases.tag_type("DFlash")  # never guessed
    assert "\n" not in str(exc.value)
    assert releases.tag_type("DSpark") == "dspark"  # the other tags keep one mechanism
    # the options mirror validates the toy's options with the shared tag's class
    from trtllm_spec.deploy.trtllm_schema import validate_options

    opts = toyflash.trtllm_speculative_config(toyflash.default_config(), profile="1.3", max_draft_len=3,
                                              speculative_model="drafter")
    assert opts["decoding_type"] == "DFlash"
    validate_options({"speculative_config": opts}, "1.3")


def test_unregister_leaves_one_mechanism_per_tag():
    from trtllm_spec.drafters import registry

    registry.register(_toy_class()())
    registry.unregister("toyflash")
    assert releases.DECODING_TAGS["DFlash"].drafters == ("dflash", "dflash2") == registry.decoding_types("DFlash")
    assert "toyflash" not in registry.MECHANISMS


def test_a_bundle_is_matched_by_its_record(toyflash, tmp_path):
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.measure.engine_common import options_type
    from trtllm_spec.measure.engine_reports import profile_from_bench_report

    report = bench_report(tmp_path)
    for drafter in ("dflash", "toyflash"):
        b = read_bundle(bundle(tmp_path, drafter))
        assert b.drafter == drafter
        options = b.speculative_options()
        assert options_type(options, b) == drafter
        prof = profile_from_bench_report(report, options=options, bundle=b, profile=b.profile)
        assert prof["drafter"]["type"] == drafter and prof["drafter"]["draft_len"] == 3
    # a mechanism that does not write the tag is still a disagreement between the manifest and the options
    with pytest.raises(UserError, match=r"manifest.json says drafter.type 'dspark' but llm_api_options.yaml says "
                                        r"\"decoding_type 'DFlash'\""):
        read_bundle(bundle(tmp_path, "dspark"))
    # and a report of another tag does not belong to a toyflash bundle
    b = read_bundle(bundle(tmp_path, "toyflash", name="again"))
    with pytest.raises(UserError, match=r"measured decoding mode 'Eagle3' \(eagle3\), but the bundle's options "
                                        r"speculate with toyflash"):
        profile_from_bench_report(bench_report(tmp_path, "Eagle3"), options=b.speculative_options(), bundle=b)


def test_a_shared_tag_without_a_bundle_is_one_line(toyflash, tmp_path, cli):
    from trtllm_spec.measure.engine_reports import profile_from_bench_report

    report = bench_report(tmp_path)
    with pytest.raises(UserError) as exc:
        profile_from_bench_report(report)
    msg = str(exc.value)
    assert "\n" not in msg and str(report) in msg and "'DFlash'" in msg and "dflash, dflash2, toyflash" in msg
    assert "give --bundle DIR" in msg
    res = cli("measure", "from-bench", report, "--out", tmp_path / "out")
    assert res.exit_code == 2 and "dflash, dflash2, toyflash" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_calibration_matches_the_expected_drafter_among_the_sharers(toyflash, tmp_path):
    from trtllm_spec.measure.calibration import RunExpectation, RunOptions, measurement

    rep = fakes.variant(fakes.FILES[3], decoding_stats={"mode": "DFlash"})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(rep))
    opts = RunOptions("llm_api_options.yaml", None, None)

    def exp(drafter: str) -> RunExpectation:
        return RunExpectation("bundle B", (fakes.HF_ID,), 1, "1.2", drafter, opts, opts)

    for drafter in ("dflash", "toyflash"):
        assert measurement(rep, exp(drafter), path).draft_len == 3
    with pytest.raises(UserError, match="ran decoding mode 'DFlash'; the bundle B's drafter is eagle3"):
        measurement(rep, exp("eagle3"), path)


def test_a_tag_of_one_mechanism_needs_no_bundle_and_dflash_asks(tmp_path):
    """Every tag but DFlash (DFlash and DFlash2 share it) has one mechanism and reads without a bundle; a DFlash
    report without one asks which ran."""
    from trtllm_spec.measure.engine_reports import profile_from_bench_report

    assert {tag for tag, t in releases.DECODING_TAGS.items() if len(t.drafters) > 1} == {"DFlash"}
    assert releases.tag_types("DFlash") == ("dflash", "dflash2")
    assert releases.tag_type("Eagle") == "eagle3" and releases.tag_type("DSpark") == "dspark"
    assert releases.tag_type("DraftTarget") == "draft_model" and releases.tag_type("PARD") == "draft_model"
    assert releases.tag_type("nope") is None and releases.tag_types("nope") == ()
    prof = profile_from_bench_report(bench_report(tmp_path, "Eagle3"))  # no bundle: the one mechanism of the tag
    assert prof["drafter"]["type"] == "eagle3"
    with pytest.raises(UserError, match=r"'DFlash': 2 drafter types share .*\(dflash, dflash2\).*give --bundle"):
        profile_from_bench_report(bench_report(tmp_path))


def test_registrations_whose_tags_do_not_add_up_are_one_line():
    from trtllm_spec.core.recipe import DRAFTER_CLASS
    from trtllm_spec.drafters import registry

    toy = _toy_class()

    class Unknown(toy):
        decoding_types = ("DFlash3",)

    class NotDeclared(toy):
        new_decoding_tags = (releases.DecodingTag("ToyFlash", "toyflash", "1.3"),)  # decoding_types: DFlash only

    class Taken(toy):
        decoding_types = ("DFlash",)
        new_decoding_tags = (releases.DecodingTag("DFlash", "toyflash", "1.3"),)

    for cls, match in ((Unknown, r"decoding tag 'DFlash3' is not registered; introduce it in new_decoding_tags"),
                       (NotDeclared, r"new_decoding_tags has 'ToyFlash', which its decoding_types \('DFlash',\) "
                                     "lack"),
                       (Taken, r"decoding tag 'DFlash' is registered already \(written by dflash, dflash2\); to "
                               "share it")):
        with pytest.raises(UserError, match=match) as exc:
            registry.register(cls())
        assert "\n" not in str(exc.value)
        assert "toyflash" not in registry.MECHANISMS and "toyflash" not in DRAFTER_CLASS
        assert releases.DECODING_TAGS["DFlash"].drafters == ("dflash", "dflash2")
        assert "ToyFlash" not in releases.DECODING_TAGS
