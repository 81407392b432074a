"""The Triton CPU preview of a real SmolLM2-135M bundle (the n-gram recipe, measured on one prompt; and issue 46's
reproduction, the same recipe drafted by SmolLM2-135M itself as a draft model at the default release) served by a
real Triton Inference Server: a streamed completion over gRPC (docs/triton_preview.md's client, verbatim) equals
target-only greedy decoding of the same prompt."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.unit.test_triton_serve import client_snippet

pytestmark = pytest.mark.slow

PROMPT = "The three primary colours are"
MAX_TOKENS = 24


DRAFTERS = {"ngram": [], "draft_model": ["--set", "drafter.type=draft_model", "--set", "drafter.model=smollm2-135m"]}


@pytest.fixture(scope="module", params=sorted(DRAFTERS))
def bundle(request, tmp_path_factory):
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.data.prompts import fetch_prompts
    from trtllm_spec.errors import DependencyMissing
    from trtllm_spec.serve.triton import find_triton

    try:
        find_triton()
    except DependencyMissing as exc:
        pytest.skip(f"no Triton venv here ({exc}); scripts/setup.sh --dev installs it")
    fetch_prompts(sources=["humaneval"])
    fetch_model("smollm2-135m")
    from click.testing import CliRunner

    from trtllm_spec.cli import main

    out = tmp_path_factory.mktemp(f"smollm2-triton-{request.param}") / "bundle"
    r = CliRunner().invoke(main, ["build", str(REPO / "recipes/smollm2-135m-ngram-cpu.yaml"), "--out", str(out),
                                  "--set", "measure.num_prompts=1", "--set", "measure.max_new_tokens=16",
                                  "--set", "measure.categories=[coding]", *DRAFTERS[request.param]],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out


def test_smollm2_bundle_streams_target_only_greedy_through_triton(bundle, tmp_path):
    import torch
    from transformers import AutoTokenizer

    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.serve.triton import TritonServer
    from trtllm_spec.stages.triton import triton_from_bundle

    record = read_bundle(bundle)  # the draft model is served from its folder in the bundle (issue 46)
    assert (record.drafter_dir is not None) == (record.drafter == "draft_model")
    repo = tmp_path / "triton"
    triton_from_bundle(bundle, repo, force=False, model_name="tensorrt_llm", preview="reference")
    target = LlamaModel.from_pretrained(bundle / "target", dtype=torch.float32, device="cpu")
    tok = AutoTokenizer.from_pretrained(bundle / "target")
    eos = tuple(target.cfg.eos_token_ids) + ((tok.eos_token_id,) if tok.eos_token_id is not None else ())
    greedy = tok.decode(generate(target, tok(PROMPT).input_ids, MAX_TOKENS, eos), skip_special_tokens=True)
    with TritonServer(repo, log_file=tmp_path / "triton.log") as srv:
        steps = client_snippet()["stream_grpc"](srv.grpc_url, PROMPT, MAX_TOKENS, timeout_s=300)
        texts = client_snippet()["generate_stream_http"](srv.url, PROMPT, MAX_TOKENS, timeout_s=300)
    assert steps[-1] == (greedy, True) and not any(final for _, final in steps[:-1])
    assert len(steps) >= 4 and texts[-1] == greedy
    assert len(greedy.split()) >= 5
