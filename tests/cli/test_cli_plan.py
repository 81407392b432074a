import json
import subprocess
import sys

import pytest

from tests.conftest import RECIPES, REPO


def test_plan_writes_files(cli, tmp_path):
    out = tmp_path / "plan"
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--drafter", "eagle3", "--gpu", "h100",
            "--batch-sizes", "1,8,64", "--isl", "1024", "--osl", "512", "--out", out)
    assert r.exit_code == 0, r.output
    for f in ("plan.json", "plan.md", "provenance.json", "speedup_vs_draft_len.png", "pareto_frontier.png",
              "step_time_breakdown.png"):
        assert (out / f).is_file(), f
    plan = json.loads((out / "plan.json").read_text())
    assert plan["target"]["group_size"] == 4
    assert [g["id"] for g in plan["guidelines"]] == [1, 2, 3, 4, 5]
    assert all({"id", "title", "draft_len", "reason"} <= set(g) for g in plan["guidelines"])
    keys = {"draft_len", "batch_size", "acceptance_length", "step_time_s", "tpot_s", "tokens_per_s_per_user",
            "tokens_per_s_per_gpu", "speedup"}
    assert all(keys <= set(c) for c in plan["candidates"])
    assert any(c["draft_len"] == 0 for c in plan["candidates"])
    rec = plan["recommendation"]
    assert rec["max_draft_len"] >= 1 and plan["frontier"] and plan["assumptions"]
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["recipe"]["target"]["model"] == "llama-3.1-8b-instruct" and "plan" in prov["command"]
    assert "eagle3" in (out / "plan.md").read_text()


def test_plan_json_stdout_and_acceptance(cli, tmp_path):
    acc = tmp_path / "acc.json"
    acc.write_text(json.dumps({"conditional_rates": [0.9, 0.9, 0.9, 0.9]}))
    r = cli("plan", "--target", "qwen3-8b", "--drafter", "eagle3", "--gpu", "b200", "--batch-sizes", "1",
            "--acceptance", acc, "--json", "--no-compare")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["drafter"]["acceptance"]["measured"] is True
    assert {c["mechanism"] for c in plan["candidates"]} == {"eagle3"}
    assert plan["recommendation"]["max_draft_len"] <= 4  # never planned beyond the measured positions


