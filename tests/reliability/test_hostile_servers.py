"""Hostile servers (issue 24, classes 1-3): replies of the wrong shape, bodies cut short, bad URLs, runs where
requests fail, and servers that trickle. Each case starts a FakeOpenAI (tests/reliability/fake_openai.py) on
127.0.0.1 with one route misbehaving and drives ``data regenerate --server-url`` or ``measure served``
through CliRunner: exit 2, one ``error:`` line naming the server and the field (and what came), no traceback,
nothing left in the working folder but what a rerun needs (``leaves``: the failed ids)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.reliability.conftest import assert_clean_failure, snapshot
from tests.reliability.fake_openai import FakeOpenAI, Reply, good_stream

CHAT, STREAM, MODELS = "POST /v1/chat/completions", "STREAM /v1/chat/completions", "GET /v1/models"


@dataclass
class Hostile:
    id: str
    command: str  # "regenerate" or "measure"
    fault: str
    routes: dict[str, Reply]
    names: tuple[str, ...]
    url: str | None = None  # a bad URL instead of the fake's
    leaves: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    named: bool = True  # measure: --server-model names the fake's model (it cannot be checked to serve the target)


def _chunk(**choice) -> dict:
    return {"choices": [{"index": 0, **choice}]}


def _vllm_page(drafts, draft_tokens, accepted) -> bytes:
    """vLLM's Prometheus counters (vllm/v1/spec_decode/metrics.py) as its /metrics serves them."""
    return (f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}\n'
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}\n').encode()


def _metrics(*pages) -> dict[str, Reply]:
    """/metrics read before and after the level (measure served differences them)."""
    return {"GET /metrics": Reply(bodies=list(pages), content_type="text/plain; version=0.0.4")}


def _with_last(extra: dict) -> dict[str, Reply]:
    """The streamed reply with ``extra`` on its last (usage) event: where vLLM streams ``metrics`` and llama.cpp
    its ``timings``."""
    events = good_stream()
    events[-2] = {**events[-2], **extra}
    return {STREAM: Reply(events=events)}


# vLLM's per-request block (--per-request-spec-decode-metrics): 10 draft tokens in 2 steps, 4 accepted
BLOCK = {"metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_draft_tokens": 10,
                                              "num_accepted_draft_tokens": 4}}}
SERVES = ("--serves-drafter", "ngram", "--serves-draft-len", "3")


