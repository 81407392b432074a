"""plan --calibrate with 'measure served' files (any engine): FAKE served measurements whose TPOTs the step model
makes from known host costs (tests/calibration_fakes.py), the terms recovered, and every refusal the issue names
(a single D, mixed targets / drafters, a concurrency not reached, AL outside [1, 1 + D], a file that does not
say what the server ran)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests import calibration_fakes as fakes
from trtllm_spec.core.artifacts import ServedMeasurement

KNOWN = fakes.KNOWN_TERMS_S


def served(tmp_path, name: str, d: int, levels=(1, 8), *, drafter="eagle3", target=fakes.TARGET, owner="vllm",
           serves=True, achieved=None, al=None) -> str:
    """A served measurement folder whose TPOT per level is the step model's with the known host costs."""
    rows = []
    for c in levels:
        a = fakes.acceptance_length(d) if d else 1.0
        acc = ({"reported": True, "source": "/metrics vllm:spec_decode_* counters (vLLM)", "num_drafts": 100,
                "num_draft_tokens": 100 * d, "num_accepted_tokens": round(100 * (a - 1)),
                "acceptance_length": a if al is None else al, "draft_acceptance_rate": 0.5} if d else
               {"reported": False, "source": None, "acceptance_length": None, "draft_acceptance_rate": None,
                "note": "not reported"})
        tpot_ms = fakes.model_tpot_s(d, c) * 1e3
        rows.append({"concurrency": c, "requests": 2 * c, "wall_s": 10.0,
                     "achieved_concurrency": achieved if achieved is not None else c * 0.97,
                     "output_tokens": 2 * c * fakes.OSL, "ttft_ms": None,
                     "tpot_ms": {"mean": tpot_ms, "p50": tpot_ms, "p90": tpot_ms, "p99": tpot_ms},
                     "server_acceptance": acc})
    server = {"url": "http://127.0.0.1:8000", "model": target, "checks": [], "owned_by": owner}
    if serves:
        server["serves"] = {"drafter": drafter if d else None, "draft_len": d, "checked": "fake"}
    data = ServedMeasurement.build(engine="openai", server=server, target={"spec": target, "path": None},
                                   suite={"name": "speed-lite", "prompt_tokens_mean": float(fakes.ISL)},
                                   settings={"max_tokens": fakes.OSL}, levels=rows, prediction={})
    folder = tmp_path / name
    folder.mkdir()
    (folder / "served_measurement.json").write_text(json.dumps(data))
    return str(folder)


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(fakes.recipe_dict()))
    return path


def test_served_runs_of_another_engine_calibrate_the_plan(cli, recipe, tmp_path):
    out = tmp_path / "plan"
    r = cli("plan", "--recipe", recipe, "--out", out, "--calibrate", served(tmp_path, "plain", 0),
            served(tmp_path, "d3", 3), served(tmp_path, "d2", 2))
    assert r.exit_code == 0, r.output
    host = json.loads((out / "host_costs.json").read_text())
    plan = json.loads((out / "plan.json").read_text())
    for term, value in KNOWN.items():  # two D and two batch sizes identify every term
        assert host[term] == pytest.approx(value, rel=0.10), term
    assert host["framework"] == "vLLM" and host["release"] == "served"
    assert "predicts vLLM's step times" in plan["host_costs"]["name"]
    assert len(host["fit"]["measurements"]) == 6 and {f["engine"] for f in host["fit"]["files"]} == {"vLLM"}
    for row in host["fit"]["measurements"]:
        assert row["fitted_tpot_s"] == pytest.approx(row["measured_tpot_s"], rel=0.02)


@pytest.mark.parametrize("files, match", [
    (lambda t: [served(t, "a", 3), served(t, "b", 3, levels=(4,))], "all run D = 3"),
    (lambda t: [served(t, "a", 0), served(t, "b", 0, levels=(4,))], "all run D = 0"),
    (lambda t: [served(t, "a", 0), served(t, "b", 3, target="qwen3-8b")], "another model's runs"),
    (lambda t: [served(t, "a", 0), served(t, "b", 3, drafter="ngram")], "another drafter's step times"),
    (lambda t: [served(t, "a", 0), served(t, "b", 3, owner="sglang")], "mix engines"),
    (lambda t: [served(t, "a", 0), served(t, "b", 3, achieved=3.0)], "did not keep 8 requests in flight"),
    (lambda t: [served(t, "a", 0), served(t, "b", 3, al=4.5)], r"outside \[1, 4\]"),
    (lambda t: [served(t, "a", 0, serves=False), served(t, "b", 3)], "server.serves is missing"),
    (lambda t: [served(t, "a", 0), str(fakes.FIXTURES / fakes.FILES[3])], "one kind"),
])
def test_served_files_that_cannot_calibrate_are_refused(cli, recipe, tmp_path, files, match):
    r = cli("plan", "--recipe", recipe, "--out", tmp_path / "plan", "--calibrate", *files(tmp_path))
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error:") and len(r.output.strip().splitlines()) == 1, r.output
    import re

    assert re.search(match, r.output), r.output
    assert not (tmp_path / "plan").exists()


