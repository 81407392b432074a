"""Suffix decoding (TensorRT-LLM's SA): the automaton against brute force, the global pool, greedy losslessness of
the suffix drafter and of the SA enhancer on EAGLE-3, per-source statistics, and the recipe rules."""

from __future__ import annotations

import random

import pytest
import torch

from tests.tiny import VOCAB
from trtllm_spec.core.recipe_load import recipe_from_dict
from trtllm_spec.drafters.suffix.config import SuffixDrafter as SuffixSection
from trtllm_spec.drafters.suffix.runtime import PoolMatcher, SuffixAutomaton, SuffixDrafter
from trtllm_spec.drafters.suffix.sa_enhancer import SAEnhancedDrafter
from trtllm_spec.errors import RecipeError, UserError
from trtllm_spec.runtime.decoder import speculative_generate
from trtllm_spec.runtime.generate import generate
from trtllm_spec.runtime.llama import LlamaModel


def brute_own(tokens: list[int], k: int) -> tuple[int, int]:
    """The upstream rule by brute force: the longest suffix (k > 0: of size k..1) with an occurrence ending before
    the last token; the continuation starts after its first occurrence."""
    n = len(tokens)
    sizes = range(min(k, n - 1), 0, -1) if k > 0 else range(n - 1, 0, -1)
    for size in sizes:
        suf = tokens[n - size:]
        for end in range(size - 1, n - 1):  # occurrences ending before the last token, earliest first
            if tokens[end - size + 1:end + 1] == suf:
                return size, end + 1
    return 0, -1


def brute_pool(text: list[int], request: list[int], k: int, cap: int) -> tuple[int, int]:
    """Longest suffix of ``request`` (<= cap, <= k) occurring in ``text`` with a following token; first occurrence."""
    top = min(len(request), cap, k if k > 0 else cap)
    for size in range(top, 0, -1):
        suf = request[len(request) - size:]
        for end in range(size - 1, len(text) - 1):
            if text[end - size + 1:end + 1] == suf:
                return size, end + 1
    return 0, -1


@pytest.mark.parametrize("alphabet", [2, 3, 5])
def test_automaton_matches_brute_force(alphabet):
    rng = random.Random(alphabet)
    for _ in range(40):
        tokens = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 40))]
        sam = SuffixAutomaton()
        for i, t in enumerate(tokens):
            sam.extend(t)
            prefix = tokens[:i + 1]
            for k in (-1, 1, 2, 4):
                assert sam.own_match(k) == brute_own(prefix, k), (prefix, k)


def test_pool_matcher_matches_brute_force():
    rng = random.Random(7)
    for _ in range(60):
        text = [rng.randrange(3) for _ in range(rng.randrange(1, 30))]
        request = [rng.randrange(3) for _ in range(rng.randrange(1, 30))]
        m = PoolMatcher(SuffixAutomaton(text))
        for i, t in enumerate(request):
            m.feed(t)
            for k, cap in ((-1, 64), (-1, 3), (2, 64)):
                assert m.match(k, cap) == brute_pool(text, request[:i + 1], k, cap), (text, request[:i + 1], k, cap)


def test_longest_match_beats_ngram_window():
    # "1 2 3 4" occurred with continuation 9; the later "3 4" occurrence continues 7: the longest suffix decides
    d = SuffixDrafter()
    d.reset([1, 2, 3, 4, 9, 9, 8, 3, 4, 7, 0, 1, 2, 3], 4, [])
    assert d.match(3) == (4, [9, 9, 8])
    fixed = SuffixDrafter(max_matching_ngram_size=2)  # "3 4" first occurred before 9 as well
    fixed.reset([5, 3, 4, 7, 1, 3], 4, [])
    assert fixed.match(2) == (2, [7, 1])
    empty = SuffixDrafter()
    empty.reset([1, 2, 3], 4, [])
    assert empty.match(4) == (0, [])


