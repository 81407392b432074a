"""``trtllm-spec measure``: acceptance math, the profile schema, the planner round trip, the CLI on a tiny random
Llama, bad inputs, and the TensorRT-LLM adapter's parsing (with fakes: TensorRT-LLM cannot run here)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from trtllm_spec.errors import UserError
from trtllm_spec.measure import profile as P
from trtllm_spec.measure.profile import PromptRun, build_profile, profile_problems, validate_profile
from trtllm_spec.planner.acceptance import load_acceptance

CHAT_TEMPLATE = ("{% for m in messages %}{{ '<s> ' + m['role'] + ' ' + m['content'] + ' </s> ' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<s> assistant ' }}{% endif %}")
WORDS = ["<pad>", "<s>", "</s>", "[UNK]", "user", "assistant"] + [f"w{i}" for i in range(250)]
TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            vocab_size=256, max_position_embeddings=1024, tie_word_embeddings=True, eos_token_id=2, bos_token_id=1,
            pad_token_id=0, initializer_range=0.2)


# ---- tiny checkpoint and suite -------------------------------------------------------------------------

def write_tokenizer(folder: Path, chat_template: str | None = CHAT_TEMPLATE) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="[UNK]")
    if chat_template:
        fast.chat_template = chat_template
    fast.save_pretrained(str(folder))


def write_target(folder: Path, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**TINY)).save_pretrained(str(folder), safe_serialization=True)
    write_tokenizer(folder, chat_template)
    return folder


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return write_target(tmp_path_factory.mktemp("measure") / "target")



# ---- acceptance math on synthetic DecodeStats ----------------------------------------------------------

def run(accepted, proposed=None, requested=None, category="coding", d=3, **kw) -> PromptRun:
    proposed = proposed if proposed is not None else [d] * len(accepted)
    requested = requested if requested is not None else [d] * len(accepted)
    n = sum(accepted) + len(accepted) + 1
    return PromptRun(f"{category}/x", category, 10, [0] * n, [0] * n, 1.0, 0.5, list(accepted), list(proposed),
                     list(requested), draft_s=0.1, verify_s=0.3, prefill_s=0.05, **kw)


def test_conditional_marginal_and_chain_al():
    s = P.section([run([2, 0, 1, 3])], 3, "chain", greedy=True)
    # a_1 = 3/4 (3 of 4 accept draft 1); a_2 = 2/3 (of 3 reaching 2); a_3 = 1/2
    assert s["conditional_rates"] == pytest.approx([0.75, 2 / 3, 0.5], abs=1e-6)
    assert s["marginal_rates"] == pytest.approx([0.75, 0.5, 0.25], abs=1e-6)
    assert s["acceptance_length"] == pytest.approx({"1": 1.75, "2": 2.25, "3": 2.5}, abs=1e-6)
    # AL(D) from the chain formula equals the measured mean when no iteration was cut short
    assert s["mean_acceptance_length"] == pytest.approx(2.5) == pytest.approx((6 + 4) / 4)
    assert s["al_histogram"] == {"1": 1, "2": 1, "3": 1, "4": 1}
    assert s["attempts"] == [4, 3, 2]
    assert s["speedup"] == pytest.approx(2.0) and s["identical_outputs"] == 1 and s["token_agreement"] == 1.0
    assert s["time_shares"]["verify"] == pytest.approx(0.6)


def test_speedup_compares_only_the_prompts_timed_both_ways():
    timed, untimed = run([2, 0, 1, 3]), run([0, 0, 0, 0, 0, 0])  # 11 and 7 tokens; the second's reference is batched
    untimed.target_s = None
    s = P.section([timed, untimed], 3, "chain", greedy=True)
    assert s["timed_prompts"] == 1 and s["time_s"]["target"] == pytest.approx(1.0)
    assert s["speedup"] == pytest.approx(2.0)  # 1.0 s alone vs 0.5 s speculative on the timed prompt
    assert s["tokens_per_s_spec"] == pytest.approx(18 / 1.0)  # every prompt's speculative run counts here
    validate_profile(_profile(runs=[timed, untimed]))


def test_short_proposals_count_as_rejections_and_given_proposed_excludes_them():
    # n-gram: iteration 2 proposed nothing, iteration 3 only one draft
    s = P.section([run([1, 0, 1, 2], proposed=[3, 0, 1, 3])], 3, "chain", greedy=True)
    assert s["conditional_rates"] == pytest.approx([0.75, 1 / 3, 0.0], abs=1e-6)
    assert s["acceptance_length"]["3"] == pytest.approx(s["mean_acceptance_length"]) == pytest.approx(2.0)
    # given proposed: position 1 proposed 3 times, all accepted; position 2 proposed twice (of 3 reaching it)
    assert s["conditional_rates_given_proposed"] == pytest.approx([1.0, 0.5, 0.0], abs=1e-6)


def test_requested_replays_the_decoder_budget_and_unattempted_positions_are_left_off():
    # max_new_tokens 6, D 3: 1 token from prefill; iter1 asks 3 (accepts 3 -> 5 tokens); iter2 asks 0
    assert P.requested_drafts([3, 0], 3, 6) == [3, 0]
    assert P.requested_drafts([0, 1, 0], 4, 6) == [4, 3, 1]
    s = P.section([run([0, 0], requested=[1, 1])], 3, "chain", greedy=True)
    assert s["conditional_rates"] == [0.0] and s["attempts"] == [2, 0, 0]
    assert s["acceptance_length"] == {"1": 1.0, "2": 1.0, "3": 1.0}  # held flat, never extrapolated


def test_block_drafter_al_is_measured_per_d():
    runs = [run([3, 1], d=3, sweep={1: (3, 2), 2: (5, 3)}), run([2], d=3, sweep={1: (2, 1)})]
    s = P.section(runs, 3, "block", greedy=False)
    assert s["acceptance_length"] == pytest.approx({"1": 5 / 3, "2": 5 / 3, "3": 3.0})
    assert s["identical_outputs"] is None and s["token_agreement"] is None


def _profile(kind="ngram", d=3, temperature=0.0, dtype="fp32", runs=None) -> dict:
    runs = runs or [run([2, 0, 1, 3]), run([1, 1], category="math"), run([3, 3, 0], category="math")]
    return build_profile(runs, drafter={"type": kind, "path": None, "draft_len": d}, target={"spec": "t"},
                         suite={"suite": "speed-lite", "items": len(runs)},
                         settings={"dtype": dtype, "temperature": temperature, "max_new_tokens": 32})


def test_profile_validates_and_round_trips_to_the_planner(tmp_path):
    prof = _profile()
    validate_profile(prof)
    assert prof["schema"] == P.SCHEMA and set(prof["categories"]) == {"coding", "math"}
    assert prof["overall"]["num_prompts"] == 3 and prof["drafter"]["al_method"] == "chain_analytic"
    path = tmp_path / "speculation_profile.json"
    path.write_text(json.dumps(prof))
    model = load_acceptance(path)
    for d in (1, 2, 3):
        assert model.acceptance_length(d) == pytest.approx(prof["overall"]["acceptance_length"][str(d)], abs=1e-6)
    math_model = load_acceptance(path, "math")
    assert math_model.acceptance_length(3) == pytest.approx(prof["categories"]["math"]["acceptance_length"]["3"])
    assert math_model.measured


@pytest.mark.parametrize("mutate,match", [
    (lambda p: p.pop("overall"), "missing top-level keys: overall"),
    (lambda p: p.update(schema="v0"), "schema"),
    (lambda p: p["overall"].update(conditional_rates=[1.5]), "conditional_rates"),
    (lambda p: p["overall"]["marginal_rates"].__setitem__(0, 0.1), "running products"),
    (lambda p: p["overall"]["acceptance_length"].update({"2": 9.0}), r"acceptance_length\['2'\]"),
    (lambda p: p["overall"]["acceptance_length"].pop("2"), "every d"),
    (lambda p: p["overall"]["al_histogram"].update({"1": 99}), "al_histogram counts"),
    (lambda p: p["categories"]["math"].update(num_prompts=5), "add up"),
    (lambda p: p["categories"]["math"].pop("speedup"), "lacks speedup"),
])
def test_validator_names_the_problem(mutate, match):
    prof = _profile()
    mutate(prof)
    with pytest.raises(UserError, match=match):
        validate_profile(prof)


def test_report_explains_bf16_and_plots(tmp_path):
    from trtllm_spec.measure import write_measure_outputs

    prof = _profile(dtype="bf16")
    prof["overall"]["identical_outputs"] = 2
    paths = write_measure_outputs(prof, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "round differently" in md
    assert "| coding |" in md and "| math |" in md and "## Provenance" in md
    assert {p.name for p in paths} >= {"acceptance_length_by_category.png", "acceptance_by_position.png"}
    write_measure_outputs(_profile(), tmp_path)  # fp32: no explanation needed
    assert "round differently" not in (tmp_path / "report.md").read_text()


# ---- the decoder on a tiny random Llama ----------------------------------------------------------------

def test_measure_fp32_identical_and_bf16_agreement(target, tiny_suite):
    from trtllm_spec.measure.run import measure

    prof = measure(target, "ngram", 3, categories=["coding"], num_prompts=1, max_new_tokens=16)
    validate_profile(prof)
    ov = prof["overall"]
    assert ov["identical_outputs"] == 1 and ov["token_agreement"] == 1.0
    assert ov["iterations"] == sum(ov["al_histogram"].values()) and ov["generated_tokens"] <= 16
    assert prof["settings"]["machine"]["cpu_count"] and prof["suite"]["item_ids"] == ["coding/mt_bench/0"]
    bf16 = measure(target, "ngram", 2, categories=["math"], num_prompts=1, max_new_tokens=8, dtype="bf16")
    validate_profile(bf16)
    assert 0.0 <= bf16["overall"]["token_agreement"] <= 1.0 and bf16["settings"]["dtype"] == "bf16"


def _three_coding_prompts(monkeypatch):
    import trtllm_spec.data.suite as suite

    texts = ["w1 w2 w3 w4 w1 w2 w3", "w5 w6 w7 w5 w6", "w9 w8 w7 w9 w8 w7 w9 w8 w2"]
    items = [suite.SuiteItem(f"coding/mt_bench/{i}", "coding", [{"role": "user", "content": t}], "mt_bench",
                             "CC-BY-4.0", str(i)) for i, t in enumerate(texts)]
    monkeypatch.setattr(suite, "build_suite", lambda *a, **k: items)


def test_reference_batches_group_similar_lengths_within_a_token_budget():
    from trtllm_spec.measure.run import length_buckets

    lengths = [900, 40, 50, 3000, 45, 400, 410, 60]
    groups = length_buckets(lengths, 3, 1000)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups == [[1, 4, 2], [7, 5], [6], [0], [3]]  # shortest first; 3 rows at most; rows x longest <= 1000
    assert all(len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 1000 for g in groups)


def test_batched_references_are_checked_and_one_prompt_per_category_is_timed(target, monkeypatch):
    """Greedy on our decoder: the references come from one batched pass, a row that differs from the speculative
    output is decoded again alone (so a wrong batched row never reads as a lossy decoder), and plain decoding is
    timed alone on the first prompt of each category."""
    import trtllm_spec.measure.run as mr

    _three_coding_prompts(monkeypatch)
    prof = mr.measure(target, "ngram", 3, categories=["coding"], num_prompts=3, max_new_tokens=12)
    validate_profile(prof)
    ref = prof["settings"]["reference"]
    assert ref == {"outputs": "batched", "timed_prompts": 1, "rechecked_at_batch_1": 0}
    assert prof["overall"]["identical_outputs"] == 3 and prof["overall"]["timed_prompts"] == 1
    assert [p["target_s"] is None for p in prof["prompts"]] == [False, True, True]
    real = mr.batched_references
    monkeypatch.setattr(mr, "batched_references", lambda *a: [[r[0] + 1] + r[1:] for r in real(*a)])  # corrupt each row
    again = mr.measure(target, "ngram", 3, categories=["coding"], num_prompts=3, max_new_tokens=12)
    assert again["settings"]["reference"]["rechecked_at_batch_1"] == 2 and again["overall"]["identical_outputs"] == 3
    sampled = mr.measure(target, "ngram", 3, categories=["coding"], num_prompts=3, max_new_tokens=8, temperature=1.0)
    assert sampled["settings"]["reference"] == {"outputs": "per_prompt", "timed_prompts": 3, "rechecked_at_batch_1": 0}


def test_cli_writes_profile_report_plots_provenance(cli, target, tiny_suite, tmp_path):
    out = tmp_path / "m"
    r = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "3", "--categories", "coding,math",
            "--num-prompts", "1", "--max-new-tokens", "12", "--device", "cpu", "--out", out)
    assert r.exit_code == 0, r.output
    for f in ("speculation_profile.json", "report.md", "provenance.json", "acceptance_length_by_category.png",
              "acceptance_by_position.png"):
        assert (out / f).is_file(), f
    prof = json.loads((out / "speculation_profile.json").read_text())
    assert profile_problems(prof) == [] and set(prof["categories"]) == {"coding", "math"}
    assert prof["settings"]["machine"]["device"] == "cpu"
    prov = json.loads((out / "provenance.json").read_text())
    assert "measure" in prov["command"] and any(k.endswith("config.json") for k in prov["inputs"])
    # the profile feeds the planner
    plan = cli("plan", "--target", target / "config.json", "--drafter", "ngram", "--gpu", "h100", "--batch-sizes",
               "1", "--acceptance", out / "speculation_profile.json", "--category", "math", "--json", "--no-compare")
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["drafter"]["acceptance"]["measured"] is True
    again = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--categories", "coding",
                "--num-prompts", "1", "--max-new-tokens", "8", "--out", out, "--force", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["drafter"]["draft_len"] == 2


# ---- bad input: exit 2, nothing written ----------------------------------------------------------------

def _write_json(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data))
    return folder


@pytest.fixture
def bad_inputs(tmp_path, target):
    no_template = tmp_path / "no-template"
    shutil.copytree(target, no_template)
    write_tokenizer(no_template, chat_template=None)
    for f in no_template.glob("chat_template*"):
        f.unlink()
    eagle = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "draft_vocab_size": 256,
             "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128}
    return {
        "other_target": _write_json(tmp_path / "eagle-other", {**eagle, "hidden_size": 128, "vocab_size": 256}),
        "other_vocab": _write_json(tmp_path / "eagle-vocab", {**eagle, "hidden_size": 64, "vocab_size": 32000}),
        "wrong_type": _write_json(tmp_path / "gpt2", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}),
        "missing": tmp_path / "no-such-drafter",
        "dflash": _write_json(tmp_path / "dflash", {"architectures": ["DFlashDraftModel"], "hidden_size": 64,
                                                    "vocab_size": 256, "block_size": 4,
                                                    "dflash_config": {"mask_token_id": 3, "target_layer_ids": [0]}}),
        "no_template": no_template,
        "no_weights": _write_json(tmp_path / "no-weights", json.loads((target / "config.json").read_text())),
        "eagle_no_weights": _write_json(tmp_path / "eagle-ok", {**eagle, "hidden_size": 64, "vocab_size": 256}),
    }


@pytest.mark.parametrize("case,args,match", [
    ("category", ["--drafter", "ngram", "--categories", "coding,poetry"], "unknown suite category 'poetry'; valid: "),
    ("other_target", ["--drafter", "{other_target}"], "hidden_size 128, the target 64"),
    ("other_vocab", ["--drafter", "{other_vocab}"], "vocab_size 32000, the target 256"),
    ("wrong_type", ["--drafter", "{wrong_type}"], "not an EAGLE-3, EAGLE-MTP, DFlash/DSpark"),
    ("missing_drafter", ["--drafter", "{missing}"], "neither 'ngram' nor 'suffix' nor an existing folder"),
    ("dflash_d", ["--drafter", "{dflash}", "--draft-len", "5"], r"block_size - 1 = 3"),
    ("no_template", ["--drafter", "ngram", "--target", "{no_template}"], "no chat template"),
    ("missing_target", ["--drafter", "ngram", "--target", "/nonexistent/model"], "does not exist"),
    ("bundle_pytorch", ["--drafter", "ngram", "--bundle", "."], "No such option"),
    ("zero_d", ["--drafter", "ngram", "--draft-len", "0"], "at least 1"),
    ("no_weights", ["--drafter", "ngram", "--target", "{no_weights}"], "has no *.safetensors weights"),
    ("drafter_no_weights", ["--drafter", "{eagle_no_weights}"], "has no *.safetensors weights"),
])
def test_bad_input_exit_2_nothing_written(cli, target, bad_inputs, tiny_suite, tmp_path, case, args, match):
    args = [a.format(**bad_inputs) for a in args]
    base = {"--target": str(target), "--draft-len": "2", "--categories": "coding"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    out = tmp_path / "out"
    r = cli("measure", "reference", *[x for kv in base.items() for x in kv], "--out", out)
    assert r.exit_code == 2, r.output
    assert match in r.stderr and "Traceback" not in r.output
    assert not out.exists()


def test_device_cuda_without_a_gpu_is_a_clear_error(cli, target, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    out = tmp_path / "out"
    r = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--categories", "coding",
            "--device", "cuda", "--out", out)
    assert r.exit_code == 2 and "--device cuda: no CUDA device" in r.stderr and "Traceback" not in r.output
    assert not out.exists()


def test_bad_drafter_folder_without_config(cli, target, tmp_path):
    (tmp_path / "d").mkdir()
    r = cli("measure", "reference", "--target", target, "--drafter", tmp_path / "d", "--draft-len", "2", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "has no config.json" in r.stderr and not (tmp_path / "o").exists()


def test_existing_output_needs_force(cli, target, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    r = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "2", "--out", out)
    assert r.exit_code == 2 and "--force" in r.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# ---- the TensorRT-LLM adapter (fakes of its documented interface) --------------------------------------

def fake_completion(tokens: int, accepted: int, drafted: int):
    """A fake ``CompletionOutput``: ``token_ids`` and ``request_perf_metrics.speculative_decoding`` as in
    TensorRT-LLM's Triton llmapi model (notes §2.1)."""
    spec = SimpleNamespace(acceptance_rate=accepted / drafted if drafted else 0.0,
                           total_accepted_draft_tokens=accepted, total_draft_tokens=drafted)
    return SimpleNamespace(token_ids=list(range(tokens)), request_perf_metrics=SimpleNamespace(speculative_decoding=spec))


