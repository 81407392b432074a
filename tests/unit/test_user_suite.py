"""``measure --suite FILE|DIR`` and recipe ``measure.suite``: layouts, categories, the overlap refusal, the context
check, the CLI on a tiny random Llama, and build's dataset.jsonl from the recipe's suite."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.unit.test_measure import target  # noqa: F401  (module fixture: a tiny random Llama + tokenizer)
from trtllm_spec.data.user_suite import (
    check_context,
    check_overlap,
    load_user_suite,
    prompt_texts,
    select_suite,
)
from trtllm_spec.errors import UserError
from trtllm_spec.measure.profile import profile_problems


def jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


ROWS = [
    {"id": "a", "category": "coding", "messages": [{"role": "system", "content": "be brief"},
                                                    {"role": "user", "content": "w1 w2 w3 w4 w1 w2"}]},
    {"id": "b", "category": "coding", "prompt": "w5 w6 w7 w5 w6 w7"},
    {"id": "c", "category": "chat", "conversations": [{"from": "human", "value": "w9 w8 w9 w8"},
                                                      {"from": "gpt", "value": "w1 w1"}]},
    {"question_id": "d", "category": "chat", "turns": ["w3 w3 w4 w4", "second turn"]},
]


def test_layouts_and_categories(tmp_path):
    items, prov = load_user_suite(jsonl(tmp_path / "s.jsonl", ROWS))
    by_id = {it.prompt_id: it for it in items}
    assert [it.category for it in items] == ["coding", "coding", "chat", "chat"]
    assert by_id["a"].messages[0] == {"role": "system", "content": "be brief"}
    assert by_id["b"].messages == [{"role": "user", "content": "w5 w6 w7 w5 w6 w7"}]
    assert by_id["c"].messages == [{"role": "user", "content": "w9 w8 w9 w8"}]  # trailing reply dropped
    assert by_id["d"].messages == [{"role": "user", "content": "w3 w3 w4 w4"}]  # first SPEED-Bench turn
    assert prov["categories"] == {"coding": 2, "chat": 2} and len(prov["sources"]["user"]["files"][0]["sha256"]) == 64
    one, _ = load_user_suite(tmp_path / "s.jsonl", ["chat"], num_prompts=1)
    assert [it.prompt_id for it in one] == ["c"]


def test_folder_names_categories_and_default_all(tmp_path):
    jsonl(tmp_path / "d" / "math.jsonl", [{"prompt": "w1 w2"}, {"prompt": "w3 w4"}])
    jsonl(tmp_path / "d" / "code.jsonl", [{"prompt": "w5"}])
    items, prov = load_user_suite(tmp_path / "d")
    assert prov["categories"] == {"code": 1, "math": 2}
    items, _ = select_suite(jsonl(tmp_path / "flat.jsonl", [{"prompt": "w1"}]), None, 10, 0)
    assert [it.category for it in items] == ["all"]


BAD = {
    "empty": ([""], "holds no prompts"),
    "no_prompt": ([{"id": 1, "text": "hi"}], "needs 'messages' (OpenAI chat), 'prompt'"),
    "unknown_role": ([{"messages": [{"role": "robot", "content": "hi"}]}], "unknown role 'robot'"),
    "sharegpt_role": ([{"conversations": [{"from": "bot", "value": "hi"}]}], "unknown role 'bot'"),
    "only_assistant": ([{"messages": [{"role": "assistant", "content": "hi"}]}], "must contain a user turn"),
    "not_json": (["{nope"], "line 1 is not JSON"),
    "empty_text": ([{"messages": [{"role": "user", "content": " "}]}], "has no text"),
    "duplicate_id": ([{"id": "x", "prompt": "a"}, {"id": "x", "prompt": "b"}], "appears twice"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_suite_files(tmp_path, case):
    rows, match = BAD[case]
    with pytest.raises(UserError, match=re.escape(match)):
        load_user_suite(jsonl(tmp_path / "s.jsonl", rows))


def test_missing_parquet_and_unknown_category(tmp_path):
    with pytest.raises(UserError, match="neither 'speed-lite' nor an existing"):
        select_suite(tmp_path / "nope.jsonl", None, 1, 0)
    (tmp_path / "q.parquet").write_bytes(b"PAR1")
    with pytest.raises(UserError, match="is parquet; export it to JSONL first"):
        load_user_suite(tmp_path / "q.parquet")
    with pytest.raises(UserError, match="has no category 'math'; it has: coding, chat"):
        load_user_suite(jsonl(tmp_path / "s.jsonl", ROWS), ["math"])


def test_overlap_refused_or_warned(tmp_path):
    items, _ = load_user_suite(jsonl(tmp_path / "s.jsonl", ROWS))
    training = prompt_texts([[{"role": "user", "content": "w5  w6 w7 w5 w6 w7"}]])  # whitespace differs
    with pytest.raises(UserError, match=r"1 of 4 suite prompts are also training prompts .*--allow-overlap"):
        check_overlap(items, training, False, "t.jsonl")
    warned = []
    rec = check_overlap(items, training, True, "t.jsonl", warned.append)
    assert rec == {"checked_against": "t.jsonl", "overlapping": 1, "allowed": True}
    assert "1 of 4 suite prompts" in warned[0]
    assert check_overlap(items, None, False, "not checked: x") == {"checked_against": None, "note": "not checked: x"}


def test_context_check(tmp_path):
    items, _ = load_user_suite(jsonl(tmp_path / "s.jsonl", [{"id": "long", "prompt": "w1"}]))
    check_context(items, [[1] * 10], 20, 64, 3)
    with pytest.raises(UserError, match="suite prompt all/user/long has 60 tokens; .* over the target's context of 64"):
        check_context(items, [[1] * 60], 20, 64, 3)


# ---- the CLI on a tiny target ---------------------------------------------------------------------------

def test_cli_measure_own_suite(cli, target, tmp_path):  # noqa: F811
    suite = jsonl(tmp_path / "s.jsonl", ROWS)
    out = tmp_path / "m"
    r = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "3", "--suite", suite,
            "--max-new-tokens", "10", "--device", "cpu", "--out", out)
    assert r.exit_code == 0, r.output
    prof = json.loads((out / "speculation_profile.json").read_text())
    assert profile_problems(prof) == [] and set(prof["categories"]) == {"coding", "chat"}
    assert prof["overall"]["identical_outputs"] == 4
    assert prof["suite"]["suite"] == str(suite.resolve()) and "overlap" in prof["suite"]
    assert json.loads((out / "provenance.json").read_text())["recipe"]["measure"]["suite"] == str(suite)


def cli_bad_cases(tmp_path: Path) -> dict:
    suite = jsonl(tmp_path / "s.jsonl", ROWS)
    return {
        "no_prompts": (["--suite", jsonl(tmp_path / "e.jsonl", [""])], "holds no prompts"),
        "unknown_role": (["--suite", jsonl(tmp_path / "r.jsonl", [{"messages": [{"role": "bot", "content": "x"}]}])],
                         "unknown role 'bot'"),
        "overlap": (["--suite", suite, "--training-data", jsonl(tmp_path / "t.jsonl", [
            {"messages": [{"role": "user", "content": "w9 w8 w9 w8"}, {"role": "assistant", "content": "ok"}]}])],
            "1 of 4 suite prompts are also training prompts"),
        "too_long": (["--suite", jsonl(tmp_path / "l.jsonl", [{"prompt": " ".join(["w7"] * 1100)}])],
                     "over the target's context of 1024"),
        "training_data_speed_lite": (["--training-data", suite], "speed-lite is split from the training prompts"),
        "missing_training_data": (["--suite", suite, "--training-data", tmp_path / "no.jsonl"], "does not exist"),
    }


@pytest.mark.parametrize("case", ["no_prompts", "unknown_role", "overlap", "too_long", "training_data_speed_lite",
                                  "missing_training_data"])
def test_cli_bad_suites_exit_2_nothing_written(cli, target, tmp_path, case):  # noqa: F811
    args, match = cli_bad_cases(tmp_path)[case]
    r = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "3", "--max-new-tokens", "8",
            *args, "--out", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert match in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_cli_overlap_allowed_warns(cli, target, tmp_path):  # noqa: F811
    suite = jsonl(tmp_path / "s.jsonl", ROWS[2:3])
    train = jsonl(tmp_path / "t.jsonl", [{"conversations": [{"from": "human", "value": "w9 w8 w9 w8"}]}])
    r = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--max-new-tokens", "6",
            "--suite", suite, "--training-data", train, "--allow-overlap", "--json")
    assert r.exit_code == 0, r.output
    assert "warning: 1 of 1 suite prompts are also training prompts" in r.output


# ---- recipe measure.suite and build ---------------------------------------------------------------------

def test_recipe_suite_feeds_the_bundle_dataset(cli, tmp_path):
    suite = jsonl(tmp_path / "prompts" / "mine.jsonl", [{"category": "support", "prompt": "How do I reset my router?"}])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "own", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "ngram"}, "measure": {"suite": "prompts/mine.jsonl"}}))
    r = cli("build", recipe, "--out", tmp_path / "b")
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "b" / "dataset.jsonl").read_text().splitlines()]
    assert [x["prompt"] for x in rows] == ["How do I reset my router?"]
    suite.unlink()
    r = cli("build", recipe, "--out", tmp_path / "b2")
    assert r.exit_code == 2 and "measure.suite 'prompts/mine.jsonl'" in r.output
    assert not (tmp_path / "b2").exists()