CASES = [
    # ---- class 1: replies of the wrong shape, bodies cut short, bad URLs
    Hostile("models-data-not-list", "regenerate", "/v1/models 'data' is a string", {MODELS: Reply({"data": "m"})},
            ("127.0.0.1", "data", "valid list", '"m"')),
    Hostile("models-id-number", "regenerate", "/v1/models entry id is a number", {MODELS: Reply({"data": [{"id": 5}]})},
            ("data[0].id", "valid string", "got 5")),
    Hostile("models-cut-short", "regenerate", "/v1/models body cut short (IncompleteRead)",
            {MODELS: Reply(b'{"data": [', declared=400)}, ("127.0.0.1", "cut short", "10 bytes")),
    Hostile("models-not-json", "regenerate", "/v1/models answers HTML", {MODELS: Reply(b"<html>hi</html>")},
            ("GET /v1/models", "not JSON")),
    Hostile("chat-choices-string", "regenerate", "chat completion 'choices' is a string",
            {CHAT: Reply({"choices": "hello"})}, ("127.0.0.1", "choices", "valid list", '"hello"')),
    Hostile("chat-choices-empty", "regenerate", "chat completion 'choices' is empty", {CHAT: Reply({"choices": []})},
            ("choices", "at least 1")),
    Hostile("chat-content-number", "regenerate", "message content is a number",
            {CHAT: Reply({"choices": [{"message": {"content": 42}}]})}, ("choices[0].message.content", "got 42")),
    Hostile("chat-usage-list", "regenerate", "usage is a list",
            {CHAT: Reply({"choices": [{"message": {"content": "x"}}], "usage": [1]})}, ("usage", "got [1]")),
    Hostile("chat-tokens-string", "regenerate", "usage.prompt_tokens is a string",
            {CHAT: Reply({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "9"}})},
            ("usage.prompt_tokens", "valid integer", '"9"')),
    Hostile("chat-cut-short", "regenerate", "chat completion body cut short (IncompleteRead)",
            {CHAT: Reply(b'{"choices": [{"mess', declared=300)}, ("127.0.0.1", "cut short")),
    Hostile("url-port-not-number", "regenerate", "URL with a non-numeric port", {}, ("'http://127.0.0.1:80a'", "port",
            "http://host:port"), url="http://127.0.0.1:80a"),
    Hostile("url-port-range", "regenerate", "URL with port 70000", {}, ("70000", "http://host:port"),
            url="http://127.0.0.1:70000"),
    Hostile("url-ipv6-broken", "regenerate", "URL with a broken IPv6 host", {}, ("'http://[::1:8000'", "IPv6",
            "http://host:port"), url="http://[::1:8000"),
    Hostile("url-no-host", "regenerate", "URL without a host", {}, ("no host", "http://host:port"), url="http://:8000"),
    Hostile("url-space", "measure", "URL with a space in the host", {}, ("no host (or contains spaces",),
            url="http://127.0.0 .1:8000"),
    Hostile("stream-delta-string", "measure", "streamed delta is a string", {STREAM: Reply(events=[
            _chunk(delta="hello"), "[DONE]"])}, ("127.0.0.1", "choices[0].delta", '"hello"')),
    Hostile("stream-choices-string", "measure", "streamed choices is a string", {STREAM: Reply(events=[
            {"choices": "x"}, "[DONE]"])}, ("streamed chunk", "choices", '"x"')),
    Hostile("stream-usage-string", "measure", "streamed usage is a string", {STREAM: Reply(events=[
            {"choices": [], "usage": "lots"}, "[DONE]"])}, ("usage", '"lots"')),
    Hostile("stream-content-number", "measure", "streamed content is a number", {STREAM: Reply(events=[
            _chunk(delta={"content": 7}), "[DONE]"])}, ("choices[0].delta.content", "got 7")),
    Hostile("stream-no-done", "measure", "stream ends without [DONE]", {STREAM: Reply(events=good_stream()[:-1])},
            ("without 'data: [DONE]'",)),
    Hostile("stream-later-bad", "measure", "the warm-up streams well, a measured request streams a bad chunk",
            {STREAM: Reply(events=[_chunk(delta={"content": ["a"]}), "[DONE]"], good_first=1)},
            ("suite prompt", "delta.content", '["a"]')),
    Hostile("metrics-cut-short", "metrics", "trtllm-serve /metrics body cut short (IncompleteRead)",
            {"GET /metrics": Reply(b'[{"specDecodingStats": {', declared=500)}, ("metrics endpoint", "cut short")),
    Hostile("metrics-500", "metrics", "trtllm-serve /metrics answers HTTP 500 (issue 37: say what it answered)",
            {"GET /metrics": Reply({"error": "stats queue broken"}, status=500)},
            ("metrics endpoint", "answered HTTP 500", "stats queue broken")),
    Hostile("served-other-model", "measure", "/v1/models lists only another model than --target, no usage, no "
            "/tokenize (issue 37)", {MODELS: Reply({"object": "list", "data": [{"id": "meta-llama/Llama-3.1-70B"}]})},
            ("'meta-llama/Llama-3.1-70B'", "does not name the target", "target", "--server-model"), named=False),
    Hostile("metrics-url-port", "metrics", "--from-trtllm-metrics URL with a non-numeric port", {},
            ("'http://127.0.0.1:9x'", "port"), url="http://127.0.0.1:9x"),
    # ---- issue 55 item 1: the engine's own acceptance numbers, checked before they are believed
    Hostile("vllm-accepted-over-drafted", "measure", "vLLM /metrics counters: 30 accepted of 20 drafted over the "
            "level (acceptance rate 1.5)", _metrics(_vllm_page(0, 0, 0), _vllm_page(10, 20, 30)),
            ("server http://127.0.0.1", "at concurrency 1", "vllm:spec_decode_num_accepted_tokens over the level = 30",
             "vllm:spec_decode_num_draft_tokens over the level = 20", "acceptance rate of 1.5", "at most 1",
             "metrics are broken")),
    Hostile("vllm-counter-negative", "measure", "vLLM /metrics counter read as -20", _metrics(
            _vllm_page(0, 0, 0), _vllm_page(10, -20, 5)), ("vllm:spec_decode_num_draft_tokens = -20", "is negative",
                                                          "a whole number >= 0")),
    Hostile("vllm-counter-nan", "measure", "vLLM /metrics counter NaN", _metrics(
            _vllm_page(0, 0, 0), _vllm_page(10, 20, "NaN")), ("vllm:spec_decode_num_accepted_tokens = nan",
                                                             "not a finite number")),
    Hostile("llamacpp-accepted-over-drafted", "measure", "llama-server /metrics: 12 accepted of 8 drafted",
            _metrics(b"llamacpp:spec_decode_num_drafts_total 0\nllamacpp:spec_decode_num_draft_tokens_total 0\n"
                     b"llamacpp:spec_decode_num_accepted_tokens_total 0\n",
                     b"llamacpp:spec_decode_num_drafts_total 4\nllamacpp:spec_decode_num_draft_tokens_total 8\n"
                     b"llamacpp:spec_decode_num_accepted_tokens_total 12\n"),
            ("llamacpp:spec_decode_num_accepted_tokens over the level = 12", "num_draft_tokens over the level = 8",
             "acceptance rate of 1.5")),
    Hostile("trtllm-stats-accepted-over-drafted", "measure", "trtllm-serve /metrics iteration stats: 9 accepted of "
            "6 drafted (was skipped as if absent)", {"GET /metrics": Reply([{"iter": 3, "specDecodingStats": {
                "numDraftTokens": 6, "numAcceptedTokens": 9, "numRequestsWithDraftTokens": 2,
                "acceptanceLength": 2.5}}])},
            ("server http://127.0.0.1", "/metrics iteration stats: entry 0", "specDecodingStats.numAcceptedTokens = 9",
             "specDecodingStats.numDraftTokens = 6")),
    Hostile("block-accepted-over-drafted", "measure", "a response's metrics.speculative_decoding: 9 accepted of 6",
            _with_last({"metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_draft_tokens": 6,
                                                             "num_accepted_draft_tokens": 9}}}),
            ("suite prompt coding/mt_bench/0", "metrics.speculative_decoding.num_accepted_draft_tokens = 9",
             "num_draft_tokens = 6")),
    Hostile("timings-accepted-over-drafted", "measure", "llama.cpp response timings: draft_n_accepted 6 of draft_n 4",
            _with_last({"timings": {"draft_n": 4, "draft_n_accepted": 6}}),
            ("response timings (llama.cpp)", "timings.draft_n_accepted = 6 > timings.draft_n = 4")),
    # ---- issue 55 item 2: --serves-* checked against every source the response carries, in one check
    Hostile("serves-d-blocks", "measure", "--serves-draft-len 3, no /metrics, per-request blocks of 10 draft tokens "
            "in 2 steps", _with_last(BLOCK), ("5.00 tokens per step at concurrency 1", "metrics.speculative_decoding",
                                              "10 draft tokens in 2 steps", "more than --serves-draft-len 3"),
            extra=SERVES),
    Hostile("serves-d-counters", "measure", "--serves-draft-len 3, /metrics counters of 5 draft tokens per step",
            _metrics(_vllm_page(0, 0, 0), _vllm_page(2, 10, 4)),
            ("5.00 tokens per step at concurrency 1", "vllm:spec_decode_* counters", "10 draft tokens in 2 steps",
             "more than --serves-draft-len 3"), extra=SERVES),
    Hostile("serves-d0-blocks", "measure", "--serves-draft-len 0, per-request blocks that drafted",
            _with_last(BLOCK), ("drafted 10 draft tokens at concurrency 1", "metrics.speculative_decoding",
                                "--serves-draft-len 0 says it runs the target alone"),
            extra=("--serves-draft-len", "0")),
    # ---- class 2: runs where requests fail exit non-zero with the count, the first error and the rerun command
    Hostile("regen-all-500", "regenerate", "every request answers HTTP 500 (after the server check)",
            {CHAT: Reply({"error": "boom"}, status=500, good_first=1)},
            ("produced 0 of 3", "HTTP 500", "boom", "rerun 'trtllm-spec data regenerate"),
            leaves=("conv.jsonl.failed.jsonl",)),
    Hostile("regen-all-429", "regenerate", "every request answers HTTP 429", {CHAT: Reply({"error": "slow down"},
            status=429, good_first=1)}, ("produced 0 of 3", "HTTP 429", "to resume"), leaves=("conv.jsonl.failed.jsonl",)),
    Hostile("regen-most-fail", "regenerate", "two of three requests fail", {CHAT: Reply({"error": "x"}, status=503,
            good_first=2)}, ("produced 1 of 3", "HTTP 503", "1 new conversations were kept"),
            leaves=("conv.jsonl", "conv.jsonl.failed.jsonl")),
    Hostile("regen-bad-shape-later", "regenerate", "requests after the check get a reply of the wrong shape",
            {CHAT: Reply({"choices": [{"message": "hi"}]}, good_first=1)},
            ("produced 0 of 3", "choices[0].message", '"hi"'), leaves=("conv.jsonl.failed.jsonl",)),
    # ---- class 3: a per-request deadline, not a per-read timeout
    Hostile("regen-timeouts", "regenerate", "every request answers after 3 s, --timeout 0.5",
            {CHAT: Reply(delay_s=3.0, body={"choices": []}, good_first=1)},
            ("produced 0 of 3", "within 0.5 s", "deadline"), leaves=("conv.jsonl.failed.jsonl",),
            extra=("--timeout", "0.5")),
    Hostile("served-over-budget", "measure", "levels 1,2,3 (6 requests) x 300,000 tokens without --allow-long", {},
            ("1,800,000 tokens (6 requests", "--allow-long"), extra=("--concurrency", "1,2,3", "--max-new-tokens", "300000")),
    Hostile("stream-trickle", "measure", "the stream trickles one event per 0.2 s for 10 s, --request-timeout 1",
            {STREAM: Reply(events=[_chunk(delta={"content": "a"})] * 50, interval_s=0.2)},
            ("within 1 s", "deadline"), extra=("--request-timeout", "1")),
]


