"""Slow tier: llama.cpp as the second engine on the real SmolLM2-135M and a short-trained EAGLE-3 head.

The native build (``assets build-llamacpp``: minutes once, then cached under the trtllm-spec cache, per llama.cpp
version and CPU), the GGUF conversions (f32 target with the GPT-2 vocabulary, the head with the capture layers
llama.cpp reads), llama.cpp's speculative decoding equal to target-only greedy (its own and ours), and its AL
within 5% of our reference decoder's on the same prompts. Skipped only where cmake / a C++ compiler is missing.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # smollm2_hf and head: tests/slow/conftest.py


@pytest.fixture(scope="module")
def built():
    from trtllm_spec.errors import DependencyMissing
    from trtllm_spec.stages.llamacpp import build_llamacpp

    try:
        return build_llamacpp()[0]  # the user's cache: CI on the same machine reuses the build
    except DependencyMissing as e:
        pytest.skip(str(e))


def test_llamacpp_runs_our_eagle3_head_as_our_decoder_does(cli, built, smollm2_hf, head, tmp_path):
    from trtllm_spec.measure.profile import profile_problems

    out = tmp_path / "measure"
    r = cli("measure", "llamacpp", "--target", "smollm2-135m", "--drafter", head, "--draft-len", "3",
            "--categories", "coding,humanities", "--num-prompts", "1", "--max-new-tokens", "40", "--out", out)
    assert r.exit_code == 0, r.output
    prof = json.loads((out / "speculation_profile.json").read_text())
    assert prof["engine"] == "llamacpp" and profile_problems(prof) == []
    ll = prof["settings"]["llamacpp"]
    assert ll["spec_type"] == "draft-eagle3" and ll["commit"] == built.record["commit"]
    assert ll["conversions"]["target"]["vocabulary"] == "gpt2" and ll["conversions"]["target"]["outtype"] == "f32"
    assert ll["conversions"]["drafter"]["llamacpp_target_layers"] == [2, 15, 27]  # our [1, 14, 26] + 1
    c = prof["comparison"]
    o = c["overall"]
    assert o["num_prompts"] == 2
    assert o["identical_to_llamacpp_target_greedy"] == 2, c["prompts"]  # llama.cpp's speculation is lossless
    assert o["identical_to_reference_target_greedy"] == 2, c["prompts"]  # both engines compute the same target
    assert o["acceptance_length_llamacpp"] > 1.0  # drafts were accepted: the head runs, not just the target
    assert c["within_tolerance"] and abs(o["relative_difference"]) <= 0.05, c
    assert "llama.cpp vs the reference decoder" in (out / "report.md").read_text()
    assert "reference decoder on the same prompts: AL" in r.output


def test_served_speculative_llama_server_reports_acceptance(cli, built, smollm2_hf, head, tmp_path):
    """'assets serve --drafter' (the same stage) and 'measure served' against it: llama-server's
    /metrics counters give AL and per-position rates over the level."""
    from tests.conftest import free_port
    from trtllm_spec.stages.llamacpp import speculative_server

    server = speculative_server("smollm2-135m", head, 3, host="127.0.0.1", port=free_port(), threads=2, ctx=1024,
                                parallel=1)
    server.log_file = tmp_path / "server.log"
    with server:
        r = cli("measure", "served", "--server-url", server.url, "--target", "smollm2-135m",
                "--concurrency", "1", "--categories", "coding", "--num-prompts", "1", "--max-new-tokens", "32",
                "--out", tmp_path / "served")
    assert r.exit_code == 0, r.output
    level = json.loads((tmp_path / "served" / "served_measurement.json").read_text())["levels"][0]
    acc = level["server_acceptance"]
    assert acc["reported"] and acc["source"].startswith("/metrics llamacpp:spec_decode_")
    assert acc["num_drafts"] > 0 and 1.0 <= acc["acceptance_length"] <= 4.0 and len(acc["marginal_rates"]) == 3
    # every token but the first comes from a step: steps + accepted + the undrafted last step = tokens - 1
    assert acc["num_drafts"] + acc["num_accepted_tokens"] <= level["output_tokens"] - 1
    # per request: llama-server's timings.draft_n / draft_n_accepted in the final streamed event
    pr = level["per_request_acceptance"]
    assert pr["reported"] and "llama.cpp" in pr["source"] and pr["categories"]["coding"]["num_requests"] == 1
    assert 1.0 <= pr["overall"]["p50"] <= 4.0


def test_request_modes_on_both_engines(cli, built, smollm2_hf, head, tmp_path):
    """JSON mode with speculation on: llama.cpp (json_schema grammar) and our decoder (xgrammar) on the same
    prompts, outputs equal to each engine's constrained target-only output; served, the mode reaches llama-server
    and per-request acceptance comes back. SmolLM2's template has no thinking switch: refused."""
    from tests.conftest import free_port
    from trtllm_spec.stages.llamacpp import speculative_server

    out = tmp_path / "json"
    r = cli("measure", "llamacpp", "--target", "smollm2-135m", "--drafter", head, "--draft-len", "3",
            "--suite", "speed-lite-modes", "--categories", "json_mode", "--num-prompts", "1", "--max-new-tokens",
            "48", "--out", out)
    assert r.exit_code == 0, r.output
    prof = json.loads((out / "speculation_profile.json").read_text())
    o = prof["comparison"]["overall"]
    assert o["identical_to_llamacpp_target_greedy"] == 1 and o["identical_to_reference_target_greedy"] == 1
    for so in (prof["structured_output"], prof["comparison"]["structured_output_reference"]):
        assert so["parsed"] == so["valid"] and so["num_outputs"] == 2
    r = cli("measure", "llamacpp", "--target", "smollm2-135m", "--drafter", head, "--draft-len", "3",
            "--chat-template-arg", "enable_thinking=false", "--num-prompts", "1", "--out", tmp_path / "think")
    assert r.exit_code == 2 and "does not read it" in r.output and not (tmp_path / "think").exists()
    server = speculative_server("smollm2-135m", head, 3, host="127.0.0.1", port=free_port(), threads=2, ctx=1024,
                                parallel=1)
    with server:
        r = cli("measure", "served", "--server-url", server.url, "--target", "smollm2-135m",
                "--concurrency", "1", "--categories", "coding", "--num-prompts", "1", "--max-new-tokens", "32",
                "--response-format", "json_object", "--out", tmp_path / "served")
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "served" / "served_measurement.json").read_text())
    assert data["settings"]["request_mode"]["response_format"] == "json_object"
    assert data["levels"][0]["per_request_acceptance"]["reported"]
