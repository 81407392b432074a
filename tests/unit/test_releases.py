"""One record per TensorRT-LLM release (core/releases.py): numeric order, clear refusals, and the copies of its facts
outside Python (Dockerfile, docs/docker.md, docs/trtllm_compat.md's release columns) checked against it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trtllm_spec.core import releases
from trtllm_spec.core.releases import Release, get, order
from trtllm_spec.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def test_release_order_is_numeric():
    assert order("1.10") > order("1.9") > order("1.4") > order("1.3") > order("1.2")
    assert sorted(["1.10", "1.9", "1.2"], key=order) == ["1.2", "1.9", "1.10"]
    assert releases.at_least("1.10", "1.3") and not releases.at_least("1.2", "1.3")
    assert not releases.at_least("1.4", None)  # 'never'
    assert list(releases.RELEASES) == sorted(releases.RELEASES, key=order)


def test_an_unknown_or_newer_release_is_one_clear_line():
    with pytest.raises(UserError, match=r"'1\.10' is newer than any release trtllm-spec knows \('1\.2', '1\.3', "
                                        r"'1\.4'\).*Adding a TensorRT-LLM release") as exc:
        get("1.10")
    assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match=r"unknown TensorRT-LLM release '0\.9'"):
        get("0.9")
    with pytest.raises(UserError, match="is not a release name"):
        order("latest")


def test_the_recipe_and_the_cli_refuse_an_unknown_release(cli, tmp_path):
    from trtllm_spec.core.recipe import RecipeError
    from trtllm_spec.core.recipe_load import recipe_from_dict

    base = {"name": "r", "target": {"model": "llama-3.1-8b-instruct"}, "drafter": {"type": "eagle3"}}
    with pytest.raises(RecipeError, match=r"engine.trtllm_version.*'1\.9' is newer than any release"):
        recipe_from_dict({**base, "engine": {"trtllm_version": "1.9"}})
    assert recipe_from_dict({**base, "engine": {"trtllm_version": 1.4}}).trtllm_profile == "1.4"  # unquoted
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--drafter", "eagle3", "--gpu", "h100",
            "--trtllm-version", "1.9")
    assert r.exit_code == 2 and "'1.9' is not one of 'auto', '1.2', '1.3', '1.4'" in r.output


def test_a_release_record_missing_a_required_fact_is_refused():
    with pytest.raises(UserError, match="'image' is missing"):
        releases.register(Release("1.5", image="", read_from="pages", final=False, stable=False))
    with pytest.raises(UserError, match="mirror_base '1.1' is not a registered release"):
        releases.register(Release("1.5", image="x", read_from="pages", final=False, stable=False, mirror_base="1.1"))
    assert "1.5" not in releases.RELEASES


def test_the_image_of_each_release_is_the_one_the_scripts_and_the_docker_docs_name():
    from trtllm_spec.deploy.scripts import DEFAULT_SERVE_IMAGE, serve_image

    images = {r.image for r in releases.RELEASES.values()}
    dockerfile = (REPO / "Dockerfile").read_text()
    default = re.search(r"^ARG TRTLLM_IMAGE=(\S+)$", dockerfile, re.M).group(1)
    assert default == get(releases.newest(stable_only=True)).image  # the newest stable release's: auto's
    assert serve_image("1.2") == "nvcr.io#nvidia/tensorrt-llm/release:1.2.1"
    assert serve_image(releases.newest(stable_only=True)) == DEFAULT_SERVE_IMAGE
    for name, text in (("Dockerfile", dockerfile), ("docs/docker.md", (REPO / "docs" / "docker.md").read_text())):
        named = set(re.findall(r"nvcr\.io[/#]nvidia/tensorrt-llm/release:[\w.]+", text))
        named = {n.replace("#", "/") for n in named}
        assert named and named <= images, f"{name} names {sorted(named - images)}, not a release record's image"
    docker_md = (REPO / "docs" / "docker.md").read_text()
    for r in releases.RELEASES.values():
        assert f"`{r.name}` -> `release:{r.image.rsplit(':', 1)[1]}`" in docker_md


def _tables(text: str) -> list[list[list[str]]]:
    tables, cur = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cur.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif cur:
            tables.append(cur)
            cur = []
    return tables + ([cur] if cur else [])


def test_the_release_columns_of_trtllm_compat_are_the_records():
    """Every table of docs/trtllm_compat.md with release columns has one per record, in order; the schedule
    table says 'one D' exactly where the descriptor's first schedule release is later (or never), and says the
    floor where the record says a tier cannot switch speculation off."""
    from trtllm_spec.core.trtllm_gates import engine_schedule
    from trtllm_spec.drafters.registry import MECHANISMS

    text = (REPO / "docs" / "trtllm_compat.md").read_text()
    names = list(releases.RELEASES)
    with_releases = [t for t in _tables(text) if any(re.fullmatch(r"\d+\.\d+", c) for c in t[0])]
    assert len(with_releases) >= 2
    for t in with_releases:
        assert [c for c in t[0] if re.fullmatch(r"\d+\.\d+", c)] == names, t[0]
    sched = next(t for t in with_releases if t[0][0] == "mechanism")
    rows = {"EAGLE-3": ("eagle3",), "MTP, DFlash, draft-target, SA": ("mtp", "dflash", "draft_model", "suffix"),
            "NGram, DSpark": ("ngram", "dspark"), "DFlash2": ("dflash2",)}
    covered = set()
    for row in sched[2:]:
        kinds = next(v for k, v in rows.items() if row[0].startswith(k))
        covered |= set(kinds)
        for i, release in enumerate(names):
            cell = row[1 + i]
            for kind in kinds:
                applies, switches_off, _ = engine_schedule(MECHANISMS[kind], release)
                assert (cell == "one D" or cell.startswith("one D ")) == (not applies), (row[0], release, cell)
                if applies:
                    assert ("planned at D >= 1" in cell) == (not switches_off), (row[0], release, cell)
    assert covered == set(MECHANISMS) - {"eagle_mtp"}  # TensorRT-LLM serves no trained EAGLE-MTP head


def test_release_facts_drive_the_mirror_and_the_gates():
    from trtllm_spec.core.trtllm_gates import cutoff_gate
    from trtllm_spec.deploy.trtllm_schema import DECODING_TAGS, TAG_SINCE

    assert {r.name: r.tags for r in releases.RELEASES.values()} == DECODING_TAGS
    assert TAG_SINCE == {"DFlash": "1.3", "DSpark": "1.3", "SA": "1.3"}
    for r in releases.RELEASES.values():
        _, gates, _ = cutoff_gate({8: 4}, 4, r.name)
        assert bool(gates) == r.max_concurrency


def test_auto_applies_the_schedule_and_a_12_pin_says_what_13_adds(cli):
    """Issue 33 item 5: with auto (1.3) the plan's per-batch schedule reaches the options; pinned to 1.2 it cannot,
    and the plan says which release would apply it."""
    import json

    args = ["plan", "--target", "llama-3.1-8b-instruct", "--drafter", "eagle3", "--gpu", "h100",
            "--batch-sizes", "1,8,64", "--json"]
    r = cli(*args)
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])["recommendation"]
    assert rec["trtllm_profile"] == "1.3" and rec["draft_len_schedule"]
    r = cli(*args, "--trtllm-version", "1.2")
    rec = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])["recommendation"]
    assert rec["trtllm_profile"] == "1.2" and rec["draft_len_schedule"] is None
    assert "TensorRT-LLM 1.3 does (engine.trtllm_version: '1.3')" in rec["draft_len_rule"]