def _regen_recipe(w: Path, target: Path) -> Path:
    p = w / "r.yaml"
    p.write_text(yaml.safe_dump({
        "name": "hostile", "target": {"model": str(target)}, "hardware": {"gpu": "l40s"},
        "workload": {"batch_sizes": [1], "isl": 64, "osl": 32},
        "drafter": {"type": "eagle3", "training": {"max_steps": 1, "seq_len": 32, "data": {
            "num_conversations": 3, "offline_features": False, "regen_max_new_tokens": 8,
            "server": {"retries": 0, "concurrency": 1}}}}}, sort_keys=False))
    return p


def _args(case: Hostile, w: Path, target: Path, url: str) -> list:
    if case.command == "metrics":
        return ["measure", "from-metrics", f"{url}/metrics", "--json"]
    if case.command == "regenerate":
        return ["data", "regenerate", _regen_recipe(w, target), "--server-url", url, "--out", w / "conv.jsonl",
                *case.extra]
    flags = {"--concurrency": "1", "--max-new-tokens": "8", **({"--server-model": "fake-model"} if case.named else {})}
    extra = list(case.extra)
    for i in range(0, len(extra) - 1):
        if extra[i] in flags:
            flags[extra[i]] = extra[i + 1]
            extra[i:i + 2] = ["", ""]
    return ["measure", "served", "--server-url", url, "--target", target, "--num-prompts", "1",
            "--categories", "coding", "--out", w / "served", *[x for kv in flags.items() for x in kv],
            *[x for x in extra if x]]


