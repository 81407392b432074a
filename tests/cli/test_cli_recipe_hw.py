import json

import yaml

from tests.conftest import RECIPES


def test_recipe_validate_ok(cli):
    r = cli("recipe", "validate", *sorted(RECIPES.glob("*.yaml")))
    assert r.exit_code == 0, r.output
    assert r.output.count("ok: ") == len(list(RECIPES.glob("*.yaml")))


def test_recipe_validate_bad(cli, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("target: {model: qwen3-8b}\ndrafter: {type: eagle3}\nworkload: {isl: -3}\n")
    r = cli("recipe", "validate", p)
    assert r.exit_code == 2 and "workload.isl" in r.output and "Traceback" not in r.output


def test_recipe_validate_resolves_target(cli, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("target: {model: ./missing-model}\ndrafter: {type: ngram}\n")
    r = cli("recipe", "validate", p)
    assert r.exit_code == 2 and "does not exist" in r.output


def test_recipe_show_resolves_defaults_and_set(cli):
    r = cli("recipe", "show", RECIPES / "qwen3-8b-dflash-b200.yaml", "--set", "drafter.block_size=8",
            "--set", "planner.max_draft_len=7")
    assert r.exit_code == 0, r.output
    data = yaml.safe_load(r.output)
    assert data["drafter"]["block_size"] == 8 and data["workload"]["isl"] == 1024  # from base/gpu-serving.yaml
    assert "extends" not in data
    r = cli("recipe", "show", RECIPES / "qwen3-8b-ngram-h100.yaml", "--json")
    assert json.loads(r.output)["drafter"]["type"] == "ngram"


def test_hw_list_and_show(cli):
    r = cli("hw", "list")
    assert r.exit_code == 0 and "h200" in r.output and "l40s" in r.output
    r = cli("hw", "show", "B200")
    assert json.loads(r.output)["peak_flops_per_s"]["fp4"] == 9e15
    r = cli("hw", "show", "nope")
    assert r.exit_code == 2 and "unknown GPU" in r.output


def test_hw_probe_at_target_shapes(cli, tmp_path, tiny_target):
    """--target: the GEMM curve comes from the target's own linear layers, and plan reads it."""
    out = tmp_path / "cpu-target.json"
    r = cli("hw", "probe", "--out", out, "--quick", "--device", "cpu", "--target", tiny_target)
    assert r.exit_code == 0, r.output
    hw = json.loads(out.read_text())
    shapes = hw["probe"]["gemm_shapes"]
    cfg = json.loads((tiny_target / "config.json").read_text())
    assert shapes["layers"] == cfg["num_hidden_layers"] and shapes["lm_head"] == [cfg["vocab_size"], cfg["hidden_size"]]
    assert hw["probe"]["gemm_k_n"] is None and "shapes" in hw["description"]
    assert sorted(int(m) for m in hw["gemm_flops_by_m"]["fp32"]) == [1, 2, 4, 8, 64]
    r = cli("plan", "--target", tiny_target, "--drafter", "ngram", "--gpu", out, "--batch-sizes", "1", "--json",
            "--no-compare")
    assert r.exit_code == 0, r.output


def test_hw_probe_quick_feeds_plan(cli, tmp_path):
    out = tmp_path / "cpu.json"
    r = cli("hw", "probe", "--out", out, "--quick", "--device", "cpu")
    assert r.exit_code == 0, r.output
    hw = json.loads(out.read_text())
    assert hw["kind"] == "cpu" and hw["gemm_flops_by_m"]["fp32"] and hw["mem_bytes_per_s"] > 1e9
    assert hw["overheads"]["per_layer_s"] > 0
    r = cli("plan", "--target", "smollm2-135m", "--drafter", "ngram", "--gpu", out, "--batch-sizes", "1",
            "--json", "--no-compare")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["precision"]["weights"] in ("fp32", "bf16") and plan["hardware"]["kind"] == "cpu"
    r = cli("hw", "probe", "--out", out, "--quick")
    assert r.exit_code == 2 and "--force" in r.output


def test_version_and_help(cli):
    assert cli("--version").exit_code == 0
    r = cli("--help")
    for cmd in ("plan", "recipe", "hw"):
        assert cmd in r.output


def test_recipe_validate_refuses_a_measure_draft_len_below_the_bundles(cli, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("target: {model: qwen3-8b}\ndrafter: {type: eagle3}\ndraft_len: 4\nmeasure: {draft_len: 2}\n")
    r = cli("recipe", "validate", p)
    assert r.exit_code == 2 and "measure.draft_len = 2 is below draft_len = 4" in r.output
    assert "Traceback" not in r.output


def test_hw_probe_on_a_machine_too_busy_to_time_layers_is_one_line_and_writes_nothing(cli, tmp_path, monkeypatch):
    from trtllm_spec.runtime import probe

    monkeypatch.setattr(probe, "_timeit_interleaved", lambda *a, **k: (2e-4, 2e-4))  # 8 layers never slower
    out = tmp_path / "cpu.json"
    r = cli("hw", "probe", "--out", out, "--quick", "--device", "cpu")
    assert r.exit_code == 2 and "too busy to measure a per-layer cost" in r.output and "Traceback" not in r.output
    assert not out.exists()