def fake_iteration_stats() -> list:
    """Fake ``llm.get_stats()`` entries (IterationStats JSON, notes §2.2): a dict, a JSON string, no spec stats."""
    return [{"iter": 1, "specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 2,
                                              "numRequestsWithDraftTokens": 1, "acceptanceLength": 3.0}},
            json.dumps({"iter": 2, "specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 0,
                                                         "numRequestsWithDraftTokens": 1, "acceptanceLength": 1.0}}),
            {"iter": 3, "iterLatencyMS": 1.0}]


def test_trtllm_parsing_with_fakes():
    from trtllm_spec.measure.trtllm_engine import iteration_acceptance, request_acceptance, trtllm_section

    req = request_acceptance(fake_completion(tokens=11, accepted=6, drafted=12))
    assert (req.iterations, req.accepted) == (4, 6) and req.acceptance_length == pytest.approx(2.5)
    it = iteration_acceptance(fake_iteration_stats())
    assert it["acceptance_length"] == pytest.approx(2.0) and it["draft_acceptance_rate"] == pytest.approx(2 / 6)
    assert iteration_acceptance([{"iter": 1}]) is None
    s = trtllm_section([req], it, 3, spec_s=1.0, target_s=2.0, reference=[[1, 2, 3]], outputs=[[1, 2, 4]], greedy=True)
    assert s["acceptance_length"] == {"3": 2.0} and s["speedup"] == pytest.approx(2.0)
    assert s["identical_outputs"] == 0 and s["token_agreement"] == pytest.approx(2 / 3)
    derived = trtllm_section([req], None, 3, spec_s=1.0, target_s=None, reference=None, outputs=[[1] * 11], greedy=True)
    assert derived["mean_acceptance_length"] == pytest.approx(2.5) and derived["identical_outputs"] is None
    prof = _profile()
    prof.update(engine="trtllm", overall=s, categories={"coding": s})
    assert profile_problems(prof) == []
    from trtllm_spec.measure.report import render_markdown

    assert "| coding | 1 |" in render_markdown(prof)
    with pytest.raises(UserError, match="return_perf_metrics"):
        request_acceptance(SimpleNamespace(token_ids=[1], request_perf_metrics=None))