def test_global_pool_is_suite_order_and_bounded():
    d = SuffixDrafter(enable_global_pool=True, pool_slots=3)  # the running request + 2 finished ones
    first = [11, 12, 13, 14, 15, 16, 17]
    d.end_request(first[:3], first[3:])
    d.reset([40, 41, 11, 12, 13], 14, [])
    assert d.match(3) == (4, [15, 16, 17]) and d.last_match == (4, "pool")
    d.end_request([50], [51, 52])
    d.end_request([60], [61, 62])  # the first text is evicted (oldest first)
    d.reset([40, 41, 11, 12, 13], 14, [])
    assert d.match(3) == (0, [])
    alone = SuffixDrafter()  # without the pool finished requests are ignored
    alone.end_request(first[:3], first[3:])
    alone.reset([40, 41, 11, 12, 13], 14, [])
    assert alone.match(3) == (0, [])


def test_own_text_wins_ties_and_pool_caps_at_64():
    d = SuffixDrafter(enable_global_pool=True)
    d.end_request([1, 2, 3], [8, 8])
    d.reset([1, 2, 3, 7, 0, 1, 2], 3, [])  # own "1 2 3" -> 7, pool "1 2 3" -> 8: same length, own wins
    assert d.match(1) == (3, [7]) and d.last_match[1] == "own"
    long = list(range(100, 200))
    d2 = SuffixDrafter(enable_global_pool=True)
    d2.end_request(long, [5])
    d2.reset([0, *long[:-1]], long[-1], [])
    assert d2.match(1) == (64, [5])


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        phrase = [rng.randrange(7, 60) for _ in range(6)]
        out.append([1] + phrase * 2 + [rng.randrange(7, VOCAB) for _ in range(5)] + phrase[:3])
    return out


@pytest.mark.parametrize("draft_len", [1, 4])
def test_greedy_lossless_suffix_with_and_without_pool(tiny_target, draft_len):
    target = LlamaModel.from_pretrained(tiny_target)
    pooled = SuffixDrafter(enable_global_pool=True)
    for prompt in _prompts(4):
        ref = generate(target, prompt, 32, (2,))
        for drafter in (SuffixDrafter(), SuffixDrafter(max_matching_ngram_size=2), pooled):
            out, stats = speculative_generate(target, drafter, prompt, 32, draft_len, eos_ids=(2,))
            assert out == ref
            assert all(0 <= a <= p <= draft_len for a, p in zip(stats.accepted, stats.proposed, strict=True))
        pooled.end_request(prompt, ref)
    # a repeated prompt drafts its earlier output from the pool: every draft accepted
    out, stats = speculative_generate(target, pooled, _prompts(1)[0], 32, 4, eos_ids=(2,))
    assert out == generate(target, _prompts(1)[0], 32, (2,)) and sum(stats.accepted) >= len(out) // 2


@pytest.fixture(scope="module")
def eagle(tiny_target, tmp_path_factory):
    from tests.unit.test_convert import ours_tensors, write_ours
    from trtllm_spec.drafters.load import load_runtime_drafter

    folder = write_ours(tmp_path_factory.mktemp("eagle") / "e", ours_tensors(dtype=torch.float32), ids=(0, 1, 3))
    return folder, LlamaModel.from_pretrained(tiny_target), load_runtime_drafter


def test_enhancer_is_lossless_and_counts_its_sources(eagle):
    folder, target, load = eagle
    kind, drafter = load(str(folder), target, options={"sa_enhancer": {"threshold": 2}}, max_len=128)
    assert kind == "eagle3" and isinstance(drafter, SAEnhancedDrafter) and drafter.capture
    seen = set()
    for prompt in _prompts(3, seed=5):
        ref = generate(target, prompt, 32, (2,))
        out, stats = speculative_generate(target, drafter, prompt, 32, 3, eos_ids=(2,))
        assert out == ref and len(stats.sources) == stats.iterations
        seen |= set(stats.sources)
    assert seen == {"sa", "neural"}
    assert drafter.sa_s > 0
    # a threshold no match reaches leaves the neural drafts alone
    _, never = load(str(folder), target, options={"sa_enhancer": {"threshold": 10_000}}, max_len=128)
    _, stats = speculative_generate(target, never, _prompts(1)[0], 24, 3)
    assert set(stats.sources) == {"neural"}


