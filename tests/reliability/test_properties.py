"""Property-based tests (hypothesis): recipes round-trip through YAML, the planner's acceptance and step time
behave for any input, draft_len_schedule obeys TensorRT-LLM's rules, d2t tables are valid for any frequency
table, and speculative decoding is greedy-lossless on random tiny models and prompts."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trtllm_spec.core import releases
from trtllm_spec.core.hardware import CATALOGUE
from trtllm_spec.core.recipe import DRAFTER_TYPES
from trtllm_spec.core.targets import preset_names
from trtllm_spec.errors import UserError

# drawn from the registries, so a release or mechanism registered later is drawn too (issue 46 item 3)
RELEASES = releases.names()

# small, deterministic runs (no example database written into the repository); --hypothesis-seed explores more
FAST = settings(max_examples=25, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ---- recipes: YAML -> model -> YAML -----------------------------------------------------------------------------

def _drafter() -> st.SearchStrategy[dict]:
    training = st.fixed_dictionaries({}, optional={
        "max_steps": st.integers(1, 10_000_000), "batch_size": st.integers(1, 4096), "lr": st.floats(1e-6, 1.0),
        "precision": st.sampled_from(["auto", "bf16", "fp32"]), "seed": st.integers(-2**31, 2**31),
        "data": st.fixed_dictionaries({}, optional={"num_conversations": st.integers(1, 1_000_000),
                                                    "eval_fraction": st.floats(0, 0.99)})})
    own = {  # the sections whose own fields are drawn too; every other registered type gets its defaults
        "eagle3": st.fixed_dictionaries({"type": st.just("eagle3")}, optional={
            "num_layers": st.integers(1, 64), "draft_vocab_size": st.integers(1, 300_000), "training": training}),
        "ngram": st.fixed_dictionaries({"type": st.just("ngram")}, optional={
            "max_matching_ngram_size": st.integers(1, 64), "is_keep_all": st.booleans()}),
        "dflash": st.fixed_dictionaries({"type": st.sampled_from(["dflash", "dspark"])}, optional={
            "block_size": st.sampled_from([2, 4, 8, 16]), "mask_token": st.one_of(st.integers(0, 10**6),
                                                                                    st.text(min_size=1, max_size=8))}),
        "draft_model": st.fixed_dictionaries({"type": st.just("draft_model"), "model": st.sampled_from(preset_names())}),
        "mtp": st.fixed_dictionaries({"type": st.just("mtp")}, optional={"num_layers": st.integers(1, 64)}),
        "suffix": st.fixed_dictionaries({"type": st.just("suffix")}, optional={
            "max_matching_ngram_size": st.sampled_from([-1, 1, 3, 64]), "enable_global_pool": st.booleans()}),
    }
    return st.sampled_from(DRAFTER_TYPES).flatmap(lambda t: own.get(t, st.just({"type": t})))


RECIPES = st.fixed_dictionaries(
    {"target": st.fixed_dictionaries({"model": st.sampled_from(preset_names())}, optional={
        "dtype": st.sampled_from(["auto", "bf16", "fp16", "fp32"]), "trust_remote_code": st.booleans()}),
     "drafter": _drafter()},
    optional={
        "name": st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,19}", fullmatch=True),  # a folder and job name
        "description": st.text(max_size=40),
        "draft_len": st.one_of(st.just("auto"), st.integers(1, 64)),
        "hardware": st.fixed_dictionaries({}, optional={
            "gpu": st.sampled_from(list(CATALOGUE)), "num_gpus": st.sampled_from([1, 2, 4, 8]),
            "tp": st.sampled_from([1, 2]), "pp": st.sampled_from([1, 2])}),
        "workload": st.fixed_dictionaries({}, optional={
            "batch_sizes": st.lists(st.integers(1, 1_000_000), min_size=1, max_size=6),
            "isl": st.integers(1, 10_000_000), "osl": st.integers(1, 10_000_000),
            "latency_target_ms": st.floats(0.001, 1e6), "temperature": st.floats(0, 10)}),
        "planner": st.fixed_dictionaries({}, optional={"max_draft_len": st.integers(1, 64),
                                                       "compare_mechanisms": st.booleans()}),
        "engine": st.fixed_dictionaries({}, optional={"trtllm_version": st.sampled_from(["auto", *RELEASES]),
                                                      "free_gpu_memory_fraction": st.floats(0.01, 1.0)}),
    })


@pytest.mark.parametrize("release", RELEASES)
@FAST
@given(data=RECIPES)
def test_recipe_yaml_round_trip(release, data, tmp_path):
    from trtllm_spec.core.recipe import RecipeError
    from trtllm_spec.core.recipe_load import load_recipe, recipe_from_dict, recipe_to_dict

    data["engine"] = {**data.get("engine", {}), "trtllm_version": release}
    try:
        recipe = recipe_from_dict(data)
    except RecipeError as exc:  # an inconsistent draw (tp*pp > num_gpus, D > max_draft_len, ...): one clean line
        assert "Traceback" not in str(exc)
        assume(False)
    dumped = recipe_to_dict(recipe)
    text = yaml.safe_dump(dumped, sort_keys=False, allow_unicode=True)
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    again = load_recipe(path)
    assert recipe_to_dict(again) == dumped
    assert yaml.safe_dump(recipe_to_dict(again), sort_keys=False, allow_unicode=True) == text


# ---- the planner -------------------------------------------------------------------------------------------------

RATES = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=12)


@st.composite
def al_tables(draw) -> dict[str, float]:
    ds = draw(st.lists(st.integers(1, 16), min_size=1, max_size=8, unique=True))
    return {str(d): draw(st.floats(1.0, 1.0 + d, allow_nan=False)) for d in ds}


@FAST
@given(rates=RATES, table=al_tables(), dmax=st.integers(0, 20))
def test_acceptance_length_monotone_and_bounded(rates, table, dmax):
    from trtllm_spec.planner.acceptance import acceptance_from_dict

    for model in (acceptance_from_dict({"conditional_rates": rates}, "p"),
                  acceptance_from_dict({"acceptance_length": table}, "p")):
        als = [model.acceptance_length(d) for d in range(dmax + 1)]
        for d, al in enumerate(als):
            assert 1.0 <= al <= 1.0 + d + 1e-9, (model, d, al)
        assert all(b >= a - 1e-12 for a, b in zip(als, als[1:], strict=False)), (model, als)


@st.composite
def plan_recipes(draw, release: str = "auto") -> dict:
    batches = draw(st.lists(st.integers(1, 512), min_size=1, max_size=5, unique=True))
    data = {"target": {"model": draw(st.sampled_from(preset_names()))},
            "drafter": draw(st.sampled_from(DRAFTER_TYPES).flatmap(lambda t: st.fixed_dictionaries(
                {"type": st.just(t), "model": st.sampled_from(preset_names())} if t == "draft_model" else
                {"type": st.just(t)}))),
            "hardware": {"gpu": draw(st.sampled_from(list(CATALOGUE)))},
            "workload": {"batch_sizes": batches, "isl": draw(st.integers(1, 32768)),
                         "osl": draw(st.integers(1, 8192))},
            "planner": {"max_draft_len": draw(st.integers(1, 12)), "compare_mechanisms": draw(st.booleans())},
            "engine": {"trtllm_version": release}}
    if draw(st.booleans()):
        data["planner"]["acceptance"] = None
        data["_rates"] = draw(RATES)
    return data


@pytest.mark.parametrize("release", RELEASES)
@FAST
@given(data=st.data())
def test_plan_step_time_and_schedule(release, data, tmp_path):
    import json

    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.planner.schedule import check_schedule, draft_len_at
    from trtllm_spec.stages.plan import compute_plan

    data = data.draw(plan_recipes(release))
    rates = data.pop("_rates", None)
    if rates is not None:
        (tmp_path / "acc.json").write_text(json.dumps({"conditional_rates": rates}))
        data["planner"]["acceptance"] = str(tmp_path / "acc.json")
    try:
        plan = compute_plan(recipe_from_dict(data))[0].to_json()
    except UserError as exc:  # e.g. MTP on a target without MTP layers, SA before 1.3: refused in one clean line
        assert str(exc) and "\n" not in str(exc) and "Traceback" not in str(exc)
        return
    by: dict[tuple[str, int], dict[int, dict]] = {}
    for c in plan["candidates"]:
        d, b = c["draft_len"], c["batch_size"]
        assert 1.0 <= c["acceptance_length"] <= 1.0 + d + 1e-9
        assert c["step_time_s"] > 0
        by.setdefault((c["mechanism"], d), {})[b] = c
    for (mech, d), row in by.items():
        batches = sorted(row)
        steps = [row[b]["step_time_s"] for b in batches]
        assert all(y >= x * (1 - 1e-9) for x, y in zip(steps, steps[1:], strict=False)), (mech, d, steps)
        if d:  # against the next shorter D priced (a one-D mechanism, DSpark, is priced at 0 and its block only)
            prev = by[(mech, max(dd for m, dd in by if m == mech and dd < d))]
            for b in batches:  # one more draft token never makes an iteration faster or accept less
                assert row[b]["step_time_s"] >= prev[b]["step_time_s"] * (1 - 1e-9), (mech, d, b)
                assert row[b]["acceptance_length"] >= prev[b]["acceptance_length"] - 1e-9
    rec = plan["recommendation"]
    schedule = {int(k): v for k, v in rec["draft_len_schedule"].items()} if rec["draft_len_schedule"] else None
    check_schedule(schedule, rec["max_draft_len"], rec["trtllm_profile"])
    cut = rec.get("max_concurrency")  # speculation off above it (one-D mechanisms), never beside a schedule
    assert cut is None or schedule is None
    for row in rec["by_batch"]:
        d = 0 if cut is not None and row["batch_size"] > cut else \
            draft_len_at(schedule, rec["max_draft_len"], rec["trtllm_profile"], row["batch_size"])
        assert d == min(row["draft_len"], rec["max_draft_len"])


@pytest.mark.parametrize("profile", RELEASES)
@FAST
@given(best=st.dictionaries(st.integers(1, 4096), st.integers(0, 16), min_size=1, max_size=10),
       extra=st.integers(0, 4096))
def test_schedule_obeys_trtllm_rules(profile, best, extra):
    from trtllm_spec.planner.schedule import check_schedule, draft_len_at, render_schedule

    max_batch = max(best) + extra
    max_d, schedule = render_schedule(best, profile, max_batch)
    check_schedule(schedule, max_d, profile)  # raises on any broken rule
    assert max_d == best[min(best)]
    for b, d in best.items():
        assert draft_len_at(schedule, max_d, profile, b) == min(d, max_d), (best, schedule, b)
    if schedule:
        assert all(0 <= v <= max_d for v in schedule.values())
        assert schedule[min(schedule)] == max_d
        if not releases.get(profile).upper_thresholds:  # lower thresholds (1.2): key 1 is required
            assert min(schedule) == 1


def test_the_draws_cover_every_registered_release_and_mechanism():
    """What the properties above draw comes from the registries: every release is a parameter, every drafter
    type (the recipe union, asserted equal to the descriptor registry) can be drawn by both recipe strategies."""
    from hypothesis import find

    from trtllm_spec.drafters.registry import MECHANISMS

    assert tuple(MECHANISMS) == DRAFTER_TYPES and len(RELEASES) == len(releases.RELEASES)
    quiet = settings(database=None, max_examples=2000, derandomize=True)
    for t in DRAFTER_TYPES:
        assert find(_drafter(), lambda d, t=t: d["type"] == t, settings=quiet)["type"] == t
        assert find(plan_recipes(), lambda d, t=t: d["drafter"]["type"] == t, settings=quiet)["drafter"]["type"] == t


# ---- d2t ---------------------------------------------------------------------------------------------------------

@FAST
@given(counts=st.dictionaries(st.integers(-5, 600), st.integers(0, 10**6), max_size=80),
       vocab=st.integers(1, 512), frac=st.floats(0.0, 1.0), specials=st.lists(st.integers(-3, 600), max_size=5))
def test_d2t_valid_for_any_frequency_table(counts, vocab, frac, specials):
    from trtllm_spec.data.vocab import check_d2t, d2t_table, draft_vocab

    dvs = max(1, min(vocab, round(frac * vocab)))
    ids = draft_vocab(Counter(counts), vocab, dvs, specials)
    assert len(ids) == dvs and ids == sorted(set(ids)) and all(0 <= t < vocab for t in ids)
    d2t = d2t_table(ids)
    assert check_d2t(d2t, vocab) == []
    assert [i + off for i, off in enumerate(d2t)] == ids
    in_range = {s for s in specials if 0 <= s < vocab}
    if len(in_range) <= dvs:
        assert in_range <= set(ids)
    with pytest.raises(UserError, match="draft_vocab_size"):
        draft_vocab(Counter(counts), vocab, vocab + 1)


# ---- the decoder: greedy losslessness ------------------------------------------------------------------------------

def _random_model(seed: int, vocab: int, hidden: int = 32, layers: int = 2, heads: int = 4, kv: int = 2):
    import torch

    from trtllm_spec.runtime.llama import LlamaConfig, LlamaModel

    cfg = LlamaConfig(num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
                      head_dim=hidden // heads, intermediate_size=2 * hidden, vocab_size=vocab, rms_norm_eps=1e-6,
                      rope_theta=10000.0, tied_embeddings=True)
    g = torch.Generator().manual_seed(seed)
    hd = hidden // heads
    w = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g),
         "model.norm.weight": 1 + 0.1 * torch.randn(hidden, generator=g)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (heads * hd, hidden)), ("self_attn.k_proj", (kv * hd, hidden)),
                            ("self_attn.v_proj", (kv * hd, hidden)), ("self_attn.o_proj", (hidden, heads * hd)),
                            ("mlp.gate_proj", (2 * hidden, hidden)), ("mlp.up_proj", (2 * hidden, hidden)),
                            ("mlp.down_proj", (hidden, 2 * hidden))):
            w[p + name + ".weight"] = torch.randn(*shape, generator=g) * 0.3
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
    return LlamaModel(cfg, w)


@FAST
@given(seed=st.integers(0, 2**16), draft_seed=st.integers(0, 2**16), vocab=st.sampled_from([16, 48, 96]),
       prompt=st.lists(st.integers(0, 15), min_size=1, max_size=12), draft_len=st.integers(1, 6),
       max_new=st.integers(1, 24), eos=st.one_of(st.none(), st.integers(0, 15)))
def test_greedy_speculative_decoding_is_lossless(seed, draft_seed, vocab, prompt, draft_len, max_new, eos):
    from trtllm_spec.drafters.draft_model.runtime import DraftModelDrafter
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate

    target = _random_model(seed, vocab)
    eos_ids = () if eos is None else (eos,)
    ref = generate(target, prompt, max_new, eos_ids)
    drafters = [NGramDrafter(3), DraftModelDrafter(_random_model(draft_seed, vocab, layers=1), max_len=64),
                DraftModelDrafter(target, max_len=64)]  # the target itself: every draft accepted
    for drafter in drafters:
        out, stats = speculative_generate(target, drafter, prompt, max_new, draft_len, eos_ids=eos_ids)
        assert out == ref, (type(drafter).__name__, out, ref)
        assert all(0 <= a <= p <= draft_len for a, p in zip(stats.accepted, stats.proposed, strict=True))
        # every accepted draft is an output token: the prefill's token plus 1 + accepted per iteration (tokens a
        # step verified past the end token are not output and not counted, as llama.cpp counts)
        assert len(out) == 1 + len(stats.accepted) + sum(stats.accepted), (type(drafter).__name__, out, stats)


def test_drafts_verified_past_the_end_token_are_not_accepted():
    """The target drafting for itself accepts every draft; when the end token comes in the middle of a step's
    drafts, the tokens after it are verified but never output, so they are not counted as accepted (the AL
    llama.cpp and TensorRT-LLM report counts output tokens; measured on SmolLM2: benchmarks/engine_parity.md)."""
    from trtllm_spec.drafters.draft_model.runtime import DraftModelDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate

    for seed in range(50):  # a model whose 4th greedy token is new, so it can serve as the end token
        target = _random_model(seed, 48)
        ref = generate(target, [1, 2, 3], 12, ())
        if ref[3] not in ref[:3]:
            break
    else:
        raise AssertionError("no seed gave a fresh 4th token")
    out, stats = speculative_generate(target, DraftModelDrafter(target, max_len=64), [1, 2, 3], 12, 4,
                                      eos_ids=(ref[3],))
    assert out == ref[:4]
    assert stats.accepted == [2] and stats.proposed == [4]  # drafts ref1..ref4 verified; ref1, ref2 + the end
    assert len(out) == 1 + len(stats.accepted) + sum(stats.accepted)
