"""Speculative sampling keeps the target's distribution: a chi-square goodness-of-fit test at significance
level alpha = 0.001 (fixed seeds, so the outcome is deterministic).

A 16-token target and a different random draft model (one layer fewer, so its distribution q is related to the
target's p but not equal). For a fixed 3-token prompt, N = 4000 generations of 4 tokens with draft length 2: the
first token comes from the prefill, the next two from one speculative iteration (2 drafts, rejection sampling,
residual / bonus token), so the pair (x2, x3) is what speculation produced. Its exact law under the target,
P(x2, x3) = sum_x1 p(x1) p(x2 | x1) p(x3 | x1, x2), with the same temperature / top-k / top-p processing, comes
from the target's own logits. Cells with an expected count below 5 are pooled; a cell the target cannot produce
(top-k / top-p) must stay empty. Drafters: the sampling draft model (q = its own processed distribution) and
the greedy n-gram drafter (deterministic, q = one-hot). Power: the same test rejects a sampler that skips the
residual correction (resamples from p instead of norm(max(0, p - q)) after a rejection).
"""

import itertools

import pytest
import torch

from tests.tiny import write_model

ALPHA = 0.001
N = 4000
VOCAB = 16
DRAFT_LEN = 2


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from trtllm_spec.runtime.llama import LlamaModel

    root = tmp_path_factory.mktemp("vocab16")
    kw = dict(hidden=32, heads=2, kv=1, inter=64, vocab=VOCAB, seed=0, init=0.3)
    target = LlamaModel.from_pretrained(write_model(root / "target", layers=2, **kw))
    draft = LlamaModel.from_pretrained(write_model(root / "draft", layers=1, **kw))
    return target, draft


