"""``measure`` as subcommands: each lists only the options its code reads; the old spellings point to the new ones;
the budget counts every decode a subcommand runs."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap

import pytest

from trtllm_spec.cli.measure import measure_group
from trtllm_spec.measure.engines import SOURCES

SUBCOMMANDS = tuple(s.name for s in SOURCES)  # every subcommand, vllm included


def test_measure_help_lists_the_subcommands(cli):
    r = cli("measure", "--help")
    assert r.exit_code == 0
    for name in SUBCOMMANDS:
        assert f"\n  {name}" in r.output, name
    assert set(measure_group.commands) == set(SUBCOMMANDS)


def _names_read(fn) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    body = tree.body[0].body
    return {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_lists_only_options_its_code_reads(cli, name):
    """Every parameter (option or argument) of the subcommand is read in its body, and its callback takes nothing
    else (no **kwargs that could swallow an option unread); ``--help`` shows exactly those options."""
    cmd = measure_group.commands[name]
    fn = inspect.unwrap(cmd.callback)
    sig = inspect.signature(fn)
    assert all(p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in sig.parameters.values())
    params = {p.name for p in cmd.params if p.name != "help"}
    if "request_mode" in sig.parameters:  # @request_mode_options reads its flags and passes one request_mode
        from trtllm_spec.cli.request_mode import FLAGS

        assert set(FLAGS) <= params, name
        params = (params - set(FLAGS)) | {"request_mode"}
    assert params == set(sig.parameters), name
    unread = params - _names_read(fn)
    assert not unread, f"measure {name} lists options its code never reads: {sorted(unread)}"
    r = cli("measure", name, "--help")
    assert r.exit_code == 0
    shown = {o for p in cmd.params for o in p.opts if o.startswith("--")}
    assert "--engine" not in r.output and "With --engine" not in r.output
    for opt in shown:
        assert opt in r.output


def test_options_are_per_subcommand():
    opts = {n: {o for p in c.params for o in p.opts} for n, c in measure_group.commands.items()}
    assert "--reference-engine" in opts["reference"] and "--reference-engine" not in opts["trtllm"]
    assert "--server-url" in opts["served"] and not any("--server-url" in v for k, v in opts.items() if k != "served")
    # llama.cpp samples the request mode's distribution too (issue 38): --temperature is its option
    assert "--compare-reference" in opts["llamacpp"] and "--temperature" in opts["llamacpp"]
    assert "--response-format" in opts["reference"] and "--response-format" not in opts["trtllm"]
    assert "--dtype" not in opts["trtllm"] and "--device" not in opts["trtllm"]  # the bundle decides
    assert "--suite" not in opts["from-bench"] and "--allow-long" not in opts["from-metrics"]  # nothing decoded


def test_no_subcommand_is_reference_and_old_spellings_point_to_the_new(cli, tiny_suite, tmp_path):
    r = cli("measure", "--target", tmp_path / "nope", "--drafter", "ngram", "--draft-len", "2", "--json")
    assert r.exit_code == 2 and "runs 'trtllm-spec measure reference'" in r.stderr and "does not exist" in r.stderr
    for old, new in ((["--engine", "llamacpp"], "measure llamacpp"), (["--engine=openai"], "measure served"),
                     (["--engine", "trtllm"], "measure trtllm"), (["--engine", "pytorch"], "measure reference"),
                     (["--from-trtllm-metrics", "m.json"], "measure from-metrics")):
        r = cli("measure", "--target", "x", *old, "--json")
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1 and f"now 'trtllm-spec {new}" in errors[0], r.output


def test_trtllm_budget_counts_the_baseline_decode(cli, tiny_target, tiny_suite, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # as on any machine without it
    b = tmp_path / "bundle"
    (b / "drafter").mkdir(parents=True)
    (b / "llm_api_options.yaml").write_text("speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 3\n"
                                            "  speculative_model: drafter\n")
    r = cli("measure", "trtllm", "--target", tiny_target, "--bundle", b, "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "4", "--json")
    # the budget comes first, before the bundle is read (this folder is no built bundle: refused after it)
    assert r.exit_code == 2 and "has no manifest.json" in r.stderr
    assert "budget: 2 requests (1 prompts x 2 decodes: the target alone and speculative)" in r.stderr, r.stderr
