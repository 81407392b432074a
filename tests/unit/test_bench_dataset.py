"""The bundle's benchmark dataset fits the bundle (issue 22 item 1): every request of ``dataset.jsonl`` fits the
options' ``max_seq_len``, counted with the target's tokenizer and chat template where one is here (the request then
carries those ``input_ids``, which trtllm-bench sends as they are), or bounded by UTF-8 bytes + special tokens for a
shape preset / HF id (the text only; trtllm-bench tokenizes it without a chat template)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.cli.test_cli_build import _recipe
from tests.conftest import RECIPES
from trtllm_spec.data.suite import SuiteItem
from trtllm_spec.errors import UserError
from trtllm_spec.stages.bench_dataset import (
    SPECIAL_TOKENS_BOUND,
    build_dataset,
    byte_bound,
    required_max_seq_len,
)


def item(text: str, i: int = 0) -> SuiteItem:
    return SuiteItem(f"coding/mt_bench/{i}", "coding", [{"role": "user", "content": text}], "mt_bench", "CC-BY-4.0",
                     str(i))


@pytest.fixture
def tok(tiny_target):
    from trtllm_spec.data.chat import load_tokenizer

    return load_tokenizer(tiny_target)


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tokenized_requests_carry_the_chat_templated_ids(tok):
    from trtllm_spec.data.chat import prompt_ids

    ds = build_dataset([item("w1 w2 w3 w4", 0), item("w9 w8", 1)], 32, tok)
    assert [r.prompt_tokens for r in ds.requests] == [len(prompt_ids(tok, [{"role": "user", "content": t}]))
                                                       for t in ("w1 w2 w3 w4", "w9 w8")]
    lines = [json.loads(x) for x in ds.jsonl().splitlines()]
    assert lines[0]["input_ids"] == prompt_ids(tok, [{"role": "user", "content": "w1 w2 w3 w4"}])
    assert lines[0]["prompt"] == "w1 w2 w3 w4" and lines[0]["output_tokens"] == 32
    assert ds.max_total_tokens == max(len(x["input_ids"]) for x in lines) + 32
    assert "tokenizer" in ds.counted


def test_without_a_tokenizer_the_text_is_bounded_by_its_bytes():
    ds = build_dataset([item("héllo wörld — 你好 🙂")], 16, None)
    (r,) = ds.requests
    assert r.input_ids is None and r.prompt_tokens == len("héllo wörld — 你好 🙂".encode()) + SPECIAL_TOKENS_BOUND
    assert "input_ids" not in json.loads(ds.jsonl())
    assert "upper bound" in ds.counted


def _byte_level_bpe():
    """A real byte-level BPE (GPT-2 / Llama 3 / Qwen style) with few merges, so most text is one token per byte --
    the worst case the bound must hold for -- and a BOS added as Llama's tokenizers do."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20, trainer)
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return lambda text: tk.encode(text).ids


def _byte_fallback_spm():
    """A SentencePiece-style BPE (Llama 2 / Mistral): Metaspace with the dummy prefix and byte fallback."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.decoder = decoders.Metaspace()
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens])
    tk.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20, trainer)
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return lambda text: tk.encode(text).ids


TEXTS = ["plain ascii words " * 20, "héllo wörld", "你好，世界" * 30, "🙂🚀" * 40, "def f(x):\n    return x ** 2\n" * 10,
         "\t\n  \n" + "a" * 300, " leading and  double  spaces ", "x"]


@pytest.mark.parametrize("make", [_byte_level_bpe, _byte_fallback_spm], ids=["byte-level-bpe", "byte-fallback-spm"])
def test_byte_bound_holds_for_real_tokenizers(make):
    encode = make()
    for text in TEXTS:
        n = len(encode(text))
        assert n <= byte_bound(text), (text, n)
    assert len(encode("🙂" * 40)) > 40  # the worst case is reached: no merges, one token per byte (+ BOS)


def test_max_seq_len_is_sized_from_the_dataset_and_the_workload(tok):
    ds = build_dataset([item("w1 " * 40)], 100, tok)
    need = ds.max_total_tokens
    assert required_max_seq_len(ds, isl=8, osl=16, max_draft_len=3, configured=None) == need + 4
    assert required_max_seq_len(ds, isl=4096, osl=512, max_draft_len=3, configured=None) == 4096 + 512 + 4
    assert required_max_seq_len(ds, isl=8, osl=16, max_draft_len=3, configured=need) == need  # fits exactly
    with pytest.raises(UserError, match=r"engine.max_seq_len = .*needs .*Raise engine.max_seq_len to \d+"):
        required_max_seq_len(ds, isl=8, osl=16, max_draft_len=3, configured=need - 1)


def test_built_bundle_dataset_fits_max_seq_len(cli, tmp_path, tiny_target, tiny_suite, monkeypatch):
    """A bundle built here: every request's chat-templated ids + output_tokens fit the options' max_seq_len."""
    from trtllm_spec.data.chat import load_tokenizer, prompt_ids

    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    # isl far below the prompts' real length: max_seq_len must come from the dataset, not from isl + osl
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"}, draft_len=3,
                     workload={"batch_sizes": [1, 8], "isl": 2, "osl": 32})
    out = tmp_path / "bundle"
    r = cli("build", recipe, "--out", out)
    assert r.exit_code == 0, r.output
    opts = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    tok = load_tokenizer(out / "target")
    for row in rows(out / "dataset.jsonl"):
        assert row["input_ids"] == prompt_ids(tok, [{"role": "user", "content": row["prompt"]}])
        assert len(row["input_ids"]) + row["output_tokens"] <= opts["max_seq_len"]
    assert opts["max_seq_len"] > 2 + 32 + 3 + 1
    # issue 22 item 4: the options file and the overhead report say what the engine does at each batch size
    if "speculative_config" in opts:
        rule = "applies no draft_len_schedule or max_concurrency to n-gram"
        assert rule in " ".join(x.lstrip("# ") for x in (out / "llm_api_options.yaml").read_text().splitlines()
                                if x.startswith("#"))
        assert rule in (out / "report" / "overhead.md").read_text()
        assert "draft_len_schedule" not in opts["speculative_config"]
    # an explicit max_seq_len the dataset does not fit is refused before anything is written
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"}, draft_len=3, engine={"max_seq_len": 20})
    r = cli("build", recipe, "--out", tmp_path / "b2")
    assert r.exit_code == 2 and "engine.max_seq_len = 20" in r.output and "Raise engine.max_seq_len" in r.output
    assert not (tmp_path / "b2").exists()


def test_preset_bundle_bounds_every_request(cli, tmp_path, monkeypatch):
    """A plan-level GPU recipe (shape preset, no tokenizer here): the text-only requests fit by the byte bound."""
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "b"
    r = cli("build", RECIPES / "qwen3-8b-ngram-h100.yaml", "--out", out)
    assert r.exit_code == 0, r.output
    opts = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    for row in rows(out / "dataset.jsonl"):
        assert "input_ids" not in row
        assert byte_bound(row["prompt"]) + row["output_tokens"] <= opts["max_seq_len"]
