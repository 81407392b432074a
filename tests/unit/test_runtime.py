"""The reference decoder: numerics against transformers, and greedy losslessness for every drafter type."""

import random

import pytest
import torch

from tests.tiny import VOCAB, write_model
from trtllm_spec.drafters.draft_model.runtime import DraftModelDrafter
from trtllm_spec.drafters.ngram.runtime import NGramDrafter
from trtllm_spec.runtime.decoder import speculative_generate
from trtllm_spec.runtime.generate import generate, generate_batch
from trtllm_spec.runtime.llama import LlamaModel


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3"])
def test_logits_match_transformers(tmp_path, model_type):
    from transformers import AutoModelForCausalLM

    folder = write_model(tmp_path / model_type, layers=3, model_type=model_type, tie=model_type != "qwen2")
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ours = LlamaModel.from_pretrained(folder)
    ids = torch.randint(0, VOCAB, (1, 30))
    with torch.no_grad():
        ref = hf(ids).logits
    cache = ours.new_cache(1, 64)
    full, _, _ = ours.forward(ids, torch.tensor([0]), cache)
    assert torch.allclose(full, ref, atol=1e-4)
    cache = ours.new_cache(1, 64)  # incremental: prefix, then one token at a time, then a 4-token verify
    parts = [ours.forward(ids[:, :10], torch.tensor([0]), cache)[0]]
    for i in range(10, 26):
        parts.append(ours.forward(ids[:, i:i + 1], torch.tensor([i]), cache)[0])
    parts.append(ours.forward(ids[:, 26:], torch.tensor([26]), cache)[0])
    assert torch.allclose(torch.cat(parts, 1), ref, atol=1e-4)


def test_batched_generation_matches_single(tiny_target):
    m = LlamaModel.from_pretrained(tiny_target)
    rng = random.Random(0)
    prompts = [[rng.randrange(7, VOCAB) for _ in range(n)] for n in (5, 12, 9)]
    singles = [generate(m, p, 12, (2,)) for p in prompts]
    assert generate_batch(m, prompts, 12, (2,)) == singles


def test_batched_generation_drops_finished_rows(tiny_target):
    """Rows that hit EOS at different steps leave the batch; the others' tokens and captured features are the
    same as decoding each prompt alone."""
    m = LlamaModel.from_pretrained(tiny_target)
    rng = random.Random(1)
    prompts = [[rng.randrange(7, VOCAB) for _ in range(rng.randrange(4, 14))] for _ in range(8)]
    free = [generate(m, p, 16, ()) for p in prompts]
    eos = tuple({o[rng.randrange(1, 8)] for o in free[:4]})  # tokens these rows emit early: they end first
    singles = [generate(m, p, 16, eos) for p in prompts]
    assert len({len(o) for o in singles}) > 2  # rows really finish at different steps
    feats: list[dict] = []
    assert generate_batch(m, prompts, 16, eos, capture=(0, 1), features=feats) == singles
    assert generate_batch(m, prompts, 16, eos, drop_finished=False) == singles
    for p, out, f in zip(prompts, singles, feats, strict=True):
        alone: list[dict] = []
        generate_batch(m, [p], 16, eos, capture=(0, 1), features=alone)
        assert f["aux"].shape[0] == len(p) + len(out)
        assert torch.allclose(f["aux"], alone[0]["aux"], atol=1e-5)
        assert torch.allclose(f["hidden"], alone[0]["hidden"], atol=1e-5)


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        phrase = [rng.randrange(7, 60) for _ in range(5)]
        out.append([1] + phrase * 3 + [rng.randrange(7, VOCAB) for _ in range(6)] + phrase)
    return out


@pytest.mark.parametrize("draft_len", [1, 3, 6])
def test_greedy_lossless_ngram_and_draft_model(tiny_target, tiny_draft, draft_len):
    target = LlamaModel.from_pretrained(tiny_target)
    draft = LlamaModel.from_pretrained(tiny_draft)
    for prompt in _prompts(5):
        ref = generate(target, prompt, 40, (2,))
        for drafter in (NGramDrafter(3), DraftModelDrafter(draft), DraftModelDrafter(target)):
            out, stats = speculative_generate(target, drafter, prompt, 40, draft_len, eos_ids=(2,))
            assert out == ref
            assert all(0 <= a <= p <= draft_len for a, p in zip(stats.accepted, stats.proposed, strict=True))
    # the target drafting for itself accepts everything
    out, stats = speculative_generate(target, DraftModelDrafter(target), _prompts(1)[0], 40, 4)
    assert stats.accepted[:-1] and all(a == 4 for a in stats.accepted[:-1])


def test_ngram_proposes_oldest_continuation():
    d = NGramDrafter(2)
    d.reset([5, 6, 7, 8, 5, 6, 9, 5], 6, [])
    assert d.propose(2)[0] == [7, 8]  # the oldest "5 6" is followed by 7 8
    d2 = NGramDrafter(2, use_oldest=False)
    d2.reset([5, 6, 7, 8, 5, 6, 9, 5], 6, [])
    assert d2.propose(2)[0] == [9, 5]
    d.reset([1, 2, 3], 4, [])
    assert d.propose(3)[0] == []


@pytest.mark.parametrize("rows", [1, 2, 5, 16, 32, 64])
@pytest.mark.parametrize("out_features", [96, 20000])
def test_linear_equals_f_linear_whichever_kernel_it_picks(rows, out_features):
    import torch.nn.functional as F

    from trtllm_spec.runtime.llama import linear

    g = torch.Generator().manual_seed(rows)
    w, x = torch.randn(out_features, 48, generator=g), torch.randn(2, rows, 48, generator=g)[:, : max(1, rows // 2)]
    got = linear(x, w)
    assert got.shape == F.linear(x, w).shape and got.is_contiguous()
    assert torch.allclose(got, F.linear(x, w), rtol=1e-5, atol=1e-5)
    bias = torch.randn(out_features, generator=g)
    assert torch.allclose(linear(x, w, bias), F.linear(x, w, bias), rtol=1e-5, atol=1e-5)
