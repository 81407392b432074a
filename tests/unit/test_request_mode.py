"""Request modes (issue 38): the recipe/CLI mode, chat-template arguments checked against the template's AST,
structured output through xgrammar in the reference decoder (lossless: equal to constrained target-only
decoding; outputs parse and validate), sampling with greedy AL beside it, and the planner's mode check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtllm_spec.core.request_mode import RequestMode, mode_difference
from trtllm_spec.errors import UserError

SPECIALS = ["<pad>", "<s>", "</s>", "[UNK]"]
QWEN3_STYLE = ("{% for m in messages %}{{ '<s>' + m['role'] + '\\n' + m['content'] + '</s>\\n' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<s>assistant\\n' }}{% if enable_thinking is defined and "
               "enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "n": {"type": "integer"}}, "required": ["name", "n"]}


def write_byte_target(folder: Path, chat_template: str = QWEN3_STYLE, seed: int = 0) -> Path:
    """A tiny random Llama with a byte-level tokenizer (every byte a token, no merges): any JSON text can be
    written, so xgrammar's masks never leave the model without a token."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(SPECIALS + sorted(byte_chars))}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="[UNK]")
    fast.chat_template = chat_template
    torch.manual_seed(seed)
    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=len(vocab), max_position_embeddings=1024,
                      tie_word_embeddings=True, eos_token_id=2, bos_token_id=1, pad_token_id=0,
                      initializer_range=0.2)
    LlamaForCausalLM(cfg).save_pretrained(str(folder), safe_serialization=True)
    fast.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def byte_target(tmp_path_factory) -> Path:
    return write_byte_target(tmp_path_factory.mktemp("rm") / "target")


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---- the mode itself ---------------------------------------------------------------------------------------

def test_mode_validates_schema_and_names():
    from pydantic import ValidationError

    m = RequestMode(chat_template_kwargs={"enable_thinking": False}, response_format=SCHEMA, temperature=0.7)
    assert m.samples and m.constrained and m.json_schema() == SCHEMA
    assert m.label() == "enable_thinking=False, json_schema, T=0.7"
    assert RequestMode(response_format="json_object").json_schema() == {"type": "object"}
    with pytest.raises(ValidationError, match="not a valid JSON Schema"):
        RequestMode(response_format={"type": "objekt"})
    with pytest.raises(ValidationError, match="json_object"):
        RequestMode(response_format="json")
    with pytest.raises(ValidationError, match="template variable name"):
        RequestMode(chat_template_kwargs={"a b": 1})
    assert mode_difference(RequestMode(), RequestMode(temperature=0.7)) == [
        "temperature 0.0 (profile) vs 0.7 (recipe)"]


def test_template_argument_read_or_refused(byte_target):
    from trtllm_spec.data.chat import check_template_kwargs, load_tokenizer, prompt_ids

    tok = load_tokenizer(byte_target)
    check_template_kwargs(tok, {"enable_thinking": False})
    msgs = [{"role": "user", "content": "hi"}]
    off = tok.decode(prompt_ids(tok, msgs, {"enable_thinking": False}))
    assert "<think>" in off and "<think>" not in tok.decode(prompt_ids(tok, msgs))
    with pytest.raises(UserError, match="reasoning_effort: .* does not read it .*enable_thinking"):
        check_template_kwargs(tok, {"reasoning_effort": "low"})


# ---- structured output in the decoder ----------------------------------------------------------------------

def _decode_both(target_dir: Path, schema: dict, temperature: float = 0.0, draft_len: int = 3, n: int = 48):
    import torch

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.constraint import GrammarConstraint
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.runtime.sampling import SamplingParams

    tok = load_tokenizer(target_dir)
    model = LlamaModel.from_pretrained(target_dir, dtype=torch.float32)
    _, drafter = load_runtime_drafter("ngram", model, options=None, max_len=512)
    c = GrammarConstraint.from_schema(tok, model.cfg.vocab_size, schema, (2,))
    ids = prompt_ids(tok, [{"role": "user", "content": "give me json {\"name\": \"ab\", \"n\": 1}"}])
    params = SamplingParams(temperature=temperature)
    ref = generate(model, ids, n, (2,), params, torch.Generator().manual_seed(0), c)
    out, st = speculative_generate(model, drafter, ids, n, draft_len, params, (2,),
                                   torch.Generator().manual_seed(0), c)
    return tok, ref, out, st