@pytest.fixture
def work(tmp_path, monkeypatch, tiny_suite):
    w = tmp_path / "w"
    w.mkdir()
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(w)
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    return w


def test_at_least_25_cases():
    assert len(CASES) >= 25 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_server(case: Hostile, cli, work, tiny_target):
    with FakeOpenAI(dict(case.routes), lifetime_s=60) as fake:
        args = _args(case, work, tiny_target, case.url or fake.url)
        before = snapshot(work)
        t0 = time.perf_counter()
        r = cli(*args)
        took = time.perf_counter() - t0
    after = {k: v for k, v in snapshot(work).items() if k not in case.leaves}
    assert_clean_failure(r.output, r.exit_code, 2, case.names, before, after)
    assert not any(k.endswith(".provenance.json") for k in snapshot(work)), "a failed run left its provenance"
    assert took < 20, f"took {took:.1f} s"
    if case.id == "served-over-budget":
        assert fake.requests == [], "a refused measurement sent requests"


def test_good_fake_server_regenerates_and_measures(cli, work, tiny_target):
    """The same fake answering well: both commands succeed (so every case above fails for its fault alone), and a
    server whose token counts could not be compared is recorded as unchecked, not as checked."""
    with FakeOpenAI(lifetime_s=60) as fake:
        r = cli("data", "regenerate", _regen_recipe(work, tiny_target), "--server-url", fake.url, "--out",
                work / "conv.jsonl")
        assert r.exit_code == 0, r.output
        assert "3 conversations in" in r.output and "not checked that the server serves the target" in r.output
        assert (work / "conv.provenance.json").is_file()
        r = cli(*_args(Hostile("good", "measure", "no fault", {}, (), None), work, tiny_target, fake.url))
        assert r.exit_code == 0, r.output
    data = json.loads((work / "served" / "served_measurement.json").read_text())
    assert data["server"]["serves_target_checked"] is False
    assert data["server"]["checks"] == ["GET /v1/models lists 'fake-model'"]
    assert "not checked" in data["server"]["unchecked"]
    assert "not checked" in (work / "served" / "report.md").read_text()


