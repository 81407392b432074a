"""trtllm-spec build / verify / triton on tiny targets (and presets, whose GPU stages are deferred)."""

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import RECIPES


def _recipe(tmp_path: Path, target: Path, drafter: dict, **extra) -> Path:
    data = {"name": "tiny-build", "target": {"model": str(target)}, "drafter": drafter,
            "hardware": {"gpu": "l40s"}, "workload": {"batch_sizes": [1, 8], "isl": 64, "osl": 32},
            "planner": {"max_draft_len": 4},
            "measure": {"num_prompts": 1, "max_new_tokens": 12, "categories": ["coding"]}} | extra
    p = tmp_path / "tiny-build.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_build_ngram_bundle_verify_and_rebuild(cli, tmp_path, tiny_target, tiny_suite, cache):
    # D is fixed, so the bundle carries speculation whatever the planner predicts for this toy
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"}, draft_len=3)
    out = tmp_path / "bundle"
    r = cli("build", recipe, "--out", out)
    assert r.exit_code == 0, r.output
    for f in ("llm_api_options.yaml", "serve.sh", "bench.sh", "dataset.jsonl", "manifest.json", "recipe.resolved.yaml",
              "report/overhead.md", "report/overhead.json", "report/plan.json", "report/measured/speculation_profile.json",
              "triton/tensorrt_llm/config.pbtxt", "triton/tensorrt_llm/1/model.yaml", "target/config.json"):
        assert (out / f).is_file(), f
    opts = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    assert opts["speculative_config"]["decoding_type"] == "NGram"
    manifest = json.loads((out / "manifest.json").read_text())
    statuses = {s["name"]: s["status"] for s in manifest["stages"]}
    assert statuses["measure"] == "done" and statuses["trtllm"] == "deferred" and statuses["drafter"] == "skipped"
    assert next(s for s in manifest["stages"] if s["name"] == "trtllm")["command"]
    assert manifest["planner_inputs"]["acceptance"] == "measured"
    text = "\n".join(p.read_text(errors="ignore") for p in out.rglob("*") if p.suffix in (".sh", ".yaml", ".json", ".pbtxt"))
    assert str(tmp_path) not in text, "bundles carry no absolute paths of the build machine"
    assert cli("verify", out).exit_code == 0
    # stage 6 writes the bundle and builds no engine: it is named 'bundle'; a manifest written before the rename
    # (stage 'engine') still verifies and reads (stage names are a record: core.bundle reads none)
    assert statuses["bundle"] == "done" and "engine" not in statuses
    from trtllm_spec.core.bundle import read_bundle

    old = dict(manifest, stages=[dict(s, name="engine") if s["name"] == "bundle" else s for s in manifest["stages"]])
    (out / "manifest.json").write_text(json.dumps(old, indent=2))
    assert cli("verify", out).exit_code == 0 and read_bundle(out).profile == manifest["trtllm_profile"]
    # a second build into the same folder needs --overwrite (cached stages reused) or --force
    r = cli("build", recipe, "--out", out)
    assert r.exit_code == 2 and "--overwrite" in r.output
    r = cli("build", recipe, "--out", out, "--overwrite")
    assert r.exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert {s["name"]: s["status"] for s in manifest["stages"]}["measure"] == "cached"
    (out / "serve.sh").write_text("tampered")
    r = cli("verify", out)
    assert r.exit_code == 1 and "changed: serve.sh" in r.output


def test_build_auto_recommends_no_speculation_when_it_does_not_pay(cli, tmp_path, tiny_target, tiny_suite, cache):
    # the toy's measured n-gram AL (~1.67 at D=2) pays under the fitted host costs; a speculative iteration that
    # costs 5 ms more than a plain one (hardware.overrides) cannot, whatever the toy accepts
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"},
                     hardware={"gpu": "l40s", "overrides": {"overheads": {"spec_iteration_s": 0.005}}})
    out = tmp_path / "bundle"
    r = cli("build", recipe, "--out", out)
    assert r.exit_code == 0, r.output
    opts = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    assert "speculative_config" not in opts
    md = (out / "report/overhead.md").read_text()
    assert "No speculation recommended" in md and "bench_speculative.sh" in md
    # the drafter at its best predicted D stays one command away, for checking the prediction on the GPU
    alt = yaml.safe_load((out / "llm_api_options.speculative.yaml").read_text())
    assert alt["speculative_config"]["decoding_type"] == "NGram"
    assert alt["speculative_config"]["max_draft_len"] in (2, 3, 4)
    assert "llm_api_options.speculative.yaml" in (out / "bench_speculative.sh").read_text()
    assert cli("verify", out).exit_code == 0