@pytest.fixture(autouse=True)
def one_thread():
    """Thousands of tiny forwards: a second thread only spins (and the machine may be busy)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _next_probs(model, seqs: list[list[int]], params) -> torch.Tensor:
    """p(. | seq) for every seq (all of one length), processed like sampling does."""
    from trtllm_spec.runtime.sampling import probs

    ids = torch.tensor(seqs)
    logits, _, _ = model.forward(ids, torch.zeros(len(seqs), dtype=torch.long), model.new_cache(len(seqs), 8),
                                 logits="last")
    return probs(logits[:, -1], params)


def _pair_law(target, prompt: list[int], params) -> torch.Tensor:
    """Exact P(x2, x3) [VOCAB, VOCAB] after the prompt, x1 marginalised."""
    p1 = _next_probs(target, [prompt], params)[0].double()
    p2 = _next_probs(target, [[*prompt, a] for a in range(VOCAB)], params).double()  # [x1, x2]
    p3 = _next_probs(target, [[*prompt, a, b] for a in range(VOCAB) for b in range(VOCAB)], params).double()
    return torch.einsum("a,ab,abc->bc", p1, p2, p3.view(VOCAB, VOCAB, VOCAB))


def _prompt_for_ngram(target, params) -> list[int]:
    """[a, b, a] where the target's first token is most often a or b: the n-gram drafter then drafts [b, a] or
    [a, b] (only when x1 repeats a prompt token has it anything to propose)."""
    best, best_mass = None, -1.0
    for a, b in itertools.permutations(range(3, 12), 2):
        p = _next_probs(target, [[a, b, a]], params)[0]
        if float(p[a] + p[b]) > best_mass:
            best, best_mass = [a, b, a], float(p[a] + p[b])
    return best


def _chisquare(counts: torch.Tensor, law: torch.Tensor) -> float:
    from scipy.stats import chisquare

    obs, exp = counts.flatten().double(), law.flatten() * N
    assert int(obs[exp == 0].sum()) == 0, "speculation produced a pair the target cannot produce"
    big = exp >= 5
    f_obs = [*obs[big].tolist(), float(obs[~big].sum())]
    f_exp = [*exp[big].tolist(), float(exp[~big].sum())]
    if f_exp[-1] == 0:
        f_obs, f_exp = f_obs[:-1], f_exp[:-1]
    assert len(f_exp) >= 10  # enough cells for the test to mean something
    total = sum(f_exp)
    return float(chisquare(f_obs, [e * sum(f_obs) / total for e in f_exp]).pvalue)


def _draw(target, make_drafter, prompt, params, seed: int) -> tuple[torch.Tensor, float]:
    """(counts of (x2, x3) over N generations, fraction of drafts accepted)."""
    from trtllm_spec.runtime.decoder import speculative_generate

    g = torch.Generator().manual_seed(seed)
    drafter = make_drafter(seed)
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.long)
    accepted = proposed = 0
    for _ in range(N):
        out, stats = speculative_generate(target, drafter, prompt, 2 + DRAFT_LEN, DRAFT_LEN, params, generator=g)
        assert len(out) == 2 + DRAFT_LEN
        counts[out[1], out[2]] += 1
        accepted += stats.accepted[0]
        proposed += stats.proposed[0]
    return counts, accepted / max(1, proposed)


def _sampling_drafter(draft, params):
    from trtllm_spec.drafters.draft_model.runtime import DraftModelDrafter

    return lambda seed: DraftModelDrafter(draft, 16, params, torch.Generator().manual_seed(seed + 1))


def _ngram_drafter(seed):
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter

    return NGramDrafter()


PARAMS = {"t1": dict(temperature=1.0), "topk5-topp0.9": dict(temperature=1.0, top_k=5, top_p=0.9)}


@pytest.mark.parametrize("name", PARAMS)
def test_draft_model_sampling_matches_target(models, name):
    from trtllm_spec.runtime.sampling import SamplingParams

    target, draft = models
    params = SamplingParams(**PARAMS[name])
    prompt = [5, 9, 5]
    counts, acc = _draw(target, _sampling_drafter(draft, params), prompt, params, seed=0)
    assert 0.05 < acc < 0.95  # the draft model is neither useless nor the target: both branches are exercised
    assert _chisquare(counts, _pair_law(target, prompt, params)) > ALPHA


@pytest.mark.parametrize("name", PARAMS)
def test_ngram_sampling_matches_target(models, name):
    from trtllm_spec.runtime.sampling import SamplingParams

    target, _ = models
    params = SamplingParams(**PARAMS[name])
    prompt = _prompt_for_ngram(target, params)
    counts, acc = _draw(target, _ngram_drafter, prompt, params, seed=1)
    assert acc > 0.05
    assert _chisquare(counts, _pair_law(target, prompt, params)) > ALPHA


@pytest.mark.parametrize("drafter", ["draft_model", "ngram"])
def test_the_test_rejects_a_sampler_without_residual(models, monkeypatch, drafter):
    """After a rejection, resampling from p itself (instead of norm(max(0, p - q)), or p without the rejected
    draft for a deterministic drafter) over-weights the drafts; at the same N and alpha the test must notice."""
    import trtllm_spec.runtime.decoder as decoder
    from trtllm_spec.runtime.sampling import SamplingParams

    def no_residual(p, draft, q, generator):
        q_d = 1.0 if q is None else float(q[draft])
        if float(torch.rand((), generator=generator)) < min(1.0, float(p[draft]) / q_d):
            return True, draft
        return False, int(torch.multinomial(p, 1, generator=generator))

    monkeypatch.setattr(decoder, "accept_or_resample", no_residual)
    target, draft = models
    params = SamplingParams(temperature=1.0)
    if drafter == "draft_model":
        prompt, make, seed = [5, 9, 5], _sampling_drafter(draft, params), 0
    else:
        prompt, make, seed = _prompt_for_ngram(target, params), _ngram_drafter, 1
    counts, _ = _draw(target, make, prompt, params, seed=seed)
    assert _chisquare(counts, _pair_law(target, prompt, params)) < ALPHA