def test_deadline_cuts_a_trickling_stream_within_its_limit():
    """The deadline is the request's: 50 events 0.2 s apart (10 s) under a 1 s limit end after about 1 s."""
    from trtllm_spec.data.openai_http import RequestFailed, stream_chat

    with FakeOpenAI({STREAM: Reply(events=[_chunk(delta={"content": "a"})] * 50, interval_s=0.2)}) as fake:
        t0 = time.perf_counter()
        with pytest.raises(RequestFailed, match="within 1 s"):
            for _ in stream_chat(fake.url, {"model": "fake-model", "messages": []}, 1.0):
                pass
        assert time.perf_counter() - t0 < 2.5


def test_deadline_cuts_a_trickling_body():
    """A non-streamed body that trickles for 10 s (no Content-Length) is cut at the deadline too."""
    from trtllm_spec.data.openai_http import RequestFailed, http_json

    with FakeOpenAI({MODELS: Reply(events=["x"] * 100, interval_s=0.1, content_type="application/json")}) as fake:
        t0 = time.perf_counter()
        with pytest.raises(RequestFailed, match="within 0.8 s"):
            http_json("GET", f"{fake.url}/v1/models", None, 0.8)
        assert time.perf_counter() - t0 < 2.5


def test_fake_stops_by_itself():
    """The fake's own timer stops it (a test that forgets ``with`` leaks no server). Waited for on the condition
    itself, the timer's thread ending once its stop() has returned, not on a guessed sleep."""
    t0 = time.perf_counter()
    fake = FakeOpenAI(lifetime_s=0.3)
    fake._stopper.join(timeout=30)  # the timer thread runs stop() to its end: shut down, socket closed
    assert not fake._stopper.is_alive() and not fake._thread.is_alive() and fake._stopped
    assert time.perf_counter() - t0 >= 0.3  # by its timer, not at once
    assert fake._httpd.socket.fileno() == -1  # its listening socket is closed



