"""Issue 22 item 1 on the real thing: the n-gram CPU recipe's bundle (real SmolLM2-135M, real speed-lite prompts)
sends only requests that fit its own max_seq_len, counted with SmolLM2's tokenizer and chat template; and the
byte bound used for targets without a tokenizer here holds for SmolLM2's byte-level BPE on every suite prompt."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import RECIPES
from trtllm_spec.data.model_assets import fetch_model
from trtllm_spec.data.prompts import fetch_prompts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def assets():
    fetch_prompts()
    return fetch_model("smollm2-135m")


def test_ngram_cpu_bundle_dataset_fits_its_max_seq_len(cli, assets, tmp_path):
    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.stages.bench_dataset import byte_bound

    out = tmp_path / "bundle"
    # 8 new tokens per measured prompt (the recipe's 48 add nothing here: the dataset is the suite's prompts, the
    # bound is the recipe's osl and max_seq_len; issue 55 item 6: the slow tier inside CI's budget)
    r = cli("build", RECIPES / "smollm2-135m-ngram-cpu.yaml", "--out", out, "--cache", tmp_path / "stages",
            "--set", "measure.max_new_tokens=8")
    assert r.exit_code == 0, r.output
    opts = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    tok = load_tokenizer(out / "target")
    lines = [json.loads(x) for x in (out / "dataset.jsonl").read_text().splitlines()]
    assert len(lines) > 1
    for row in lines:
        ids = prompt_ids(tok, [{"role": "user", "content": row["prompt"]}])
        assert row["input_ids"] == ids  # what the engine prefills: SmolLM2's chat template, as measured
        assert len(ids) + row["output_tokens"] <= opts["max_seq_len"]
        assert len(tok(row["prompt"])["input_ids"]) <= byte_bound(row["prompt"])
    assert opts["max_seq_len"] >= max(len(x["input_ids"]) for x in lines) + 256
