"""DFlash2 end to end on the tiny target (issue 45 item 3): recognised by its architecture and selector fields, refused
in one line where it is given as DFlash (and the reverse) or its layout is broken, decoded by the reference decoder
(the convolution and the selector as docs/dflash2.md writes them; greedy lossless, sampled lossless by a
chi-square test), checked by ``doctor``, and bundled for TensorRT-LLM 1.4 only, under the shared ``DFlash`` tag.

The convolution and the walk are checked against naive loops written here from the equations (not against the
code under test), and a head at the trainers' fresh start (identity convolutions, zero successor codebook) must
draft exactly what its DFlash backbone drafts in DFlash's own runtime."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from tests.tiny import write_dflash2, write_model
from trtllm_spec.errors import UserError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from trtllm_spec.runtime.llama import LlamaModel

    root = tmp_path_factory.mktemp("dflash2")
    t = write_model(root / "target", layers=4)
    return t, LlamaModel.from_pretrained(t), root


def _load(folder, target):
    from trtllm_spec.drafters.load import load_runtime_drafter

    return load_runtime_drafter(str(folder), target)


PROMPTS = [[5, 9, 11, 5, 9, 11, 5], [7, 8, 9, 10, 7, 8, 9], [20, 21, 22, 23, 24, 25, 20, 21]]


# ---- recognition and refusals ---------------------------------------------------------------------------------

def test_recognised_as_dflash2_and_dflash_stays_dflash(tiny):
    from trtllm_spec.drafters.registry import exported_type, folder_refusal

    _, _, root = tiny
    d = write_dflash2(root / "rec", tiny[0])
    cfg = json.loads((d / "config.json").read_text())
    assert exported_type(cfg) == "dflash2" and folder_refusal(cfg, "x", "dflash2") is None
    why = folder_refusal(cfg, "x", "dflash")
    assert why.startswith("x: a DFlash2 drafter") and "drafter.type: dflash2" in why and "\n" not in why
    v1 = {**cfg, "architectures": ["DFlashDraftModel"],
          "dflash_config": {k: v for k, v in cfg["dflash_config"].items()
                            if k in ("block_size", "target_layer_ids", "mask_token_id")}}
    assert exported_type(v1) == "dflash"
    why = folder_refusal(v1, "y", "dflash2")
    assert why.startswith("y: a DFlash drafter") and "drafter.type: dflash" in why


@pytest.mark.parametrize("change,needle", [
    (lambda dc: dc.pop("selector_rank"), "lacks dflash_config.selector_rank"),
    (lambda dc: dc.update(selector_top_k=10_000), "selector_top_k = 10000 exceeds vocab_size 256"),
    (lambda dc: dc.update(conv_group_size=7), "conv_group_size = 7 does not divide hidden_size 64"),
    (lambda dc: dc.update(conv_kernel_size=9), "conv_kernel_size = 9 exceeds block_size 4"),
    (lambda dc: dc.update(selector_top_k=True), "selector_top_k = True must be a positive integer"),
])
def test_a_broken_dflash2_config_is_one_line(tiny, tmp_path, change, needle):
    from trtllm_spec.measure.run import inspect_drafter

    d = write_dflash2(tmp_path / "bad", tiny[0])
    cfg = json.loads((d / "config.json").read_text())
    change(cfg["dflash_config"])
    (d / "config.json").write_text(json.dumps(cfg))
    for call in (lambda: _load(d, tiny[1]), lambda: inspect_drafter(str(d), {"hidden_size": 64, "vocab_size": 256},
                                                                     3)):
        with pytest.raises(UserError) as exc:
            call()
        assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_wrong_tensor_shape_is_named(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    d = write_dflash2(tmp_path / "shape", tiny[0])
    w = load_file(str(d / "model.safetensors"))
    w["candidate_selector.successor_codebook"] = torch.zeros(256, 3)
    save_file(w, str(d / "model.safetensors"))
    with pytest.raises(UserError, match=r"successor_codebook has shape \[256, 3\], expected \[256, 8\]"):
        _load(d, tiny[1])


# ---- the computation -------------------------------------------------------------------------------------------

def test_the_convolution_is_the_documented_one(tiny):
    """conv_s(u)[i, c] = sum_{t <= i, t < k} (b[s, t, c] + delta[i, s, t, c // g]) u[i - t, c], delta = W x_i
    viewed as [2, k, G] (index (s k + t) G + group): a naive loop against the runtime's vectorised filter."""
    _, target, root = tiny
    d = write_dflash2(root / "conv", tiny[0], kernel=3, block=6, seed=3)
    _, dr = _load(d, target)
    g = torch.Generator().manual_seed(0)
    rows, h = 5, 64
    x, u = torch.randn(1, rows, h, generator=g), torch.randn(1, rows, h, generator=g)
    base, proj = dr.layers[0]["attention_conv"]
    k, grp = base.shape[1], dr.g
    taps = dr._coefficients(x, (base, proj))
    for s in (0, 1):
        got = dr._filter(u, taps[s])[0]
        want = torch.zeros(rows, h)
        for i in range(rows):
            delta = (proj @ x[0, i]).view(2, k, h // grp)
            for c in range(h):
                want[i, c] = sum((base[s, t, c] + delta[s, t, c // grp]) * u[0, i - t, c]
                                 for t in range(min(k, i + 1)))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_fresh_head_drafts_what_its_dflash_backbone_drafts(tiny):
    """Identity convolutions and a zero successor codebook (the trainers' start) leave DFlash: the same folder read
    by DFlash's runtime (which ignores the conv and selector tensors) drafts the same tokens over a whole block."""
    from trtllm_spec.drafters.dflash.runtime import DFlashDrafter

    tpath, target, root = tiny
    d = write_dflash2(root / "fresh", tpath, identity=True, seed=4, scale=0.5)
    _, d2 = _load(d, target)
    d1 = DFlashDrafter(d, target)
    n = d2.max_draft_len  # R = block_size rows on both
    seen = set()
    for prompt in PROMPTS:
        logits, aux, _ = target.forward(torch.tensor([prompt]), torch.tensor([0]), target.new_cache(1, 64),
                                        capture=d2.capture, logits="last")
        first = int(logits[0, -1].argmax())
        for dr in (d1, d2):
            dr.reset(prompt, first, aux)
        a, b = d1.propose(n)[0], d2.propose(n)[0]
        assert a == b
        seen.update(a)
    assert len(seen) > 2  # the drafts are not one repeated token


def test_the_walk_is_the_documented_one(tiny):
    """Greedy walk from the anchor: slot j's score of candidate c is u_j[c] + sum_r A[prev, r] z_j[r] B[C_j[c], r]
    with prev the anchor, then the token chosen at j - 1; recomputed here from the runtime's own final hidden
    states (captured by hooking the lm_head input), so a wrong predecessor or codebook order changes the drafts."""
    import torch.nn.functional as F

    tpath, target, root = tiny
    d = write_dflash2(root / "walk", tpath, seed=5, top_k=6, block=5)
    _, dr = _load(d, target)
    prompt = PROMPTS[2]
    logits, aux, _ = target.forward(torch.tensor([prompt]), torch.tensor([0]), target.new_cache(1, 64),
                                    capture=dr.capture, logits="last")
    dr.reset(prompt, int(logits[0, -1].argmax()), aux)
    seen = {}
    real_linear = F.linear

    def spy(x, w, *a):
        if w is dr.hidden_projection:
            seen["hn"] = x.clone()
        return real_linear(x, w, *a)

    F.linear = spy
    try:
        drafts, q = dr.propose(4)
    finally:
        F.linear = real_linear
    assert q is None and len(drafts) == 4
    hn = seen["hn"]
    unary, cand = (hn @ target.lm_head.T).topk(6, dim=-1)
    z = hn @ dr.hidden_projection.T
    prev, want = dr.anchor, []
    for j in range(4):
        scores = [float(unary[j, c]) + sum(float(dr.predecessor[prev, r] * z[j, r] * dr.successor[cand[j, c], r])
                                           for r in range(dr.rank)) for c in range(6)]
        prev = int(cand[j, max(range(6), key=scores.__getitem__)])
        want.append(prev)
    assert drafts == want
    assert drafts != [int(t) for t in cand[:, 0]]  # the transition changed at least one pick (not plain argmax)


@pytest.mark.parametrize("window", [None, 4])
def test_greedy_is_lossless(tiny, window):
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate

    tpath, target, root = tiny
    d = write_dflash2(root / f"lossless{window}", tpath, seed=6, block=6, sliding_window=window)
    _, dr = _load(d, target)
    assert dr.windows == [window]
    for prompt in PROMPTS:
        want = generate(target, prompt, 24)
        for dlen in (1, 3, 5):
            out, stats = speculative_generate(target, dr, prompt, 24, dlen)
            assert out == want
            assert max(stats.proposed) == dlen


# ---- sampling: the chi-square test of tests/unit/test_sampling.py on a DFlash2 head ---------------------------

def test_sampled_walk_keeps_the_target_distribution(tmp_path):
    """The sampled walk draws each draft from softmax(scores / T) over the K candidates and returns that q; the
    pair law of tokens 2-3 under speculation must be the target's (chi-square, alpha 0.001, fixed seeds), and the
    empirical law of the first draft at a fixed state must be its q."""
    from tests.unit import test_sampling as ts
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.runtime.sampling import SamplingParams

    kw = dict(hidden=32, heads=2, kv=1, inter=64, vocab=ts.VOCAB, seed=0, init=0.3)
    tpath = write_model(tmp_path / "target", layers=2, **kw)
    target = LlamaModel.from_pretrained(tpath)
    d = write_dflash2(tmp_path / "d2", tpath, group=8, rank=4, top_k=6, block=3, seed=7, scale=0.5)
    params = SamplingParams(temperature=1.0)
    _, dr = _load(d, target)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # the first draft's empirical law at one state is the q it returns
        prompt = [5, 9, 5]
        logits, aux, _ = target.forward(torch.tensor([prompt]), torch.tensor([0]), target.new_cache(1, 16),
                                        capture=dr.capture, logits="last")
        g = torch.Generator().manual_seed(1)
        dr.use_sampling(params, g)
        dr.reset(prompt, 3, aux)
        counts = torch.zeros(ts.VOCAB)
        for _ in range(3000):
            drafts, qs = dr.propose(1)
            counts[drafts[0]] += 1
        q = qs[0]
        assert abs(float(q.sum()) - 1) < 1e-5 and int((q > 0).sum()) == 6
        assert float((counts / 3000 - q).abs().max()) < 0.04
        # lossless
        counts, acc = ts._draw(target, lambda seed: _load(d, target)[1], prompt, params, seed=0)
        assert 0.02 < acc < 0.98
        assert ts._chisquare(counts, ts._pair_law(target, prompt, params)) > ts.ALPHA
    finally:
        torch.set_num_threads(n)


# ---- doctor ----------------------------------------------------------------------------------------------------

def test_doctor_checks_the_dflash2_layout(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    from trtllm_spec.train.doctor import run_doctor

    tpath = tiny[0]
    tcfg = json.loads((tpath / "config.json").read_text())
    d = write_dflash2(tmp_path / "doc", tpath)
    kind, findings = run_doctor(d, None, tcfg)
    assert kind == "dflash2"
    assert not [f for f in findings if f.level == "error"], [f.message for f in findings]
    assert any(f.check == "layout" and "DFlash2 convolutions" in f.message for f in findings)
    w = load_file(str(d / "model.safetensors"))
    del w["layers.0.mlp_conv.base_kernel"]
    save_file(w, str(d / "model.safetensors"))
    _, findings = run_doctor(d, None, tcfg)
    err = [f.message for f in findings if f.level == "error"]
    assert len(err) == 1 and "layers.0.mlp_conv.base_kernel missing (expected [2, 2, 64])" in err[0]


# ---- recipe, bundle, releases -----------------------------------------------------------------------------------

def _recipe(tmp_path, folder, drafter: dict | None = None, **extra) -> object:
    # the section describes the head it reuses (write_dflash2's defaults)
    section = {"type": "dflash2", "checkpoint": str(folder), "block_size": 4, "num_layers": 1, "conv_group_size": 8,
               "selector_rank": 8, "selector_top_k": 4, **(drafter or {})}
    r = {"name": "d2", "target": {"model": "llama-3.1-8b-instruct"}, "drafter": section,
         "hardware": {"gpu": "h100"}, "workload": {"batch_sizes": [1, 8], "isl": 1024, "osl": 256}, **extra}
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(r))
    return p


def test_bundle_writes_the_dflash_tag_from_14_and_refuses_13(tiny, tmp_path, cli):
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.deploy.trtllm_schema import validate_options

    d = write_dflash2(tmp_path / "head", tiny[0])
    recipe = _recipe(tmp_path, d)
    bundle = tmp_path / "bundle"
    r = cli("build", recipe, "--out", bundle, "--set", "planner.compare_mechanisms=false")
    assert r.exit_code == 0, r.output
    b = read_bundle(bundle)
    assert b.drafter == "dflash2" and b.profile == "1.4"  # auto: the first release that runs it
    spec = b.speculative_options()["speculative_config"]
    assert spec["decoding_type"] == "DFlash" and spec["attention_backend"] == "VANILLA"
    assert spec["mask_token_id"] == 255 and spec["max_draft_len"] <= 3
    validate_options(b.speculative_options(), "1.4")
    assert json.loads((bundle / "drafter" / "config.json").read_text())["architectures"] == ["DFlash2DraftModel"]
    # an engine report of the shared tag is read as DFlash2 through the bundle's record (replan)
    from tests.bundle_fakes import bench_report_for

    report = bench_report_for(tmp_path / "report_c1.json", spec["max_draft_len"], "DFlash")
    r = cli("replan", "--bundle", bundle, "--from-trtllm-bench", report, "--out", tmp_path / "re")
    assert r.exit_code == 0, r.output
    prof = json.loads((tmp_path / "re" / "measured" / "speculation_profile.json").read_text())
    assert prof["drafter"]["type"] == "dflash2"
    new = yaml.safe_load((tmp_path / "re" / "llm_api_options.yaml").read_text())
    if new.get("speculative_config"):
        assert new["speculative_config"]["attention_backend"] == "VANILLA"
        validate_options(new, "1.4")
    r = cli("build", _recipe(tmp_path, d, engine={"trtllm_version": "1.3"}), "--out", tmp_path / "b13")
    assert r.exit_code == 2 and "1.4" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "b13").exists()


def test_a_section_that_does_not_describe_its_checkpoint_is_refused(tiny, tmp_path, cli):
    d = write_dflash2(tmp_path / "head", tiny[0])
    r = cli("build", _recipe(tmp_path, d, {"selector_top_k": 16, "conv_group_size": 16}), "--out", tmp_path / "b")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    line = next(x for x in r.output.splitlines() if "drafter.checkpoint" in x)
    assert "conv_group_size = 16" in line and "has 8" in line and "2 field(s) differ" in line
    assert "--set drafter.conv_group_size=8 --set drafter.selector_top_k=4" in line
    assert not (tmp_path / "b").exists()


def test_without_a_checkpoint_it_is_trained():
    """No checkpoint: the drafter stage trains it (ModelOpt's DFlash mode plus the plugin: test_dflash2_train.py)."""
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.drafters.registry import get

    recipe = recipe_from_dict({"name": "z", "target": {"model": "llama-3.1-8b-instruct"},
                               "drafter": {"type": "dflash2"}})
    mech = get("dflash2")
    assert mech.source(recipe.drafter, resolve_target("llama-3.1-8b-instruct").shape) == "train"
    assert mech.modelopt_mode == "dflash"


def test_recipe_rules(tiny):
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.errors import RecipeError

    base = {"name": "z", "target": {"model": "llama-3.1-8b-instruct"}}
    with pytest.raises(RecipeError, match="conv_kernel_size = 9 exceeds drafter.block_size = 8"):
        recipe_from_dict({**base, "drafter": {"type": "dflash2", "block_size": 8, "conv_kernel_size": 9}})
    with pytest.raises(RecipeError, match="1.4"):
        recipe_from_dict({**base, "drafter": {"type": "dflash2"}, "engine": {"trtllm_version": "1.3"}})


def test_the_planner_costs_the_convolutions_and_selector():
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.drafters.registry import get

    shape = resolve_target("llama-3.1-8b-instruct").shape
    d1, d2 = get("dflash"), get("dflash2")
    cfg = d2.default_config()
    extra = cfg.num_layers * 4 * 2 * shape.hidden_size * (1 + shape.hidden_size // 16) + \
        64 * shape.hidden_size + 2 * shape.vocab_size * 64
    assert d2.trainable_params(cfg, shape) - d1.trainable_params(cfg, shape) == extra
    assert d2.cost(shape, cfg).weight_params > d1.cost(shape, cfg).weight_params
    a1, a2 = d1.default_acceptance(shape, cfg), d2.default_acceptance(shape, cfg)
    assert a2.acceptance_length(15) == pytest.approx(a1.acceptance_length(15) * 6.20 / 4.99, rel=1e-3)