def test_server_token_check_is_claimed_only_when_it_ran(tiny_target):
    """A server reporting the probe's usage.prompt_tokens is checked against the target (and claimed as checked);
    one reporting another count is refused; one reporting none is recorded as unchecked."""
    from tests.reliability.fake_openai import good_completion
    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.openai_http import PROBE, check_server
    from trtllm_spec.errors import UserError

    tok = load_tokenizer(tiny_target)
    want = len(prompt_ids(tok, PROBE))
    for count, ok in ((want, True), (want + 7, False), (None, None)):
        body = good_completion()
        body["usage"] = {"prompt_tokens": count, "completion_tokens": 1}
        with FakeOpenAI({CHAT: Reply(body)}) as fake:
            if ok is False:
                with pytest.raises(UserError, match=f"counts the probe prompt as {want + 7} tokens"):
                    check_server(fake.url, tok, None, 5.0, "--server-model")
                continue
            got = check_server(fake.url, tok, None, 5.0, "--server-model")
        assert got.model == "fake-model" and got.token_checked is bool(ok)
        assert ("probe prompt token count equals the target's" in got.checks) is bool(ok)
        assert (got.note is None) is bool(ok)


def test_a_stream_without_usage_is_counted_with_the_targets_tokenizer(cli, work, tiny_target):
    """A server that streams no usage chunk (llama-cpp-python's Python server, some proxies): the reply is
    re-tokenized with the target's tokenizer, and the level says so."""
    no_usage = [e for e in good_stream("Hello there, friend.") if not (isinstance(e, dict) and "usage" in e)]
    with FakeOpenAI({"STREAM /v1/chat/completions": Reply(events=no_usage)}, lifetime_s=60) as fake:
        r = cli(*_args(Hostile("no-usage", "measure", "no usage chunk", {}, (), None), work, tiny_target, fake.url))
        assert r.exit_code == 0, r.output
    level = json.loads((work / "served" / "served_measurement.json").read_text())["levels"][0]
    assert level["token_count_source"] == "re-tokenized with the target's tokenizer"
    assert level["output_tokens"] > 0


def test_regenerate_out_under_a_file_is_refused_before_any_request(cli, work, tiny_target):
    """``--out X/afile/conversations.jsonl`` where ``X/afile`` is a file (issue 37: was a FileExistsError traceback
    after the server check): one line naming the flag and the file, exit 2, nothing sent or written."""
    (work / "afile").write_text("mine")
    with FakeOpenAI(lifetime_s=60) as fake:
        recipe = _regen_recipe(work, tiny_target)
        before = snapshot(work)
        r = cli("data", "regenerate", recipe, "--server-url", fake.url, "--out", work / "afile" / "c" / "conv.jsonl")
    assert_clean_failure(r.output, r.exit_code, 2, ("--out", "afile", "is a file, not a folder"), before,
                         snapshot(work))
    assert not [q for q in fake.requests if "chat" in q], fake.requests