def test_enhancer_refused_where_upstream_has_no_sa_config(eagle, tiny_target):
    _, target, load = eagle
    with pytest.raises(UserError, match="neural drafter"):
        load("suffix", target, options={"sa_enhancer": {"threshold": 2}})


def test_source_counts_in_the_profile():
    from trtllm_spec.measure.profile import PromptRun, section

    run = PromptRun("a", "coding", 5, [1] * 9, [1] * 9, 1.0, 0.5, [3, 0, 2], [3, 3, 2], [3, 3, 3],
                    draft_s=0.2, sources=["sa", "neural", "sa"], enhancer_s=0.05)
    s = section([run], 3, "chain", True)
    assert s["sources"] == {"neural": {"iterations": 1, "drafted_tokens": 3, "accepted_tokens": 0,
                                       "acceptance_rate": 0.0, "mean_acceptance_length": 1.0},
                            "sa": {"iterations": 2, "drafted_tokens": 5, "accepted_tokens": 5,
                                   "acceptance_rate": 1.0, "mean_acceptance_length": 3.5}}
    assert s["enhancer_time_share"] == 0.1
    plain = PromptRun("b", "coding", 5, [1] * 4, [1] * 4, 1.0, 0.5, [1], [1], [1])
    assert "sources" not in section([plain], 3, "chain", True)


BASE = {"target": {"model": "llama-3.1-8b-instruct"}, "hardware": {"gpu": "h100-sxm"}}


def test_recipe_rules():
    r = recipe_from_dict({**BASE, "drafter": {"type": "suffix"}})
    assert r.trtllm_profile == "1.3" and r.drafter.max_matching_ngram_size == -1
    for bad, match in (({"max_matching_ngram_size": 0}, "0 is invalid"),
                       ({"global_pool_size": 64}, "needs drafter.enable_global_pool"),
                       ({"enable_global_pool": True, "max_matching_ngram_size": 65}, "1..64"),
                       ({"enable_global_pool": True, "global_pool_size": 8}, "below the largest batch size 64")):
        with pytest.raises(RecipeError, match=match):
            recipe_from_dict({**BASE, "drafter": {"type": "suffix", **bad}})
    with pytest.raises(RecipeError, match="not in TensorRT-LLM 1.2"):
        recipe_from_dict({**BASE, "drafter": {"type": "suffix"}, "engine": {"trtllm_version": "1.2"}})
    enhanced = recipe_from_dict({**BASE, "drafter": {"type": "eagle3", "sa_enhancer": {"threshold": 3}}})
    assert enhanced.trtllm_profile == "1.3"  # auto: a release with sa_config
    assert recipe_from_dict({**BASE, "drafter": {"type": "eagle3"}}).trtllm_profile == "1.3"  # auto: newest stable
    with pytest.raises(RecipeError, match="sa_enhancer needs TensorRT-LLM 1.3"):
        recipe_from_dict({**BASE, "drafter": {"type": "mtp", "sa_enhancer": {}}, "engine": {"trtllm_version": "1.2"}})
    with pytest.raises(RecipeError, match="threshold"):
        recipe_from_dict({**BASE, "drafter": {"type": "eagle3", "sa_enhancer": {"threshold": 0}}})
    with pytest.raises(RecipeError, match="sa_enhancer"):
        recipe_from_dict({**BASE, "drafter": {"type": "dflash", "sa_enhancer": {}}})
    assert SuffixSection(enable_global_pool=True).pool_slots(8) == 64
    assert SuffixSection(enable_global_pool=True, global_pool_size=256).pool_slots(8) == 256


