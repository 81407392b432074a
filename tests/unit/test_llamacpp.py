"""llama.cpp as the second engine, without building it: the build's refusals and cache key, the converter call's
rules (capture ids, vocabulary path), the descriptors' spec types, and llama-server's counters turned into our
iterations. The real build, conversion and decoding run in tests/slow/test_llamacpp_smollm2.py."""

from __future__ import annotations

import json

import pytest

from trtllm_spec.drafters.eagle3.llamacpp import capture_ids as llamacpp_capture_ids
from trtllm_spec.errors import DependencyMissing, UserError
from trtllm_spec.llamacpp import build as lb
from trtllm_spec.llamacpp.convert import byte_level_bpe, outtype
from trtllm_spec.measure.llamacpp_engine import SpecCounts, counts_between, iterations_from_counts
from trtllm_spec.serve.llamacpp import DraftSpec, parse_prometheus, server_command

# ---- build -----------------------------------------------------------------------------------------------------

def test_missing_toolchain_is_refused_with_the_debian_packages(monkeypatch, tmp_path):
    monkeypatch.setattr(lb.shutil, "which", lambda name: None)
    with pytest.raises(DependencyMissing, match=r"missing: cmake, c\+\+, cc.*apt-get install cmake g\+\+"):
        lb.ensure_build(tmp_path)
    assert not any((tmp_path / "llamacpp").glob("llama-cpp-python-*"))  # nothing half-built kept


def test_only_build_llamacpp_downloads(tmp_path):
    # the other commands (measure llamacpp, assets serve --drafter) use no network: they refuse
    with pytest.raises(UserError, match="run 'trtllm-spec assets build-llamacpp' once"):
        lb.ensure_build(tmp_path, download=False)


def test_cli_build_llamacpp_refusals(cli, monkeypatch, tmp_path):
    monkeypatch.setattr(lb.shutil, "which", lambda name: None)
    r = cli("assets", "build-llamacpp", "--cache", tmp_path)
    assert r.exit_code == 2 and "apt-get install cmake" in r.output and "Traceback" not in r.output
    r = cli("assets", "build-llamacpp", "--cache", tmp_path, "--jobs", "0")
    assert r.exit_code == 2 and "--jobs 0" in r.output
    r = cli("assets", "build-llamacpp", "--cache", tmp_path, "--source", tmp_path / "nope.tar.gz")
    assert r.exit_code == 2 and "does not exist" in r.output


def test_cli_build_llamacpp_reuses_a_cached_build(cli, tmp_path):
    folder = lb.build_folder(tmp_path)
    (folder / "bin").mkdir(parents=True)
    for b in lb.BINARIES:
        (folder / "bin" / b).write_text("")
    (folder / "build.json").write_text(json.dumps({"commit": "0c1e57098bba43ac", "package_version": "0.3.36",
                                                   "build_s": 321.0}))
    r = cli("assets", "build-llamacpp", "--cache", tmp_path)
    assert r.exit_code == 0, r.output
    assert "llama.cpp 0c1e57098bba" in r.output and "cached (built in 321 s)" in r.output


def test_cache_key_names_the_cpu_features(monkeypatch):
    monkeypatch.setattr(lb, "cpu_features", lambda: ["avx2"])
    a = lb.cpu_key()
    monkeypatch.setattr(lb, "cpu_features", lambda: ["avx2", "avx512f"])
    assert lb.cpu_key() != a  # a binary built for other instructions is never reused


def test_x86_instructions_follow_the_cpu_and_never_amx():
    # a VM here reported amx_tile yet trapped it (SIGILL in libggml-cpu on a quantized GGUF): never compiled in
    flags = lb.isa_flags("x86_64", ["sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "amx_tile", "amx_int8",
                                    "amx_bf16"])
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags and "-DGGML_FMA=ON" in flags
    assert "-DGGML_AVX512=OFF" in flags and "-DGGML_AVX512_BF16=OFF" in flags
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(flags)
    assert not any(f.endswith("AMX_TILE=ON") for f in flags)
    avx512 = lb.isa_flags("x86_64", ["avx2", "avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw",
                                     "avx512_bf16"])
    assert "-DGGML_AVX512=ON" in avx512 and "-DGGML_AVX512_BF16=ON" in avx512
    assert "-DGGML_AVX512=OFF" in lb.isa_flags("x86_64", ["avx2", "avx512f"])  # the whole F/CD/VL/DQ/BW set
    assert lb.isa_flags("aarch64", ["asimd"]) == ["-DGGML_NATIVE=ON"]


