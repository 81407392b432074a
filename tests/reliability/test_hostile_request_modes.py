"""Hostile request modes (issue 46 item 5): what ``--response-format`` and ``--chat-template-arg`` may be handed.
Each is refused before anything is measured or written: exit 2, one line naming what is wrong, the output folder
untouched. Run through ``measure reference`` on a tiny byte-level target (CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.conftest import assert_clean_failure, snapshot
from tests.unit.test_request_mode import write_byte_target

# a template with no thinking switch (SmolLM2's kind): enable_thinking would be accepted and ignored
PLAIN = ("{% for m in messages %}{{ '<s>' + m['role'] + '\n' + m['content'] + '</s>\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<s>assistant\n' }}{% endif %}")


@pytest.fixture(scope="module")
def byte_target(tmp_path_factory) -> Path:
    return write_byte_target(tmp_path_factory.mktemp("hrm") / "target")


@pytest.fixture(scope="module")
def plain_target(tmp_path_factory) -> Path:
    return write_byte_target(tmp_path_factory.mktemp("hrm") / "plain", chat_template=PLAIN)


def measure(cli, target: Path, out: Path, *args):
    return cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2",
               "--categories", "coding", "--num-prompts", "1", "--max-new-tokens", "4", "--out", out, *args)


def refused(cli, tmp_path: Path, target: Path, args: list, names: list[str]) -> str:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    before = snapshot(work)
    r = measure(cli, target, work / "out", *args)
    return assert_clean_failure(r.output, r.exit_code, 2, names, before, snapshot(work))


@pytest.mark.parametrize("schema, names", [
    ('["type", "object"]', ["response_format", "object"]),  # JSON, but a list
    ('"json_schema"', ["response_format", "json_object"]),  # JSON, a string that is not json_object
    ('{"type": "objekt"}', ["not a valid JSON Schema"]),
    ('{"properties": 5}', ["not a valid JSON Schema", "properties"]),
    ('{"type": "object", "required": "name"}', ["not a valid JSON Schema", "required"]),
])
def test_valid_json_that_is_no_json_schema(cli, byte_target, tiny_suite, tmp_path, schema, names):
    refused(cli, tmp_path, byte_target, ["--response-format", schema], names)


@pytest.mark.parametrize("ref", ["file:///etc/passwd", "https://example.com/schema.json", "other.json",
                                 "other.json#/$defs/x", "//example.com/s.json"])
def test_a_ref_to_a_file_or_url_is_refused_without_fetching_it(cli, byte_target, tiny_suite, tmp_path, ref):
    schema = json.dumps({"type": "object", "properties": {"a": {"$ref": ref}}})
    line = refused(cli, tmp_path, byte_target, ["--response-format", schema], ["$ref", ref])
    assert "#/" in line  # says what is allowed: a reference inside the schema


def test_a_local_ref_is_accepted(cli, byte_target, tiny_suite, tmp_path):
    schema = {"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/n"}},
              "required": ["n"]}
    r = measure(cli, byte_target, tmp_path / "ok", "--response-format", json.dumps(schema))
    assert r.exit_code == 0, r.output


def test_a_schema_xgrammar_cannot_compile(cli, byte_target, tiny_suite, tmp_path):
    """Valid JSON Schema (the metaschema accepts the pattern as a string), but not a regex xgrammar compiles."""
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)y"}},
                         "required": ["a"]})
    refused(cli, tmp_path, byte_target, ["--response-format", schema], ["xgrammar", "response_format"])


def test_a_10_mb_schema_is_refused_by_its_size(cli, byte_target, tiny_suite, tmp_path):
    props = {f"p{i}": {"type": "string", "description": "x" * 200} for i in range(45_000)}
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({"type": "object", "properties": props}))
    assert path.stat().st_size > 10_000_000
    refused(cli, tmp_path, byte_target, ["--response-format", path], ["huge.json", "MB"])
    inline = json.dumps({"type": "object", "properties": props})  # the same inline: refused by its length
    refused(cli, tmp_path, byte_target, ["--response-format", inline], ["--response-format", "MB"])


def test_enable_thinking_for_a_template_that_ignores_it(cli, plain_target, tiny_suite, tmp_path):
    line = refused(cli, tmp_path, plain_target, ["--chat-template-arg", "enable_thinking=false"],
                   ["enable_thinking", "does not read it"])
    assert "\n" not in line


def test_the_same_schemas_are_refused_in_a_recipe(tmp_path):
    """``workload.request_mode.response_format`` goes through the same checks (a recipe is another way in)."""
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.errors import TrtllmSpecError

    for fmt, name in (({"$ref": "https://example.com/s.json"}, "$ref"),
                      ({"type": "object", "description": "x" * 2_000_000}, "MB")):
        with pytest.raises(TrtllmSpecError, match=name.replace("$", r"\$")) as exc:
            recipe_from_dict({"target": {"model": "qwen3-8b"}, "drafter": {"type": "ngram"},
                              "workload": {"request_mode": {"response_format": fmt}}})
        assert "\n" not in str(exc.value)