def test_planner_charges_the_automaton_not_a_model():
    """SA's draft cost: no forward pass, one step per iteration; its slots are held out of the KV budget (per
    sequence, or a fixed pool)."""
    from trtllm_spec.core.hardware import load_hardware
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.drafters.registry import get
    from trtllm_spec.drafters.suffix import SA_BYTES_PER_TOKEN
    from trtllm_spec.planner.cost import Parallelism, Precision
    from trtllm_spec.planner.search import CostContext, Workload, draft_step, max_feasible_batch

    shape = resolve_target("llama-3.1-8b-instruct").shape
    mech = get("suffix")
    cost = mech.cost(shape, SuffixSection())
    assert cost.passes == () and cost.weight_params == 0 and cost.kv_shape is None and not cost.sequential
    assert cost.state_bytes_per_token == SA_BYTES_PER_TOKEN and cost.state_pool_slots == 0
    ctx = CostContext(shape, load_hardware("h100-sxm"), Parallelism(), Precision(), Workload((1, 8), 32768, 32768))
    step = draft_step(ctx, cost, 8, 4)
    assert step.total_s == pytest.approx(ctx.hw.overheads.draft_step_s)  # one host step, whatever D
    ngram = get("ngram").cost(shape, get("ngram").default_config())
    plain, own, pooled = (max_feasible_batch(ctx, c, 4) for c in (ngram, cost, mech.cost(
        shape, SuffixSection(enable_global_pool=True, global_pool_size=512))))
    assert own <= plain and pooled < plain  # charged: ~228 B per token per slot (a KV token of 8B is 128 KiB)
    assert max_feasible_batch(ctx, cost, 0) == max_feasible_batch(ctx, None, 0)  # D = 0: no automaton


def test_measure_pool_follows_suite_order_not_batching(tiny_target, monkeypatch):
    """In measure the pool holds the suite's earlier prompts and outputs, in suite order: a task asked again later
    drafts the earlier reply from the pool, and the result is the same whatever the reference batching."""
    import trtllm_spec.data.suite as suite
    import trtllm_spec.measure.run as run
    from trtllm_spec.data.suite import SuiteItem

    def item(i, cat, text):
        return SuiteItem(f"{cat}/mt_bench/{i}", cat, [{"role": "user", "content": text}], "mt_bench", "CC-BY-4.0", str(i))

    a = "w5 w9 w3 w7 w1 w8 w2 w6"
    items = [item(0, "coding", a), item(1, "math", "w4 w4 w2 w9"), item(2, "math", a)]
    monkeypatch.setattr(suite, "build_suite", lambda *a, **k: items)
    kw = dict(suite="speed-lite", num_prompts=3, max_new_tokens=16, device="cpu")
    pool = {"max_matching_ngram_size": -1, "enable_global_pool": True, "pool_slots": 64}
    alone = run.measure(tiny_target, "suffix", 4, drafter_options={**pool, "enable_global_pool": False}, **kw)
    pooled = run.measure(tiny_target, "suffix", 4, drafter_options=pool, **kw)
    monkeypatch.setattr(run, "REFERENCE_BATCH", 1)
    rebatched = run.measure(tiny_target, "suffix", 4, drafter_options=pool, **kw)
    al = {p["id"]: p["acceptance_length"] for p in pooled["prompts"]}
    assert al == {p["id"]: p["acceptance_length"] for p in rebatched["prompts"]}
    base = {p["id"]: p["acceptance_length"] for p in alone["prompts"]}
    assert al["math/mt_bench/2"] > base["math/mt_bench/2"]  # the repeat drafts the first reply from the pool
    assert al["coding/mt_bench/0"] == base["coding/mt_bench/0"]  # the first prompt has an empty pool
    assert pooled["drafter"]["options"] == pool
    assert pooled["overall"]["identical_outputs"] == 3