def test_build_eagle3_trains_and_bundles_the_drafter(cli, tmp_path, tiny_target, tiny_suite, cache):
    from tests.tiny import write_conversations

    data = write_conversations(tmp_path / "c.jsonl", 16)
    drafter = {"type": "eagle3", "draft_vocab_size": 64, "training": {
        "max_steps": 2, "batch_size": 2, "seq_len": 64, "precision": "fp32", "checkpoint_every": 2,
        "data": {"path": str(data), "eval_fraction": 0.25}}}
    out = tmp_path / "bundle"
    r = cli("build", _recipe(tmp_path, tiny_target, drafter, draft_len=2), "--out", out)
    assert r.exit_code == 0, r.output
    spec = yaml.safe_load((out / "llm_api_options.yaml").read_text())["speculative_config"]
    # auto: the 1.3 form (the newest stable release, core/releases.auto_release)
    assert spec["decoding_type"] == "Eagle3" and spec["speculative_model"] == "drafter"
    assert json.loads((out / "manifest.json").read_text())["trtllm_profile"] == "1.3"
    assert (out / "drafter/config.json").is_file() and (out / "drafter/model.safetensors").is_file()
    from safetensors import safe_open

    with safe_open(str(out / "drafter/model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert "midlayer.self_attn.q_proj.weight" in names and not any(n.startswith("layers.") for n in names)
    r = cli("doctor", out / "drafter", "--target", out / "target")
    assert r.exit_code == 0, r.output
    r = cli("triton", out, "--out", tmp_path / "repo")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "repo/tensorrt_llm/config.pbtxt").is_file()


def test_build_gpu_recipe_defers_what_needs_the_gpu(cli, tmp_path, cache):
    out = tmp_path / "b"
    r = cli("build", RECIPES / "llama-3.3-70b-eagle3-h200-tp4.yaml", "--out", out)
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    st = {s["name"]: s for s in manifest["stages"]}
    assert st["drafter"]["status"] == "deferred" and "trtllm-spec train" in st["drafter"]["command"]
    assert st["measure"]["status"] == "deferred" and manifest["planner_inputs"]["acceptance"] == "assumed"
    opts = yaml.safe_load((out / "llm_api_options.yaml").read_text())
    assert opts["tensor_parallel_size"] == 4 and opts["speculative_config"]["speculative_model"] == "drafter"  # 1.3
    assert (out / "slurm_train.sbatch").is_file()  # FSDP drafter training on the cluster
    assert "--nnodes 2 " in (out / "train_torchrun.sh").read_text()  # the same launch, without SLURM
    assert not (out / "target").exists()  # 70B is referenced by HF id, not copied
    assert "meta-llama/Llama-3.3-70B-Instruct" in (out / "serve.sh").read_text()


def test_concurrent_builds_are_locked(tmp_path, cache):
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.errors import UserError
    from trtllm_spec.stages.pipeline import build_lock, run_build

    out = tmp_path / "b"
    recipe_file = RECIPES / "qwen3-8b-ngram-h100.yaml"
    with build_lock(out), pytest.raises(UserError, match="another build is writing"):
        run_build(load_recipe(recipe_file), recipe_file, out, log=lambda m: None)
    assert not out.exists()


def test_build_bad_inputs(cli, tmp_path, tiny_target, cache):
    r = cli("build", _recipe(tmp_path, tiny_target, {"type": "ngram"}, quantization={"method": "int4_awq"}),
            "--out", tmp_path / "o")
    assert r.exit_code == 2 and "hidden size >= 128" in r.output and not (tmp_path / "o").exists()
    r = cli("build", _recipe(tmp_path, tiny_target, {"type": "dflash"}, engine={"trtllm_version": "1.2"}),
            "--out", tmp_path / "o")
    assert r.exit_code == 2 and "1.3" in r.output
    r = cli("verify", tmp_path)
    assert r.exit_code == 2 and "manifest" in r.output


def test_build_without_out_writes_output_dir(cli, tmp_path, tiny_target, tiny_suite, cache, monkeypatch):
    """recipe output.dir (relative to the recipe file) is where build writes when --out is not given."""
    monkeypatch.chdir(tmp_path)
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"}, draft_len=2, output={"dir": "bundles/here"},
                     measure={"profile": None, "num_prompts": 1, "max_new_tokens": 6, "categories": ["coding"]})
    r = cli("build", recipe)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "bundles" / "here" / "manifest.json").is_file() and not (tmp_path / "out").exists()


def test_build_summary_says_what_was_measured_and_for_which_gpu(cli, tmp_path, tiny_target, tiny_suite, cache):
    recipe = _recipe(tmp_path, tiny_target, {"type": "ngram"}, draft_len=3)
    r = cli("build", recipe, "--out", tmp_path / "bundle")
    assert r.exit_code == 0, r.output
    err = r.stderr
    assert err.splitlines()[0].startswith("planning for GPU l40s") and "--set hardware.gpu=NAME" in err.splitlines()[0]
    measured = next(ln for ln in err.splitlines() if ln.startswith("Measured here:"))
    assert "ngram at D=3 accepts AL" in measured and "per category: coding" in measured and "this machine" in measured
    assert "Planned for: NVIDIA L40S" in err and "'trtllm-spec hw list'" in err
    assert "Recommended: ngram, max_draft_len 3" in err
    assert "It would pay at batch 1 on l40s from AL" in err or "It pays up to batch" in err


def test_needed_acceptance_is_the_break_even_of_the_planners_speedup():
    from trtllm_spec.report.summary import needed_acceptance

    assert needed_acceptance({"acceptance_length": 1.5, "speedup": 0.75}) == 2.0
    assert needed_acceptance({"acceptance_length": 1.5, "speedup": 0}) is None


def test_guideline_5_ranks_measured_acceptance_above_assumed(cli, tmp_path):
    """An assumed AL (the fastest assumed mechanism's: DFlash2's, from 1.4) is named after the measured winner with
    the release it needs and marked, never ranked above it."""
    acc = tmp_path / "acc.json"
    acc.write_text(json.dumps({"acceptance_length": {"1": 1.5, "2": 1.8, "3": 2.0}}))
    r = cli("plan", "--target", "llama-3.1-8b-instruct", "--gpu", "h100-sxm", "--drafter", "eagle3", "--acceptance",
            acc, "--batch-sizes", "1,8", "--json")
    assert r.exit_code == 0, r.output
    g5 = json.loads(r.stdout)["guidelines"][4]
    assert g5["details"]["best_mechanism"] == "eagle3"
    assert g5["reason"].startswith("at B=1 the fastest with measured acceptance is eagle3")
    assert "with assumed acceptance (not measured here) dflash2 (TensorRT-LLM 1.4+) at D=" in g5["reason"]
    assert "assumed)" in g5["reason"]