def test_served_model_named_explicitly_is_measured_and_recorded(cli, work, tiny_target):
    """The refusal of an unnamed other model (case served-other-model) is lifted by naming it: --server-model."""
    routes = {MODELS: Reply({"object": "list", "data": [{"id": "meta-llama/Llama-3.1-70B"}]})}
    with FakeOpenAI(routes, lifetime_s=60) as fake:
        args = _args(Hostile("named", "measure", "", {}, ()), work, tiny_target, fake.url)
        r = cli(*args[:args.index("--server-model")], *args[args.index("--server-model") + 2:],
                "--server-model", "meta-llama/Llama-3.1-70B")
        assert r.exit_code == 0, r.output
    data = json.loads((work / "served" / "served_measurement.json").read_text())
    assert data["server"]["model"] == "meta-llama/Llama-3.1-70B" and data["server"]["serves_target_checked"] is False


def test_a_served_id_names_the_target_by_its_name_not_by_chance():
    from trtllm_spec.measure.served import names_target

    assert names_target("SmolLM2-135M-Instruct", ["smollm2-135m"])
    assert names_target("/models/smollm2-135m-instruct-f16.gguf", ["/cache/models/SmolLM2-135M", "hf"])
    assert not names_target("meta-llama/Llama-3.1-70B", ["smollm2-135m", "hf", "models"])
    assert not names_target("hf", ["hf"])  # too short to name anything


def test_metrics_answering_500_is_reported_with_what_it_answered(cli, work, tiny_target):
    """measure --engine openai: a /metrics that answers HTTP 500 is not 'no /metrics': the level says what came."""
    with FakeOpenAI({"GET /metrics": Reply({"error": "exporter crashed"}, status=500)}, lifetime_s=60) as fake:
        r = cli(*_args(Hostile("m500", "measure", "", {}, ()), work, tiny_target, fake.url))
        assert r.exit_code == 0, r.output
    acc = json.loads((work / "served" / "served_measurement.json").read_text())["levels"][0]["server_acceptance"]
    assert acc["reported"] is False
    assert "/metrics answered HTTP 500" in acc["note"] and "exporter crashed" in acc["note"], acc["note"]


def test_a_declaration_is_checked_against_every_source_and_says_which(cli, work, tiny_target):
    """Issue 55 item 2, the good side: counters and blocks that agree with --serves-draft-len 5 are both named as
    checked; a server with neither says which sources could not be checked and why (was: "unchecked: the engine
    reports no draft counters" although the run had read the blocks)."""
    routes = {**_metrics(_vllm_page(0, 0, 0), _vllm_page(2, 10, 4)), **_with_last(BLOCK)}
    declared = ("--serves-drafter", "ngram", "--serves-draft-len", "5")
    with FakeOpenAI(routes, lifetime_s=60) as fake:
        r = cli(*_args(Hostile("both", "measure", "", {}, (), extra=declared), work, tiny_target, fake.url))
        assert r.exit_code == 0, r.output
    serves = json.loads((work / "served" / "served_measurement.json").read_text())["server"]["serves"]
    assert serves["checked"] == ("checked against /metrics vllm:spec_decode_* counters (vLLM) and the responses' "
                                 "metrics.speculative_decoding (draft tokens per step <= D)")
    assert "server runs (as declared): ngram, D = 5; checked against" in (work / "served" / "report.md").read_text()
    with FakeOpenAI(lifetime_s=60) as fake:
        r = cli(*_args(Hostile("none", "measure", "", {}, (), extra=declared), work, tiny_target, fake.url),
                "--force")
        assert r.exit_code == 0, r.output
    checked = json.loads((work / "served" / "served_measurement.json").read_text())["server"]["serves"]["checked"]
    assert checked.startswith(f"unchecked: no source counts draft steps: the engine's counters ({fake.url}/metrics "
                              "answered HTTP 404"), checked
    assert "the per-request blocks (no response carried one: metrics.speculative_decoding" in checked