def _bundle(tmp_path: Path) -> Path:
    b = tmp_path / "bundle"
    (b / "drafter").mkdir(parents=True)
    (b / "llm_api_options.yaml").write_text("speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 3\n"
                                            "  speculative_model: drafter\nkv_cache_config:\n  free_gpu_memory_fraction: 0.8\n")
    (b / "drafter" / "config.json").write_text("{}")
    from tests.bundle_fakes import seal_bundle

    return seal_bundle(b, "eagle3", "1.3")


def test_bundle_options(tmp_path):
    from tests.bundle_fakes import seal_bundle
    from trtllm_spec.core.bundle import read_bundle
    from trtllm_spec.measure.trtllm_engine import bundle_draft_len

    b = _bundle(tmp_path)
    opts = read_bundle(b).speculative_options(absolute_paths=True)
    assert opts["speculative_config"]["speculative_model"] == str((b / "drafter").resolve())
    assert bundle_draft_len(opts) == 3
    (b / "llm_api_options.yaml").write_text("kv_cache_config: {}\n")
    with pytest.raises(UserError, match="does not match its manifest"):
        read_bundle(b)
    seal_bundle(b, "eagle3", "1.3")
    with pytest.raises(UserError, match="no speculative_config"):
        read_bundle(b).speculative_options()
    with pytest.raises(UserError, match="has no manifest.json"):
        read_bundle(tmp_path)