@pytest.mark.parametrize("args, match", [
    (["--serves-drafter", "eagle3"], "give --serves-draft-len D too"),
    (["--serves-draft-len", "-1"], "a draft length is >= 0"),
    (["--serves-drafter", "ngram", "--serves-draft-len", "0"], "drop --serves-drafter"),
    (["--serves-draft-len", "3"], "name what the server drafts with"),
    (["--serves-drafter", "eagle9", "--serves-draft-len", "3"], "not a drafter type"),
])
def test_measure_served_refuses_a_contradictory_declaration(cli, args, match):
    r = cli("measure", "served", "--server-url", "http://127.0.0.1:9", "--target", "smollm2-135m", "--json", *args)
    assert r.exit_code == 2 and match in r.output, r.output


def test_every_source_checks_the_declaration():
    """One check for every source a level carries (issue 55 item 2): the engine's counters (/metrics, iteration
    stats) and the responses' per-request blocks alike refuse more draft tokens per step than D, and drafts under
    D = 0; where none counts steps, the record says which sources could not be checked and why."""
    from trtllm_spec.errors import UserError
    from trtllm_spec.stages.served import check_serves_reports

    counters = {"concurrency": 4, "server_acceptance": {"reported": True, "source": "vLLM", "num_drafts": 10,
                                                        "num_draft_tokens": 40}}
    blocks = {"concurrency": 1, "server_acceptance": {"reported": False, "why": "it has no /metrics"},
              "per_request_acceptance": {"reported": True, "draft_counts": {
                  "source": "the responses' metrics.speculative_decoding", "responses": 2, "responses_drafting": 2,
                  "num_spec_steps": 4, "num_draft_tokens": 10, "max_draft_tokens_per_step": 5.0,
                  "max_at": "coding/mt_bench/0: 10 draft tokens in 2 steps"}}}
    trtllm = {"concurrency": 2, "server_acceptance": {"reported": True, "source": "iteration stats",
                                                      "num_requests_with_draft_tokens": 6, "num_draft_tokens": 24}}
    assert check_serves_reports({"drafter": "ngram", "draft_len": 4}, [counters], "u").startswith(
        "checked against vLLM (draft tokens per step <= D)")
    assert "checked against iteration stats" in check_serves_reports({"drafter": "ngram", "draft_len": 4}, [trtllm],
                                                                    "u")
    assert check_serves_reports({"drafter": "ngram", "draft_len": 5}, [blocks], "u") == (
        "checked against the responses' metrics.speculative_decoding (draft tokens per step <= D)")
    for lv, says in ((counters, "4.00 tokens per step at concurrency 4 (vLLM: 40 draft tokens in 10 steps)"),
                     (trtllm, "4.00 tokens per step at concurrency 2 (iteration stats"),
                     (blocks, "5.00 tokens per step at concurrency 1 (the responses' metrics.speculative_decoding; "
                              "coding/mt_bench/0: 10 draft tokens in 2 steps)")):
        with pytest.raises(UserError, match="more than --serves-draft-len 3") as err:
            check_serves_reports({"drafter": "ngram", "draft_len": 3}, [lv], "u")
        assert says in str(err.value)
        with pytest.raises(UserError, match="runs the target alone"):
            check_serves_reports({"drafter": None, "draft_len": 0}, [lv], "u")
    silent = {"concurrency": 1, "server_acceptance": {"reported": False, "why": "u/metrics answered HTTP 404"},
              "per_request_acceptance": {"reported": False}}
    said = check_serves_reports({"drafter": "ngram", "draft_len": 3}, [silent], "u")
    assert said.startswith("unchecked: no source counts draft steps: the engine's counters (u/metrics answered HTTP "
                           "404); the per-request blocks (no response carried one"), said