def test_constrained_speculative_equals_constrained_greedy_and_validates(byte_target):
    import jsonschema

    tok, ref, out, st = _decode_both(byte_target, SCHEMA, n=64)
    assert out == ref  # lossless under the grammar: the masked target decides every token
    text = tok.decode(out, skip_special_tokens=True)
    if out[-1] == 2:  # the grammar closed: the output is one JSON value that the schema accepts
        jsonschema.validate(json.loads(text), SCHEMA)
    else:  # cut by max_new_tokens: still a prefix the grammar allows
        assert text.lstrip().startswith("{")
    assert st.iterations >= 1


def test_drafts_outside_the_grammar_are_rejected(byte_target):
    """A drafter proposing the prompt's text (n-gram) must not get a draft past the mask: every accepted draft
    is the constrained target's own token, so the constrained output is reproduced exactly."""
    tok, ref, out, st = _decode_both(byte_target, {"type": "object"}, n=40, draft_len=4)
    assert out == ref and sum(st.accepted) <= sum(st.proposed)
    assert out[-1] == 2 and json.loads(tok.decode(out, skip_special_tokens=True)) == {}


def test_constrained_sampling_stays_in_the_grammar(byte_target):
    tok, _ref, out, _st = _decode_both(byte_target, SCHEMA, temperature=0.7, n=64)
    text = tok.decode(out, skip_special_tokens=True)
    assert text.lstrip().startswith("{")
    if out[-1] == 2:
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.validate(json.loads(text), SCHEMA)


# ---- measure with a mode (CLI) -------------------------------------------------------------------------------

def test_cli_measure_records_the_mode_and_validates_outputs(cli, byte_target, tiny_suite, tmp_path):
    out = tmp_path / "m"
    r = cli("measure", "--target", byte_target, "--drafter", "ngram", "--draft-len", "3", "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "24", "--response-format", "json_object",
            "--chat-template-arg", "enable_thinking=false", "--out", out)
    assert r.exit_code == 0, r.output
    prof = json.loads((out / "speculation_profile.json").read_text())
    assert prof["settings"]["request_mode"] == {"chat_template_kwargs": {"enable_thinking": False},
                                                "response_format": "json_object", "temperature": 0.0,
                                                "top_p": 1.0}
    so = prof["structured_output"]
    assert so["num_outputs"] == 2 and so["parsed"] == so["valid"]
    assert prof["overall"]["identical_outputs"] == 1


def test_cli_sampling_reports_greedy_beside_sampled(cli, byte_target, tiny_suite, tmp_path):
    r = cli("measure", "--target", byte_target, "--drafter", "ngram", "--draft-len", "3", "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "16", "--temperature", "0.7", "--top-p", "0.9", "--json",
            "--out", tmp_path / "s")
    assert r.exit_code == 0, r.output
    report = (tmp_path / "s" / "report.md").read_text()
    assert "## Greedy vs sampled" in report and "request mode: T=0.7, top_p=0.9" in report
    prof = json.loads(r.stdout[r.stdout.index("{"):r.stdout.rindex("}") + 1])
    g = prof["greedy_comparison"]
    assert g["temperature"] == 0.7 and g["overall"]["greedy"] >= 1 and "coding" in g["categories"]
    assert prof["settings"]["request_mode"]["top_p"] == 0.9


@pytest.mark.parametrize("args, match", [
    (["--response-format", '{"type": "objekt"}'], "not a valid JSON Schema"),
    (["--response-format", "schema.json"], "neither 'json_object'"),
    (["--chat-template-arg", "reasoning_effort=low"], "does not read it"),
    (["--chat-template-arg", "enable_thinking"], "expected KEY=VALUE"),
    (["--top-p", "0"], "top_p"),
])
def test_cli_bad_mode_exit_2_nothing_written(cli, byte_target, tiny_suite, tmp_path, args, match):
    out = tmp_path / "bad"
    r = cli("measure", "--target", byte_target, "--drafter", "ngram", "--draft-len", "3", "--categories", "coding",
            "--num-prompts", "1", "--max-new-tokens", "8", "--out", out, *args)
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output
    assert not out.exists()


# ---- plan --acceptance checks the mode ------------------------------------------------------------------------

