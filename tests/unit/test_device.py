"""The one device + precision rule (runtime/device.py), the launch checks (train/distributed.py) and
``train --dry-run`` (train/launch.py). GPUs are fakes here (this machine has none), built from torch's
documented ``torch.cuda`` calls the rule makes."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import RECIPES, REPO
from trtllm_spec.errors import UserError
from trtllm_spec.runtime import device as dv


def fake_torch(cuda: bool, bf16: bool = True, name: str = "FakeGPU"):
    """A fake of the torch.cuda calls the rule makes (named a fake: no GPU exists here)."""
    return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: cuda, is_bf16_supported=lambda: bf16,
                                                get_device_name=lambda i=0: name),
                           backends=SimpleNamespace(cpu=SimpleNamespace(get_cpu_capability=lambda: "AVX2")))


def test_device_auto_and_cuda_refusal():
    assert dv.resolve_device(fake_torch(False), "auto") == "cpu"
    assert dv.resolve_device(fake_torch(True), "auto") == "cuda"
    with pytest.raises(UserError, match="--device cuda: no CUDA device"):
        dv.resolve_device(fake_torch(False), "cuda")
    with pytest.raises(UserError, match="choose auto, cpu or cuda"):
        dv.resolve_device(fake_torch(False), "tpu")


def test_cpu_dtype_follows_the_timed_gemm():
    def never():
        pytest.fail("fp32 needs no timing")

    def slow():  # the AVX2-only EPYC of docs/training.md
        return 0.8, 71.0

    def fast():  # AVX512-BF16 / AMX
        return 2.0, 1.0

    t = fake_torch(False)
    assert dv.resolve_dtype(t, "cpu", "fp32", timing=never) == ("fp32", "requested")
    dt, why = dv.resolve_dtype(t, "cpu", "auto", timing=slow)
    assert dt == "fp32" and "bf16 GEMM 71.00 ms vs fp32 0.80 ms" in why and "AVX2" in why
    assert dv.resolve_dtype(t, "cpu", "auto", timing=fast)[0] == "bf16"
    assert dv.resolve_dtype(t, "cpu", "bf16", timing=slow)[0] == "bf16"  # asked for: run, with the numbers


def test_cuda_dtype_and_unsupported_bf16():
    assert dv.resolve_dtype(fake_torch(True), "cuda", "auto")[0] == "bf16"
    assert dv.resolve_dtype(fake_torch(True, bf16=False), "cuda", "auto")[0] == "fp32"
    with pytest.raises(UserError, match="--dtype bf16: OldGPU has no bf16 support; use --dtype fp32"):
        dv.resolve_dtype(fake_torch(True, bf16=False, name="OldGPU"), "cuda", "bf16")
    with pytest.raises(UserError, match="choose auto, bf16 or fp32"):
        dv.resolve_dtype(fake_torch(True), "cuda", "fp8")


def test_real_cpu_choice_is_the_measured_one_and_cached():
    import torch

    dv.cpu_bf16_timing.cache_clear()
    p = dv.choose("cpu", "auto", torch)
    fp32_ms, bf16_ms = dv.cpu_bf16_timing()
    assert dv.cpu_bf16_timing.cache_info().hits >= 1  # measured once per process
    assert p.dtype == ("bf16" if bf16_ms < 0.8 * fp32_ms else "fp32")
    assert p.as_dict()["device"] == "cpu" and p.as_dict()["requested_dtype"] == "auto"


# ---- launch checks -----------------------------------------------------------------------------------------------

def dc(strategy="none", nproc=1, nnodes=1):
    from trtllm_spec.core.recipe import DistributedConfig

    return DistributedConfig(strategy=strategy, nproc_per_node=nproc, nnodes=nnodes)


def env(world, local=None, rank=0):
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(local or world)}


def test_check_launch():
    from trtllm_spec.train.distributed import check_launch

    check_launch(dc(), "cpu", {})
    check_launch(dc("fsdp", 2), "cpu", env(2))
    check_launch(dc("ddp", 8, 2), "cuda", env(16, 8), cuda_count=8)
    bad = [(dc("fsdp", 2), "cpu", {}, 0, "strategy fsdp with one process"),
           (dc("none", 1, 2), "cpu", {}, 0, "nnodes 2: a multi-node run needs a launcher"),
           (dc("ddp", 2), "cuda", env(2), 1, "nproc_per_node 2: only 1 GPU(s) visible"),
           (dc("ddp", 8), "cpu", env(2), 0, "asks for 1 node(s) x 8 processes, the launcher started 2"),
           (dc("none"), "cpu", env(2), 0, "strategy none, but the launcher started 2 processes")]
    for cfg, device, e, gpus, message in bad:
        with pytest.raises(UserError, match=re.escape(message)):
            check_launch(cfg, device, e, gpus)


def test_resume_refusal_names_both_launches(tmp_path):
    from trtllm_spec.train.distributed import check_resume

    check_resume({"strategy": "fsdp", "world_size": 2}, tmp_path, "fsdp", 2)
    check_resume({}, tmp_path, "none", 1)  # checkpoints from before strategy was recorded
    with pytest.raises(UserError, match="strategy ddp on 4 process.*this run is ddp on 2.*not supported"):
        check_resume({"strategy": "ddp", "world_size": 4}, tmp_path, "ddp", 2)


# ---- --dry-run ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("recipe, expect", [
    ("llama-3.1-8b-eagle3-h100.yaml", ["torchrun --standalone --nproc_per_node 8", "strategy ddp", "world 8"]),
    ("llama-3.3-70b-eagle3-h200-tp4.yaml", ["--nnodes 2 --rdzv_backend c10d", "strategy fsdp", "world 16",
                                            "/ 16 (fsdp)", "DOES NOT FIT on one h200"]),
    ("smollm2-135m-eagle3-cpu.yaml", ["python -m trtllm_spec train", "strategy none", "world 1"]),
])
def test_dry_run_prints_the_launch_without_torch(recipe, expect):
    code = ("import sys; from click.testing import CliRunner; from trtllm_spec.cli import main; "
            f"r = CliRunner().invoke(main, ['train', {str(RECIPES / recipe)!r}, '--dry-run']); print(r.output); "
            "assert r.exit_code == 0, r.output; assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    for e in expect:
        assert e in r.stdout, r.stdout
    assert "memory per rank (estimate" in r.stdout and "AdamW" in r.stdout


def test_estimate_shards_under_fsdp():
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.train.launch import estimate

    r = load_recipe(RECIPES / "llama-3.3-70b-eagle3-h200-tp4.yaml")
    shape = resolve_target(r.target.model, r.base_dir).shape
    one = estimate(load_recipe(RECIPES / "llama-3.3-70b-eagle3-h200-tp4.yaml",
                               ("drafter.training.distributed.strategy=ddp",)), shape)
    sharded = estimate(r, shape)
    assert sharded["drafter_states"] == pytest.approx(one["drafter_states"] / 16)
    assert sharded["target_weights"] == pytest.approx(one["target_weights"] / 16)
    assert 0.5e9 < sharded["drafter_params"] * 1.0 < 3e9  # 1-layer EAGLE-3 head of a 70B with a 32k vocabulary


def test_regenerate_records_and_prints_its_placement(cli, tiny_target, tiny_suite, tmp_path):
    import json

    import yaml

    r = tmp_path / "r.yaml"
    r.write_text(yaml.safe_dump({"name": "t", "target": {"model": str(tiny_target)}, "drafter": {
        "type": "eagle3", "training": {"data": {"num_conversations": 2, "regen_max_new_tokens": 4}}}}))
    out = tmp_path / "d" / "c.jsonl"
    res = cli("data", "regenerate", r, "--out", out, "--device", "cpu", "--dtype", "fp32")
    assert res.exit_code == 0, res.output
    assert "(cpu, fp32)" in res.output and "regenerate: device cpu, fp32 (requested)" in res.output
    prov = json.loads((tmp_path / "d" / "c.provenance.json").read_text())
    assert prov["placement"]["device"] == "cpu" and prov["placement"]["dtype"] == "fp32"
    assert prov["generated_tokens"] > 0 and prov["inputs"]


def _cli_wait_policy(env_value):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_value or {})
    code = ("import os, sys; from trtllm_spec.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()[-3:]


def test_cli_makes_idle_openmp_threads_spin_briefly_unless_the_user_chose():
    # set before torch loads (libgomp reads it once); a policy or spin count the user set is kept
    assert _cli_wait_policy(None) == ["None", "10000", "False"]
    assert _cli_wait_policy({"OMP_WAIT_POLICY": "ACTIVE"}) == ["ACTIVE", "None", "False"]
    assert _cli_wait_policy({"GOMP_SPINCOUNT": "300000"}) == ["None", "300000", "False"]


def test_the_training_estimate_comes_from_each_descriptor():
    """train/launch.py asks the drafter's descriptor (no branch on drafter type): EAGLE-3 fuses 3 captured hidden
    states, the EAGLE-MTP head 2 (h x h fewer parameters), DFlash its target layers and draft layers without an
    lm_head; TTT steps, offline features and the SaveState layers are the EAGLE-3 head's alone."""
    from trtllm_spec.core.targets import resolve_shape
    from trtllm_spec.drafters.dflash.config import DFlashDrafter
    from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
    from trtllm_spec.drafters.eagle_mtp.config import EagleMTPDrafter
    from trtllm_spec.drafters.registry import get

    shape = resolve_shape("llama-3.1-8b-instruct")
    h = shape.hidden_size
    e, m, f = Eagle3Drafter(), EagleMTPDrafter(), DFlashDrafter()
    assert get("eagle3").trainable_params(e, shape) - get("eagle_mtp").trainable_params(m, shape) == h * h
    assert 0 < get("dflash").trainable_params(f, shape) < get("eagle3").trainable_params(e, shape)
    assert get("eagle3").kept_logit_passes(e) == 3 and get("dflash").kept_logit_passes(f) == 1
    assert get("eagle3").savestate_layers(e, {"num_hidden_layers": 32}) == [1, 15, 28]  # default_capture_layers
    assert get("dflash").savestate_layers(f, {"num_hidden_layers": 32}) is None
    with pytest.raises(NotImplementedError):
        get("ngram").trainable_params(None, shape)