def test_plan_from_recipe_with_overrides(cli, tmp_path):
    r = cli("plan", "--recipe", RECIPES / "llama-3.3-70b-eagle3-h200-tp4.yaml", "--set", "workload.isl=8192",
            "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["workload"]["isl"] == 8192 and plan["parallelism"]["tp"] == 4
    assert plan["target"]["group_size"] == 8


def test_plan_drafter_flag_replaces_recipe_drafter(cli):
    r = cli("plan", "--recipe", RECIPES / "llama-3.1-8b-eagle3-h100.yaml", "--drafter", "ngram", "--json",
            "--no-compare")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["drafter"]["type"] == "ngram"


def test_plan_every_recipe(cli):
    for path in sorted(RECIPES.glob("*.yaml")):
        r = cli("plan", "--recipe", path, "--json")
        assert r.exit_code == 0, (path, r.output)


@pytest.mark.parametrize("args,match", [
    (["--target", "llama-9b"], "Presets:"),
    (["--target", "qwen3-8b", "--gpu", "h300"], "unknown GPU 'h300'"),
    (["--target", "qwen3-8b", "--batch-sizes", "1,x"], "comma-separated"),
    (["--target", "qwen3-8b", "--batch-sizes", "0"], "batch sizes must be"),
    (["--target", "qwen3-8b", "--max-draft-len", "99"], "--max-draft-len: Input should be less than or equal to 64"),
    (["--target", "qwen3-8b", "--tp", "2"], "exceeds --num-gpus = 1; raise --num-gpus"),
    (["--target", "qwen3-8b", "--gpu", "a100", "--dtype", "fp8"], "fp8 tensor cores"),
    (["--target", "qwen3-8b", "--drafter", "draft_model"], "--draft-model: required"),
    (["--target", "qwen3-8b", "--drafter", "draft_model", "--draft-model", "llama-3.2-1b-instruct"], "vocab"),
    (["--target", "qwen3-8b", "--set", "workload.isll=3"], "did you mean 'isl'"),
    ([], "needs --target"),
    (["--target", "qwen3-8b", "--serving", "vllm"], "--serving 'vllm': expected FRAMEWORK:VERSION"),
    (["--target", "qwen3-8b", "--serving", "tgi:1.0"], "--serving: Input should be 'vllm' or 'sglang'"),
    (["--target", "qwen3-8b", "--serving", "vllm:next"], "'next' is not a release number"),
])
def test_plan_bad_input(cli, tmp_path, args, match):
    out = tmp_path / "out"
    r = cli("plan", *args, "--out", out)
    assert r.exit_code == 2, r.output
    assert match in r.output
    assert "Traceback" not in r.output
    assert not out.exists()
    assert not list(tmp_path.glob(".out.*")), "no temporary folder left behind"


@pytest.mark.parametrize("args,match,not_match", [
    (["--target", "qwen3-8b", "--drafter", "suffix", "--trtllm-version", "1.2"], "set --trtllm-version 1.3",
     "engine.trtllm_version"),
    (["--target", "qwen3-8b", "--isl", "0"], "--isl: Input should be greater than or equal to 1", "workload.isl"),
    # a recipe value stays its key; a flag beside the recipe is named as the flag
    (["--recipe", RECIPES / "smollm2-135m-ngram-cpu.yaml", "--drafter", "suffix", "--set",
      "engine.trtllm_version=1.2"], "set engine.trtllm_version: '1.3'", "--trtllm-version"),
    (["--recipe", RECIPES / "smollm2-135m-ngram-cpu.yaml", "--tp", "3"], "--tp*pp = 3 exceeds num_gpus", "--num-gpus"),
    # --set after a flag wins: the user typed the key
    (["--target", "qwen3-8b", "--isl", "5", "--set", "workload.isl=0"], "workload.isl: Input", "--isl"),
])
def test_errors_name_what_the_user_typed(cli, tmp_path, args, match, not_match):
    r = cli("plan", *args, "--json")
    assert r.exit_code == 2 and match in r.stderr and not_match not in r.stderr, r.output


def test_name_flags_in_leaves_other_words_alone():
    from trtllm_spec.cli.common import name_flags_in

    origins = {"draft_len": "--draft-len", "workload.isl": "--isl", "hardware.tp": "--tp"}
    text = "r.yaml: measure.draft_len = 5 and max_draft_len 4; draft_len = 3; workload.isl_x; not hardware: tp"
    assert name_flags_in(text, origins) == ("r.yaml: measure.draft_len = 5 and max_draft_len 4; --draft-len 3; "
                                            "workload.isl_x; not hardware: tp")
    assert name_flags_in("r.yaml: hardware: tp2 or tp*pp", origins) == "r.yaml: hardware: tp2 or --tp*pp"
    assert name_flags_in("workload.isl = 7 (--isl) is below", origins) == "--isl 7 is below"


def test_plan_bad_acceptance_file(cli, tmp_path):
    acc = tmp_path / "acc.json"
    acc.write_text(json.dumps({"conditional_rates": [1.5]}))
    r = cli("plan", "--target", "qwen3-8b", "--acceptance", acc, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "conditional_rates[0] = 1.5" in r.output


def test_plan_refuses_existing_output(cli, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = cli("plan", "--target", "qwen3-8b", "--out", out)
    assert r.exit_code == 2 and "--force" in r.output
    assert (out / "keep.txt").read_text() == "mine"
    r = cli("plan", "--target", "qwen3-8b", "--out", out, "--force")  # --force replaces only our own outputs
    assert r.exit_code == 2 and "not a trtllm-spec output" in r.output and (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    assert cli("plan", "--target", "qwen3-8b", "--out", out).exit_code == 0
    r = cli("plan", "--target", "qwen3-8b", "--out", out, "--force")  # a plan folder (provenance.json) is ours
    assert r.exit_code == 0 and (out / "plan.json").exists()


def test_plan_does_not_import_torch(tmp_path):
    code = ("import sys; from trtllm_spec.cli import main\n"
            "try:\n    main(['plan', '--target', 'qwen3-8b', '--json'], standalone_mode=False)\n"
            "except SystemExit: pass\n"
            "assert 'torch' not in sys.modules and 'modelopt' not in sys.modules, 'heavy import on plan'\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_plan_when_no_batch_fits(cli, tmp_path):
    """Issue 17: a 70B bf16 target on one H200 used to end in a matplotlib traceback and blame the drafter."""
    out = tmp_path / "p"
    r = cli("plan", "--target", "llama-3.3-70b-instruct", "--gpu", "h200", "--batch-sizes", "1,64", "--isl", "8192",
            "--osl", "1024", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)["recommendation"]
    assert rec["infeasible_batch_sizes"] == [1, 64] and not rec["by_batch"]
    assert "weights alone do not fit" in rec["note"] and "--tp 2" in rec["note"] and "fp8" in rec["note"]
    assert "improve the drafter" not in rec["note"]
    assert rec["memory"]["weight_bytes"] > rec["memory"]["hbm_bytes"] - rec["memory"]["runtime_reserve_bytes"]
    md = (out / "plan.md").read_text()
    assert "no batch size fits in memory" in md and not list(out.glob("*.png"))


def test_plan_names_kv_bytes_when_large_batches_do_not_fit(cli, tmp_path):
    r = cli("plan", "--target", "llama-3.3-70b-instruct", "--gpu", "h200", "--dtype", "fp8", "--batch-sizes",
            "1,64", "--isl", "8192", "--osl", "1024", "--json", "--no-compare")
    assert r.exit_code == 0, r.output
    mem = json.loads(r.stdout)["recommendation"]["memory"]
    assert 0 < mem["max_batch_without_speculation"] < 64 and "one sequence of 9216 tokens" in mem["note"]


@pytest.mark.parametrize("kv", [7, 0])
def test_plan_refuses_impossible_kv_heads(cli, tmp_path, kv):
    from tests.conftest import LLAMA_TINY, write_config

    folder = write_config(tmp_path / "m", **{**LLAMA_TINY, "num_attention_heads": 32, "hidden_size": 256,
                                              "num_key_value_heads": kv})
    r = cli("plan", "--target", folder, "--gpu", "h100", "--json")
    assert r.exit_code == 2, r.output
    assert "num_key_value_heads" in r.output and "Traceback" not in r.output


def test_plan_dspark_one_draft_len(cli, tmp_path):
    """DSpark runs only at D = block_size in TensorRT-LLM and no release applies a schedule or max_concurrency to it
    (support_dynamic_draft_len): the plan shows D = 8 at every batch size, and plan.md says where a weak drafter
    stops paying and what to do instead (issue 22 item 4)."""
    acc = tmp_path / "acc.json"
    acc.write_text(json.dumps({"acceptance_length": {"8": 1.8}}))
    out = tmp_path / "plan"
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--drafter", "dspark", "--gpu", "h100", "--batch-sizes",
            "1,4,64,256", "--acceptance", acc, "--no-compare", "--set", "drafter.block_size=8",
            "--set", "engine.trtllm_version='1.3'", "--out", out)
    assert r.exit_code == 0, r.output
    rec = json.loads((out / "plan.json").read_text())["recommendation"]
    assert rec["max_draft_len"] == 8 and rec["draft_len_schedule"] is None
    assert rec["max_concurrency"] is None and {r["draft_len"] for r in rec["by_batch"]} == {8}
    md = (out / "plan.md").read_text()
    assert "max_concurrency:" not in md.replace("draft_len_schedule or max_concurrency", "")
    assert "applies no draft_len_schedule or max_concurrency to DSpark" in md and "separate deployment" in md


def test_plan_prices_the_engine_the_user_serves(cli):
    """Issue 54: --serving (engine.serving) picks the host-cost profile of that engine's release, by the release rule
    where it has no fit of its own; the plan names it, the rule and every term's source."""
    args = ("plan", "--target", "llama-3.1-8b-instruct", "--gpu", "h100", "--batch-sizes", "1,16", "--json",
            "--no-compare")
    trt = json.loads(cli(*args).stdout)
    assert trt["host_costs"]["framework"] == "TensorRT-LLM" and trt["host_costs"]["rule"]["base_release"] == "0.20-1.0rc"
    r = cli(*args, "--serving", "vllm:0.10.2")
    assert r.exit_code == 0, r.output
    vllm = json.loads(r.stdout)
    hc = vllm["host_costs"]
    assert (hc["framework"], hc["release"], hc["rule"]["base_release"]) == ("vLLM", "0.10.2", "0.8.5")
    assert vllm["uncertainty"]["rule"]["base"] == "vllm-0.8.5"
    src = {t["term"]: t["source"] for t in vllm["step_terms"]}
    assert "by the release rule from vllm-0.8.5" in src["iteration_s"]
    assert "no per-sequence measurements" in src["sequence_s"]  # vLLM's fit has no batch sweep
    assert vllm["uncertainty"]["host_sd_s"]["sequence_s"] > 0
    sgl = json.loads(cli(*args, "--serving", "sglang:0.5.2").stdout)
    src = {t["term"]: t["source"] for t in sgl["step_terms"]}
    assert "no per-sequence" not in src["spec_sequence_s"] and sgl["step_terms"][4]["value_s"] > 0  # fitted
    assert sgl["uncertainty"]["host_sd_s"] == {}
    assert {c["speedup"] for c in vllm["candidates"]} != {c["speedup"] for c in trt["candidates"]}