def test_plan_refuses_a_profile_of_another_mode(cli, tmp_path):
    acc = tmp_path / "acc.json"
    mode = {"chat_template_kwargs": {}, "response_format": "json_object", "temperature": 0.0, "top_p": 1.0}
    acc.write_text(json.dumps({"conditional_rates": [0.6, 0.5, 0.4], "settings": {"temperature": 0.0,
                                                                                   "request_mode": mode}}))
    base = ("plan", "--target", "qwen3-8b", "--drafter", "eagle3", "--gpu", "b200", "--batch-sizes", "1",
            "--acceptance", acc, "--json", "--no-compare")
    r = cli(*base)
    assert r.exit_code == 2 and "request mode 'json_object'" in r.output and "'default'" in r.output
    assert "response_format" in r.output and "Traceback" not in r.output
    r = cli(*base, "--set", "workload.request_mode.response_format=json_object")
    assert r.exit_code == 0, r.output
    old = tmp_path / "old.json"  # a profile from before request modes: the default mode at its temperature
    old.write_text(json.dumps({"conditional_rates": [0.6, 0.5], "settings": {"temperature": 0.7}}))
    r = cli(*base[:-3], old, "--json", "--no-compare")
    assert r.exit_code == 2 and "T=0.7" in r.output


# ---- served: the mode in the request, per-request acceptance -----------------------------------------------

def _items():
    from trtllm_spec.data.suite import SuiteItem

    return [SuiteItem(f"{c}/mt_bench/{i}", c, [{"role": "user", "content": "hi"}], "mt_bench", "CC-BY-4.0", str(i))
            for c in ("coding", "math") for i in range(3)]


def _stream_with(extra: dict, finish_extra: dict | None = None) -> list:
    return ([{"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
             {"choices": [{"index": 0, "delta": {"content": "{\"a\": 1}"}}]},
             {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", **(finish_extra or {})}]},
             {"choices": [], "usage": {"completion_tokens": 21}, **extra}, "[DONE]"])


@pytest.mark.parametrize("extra, finish, al, source", [
    ({"timings": {"draft_n": 30, "draft_n_accepted": 10}}, None, 20 / 10, "timings (llama.cpp)"),
    ({"metrics": {"speculative_decoding": {"num_spec_steps": 8, "num_draft_tokens": 24,
                                           "num_accepted_draft_tokens": 12}}}, None, 1 + 12 / 8, "speculative"),
    ({}, {"speculative_decoding_stats": {"num_spec_steps": 5, "num_draft_tokens": 15,
                                         "num_accepted_draft_tokens": 15}}, 4.0, "speculative"),
    # TensorRT-LLM PR #19311's shape: on the choice, total_* counts (20 steps, 30 of 60 drafts accepted: AL 2.5)
    ({}, {"speculative_decoding": {"acceptance_rate": 0.5, "total_accepted_draft_tokens": 30,
                                   "total_draft_tokens": 60, "num_spec_steps": 20,
                                   "acceptance_histogram": [8, 0, 6, 6], "num_spec_tokens": 3}}, 2.5, "speculative"),
])
def test_served_per_request_acceptance_percentiles(extra, finish, al, source):
    from tests.reliability.fake_openai import FakeOpenAI, Reply
    from trtllm_spec.measure.served import measure_served

    mode = RequestMode(response_format=SCHEMA, chat_template_kwargs={"enable_thinking": False})
    with FakeOpenAI({"STREAM /v1/chat/completions": Reply(events=_stream_with(extra, finish))}) as srv:
        levels = measure_served(srv.url, "fake-model", _items(), [2], max_tokens=32, temperature=0.0, seed=0,
                                timeout=10, count_tokens=len, request_mode=mode)
    pr = levels[0]["per_request_acceptance"]
    assert pr["reported"] and source in pr["source"] and pr["requests_without"] == 0
    assert set(pr["categories"]) == {"coding", "math"} and pr["categories"]["math"]["num_requests"] == 3
    assert pr["overall"]["p10"] == pr["overall"]["p50"] == pr["overall"]["p90"] == pytest.approx(al, abs=1e-4)


def test_served_sends_the_mode_and_falls_back_to_counters():
    from tests.reliability.fake_openai import FakeOpenAI
    from trtllm_spec.measure.served import measure_served, mode_body

    body = mode_body({"model": "m"}, RequestMode(response_format=SCHEMA, top_p=0.9, temperature=0.7,
                                                  chat_template_kwargs={"enable_thinking": False}))
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "request_mode",
                                                                              "schema": SCHEMA}}
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["top_p"] == 0.9
    assert mode_body({}, RequestMode(response_format="json_object"))["response_format"] == {"type": "json_object"}
    with FakeOpenAI() as srv:
        levels = measure_served(srv.url, "fake-model", _items(), [1], max_tokens=8, temperature=0.0, seed=0,
                                timeout=10, count_tokens=len)
    pr = levels[0]["per_request_acceptance"]
    assert not pr["reported"] and "counters are the measurement" in pr["note"]


