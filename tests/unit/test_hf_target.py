"""The transformers-backed target of the reference decoder (issue 16 item 2): tiny random Qwen3-MoE, Mixtral,
gpt-oss (sliding window + sinks) and DeepSeek-V3 (MLA) targets decode speculatively with n-gram and EAGLE-3
drafters, greedy outputs identical to target-only decoding and to transformers' own ``generate``; rollback by
cropping the cache at every acceptance count; the engine choice (ours | hf | auto) and its refusals."""

from __future__ import annotations

import copy
import json
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.tiny import FAMILIES, write_family  # noqa: E402
from trtllm_spec.errors import UserError  # noqa: E402

PROMPT = [1, 7, 8, 9, 10, 7, 8, 9, 10, 7, 8, 11, 12]  # repeats give the n-gram drafter something to accept
NEW = 20  # > gpt-oss's sliding window (8) with the prompt: crops happen after the window is full


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    from trtllm_spec.runtime.hf_target import HFTarget

    folder = write_family(tmp_path_factory.mktemp(request.param) / "target", request.param)
    target = HFTarget.from_pretrained(folder)
    return request.param, folder, target, _hf_generate(target.model, PROMPT, NEW)


@pytest.fixture(scope="module")
def eagle_dir(tmp_path_factory):
    """An untrained EAGLE-3 export in our layout for a 4-layer, hidden-64, vocab-256 target (ModelOpt's key names;
    tests/unit/test_convert.py spells them from the upstream sources)."""
    from tests.unit.test_convert import ours_tensors, write_ours

    return write_ours(tmp_path_factory.mktemp("eagle") / "eagle3", ours_tensors(dtype=torch.float32), ids=(0, 1, 3))


def _hf_generate(model, prompt: list[int], n: int) -> list[int]:
    """transformers' own greedy decoding (its default cache: sliding-window layers for gpt-oss), EOS off."""
    gc = copy.deepcopy(model.generation_config)
    gc.eos_token_id, gc.pad_token_id = None, 0
    out = model.generate(torch.tensor([prompt]), generation_config=gc, max_new_tokens=n, min_new_tokens=n,
                         do_sample=False)
    return out[0, len(prompt):].tolist()


class ScriptedDrafter:
    """A fake drafter that knows the target-only continuation and proposes it with one token corrupted at a random
    position (or none): every acceptance count 0..D happens, so every rollback depth is cropped."""

    capture: tuple[int, ...] = ()
    max_draft_len = None

    def __init__(self, continuation: list[int], seed: int = 0) -> None:
        self.ref, self.rng = continuation, random.Random(seed)

    def reset(self, prompt, first_token, aux):
        self.done = 1

    def propose(self, n):
        drafts = list(self.ref[self.done:self.done + n])
        k = self.rng.randrange(len(drafts) + 1) if drafts else 0
        if k < len(drafts):
            drafts[k] = (drafts[k] + 1) % 256
        return drafts, None

    def commit(self, verified, next_token, aux):
        self.done += len(verified)


def test_target_only_decoding_equals_transformers_generate(family):
    from trtllm_spec.runtime.generate import generate

    _, _, target, ref = family
    assert generate(target, PROMPT, NEW, ()) == ref


def test_greedy_lossless_for_ngram_eagle3_and_every_rollback_depth(family, eagle_dir):
    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.decoder import speculative_generate

    _, _, target, ref = family
    _, ngram = load_runtime_drafter("ngram", target)
    kind, eagle = load_runtime_drafter(str(eagle_dir), target, max_len=64)
    assert kind == "eagle3" and eagle.capture == (0, 1, 3)
    for drafter, d in ((ngram, 3), (eagle, 3), (ScriptedDrafter(ref), 4)):
        out, stats = speculative_generate(target, drafter, PROMPT, NEW, d)
        assert out == ref, type(drafter).__name__
    assert sum(stats.accepted) > 0 and len(set(stats.accepted)) > 1  # scripted: accepted and rejected drafts


def test_captured_layers_are_layer_outputs_before_the_final_norm(family):
    _, _, target, _ = family
    ids = torch.tensor([PROMPT])
    logits, aux, normed = target.forward(ids, torch.tensor([0]), target.new_cache(1, 64), capture=(1, 3))
    hs = target.model(input_ids=ids, output_hidden_states=True).hidden_states
    assert torch.allclose(aux[0], hs[2], atol=1e-5)  # hidden_states[i + 1] is layer i's output...
    assert torch.allclose(normed, hs[4], atol=1e-5)  # ...except the last slot, which is after the final norm
    assert not torch.allclose(aux[1], hs[4], atol=1e-3) and logits.shape == (1, len(PROMPT), 256)


def test_a_family_without_decoder_layers_is_refused_by_name_for_capturing_drafters(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    from trtllm_spec.runtime.hf_target import HFTarget

    cfg = AutoConfig.for_model("gpt2", vocab_size=256, n_layer=2, n_embd=32, n_head=2)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(tmp_path / "gpt2"))
    target = HFTarget.from_pretrained(tmp_path / "gpt2")
    logits, _, normed = target.forward(torch.tensor([PROMPT]), torch.tensor([0]), target.new_cache(1, 32), logits="last")
    assert logits.shape == (1, 1, 256) and normed is None  # n-gram drafting needs neither
    with pytest.raises(UserError, match="a 'gpt2' target has no decoder 'layers'"):
        target.forward(torch.tensor([PROMPT]), torch.tensor([0]), target.new_cache(1, 32), capture=(0,))
    with pytest.raises(UserError, match="a 'gpt2' target's final norm"):
        target.norm  # noqa: B018 -- what an EAGLE-MTP head reads


