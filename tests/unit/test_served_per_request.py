"""``measure served``'s per-request acceptance fields that lie (issue 46, item 5): a block whose counts cannot be
true stops the measurement with one line naming the field; a block missing on some responses is counted, and the
level's counters stay beside it."""

from __future__ import annotations

import pytest

from tests.unit.test_request_mode import _items, _stream_with
from trtllm_spec.errors import UserError


@pytest.mark.parametrize("block, says", [
    ({"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 13},
     "metrics.speculative_decoding.num_accepted_draft_tokens = 13 > metrics.speculative_decoding.num_draft_tokens = "
     "12 (an acceptance rate of 1.08; at most 1"),
    ({"num_spec_steps": 4, "num_draft_tokens": -3, "num_accepted_draft_tokens": 0}, "num_draft_tokens = -3 is negative"),
    ({"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": "7"},
     "num_accepted_draft_tokens = '7' is not a finite number (a count: a whole number >= 0)"),
    ({"num_spec_steps": 4, "num_draft_tokens": 12.5, "num_accepted_draft_tokens": 3}, "12.5 is not a whole number"),
    ({"num_spec_steps": 0, "num_draft_tokens": 12, "num_accepted_draft_tokens": 3},
     "num_spec_steps = 0 with metrics.speculative_decoding.num_draft_tokens = 12"),
    ({"num_spec_steps": -1, "num_draft_tokens": 12, "num_accepted_draft_tokens": 3}, "num_spec_steps = -1 is negative"),
])
def test_a_per_request_block_that_lies_is_one_line(block, says):
    from tests.reliability.fake_openai import FakeOpenAI, Reply
    from trtllm_spec.measure.served import measure_served

    with FakeOpenAI({"STREAM /v1/chat/completions": Reply(events=_stream_with({"metrics": {
            "speculative_decoding": block}}))}) as srv, pytest.raises(UserError) as err:
        measure_served(srv.url, "fake-model", _items(), [1], max_tokens=32, temperature=0.0, seed=0, timeout=10,
                       count_tokens=len)
    msg = str(err.value)
    assert "\n" not in msg and "metrics.speculative_decoding" in msg and says in msg
    assert msg.startswith(f"server {srv.url}, suite prompt ") and "metrics are broken" in msg


def test_cli_exit_2_on_a_lying_block(tmp_path, monkeypatch, tiny_target):
    from click.testing import CliRunner

    from tests.reliability.fake_openai import FakeOpenAI, Reply
    from trtllm_spec.cli import main

    lie = {"metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_draft_tokens": 6,
                                                "num_accepted_draft_tokens": 9}}}
    monkeypatch.setattr("trtllm_spec.data.user_suite.select_suite", lambda *a, **k: (_items(), {"name": "t"}))
    with FakeOpenAI({"STREAM /v1/chat/completions": Reply(events=_stream_with(lie))}) as srv:
        r = CliRunner().invoke(main, ["measure", "served", "--server-url", srv.url, "--server-model", "fake-model",
                                      "--target", str(tiny_target), "--concurrency", "1", "--out", tmp_path / "o"])
    assert r.exit_code == 2, r.output
    assert "num_accepted_draft_tokens = 9 > metrics.speculative_decoding.num_draft_tokens = 6" in r.output
    assert not (tmp_path / "o").exists()


def test_a_block_missing_on_some_responses_is_counted():
    from tests.reliability.fake_openai import FakeOpenAI, Reply
    from trtllm_spec.measure.served import measure_served

    good = {"metrics": {"speculative_decoding": {"num_spec_steps": 8, "num_draft_tokens": 24,
                                                 "num_accepted_draft_tokens": 12}}}
    # the warm-up and the first measured request get a plain stream (no block), the other five carry it
    reply = Reply(events=_stream_with(good), good_first=2)
    with FakeOpenAI({"STREAM /v1/chat/completions": reply}) as srv:
        levels = measure_served(srv.url, "fake-model", _items(), [1], max_tokens=32, temperature=0.0, seed=0,
                                timeout=10, count_tokens=len)
    pr = levels[0]["per_request_acceptance"]
    assert pr["reported"] and pr["requests_without"] == 1 and pr["overall"]["num_requests"] == 5
    assert pr["overall"]["p50"] == pytest.approx(1 + 12 / 8)