def test_trtllm_not_installed_names_the_command(cli, target, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # import fails, as on any machine without it
    b = _bundle(tmp_path)
    out = tmp_path / "out"
    r = cli("measure", "trtllm", "--target", target, "--bundle", b, "--categories", "coding",
            "--num-prompts", "2", "--out", out)
    assert r.exit_code == 2 and not out.exists()
    assert "TensorRT-LLM is not installed here; run this on a GPU node with: trtllm-spec measure trtllm" \
        in r.stderr
    assert f"--bundle {b}" in r.stderr and "--categories coding --num-prompts 2" in r.stderr
    mismatch = cli("measure", "trtllm", "--target", target, "--bundle", b, "--draft-len", "5", "--json")
    assert mismatch.exit_code == 2 and "max_draft_len 3" in mismatch.stderr


def test_block_drafter_sweeps_each_draft_len_and_sampling_skips_the_comparison(target, tiny_suite, monkeypatch):
    import trtllm_spec.drafters.load as load
    from trtllm_spec.drafters.ngram.runtime import NGramDrafter
    from trtllm_spec.measure.run import measure

    # a block drafter's decode loop is the decoder's; n-gram stands in so the sweep runs in a second
    monkeypatch.setattr(load, "load_runtime_drafter", lambda spec, target, **kw: ("dflash", NGramDrafter(3)))
    prof = measure(target, "ngram", 3, categories="coding", num_prompts=1, max_new_tokens=10, block_sweep=[1, 3],
                   temperature=0.8)
    validate_profile(prof)
    ov = prof["overall"]
    assert prof["drafter"]["al_method"] == "measured_per_draft_len" and prof["drafter"]["block_sweep"] == [1, 3]
    assert set(ov["acceptance_length"]) == {"1", "3"} and ov["identical_outputs"] is None
    assert load_acceptance_from(prof).acceptance_length(1) == pytest.approx(ov["acceptance_length"]["1"])


def load_acceptance_from(prof: dict):
    from trtllm_spec.planner.acceptance import acceptance_from_dict

    return acceptance_from_dict(prof["overall"], "profile")


def test_lossy_fp32_output_fails_the_check_after_writing(cli, monkeypatch, target, tmp_path):
    import trtllm_spec.measure.run as run_mod
    from trtllm_spec.measure.report import lossless_problem

    prof = _profile()
    prof["overall"]["identical_outputs"] = 2
    prof["prompts"][1]["identical"] = False
    prof["target"]["path"] = str(target)
    assert "1 of 3 prompts (math/x)" in lossless_problem(prof)
    assert lossless_problem(_profile(dtype="bf16")) is None
    monkeypatch.setattr(run_mod, "measure", lambda *a, **kw: prof)
    out = tmp_path / "out"
    r = cli("measure", "reference", "--target", target, "--drafter", "ngram", "--draft-len", "3", "--out", out)
    assert r.exit_code == 1 and "must be lossless" in r.stderr
    assert "Check failed" in (out / "report.md").read_text()