def test_served_endpoint_rejecting_response_format_is_one_line():
    from tests.reliability.fake_openai import FakeOpenAI, Reply, good_stream
    from trtllm_spec.measure.served import measure_served

    # the plain warm-up streams; the same request with response_format is refused (HTTP 400)
    refuse = Reply({"error": "response_format not supported"}, status=400, good_first=1)
    with FakeOpenAI({"STREAM /v1/chat/completions": refuse}) as srv, \
            pytest.raises(UserError, match="rejects the request mode 'json_object'"):
        measure_served(srv.url, "fake-model", _items(), [1], max_tokens=8, temperature=0.0, seed=0,
                       timeout=10, count_tokens=len, request_mode=RequestMode(response_format="json_object"))
    assert good_stream  # the good reply the first request got


# ---- speed-lite-modes: one category per mode ------------------------------------------------------------------

@pytest.fixture
def tiny_modes(monkeypatch):
    import trtllm_spec.data.suite as suite
    from trtllm_spec.data.suite import SuiteItem

    def fake_build_suite(name="speed-lite", categories=None, num_prompts=10, seed=0, cache=None):
        text = {"qa": "Who wrote it? Passage: Ann wrote it.", "rag": "Where is Paris?", "reasoning": "Why is 2 > 1?"}
        return [SuiteItem(f"{c}/src/{i}", c, [{"role": "user", "content": text[c]}], "squad", "CC", str(i))
                for c in categories for i in range(min(num_prompts, 1))]

    monkeypatch.setattr(suite, "build_suite", fake_build_suite)


def test_mode_suite_items_carry_their_mode(tiny_modes):
    from trtllm_spec.data.mode_suite import JSON_ANSWER, TOOL_CALL, build_mode_suite

    items = {it.category: it for it in build_mode_suite(None, 1)}
    assert set(items) == {"json_mode", "tool_call", "reasoning_thinking_on", "reasoning_thinking_off"}
    assert items["json_mode"].response_format == JSON_ANSWER and "JSON object" in items["json_mode"].messages[-1][
        "content"]
    assert items["tool_call"].response_format == TOOL_CALL and items["tool_call"].messages[0]["role"] == "system"
    assert items["reasoning_thinking_off"].template_kwargs == {"enable_thinking": False}
    assert items["reasoning_thinking_on"].messages == items["reasoning_thinking_off"].messages
    with pytest.raises(UserError, match="valid: json_mode"):
        build_mode_suite(["coding"], 1)


def test_measure_reports_al_per_mode(byte_target, tiny_modes):
    from trtllm_spec.measure.run import measure

    prof = measure(byte_target, "ngram", 3, suite="speed-lite-modes", num_prompts=1, max_new_tokens=24)
    assert set(prof["categories"]) == {"json_mode", "tool_call", "reasoning_thinking_on", "reasoning_thinking_off"}
    assert prof["overall"]["identical_outputs"] == 4  # lossless in every mode, constrained ones included
    so = prof["structured_output"]
    assert so["num_outputs"] == 4 and so["parsed"] == so["valid"]


def test_thinking_pair_left_out_for_a_template_without_the_switch(tmp_path, tiny_modes):
    from trtllm_spec.measure.run import measure

    plain = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    target = write_byte_target(tmp_path / "plain", chat_template=plain)
    prof = measure(target, "ngram", 2, suite="speed-lite-modes", num_prompts=1, max_new_tokens=8)
    assert set(prof["categories"]) == {"json_mode", "tool_call"}
    assert "reasoning_thinking_on" in prof["suite"]["skipped_categories"]
    with pytest.raises(UserError, match="enable_thinking: .* does not read it"):
        measure(target, "ngram", 2, suite="speed-lite-modes", categories=["reasoning_thinking_off"], num_prompts=1,
                max_new_tokens=8)


# ---- the bundle: guided decoding when the mode asks for it ---------------------------------------------------

