"""``trtllm-spec measure`` on the real SmolLM2-135M (fetched like ``trtllm-spec assets fetch smollm2-135m``) and
the real speed-lite prompts: n-gram, two categories x one prompt, 24 new tokens, fp32."""

from __future__ import annotations

import json

import pytest

from trtllm_spec.data.model_assets import fetch_model
from trtllm_spec.data.prompts import fetch_prompts
from trtllm_spec.measure.profile import profile_problems
from trtllm_spec.planner.acceptance import load_acceptance

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    fetch_prompts(sources=["humaneval", "mt_bench"])  # coding and humanities; both idempotent
    return fetch_model("smollm2-135m")


def test_measure_ngram_on_smollm2_is_lossless(cli, smollm2, tmp_path):
    out = tmp_path / "measure"
    r = cli("measure", "--target", "smollm2-135m", "--drafter", "ngram", "--draft-len", "4", "--categories",
            "coding,humanities", "--num-prompts", "1", "--max-new-tokens", "24", "--dtype", "fp32", "--out", out)
    assert r.exit_code == 0, r.output
    prof = json.loads((out / "speculation_profile.json").read_text())
    assert profile_problems(prof) == []
    assert set(prof["categories"]) == {"coding", "humanities"}
    ov = prof["overall"]
    assert ov["num_prompts"] == 2 and ov["identical_outputs"] == 2 and ov["token_agreement"] == 1.0
    assert 1.0 <= ov["mean_acceptance_length"] <= 5.0 and ov["speedup"] > 0
    assert prof["target"]["path"] == str(smollm2.resolve())
    assert prof["suite"]["sources"].keys() == {"humaneval", "mt_bench"}
    assert load_acceptance(out / "speculation_profile.json", "coding").acceptance_length(4) >= 1.0
    assert "## By category" in (out / "report.md").read_text()
