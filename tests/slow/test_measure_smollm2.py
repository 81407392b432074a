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
    r = cli("measure", "reference", "--target", "smollm2-135m", "--drafter", "ngram", "--draft-len", "4", "--categories",
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


def test_transformers_engine_on_smollm2_gives_our_decoders_tokens(smollm2):
    """The real checkpoint through both reference engines: the same greedy tokens, target alone and with n-gram
    drafts (benchmarks/reference_decoder.py times the two)."""
    import torch

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.suite import build_suite
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.targets import load_target

    cfg = json.loads((smollm2 / "config.json").read_text())
    ours, hf = (load_target(smollm2, cfg, e, torch.float32, "cpu")[1] for e in ("ours", "hf"))
    tok = load_tokenizer(smollm2)
    ids = prompt_ids(tok, build_suite(categories=["coding"], num_prompts=1)[0].messages)
    eos = tuple(ours.cfg.eos_token_ids)
    ref = generate(ours, ids, 24, eos)
    assert generate(hf, ids, 24, eos) == ref
    assert speculative_generate(hf, NGramDrafter(), ids, 24, 4, eos_ids=eos)[0] == ref