@pytest.mark.parametrize("profile", ["1.2", "1.3", "1.4"])
def test_bundle_options_enable_guided_decoding(profile):
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.deploy.trtllm_options import make_llm_api_options
    from trtllm_spec.stages.bundle import guided_backend

    base = {"name": "r", "target": {"model": "qwen3-8b"}, "drafter": {"type": "ngram"}}
    plain = recipe_from_dict(base)
    json_mode = recipe_from_dict({**base, "workload": {"request_mode": {"response_format": SCHEMA}}})
    assert guided_backend(plain) is None and guided_backend(json_mode) == "xgrammar"
    common = dict(profile=profile, drafter_type="ngram", drafter_config=plain.drafter, speculative_model=None,
                  max_draft_len=0, draft_len_schedule=None, tp=1, pp=1, ep=1, max_batch_size=8, max_seq_len=None,
                  batch_sizes=[1, 8], free_gpu_memory_fraction=0.9, enable_block_reuse=True, kv_cache_dtype="auto",
                  cuda_graphs=True)
    assert make_llm_api_options(**common, guided_decoding_backend="xgrammar")["guided_decoding_backend"] == "xgrammar"
    assert "guided_decoding_backend" not in make_llm_api_options(**common)
    with pytest.raises(UserError, match="guided_decoding_backend"):
        make_llm_api_options(**common, guided_decoding_backend="outlines")


def test_recipe_refuses_two_temperatures_and_bad_schema():
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.errors import RecipeError

    base = {"name": "r", "target": {"model": "qwen3-8b"}, "drafter": {"type": "ngram"}}
    with pytest.raises((RecipeError, UserError), match="differ"):
        recipe_from_dict({**base, "measure": {"temperature": 0.5}, "workload": {"request_mode": {"temperature": 0.7}}})
    with pytest.raises((RecipeError, UserError), match="not a valid JSON Schema"):
        recipe_from_dict({**base, "workload": {"request_mode": {"response_format": {"type": 5}}}})


# ---- train in the mode you serve -----------------------------------------------------------------------------

def test_regeneration_uses_and_records_the_template_arguments(byte_target, tmp_path):
    from types import SimpleNamespace

    from trtllm_spec.data.chat import load_tokenizer
    from trtllm_spec.data.regenerate import regenerate

    items = [SimpleNamespace(id="a", source="s", messages=[{"role": "user", "content": "hi"}])]
    out = tmp_path / "regen.jsonl"
    regenerate(items, byte_target, out, max_new_tokens=4, batch_size=1, dtype="fp32", device="cpu",
               template_kwargs={"enable_thinking": False})
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["chat_template_kwargs"] == {"enable_thinking": False}
    tok = load_tokenizer(byte_target)
    assert "<think>" in tok.decode(rec["tokens"])  # the prompt was rendered in the mode
    from trtllm_spec.train.run import prepare_samples  # training reads the exact tokens of the mode

    *_, train = prepare_samples(tok, [rec], 64, 0.0, 0)
    assert train[0][0] == rec["tokens"] and "<think>" in tok.decode(train[0][0])
    with pytest.raises(UserError, match="does not read it"):
        regenerate(items, byte_target, tmp_path / "x.jsonl", max_new_tokens=4, batch_size=1, dtype="fp32",
                   device="cpu", template_kwargs={"reasoning_effort": "low"})


def test_training_mode_refuses_mixed_records_and_doctor_warns(tmp_path):
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.stages.drafter import training_mode_finding
    from trtllm_spec.train.run import training_mode

    recipe = recipe_from_dict({"name": "r", "target": {"model": "qwen3-8b"}, "drafter": {"type": "eagle3"},
                               "workload": {"request_mode": {"chat_template_kwargs": {"enable_thinking": False}}}})
    assert training_mode(recipe, [{"id": "a", "chat_template_kwargs": {"enable_thinking": False}}]) == {
        "enable_thinking": False}
    with pytest.raises(UserError, match="regenerated conversation b .* another|regenerate into a new"):
        training_mode(recipe, [{"id": "b", "messages": []}])
    d = tmp_path / "drafter"
    d.mkdir()
    assert training_mode_finding(d, RequestMode()).level == "info"
    (d / "trtllm_spec_drafter.json").write_text(json.dumps({"training": {"chat_template_kwargs": {}}}))
    f = training_mode_finding(d, RequestMode(chat_template_kwargs={"enable_thinking": False}))
    assert f.level == "warning" and "enable_thinking" in f.message and "retrain" in f.message
    assert training_mode_finding(d, RequestMode()).level == "ok"