@pytest.mark.parametrize("name,model_type,want", [("auto", "llama", "ours"), ("auto", "qwen3", "ours"),
                                                  ("auto", "mixtral", "hf"), ("auto", "gpt_oss", "hf"),
                                                  ("hf", "llama", "hf"), ("ours", "qwen2", "ours")])
def test_engine_selection_by_model_type(name, model_type, want):
    from tests.conftest import LLAMA_TINY
    from trtllm_spec.runtime.targets import resolve_reference_engine

    cfg = {**LLAMA_TINY, "model_type": model_type}
    assert resolve_reference_engine(name, cfg) == want


def test_engine_selection_refusals():
    from trtllm_spec.runtime.targets import resolve_reference_engine

    with pytest.raises(UserError, match="--reference-engine ours: .*not 'deepseek_v3'.*use --reference-engine hf"):
        resolve_reference_engine("ours", {"model_type": "deepseek_v3"})
    yarn = {"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert resolve_reference_engine("auto", yarn) == "hf"  # a rope our decoder does not run
    with pytest.raises(UserError, match="rope type 'yarn'"):
        resolve_reference_engine("ours", yarn)
    with pytest.raises(UserError, match="'fast': choose one of auto, ours, hf"):
        resolve_reference_engine("fast", {"model_type": "llama"})


def test_hf_engine_on_a_llama_target_gives_our_decoders_tokens(tiny_target):
    """The same checkpoint through both engines: token-identical greedy decoding (fp32)."""
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.targets import load_target

    cfg = json.loads((tiny_target / "config.json").read_text())
    (e1, ours), (e2, hf) = (load_target(tiny_target, cfg, e, torch.float32, "cpu") for e in ("auto", "hf"))
    assert (e1, e2) == ("ours", "hf") and type(ours).__name__ == "LlamaModel"
    ref = generate(ours, PROMPT, 16, ())
    assert generate(hf, PROMPT, 16, ()) == ref
    assert speculative_generate(hf, NGramDrafter(), PROMPT, 16, 3)[0] == ref


def test_weights_missing_for_the_config_are_refused_not_randomly_initialised(tiny_target, tmp_path):
    import shutil

    from trtllm_spec.runtime.hf_target import HFTarget

    bad = tmp_path / "bad"
    shutil.copytree(tiny_target, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "model_type": "mistral", "architectures": ["MistralForCausalLM"],
                                                 "num_hidden_layers": cfg["num_hidden_layers"] + 1}))
    with pytest.raises(UserError, match=r"9 tensor\(s\) missing for the 'mistral' model.*re-export"):
        HFTarget.from_pretrained(bad)


# ---- measure on a MoE target, end to end ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def moe_target(tmp_path_factory):
    return write_family(tmp_path_factory.mktemp("moe") / "qwen3-moe", "qwen3_moe")


MEASURE = ["--drafter", "ngram", "--draft-len", "2", "--categories", "coding", "--num-prompts", "1",
           "--max-new-tokens", "8"]


def test_cli_measure_on_a_moe_target_picks_transformers_and_is_lossless(cli, moe_target, tiny_suite, tmp_path):
    out = tmp_path / "m"
    r = cli("measure", "reference", "--target", moe_target, *MEASURE, "--out", out)
    assert r.exit_code == 0, r.output
    prof = json.loads((out / "speculation_profile.json").read_text())
    assert prof["settings"]["reference_engine"] == "hf" and prof["target"]["model_type"] == "qwen3_moe"
    assert prof["overall"]["identical_outputs"] == prof["overall"]["num_prompts"] == 1
    assert "(transformers target)" in (out / "report.md").read_text()
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["recipe"]["measure"]["reference_engine"] == "auto"


@pytest.mark.parametrize("args,match", [
    (["--reference-engine", "ours"], "--reference-engine ours: "),
    (["--reference-engine", "fast"], "Invalid value for '--reference-engine'"),
    (["--reference-engine", "hf", "--bundle", "."], "No such option"),
])
def test_cli_reference_engine_bad_input_exit_2_nothing_written(cli, moe_target, tiny_suite, tmp_path, args, match):
    out = tmp_path / "m"
    base = MEASURE if "--engine" not in args else []
    r = cli("measure", "reference", "--target", moe_target, *base, *args, "--out", out)
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output, r.output
    if args[1] == "ours":
        assert "not 'qwen3_moe'" in r.output and "use --reference-engine hf" in r.output
    assert not out.exists()


def test_recipe_reference_engine_reaches_the_build_measure_stage(moe_target, tiny_suite):
    from trtllm_spec.core.recipe import Recipe
    from trtllm_spec.stages.measure import measure_profile

    m = Recipe.model_validate({"target": {"model": "llama-3.1-8b-instruct"}, "drafter": {"type": "ngram"},
                               "measure": {"reference_engine": "hf"}}).measure
    assert m.reference_engine == "hf"
    with pytest.raises(Exception, match="reference_engine"):
        Recipe.model_validate({"target": {"model": "llama-3.1-8b-instruct"}, "drafter": {"type": "ngram"},
                               "measure": {"reference_engine": "vllm"}})
    with pytest.raises(UserError, match="not 'qwen3_moe'"):
        measure_profile(moe_target, "ngram", 2, suite="speed-lite", categories=["coding"], num_prompts=1,
                        max_new_tokens=4, temperature=0.0, seed=0, reference_engine="ours")