def test_cache_key_names_the_cmake_flags(monkeypatch):
    a = lb.cpu_key()
    monkeypatch.setattr(lb, "CMAKE_FLAGS", (*lb.CMAKE_FLAGS, "-DGGML_LTO=ON"))
    assert lb.cpu_key() != a  # a build policy change rebuilds


def test_source_folder_without_llama_cpp_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(UserError, match="no llama.cpp sources"):
        lb._sources(tmp_path / "src", tmp_path, lambda m: None)


def test_git_head_of_a_submodule(tmp_path):
    llama = tmp_path / "vendor" / "llama.cpp"
    llama.mkdir(parents=True)
    (tmp_path / ".git" / "modules" / "vendor" / "llama.cpp").mkdir(parents=True)
    (tmp_path / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD").write_text("0c1e57098bba\n")
    (llama / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    assert lb._git_head(llama) == "0c1e57098bba"


@pytest.mark.parametrize("line,frac", [("[21/208] Building CXX", 21 / 208), ("[ 40%] Building", 0.4),
                                       ("-- Configuring done", None)])
def test_build_progress_lines(line, frac):
    assert lb._progress(line) == frac


# ---- conversion rules -------------------------------------------------------------------------------------------

def test_capture_ids_become_layer_inputs():
    # ours (ModelOpt / TensorRT-LLM): layer outputs; llama.cpp: layer inputs -> + 1. SmolLM2: 30 layers
    assert llamacpp_capture_ids({}, 30) == [2, 15, 27]  # = llama.cpp's own default [2, L//2, L-3]
    assert llamacpp_capture_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 9, 29]}}, 30) == [1, 10, 30]
    with pytest.raises(UserError, match="exactly 3"):
        llamacpp_capture_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}, 30)
    with pytest.raises(UserError, match="outside the target's 0..29"):
        llamacpp_capture_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 30]}}, 30)


def test_byte_level_bpe_is_recognised(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}, "pre_tokenizer": {
        "type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "ByteLevel"}]}}))
    assert byte_level_bpe(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}, "pre_tokenizer": {
        "type": "Metaspace"}}))
    assert not byte_level_bpe(tmp_path)


def test_never_a_4_bit_gguf():
    assert outtype("fp32") == "f32" and outtype("bf16") == "bf16"
    with pytest.raises(UserError, match="never a 4-bit"):
        outtype("q4_1")


# ---- descriptors ------------------------------------------------------------------------------------------------

def test_descriptors_name_their_llamacpp_spec_type():
    from trtllm_spec.drafters.registry import get
    from trtllm_spec.stages.llamacpp import spec_type_of

    assert spec_type_of("eagle3") == "draft-eagle3" and spec_type_of("dflash") == "draft-dflash"
    assert get("draft_model").llamacpp_spec_type == "draft-simple"
    for kind, why in [("eagle_mtp", "EAGLE-MTP head"), ("mtp", "target's GGUF"), ("dspark", "DeepSeek-V4"), ("ngram", "other algorithms")]:
        with pytest.raises(UserError, match=f"a {kind} drafter cannot run on llama.cpp: .*{why}"):
            spec_type_of(kind)


# ---- llama-server's counters -> iterations ------------------------------------------------------------------

def test_a_request_that_ends_inside_its_last_step_gives_the_unreturned_tokens_back():
    # a self-drafting server: 14 steps that each accepted all 3 drafts, but the reply is 56 tokens, not 1 + 14 x 4:
    # the request ended inside the last step, whose tokens past the end were verified, not output
    its = iterations_from_counts(SpecCounts(14, 42, 42, [14, 14, 14]), 56, 3)
    assert len(its) == 14 and sorted(its) == [2] + [3] * 13 and (56 - 1) / len(its) == pytest.approx(55 / 14)
    with pytest.raises(UserError, match="more than the tokens"):  # more than one step short: inconsistent
        iterations_from_counts(SpecCounts(14, 42, 42, [14, 14, 14]), 52, 3)


