"""``measure from-bench`` / ``measure from-metrics``: the engine's numbers into a speculation profile.

The fixtures in tests/fixtures/engine_reports are FAKES written by hand from the documented schemas
(trtllm-bench ``get_statistics_dict``; trtllm-serve IterationStats JSON): TensorRT-LLM cannot run here.
"""

from __future__ import annotations

import copy
import http.server
import json
import socket
import threading
from pathlib import Path

import pytest

from trtllm_spec.errors import UserError
from trtllm_spec.measure.engine_reports import BENCH_SOURCE, profile_from_bench_report
from trtllm_spec.measure.iteration_stats import METRICS_SOURCE, profile_from_iteration_stats
from trtllm_spec.measure.profile import validate_profile
from trtllm_spec.planner.acceptance import load_acceptance

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_reports"
BENCH = FIXTURES / "fake_bench_report_c1.json"
METRICS = FIXTURES / "fake_trtllm_serve_metrics.json"


def bench_report() -> dict:
    return json.loads(BENCH.read_text())


def write(tmp_path: Path, data, name: str = "report.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


def test_bench_report_al_leaves_the_context_phase_out():
    prof = profile_from_bench_report(BENCH)
    validate_profile(prof)
    rep = bench_report()
    n = rep["request_info"]["avg_output_length"]
    a = rep["decoding_stats"]["num_accepted_draft_tokens_percentiles"]["average"]
    # trtllm-bench: iterations I = N - A include the context phase; ours: (N - 1) / (I - 1) tokens per iteration
    expected = (n - 1) / (n - a - 1)
    ov = prof["overall"]
    assert ov["mean_acceptance_length"] == pytest.approx(expected, abs=1e-6)
    assert prof["drafter"] == {**prof["drafter"], "type": "eagle3", "draft_len": 3}
    assert ov["acceptance_length"] == {"3": pytest.approx(expected, abs=1e-6)}
    assert ov["conditional_rates"] is None and ov["num_prompts"] == 64
    assert ov["draft_acceptance_rate"] == pytest.approx(a / (3 * (n - a - 1)), abs=1e-6)
    assert prof["source"]["kind"] == BENCH_SOURCE and prof["source"]["sha256"]
    assert prof["source"]["trtllm_version"] == "1.2.1"
    assert set(prof["categories"]) == {"all"}
    model = load_acceptance_from(prof)
    assert model.acceptance_length(3) == pytest.approx(expected, abs=1e-6)


def load_acceptance_from(prof: dict, tmp: Path | None = None):
    import tempfile

    folder = Path(tmp or tempfile.mkdtemp())
    p = folder / "speculation_profile.json"
    p.write_text(json.dumps(prof))
    return load_acceptance(p)


def test_metrics_file_sums_iterations():
    prof = profile_from_iteration_stats(str(METRICS), draft_len=3)
    validate_profile(prof)
    stats = json.loads(METRICS.read_text())
    acc = sum(s["specDecodingStats"]["numAcceptedTokens"] for s in stats)
    req = sum(s["specDecodingStats"]["numRequestsWithDraftTokens"] for s in stats)
    assert prof["overall"]["mean_acceptance_length"] == pytest.approx((acc + req) / req, abs=1e-6)
    assert prof["source"]["kind"] == METRICS_SOURCE and prof["drafter"]["draft_len"] == 3
    # without --draft-len, D is the largest drafts per request an iteration had
    assert profile_from_iteration_stats(str(METRICS))["drafter"]["draft_len"] == 3


def test_metrics_json_lines(tmp_path):
    lines = "\n".join(json.dumps(s) for s in json.loads(METRICS.read_text()))
    prof = profile_from_iteration_stats(str(write(tmp_path, lines, "stats.jsonl")), draft_len=3)
    assert prof["overall"]["mean_acceptance_length"] == pytest.approx(29 / 11, abs=1e-6)


@pytest.fixture
def metrics_server():
    body = METRICS.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if self.path == "/metrics" else b"{}")

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_metrics_url(cli, metrics_server, tmp_path):
    res = cli("measure", "from-metrics", f"{metrics_server}/metrics", "--draft-len", "3",
              "--out", tmp_path / "m")
    assert res.exit_code == 0, res.output
    prof = json.loads((tmp_path / "m" / "speculation_profile.json").read_text())
    assert prof["source"]["url"].endswith("/metrics")
    assert "trtllm-serve /metrics" in (tmp_path / "m" / "report.md").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_bench_report_to_plan(cli, tmp_path):
    res = cli("measure", "from-bench", BENCH, "--out", tmp_path / "m")
    assert res.exit_code == 0, res.output
    assert "from trtllm-bench --report_json" in res.output
    prof_path = tmp_path / "m" / "speculation_profile.json"
    prov = json.loads((tmp_path / "m" / "provenance.json").read_text())
    assert "fake_bench_report_c1.json" in json.dumps(prov)
    res = cli("plan", "--target", "llama-3.1-8b-instruct", "--drafter", "eagle3", "--gpu", "h100",
              "--acceptance", prof_path, "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output[res.output.index("{"):res.output.rindex("}") + 1])
    by_batch = plan["recommendation"]["by_batch"]
    assert by_batch[0]["acceptance_length"] == pytest.approx(1 + 120 / 135, abs=1e-3)


def _without(key_path: str):
    def mutate(rep: dict) -> dict:
        node = rep
        *head, last = key_path.split(".")
        for k in head:
            node = node[k]
        del node[last]
        return rep
    return mutate


BAD_REPORTS = {
    "no_decoding_stats": (_without("decoding_stats"), "has no 'decoding_stats': the run did not speculate"),
    "other_shape": (lambda rep: {"results": [1, 2]}, "not a trtllm-bench report_json"),
    "list": (lambda rep: [rep], "must hold a JSON object"),
    "no_accepted": (_without("decoding_stats.num_accepted_draft_tokens_percentiles"),
                    "lacks decoding_stats.num_accepted_draft_tokens_percentiles.average"),
    "no_request_info": (_without("request_info"), "has no 'request_info'"),
    "no_num_requests": (_without("request_info.num_requests"), "lacks request_info.num_requests"),
    "unknown_mode": (lambda rep: {**rep, "decoding_stats": {**rep["decoding_stats"], "mode": "Medusa"}},
                     "decoding_stats.mode 'Medusa'"),
}


@pytest.mark.parametrize("case", sorted(BAD_REPORTS))
def test_bad_reports_exit_2_nothing_written(cli, tmp_path, case):
    mutate, match = BAD_REPORTS[case]
    path = write(tmp_path, mutate(copy.deepcopy(bench_report())))
    res = cli("measure", "from-bench", path, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert match in res.output and "Traceback" not in res.output
    assert len([ln for ln in res.output.splitlines() if ln.startswith("error:")]) == 1
    assert not (tmp_path / "out").exists()


BAD_CLI = {
    "metrics_down": (lambda tmp: ["from-metrics", f"http://127.0.0.1:{free_port()}/metrics"],
                     "did not answer"),
    "metrics_no_spec": (lambda tmp: ["from-metrics", write(tmp, [{"iter": 1, "numActiveRequests": 2}])],
                        "enable_iter_perf_stats"),
    "metrics_empty": (lambda tmp: ["from-metrics", write(tmp, [])], "holds no iteration stats"),
    "metrics_not_json": (lambda tmp: ["from-metrics", write(tmp, "<html>")], "is not JSON"),
    "missing_file": (lambda tmp: ["from-bench", tmp / "nope.json"], "nope.json"),
    "with_drafter": (lambda tmp: ["from-bench", BENCH, "--drafter", "ngram"], "Did you mean '--draft-len'"),
    "old_form": (lambda tmp: ["--from-trtllm-bench", BENCH], "now 'trtllm-spec measure from-bench FILE'"),
    "draft_len_0": (lambda tmp: ["from-bench", BENCH, "--draft-len", "0"], "--draft-len 0"),
    "draft_len_above": (lambda tmp: ["from-bench", BENCH, "--draft-len", "5"], "must be in 1..3"),
    "al_above_d": (lambda tmp: ["from-metrics", METRICS, "--draft-len", "1"], "exceeds 1 + D"),
}


@pytest.mark.parametrize("case", sorted(BAD_CLI))
def test_bad_cli_exit_2_nothing_written(cli, tmp_path, case):
    args, match = BAD_CLI[case]
    res = cli("measure", *args(tmp_path), "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert match in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def bundle_with(tmp_path: Path, spec: dict, version: str = "1.2") -> Path:
    import yaml

    b = tmp_path / "bundle"
    b.mkdir()
    (b / "llm_api_options.yaml").write_text(yaml.safe_dump({"speculative_config": spec}))
    from tests.bundle_fakes import seal_bundle
    from trtllm_spec.core.releases import tag_type

    return seal_bundle(b, tag_type(spec["decoding_type"]), version)


def test_bundle_checks_the_draft_len_and_schedule(tmp_path):
    spec = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "drafter"}
    from trtllm_spec.core.bundle import read_bundle

    b = read_bundle(bundle_with(tmp_path, spec))
    prof = profile_from_bench_report(BENCH, options={"speculative_config": spec}, bundle=b)
    assert prof["drafter"]["bundle"] == str(b.path.resolve())
    with pytest.raises(UserError, match="the bundle's options say 4"):
        profile_from_bench_report(BENCH, options={"speculative_config": {**spec, "max_draft_len": 4}})
    rep = bench_report()
    rep["request_info"]["avg_num_concurrent_requests"] = 16.0
    path = write(tmp_path, rep)
    sched = {"speculative_config": {**spec, "draft_len_schedule": {1: 3, 8: 1}}}
    with pytest.raises(UserError, match="gives D = 1, not 3"):  # 1.2's lower thresholds: 16 >= 8 -> 1
        profile_from_bench_report(path, options=sched, profile="1.2")
    from trtllm_spec.core.releases import default_release

    with pytest.raises(UserError, match=rf"\(TensorRT-LLM {default_release()} rules\) gives D"):  # what auto picks
        profile_from_bench_report(path, options=sched)
    # the D the schedule ran, given explicitly: AL belongs to it
    prof = profile_from_bench_report(path, options=sched, draft_len=2)
    assert list(prof["overall"]["acceptance_length"]) == ["2"]


def test_cli_bundle_gives_the_drafter_type(cli, tmp_path):
    b = bundle_with(tmp_path, {"decoding_type": "NGram", "max_draft_len": 3})
    res = cli("measure", "from-metrics", METRICS, "--bundle", b, "--json")
    assert res.exit_code == 0, res.output
    prof = json.loads(res.output[res.output.index("{"):res.output.rindex("}") + 1])
    assert prof["drafter"]["type"] == "ngram" and prof["drafter"]["draft_len"] == 3