def test_counters_become_the_iterations_histogram():
    metrics = parse_prometheus(
        "# HELP x\nllamacpp:spec_decode_num_drafts_total 10\nllamacpp:spec_decode_num_draft_tokens_total 30\n"
        "llamacpp:spec_decode_num_accepted_tokens_total 12\n"
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 7\n'
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 4\n'
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1\n')
    c = counts_between({}, metrics, 3)
    assert c == SpecCounts(10, 30, 12, [7, 4, 1])
    # 10 steps: 3 accepted none, 3 one, 3 two, 1 three = 12 accepted; 24 tokens = 1 prefill + 10 steps + 12 + 1 plain
    its = iterations_from_counts(c, 24, 3)
    assert sorted(its) == sorted([0] * 3 + [1] * 3 + [2] * 3 + [3] + [0])
    assert (sum(its) + len(its)) == 24 - 1  # AL = (generated - 1) / iterations, as our decoder counts it


def test_inconsistent_counters_are_refused():
    with pytest.raises(UserError, match="disagree"):
        iterations_from_counts(SpecCounts(2, 6, 5, [2, 2, 0]), 20, 3)  # per position says 4, total 5
    with pytest.raises(UserError, match="more than the tokens"):
        iterations_from_counts(SpecCounts(10, 30, 20, [10, 10, 0]), 12, 3)


def test_server_command_drafts_exactly_d():
    cmd = server_command(lb.Path("/b/llama-server"), lb.Path("t.gguf"), draft=DraftSpec(lb.Path("d.gguf"),
                         "draft-eagle3", 3), port=9000)
    s = " ".join(cmd)
    assert "--spec-type draft-eagle3" in s and "--spec-draft-n-max 3" in s and "--spec-draft-p-min 0" in s
    assert "--spec-draft-n-min 0" in s and "--metrics" in s and "--host 127.0.0.1" in s


# ---- measure llamacpp: refusals before anything builds ---------------------------------------------

def test_measure_llamacpp_refusals(cli, tmp_path, tiny_target, tiny_suite):
    from tests.conftest import write_config

    mtp = write_config(tmp_path / "mtp", architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=256,
                       vocab_size=256, hidden_size=64, eagle_config={"use_aux_hidden_state": False})
    base = ["measure", "llamacpp", "--target", tiny_target, "--draft-len", "3", "--out", tmp_path / "o"]
    r = cli(*base, "--drafter", mtp)
    assert r.exit_code == 2 and "a eagle_mtp drafter cannot run on llama.cpp" in r.output, r.output
    for flag in (["--block-sweep", "1,2"], ["--device", "cuda"]):  # not its options
        r = cli(*base, "--drafter", mtp, *flag)
        assert r.exit_code == 2 and "No such option" in r.output and flag[0] in r.output.split("No such option")[1]
    r = cli(*base, "--drafter", mtp, "--temperature", "0.7")  # sampling is measured (issue 38): the drafter decides
    assert r.exit_code == 2 and "a eagle_mtp drafter cannot run on llama.cpp" in r.output, r.output
    r = cli(*base, "--drafter", mtp, "--response-format", '{"type": "objekt"}')
    assert r.exit_code == 2 and "not a valid JSON Schema" in r.output, r.output
    r = cli("measure", "reference", "--target", tiny_target, "--draft-len", "3", "--drafter", mtp, "--json",
            "--compare-reference")
    assert r.exit_code == 2 and "No such option" in r.output and "--compare-reference" in r.output
    assert not (tmp_path / "o").exists()


# ---- served: llama-server's /metrics over a level ---------------------------------------------------------------

def test_served_acceptance_from_llama_server_metrics():
    from trtllm_spec.measure.served import server_acceptance

    page = ("llamacpp:spec_decode_num_drafts_total {}\nllamacpp:spec_decode_num_draft_tokens_total {}\n"
            "llamacpp:spec_decode_num_accepted_tokens_total {}\n"
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {}\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} {}\n')
    a = server_acceptance([], page.format(2, 4, 1, 1, 0), page.format(12, 24, 9, 7, 2))
    assert a["reported"] and a["source"].startswith("/metrics llamacpp:spec_decode_")
    assert a["num_drafts"] == 10 and a["num_accepted_tokens"] == 8 and a["acceptance_length"] == 1.8
    assert a["marginal_rates"] == [0.6, 0.2] and a["conditional_rates"] == [0.6, pytest.approx(1 / 3, abs=1e-6)]
    assert not server_acceptance([], page.format(2, 4, 1, 1, 0), page.format(2, 4, 1, 1, 0))["reported"]


def test_serve_drafter_options_are_refused_without_a_drafter(cli, tmp_path):
    r = cli("assets", "serve", "smollm2-135m", "--draft-len", "3")
    assert r.exit_code == 2 and "add --drafter DIR" in r.output
    r = cli("assets", "serve", "smollm2-135m", "--drafter", tmp_path, "--port", "0")
    assert r.exit_code == 2 and "--port 0" in r.output
    r = cli("assets", "serve", "smollm2-135m", "--drafter", tmp_path)
    assert r.exit_code == 2 and "--drafter needs D >= 1" in r.output
    for args, what in ((("--parallel", "0"), "--parallel 0"), (("--ctx", "16"), "--ctx 16")):
        r = cli("assets", "serve", "smollm2-135m", *args)  # refused before any download or build
        assert r.exit_code == 2 and what in r.output and "Traceback" not in r.output
    r = cli("assets", "serve", "nope")
    assert r.exit_code == 2 and "unknown model asset 'nope'" in r.output


# ---- the comparison ---------------------------------------------------------------------------------------------

def _run(pid, cat, ref, out, accepted):
    from trtllm_spec.measure.profile import PromptRun

    return PromptRun(pid, cat, 5, ref, out, 1.0, 1.0, accepted, [3] * len(accepted), [3] * len(accepted))


def test_comparison_per_category_and_greedy_agreement():
    from trtllm_spec.measure.engine_compare import compare, render_comparison

    g = [1, 2, 3, 4, 5, 6, 7]
    llama = [_run("c/0", "coding", g, g, [2, 1, 2, 0]), _run("m/0", "math", g, g[:6] + [9], [1, 1, 0, 0, 0])]
    ours = [_run("c/0", "coding", g, g, [2, 1, 2, 0]), _run("m/0", "math", g, g, [1, 1, 1, 0, 0])]
    c = compare(llama, ours, 3, {"engine": "pytorch"})
    assert c["categories"]["coding"]["relative_difference"] == 0.0
    m = c["categories"]["math"]
    assert m["acceptance_length_llamacpp"] == 1.4 and m["acceptance_length_reference"] == 1.6
    assert m["identical_to_llamacpp_target_greedy"] == 0 and m["identical_to_reference_target_greedy"] == 0
    o = c["overall"]
    assert o["acceptance_length_llamacpp"] == pytest.approx(16 / 9, abs=1e-6) and o["same_output_both_engines"] == 1
    assert c["within_tolerance"] is False  # 16/9 vs 17/9: -5.9%
    md = render_comparison(c)
    assert "| math | 1 | 1.400 | 1.600 | -0.200 | -12.5% | 0/1 | 0/1 | 0/1 |" in md and "OUTSIDE the 5% bar" in md
    with pytest.raises(ValueError, match="different prompts"):
        compare(llama, ours[::-1], 3, {})


def test_each_descriptor_runs_its_own_llamacpp_converter(monkeypatch, tmp_path):
    """The converter is the descriptor's (Mechanism.llamacpp_convert, from its package), not a table in
    stages/llamacpp.py."""
    import trtllm_spec.drafters.dflash.llamacpp as dflash_lc
    import trtllm_spec.drafters.eagle3.llamacpp as eagle3_lc
    import trtllm_spec.llamacpp.convert as convert
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.errors import UserError

    calls = []
    for module, attr, fn in ((eagle3_lc, "convert", "convert_eagle3"), (dflash_lc, "convert", "convert_dflash"),
                             (convert, "convert_target", "convert_target")):
        monkeypatch.setattr(module, attr, lambda *a, _fn=fn: calls.append((_fn, a)) or {"fn": _fn})
    d, t, o = tmp_path / "d", tmp_path / "t", tmp_path / "o.gguf"
    want = {"eagle3": ("convert_eagle3", ("conv", d, t, o, "f32", print)),
            "dflash": ("convert_dflash", ("conv", d, t, o, "f32", print)),
            "dflash2": ("convert_dflash", ("conv", d, t, o, "f32", print)),  # one converter for both (qwen.py)
            "draft_model": ("convert_target", ("conv", d, o, "f32", print))}
    for name, mech in MECHANISMS.items():
        if mech.llamacpp_spec_type is None:
            with pytest.raises(UserError, match=name):
                mech.llamacpp_convert("conv", d, t, o, "f32", print)
            continue
        assert mech.llamacpp_convert("conv", d, t, o, "f32", print) == {"fn": want[name][0]}
        assert calls[-1] == want[name]
    assert {c[0] for c in calls} == {"convert_eagle3", "convert_dflash", "convert_target"}
