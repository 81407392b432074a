"""Data-parallel training under ``torchrun`` (2 processes, gloo on CPU) on the tiny target.

The proof that the ranks read different micro-batches *and* that DDP averages their gradients: with batch B per
rank, 2 ranks and grad_accum 1, rank r reads exactly the chunks that micro-batch r of a single process with
grad_accum 2 reads, and DDP's mean of the two ranks' gradients is the single process's accumulated
``g0 / 2 + g1 / 2``. So the two runs must end on the same weights (EAGLE-3 training draws no random numbers).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import REPO
from tests.tiny import write_conversations

TORCHRUN = Path(sys.executable).with_name("torchrun")


def _recipe(folder: Path, target: Path, data: Path, drafter: dict, **training) -> Path:
    t = {"max_steps": 3, "batch_size": 2, "seq_len": 64, "lr": 3e-3, "warmup_steps": 1, "checkpoint_every": 2,
         "precision": "fp32", "data": {"path": str(data), "eval_fraction": 0.25},
         "distributed": {"strategy": "ddp", "nproc_per_node": 2}} | training
    path = folder / f"recipe-{len(list(folder.glob('recipe-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny-ddp", "target": {"model": str(target)},
                                    "drafter": drafter | {"training": t}}))
    return path


def _torchrun(recipe: Path, out: Path, *extra: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                        "OMP_NUM_THREADS": "1"}
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", "-m", "trtllm_spec", "train", str(recipe),
           "--out", str(out), *extra]
    r = subprocess.run(cmd, cwd=recipe.parent, env=env, capture_output=True, text=True, timeout=300)
    assert (r.returncode == 0) == ok, r.stdout[-3000:] + r.stderr[-6000:]
    return r


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


pytestmark = pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed next to python")


@pytest.fixture(scope="module")
def convs(tmp_path_factory):
    return write_conversations(tmp_path_factory.mktemp("data") / "c.jsonl", 24)


EAGLE = {"type": "eagle3", "num_layers": 1, "draft_vocab_size": 64}
ONE = {"strategy": "none", "nproc_per_node": 1}


@pytest.fixture(scope="module")
def ddp_run(tiny_target, convs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    out = folder / "train"
    # a time budget far beyond the run: every step then joins the broadcast of rank 0's clock (the learning rate
    # follows it), which must neither hang nor move the rate measurably (compared with one process below)
    r = _torchrun(_recipe(folder, tiny_target, convs, EAGLE, time_budget_minutes=1e5), out)
    return out, r


def test_torchrun_trains_and_exports_once(ddp_run, convs):
    out, r = ddp_run
    cfg = json.loads((out / "drafter" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and (out / "drafter" / "model.safetensors").is_file()
    log = _log(out)
    assert [rec["step"] for rec in log] == [1, 2, 3]  # one line per step, not one per rank
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 3 and summary["tokens"] == log[-1]["tokens"]
    assert r.stderr.count("ddp: 2 ranks (cpu:gloo)") == 1  # only rank 0 speaks
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest", "step-0000002", "step-0000003"]
    if summary["offline_features"]:  # each rank captured its own half of the features, every rank read them all
        # data.path is given: features/ sits next to those conversations (train.run.features_folder)
        halves = [json.loads((convs.parent / "features" / f"index-{r}-of-2.json").read_text()) for r in (0, 1)]
        assert len(halves[0]["conversations"]) + len(halves[1]["conversations"]) == summary["conversations"]


def test_ranks_read_their_own_shards(ddp_run, tiny_target, convs):
    """rank_tokens (what each rank's micro-batches held) are the Schedule's shards, and they differ."""
    from trtllm_spec.data.chat import load_tokenizer
    from trtllm_spec.data.regenerate import read_done
    from trtllm_spec.train.run import prepare_samples
    from trtllm_spec.train.samples import Schedule

    out, _ = ddp_run
    tok = load_tokenizer(tiny_target)
    chunks, *_ = prepare_samples(tok, list(read_done(convs).values()), 64, 0.25, tok.pad_token_id)
    shards = [Schedule(chunks, 2, 1, 0, rank=r, world=2) for r in (0, 1)]
    total = 0
    for step, rec in enumerate(_log(out)):
        expected = [int(s.micro_batch(step, 0)[2].sum()) for s in shards]
        assert rec["rank_tokens"] == expected
        total += sum(expected)
        assert rec["tokens"] == total
    assert any(a != b for a, b in (rec["rank_tokens"] for rec in _log(out)))


def test_ddp_equals_single_process_accumulation(ddp_run, tiny_target, convs, tmp_path):
    """2 ranks x grad_accum 1 == 1 process x grad_accum 2 (same chunks, gradients averaged): same weights."""
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.stages.drafter import run_train

    out, _ = ddp_run
    single = tmp_path / "single"
    res = run_train(load_recipe(_recipe(tmp_path, tiny_target, convs, EAGLE, grad_accum=2, time_budget_minutes=1e5,
                                     distributed=ONE)),
                    single, log=lambda m: None)
    a = _weights(out / "checkpoints" / "step-0000003" / "trainable.safetensors")
    b = _weights(single / "checkpoints" / "step-0000003" / "trainable.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)
    for x, y in zip(_log(out), _log(single), strict=True):
        assert x["tokens"] == y["tokens"] and x["loss"] == pytest.approx(y["loss"], rel=1e-5)
    assert json.loads((out / "train_summary.json").read_text())["heldout_acc"] == \
        pytest.approx(res.summary["heldout_acc"], abs=1e-3)


@pytest.mark.slow
def test_ddp_resume_equals_uninterrupted(tiny_target, convs, tmp_path):
    """Rank 0 checkpoints (with every rank's RNG state: DFlash samples anchors), every rank loads."""
    dflash = {"type": "dflash", "num_layers": 2, "block_size": 4, "mask_token": 3}
    recipe = _recipe(tmp_path, tiny_target, convs, dflash, max_steps=4)
    _torchrun(recipe, tmp_path / "a")
    _torchrun(recipe, tmp_path / "b", "--max-steps", "2")
    r = _torchrun(recipe, tmp_path / "b", "--resume")
    assert "resumed at step 2" in r.stderr
    a, b = (_weights(tmp_path / x / "drafter" / "model.safetensors") for x in "ab")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [x["loss"] for x in _log(tmp_path / "a")] == [x["loss"] for x in _log(tmp_path / "b")]


# ---- FSDP2 (torch.distributed.fsdp.fully_shard) ----------------------------------------------------------------
FSDP = {"strategy": "fsdp", "nproc_per_node": 2}
# FSDP reduce-scatters what DDP all-reduces: the same mean gradient, summed in another order. Stated tolerance
# for the same 3 steps: loss within 1e-5 relative, weights within 1e-5 absolute (measured: see the report).
LOSS_RTOL, WEIGHT_ATOL = 1e-5, 1e-5


@pytest.fixture(scope="module")
def fsdp_run(tiny_target, convs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp")
    out = folder / "train"
    r = _torchrun(_recipe(folder, tiny_target, convs, EAGLE, time_budget_minutes=1e5, distributed=FSDP), out)
    return out, r


def test_fsdp_shards_the_drafter(fsdp_run, ddp_run):
    out, r = fsdp_run
    log = _log(out)
    total = sum(p.numel() for p in _weights(out / "checkpoints" / "step-0000003" / "trainable.safetensors").values())
    for rec in log:
        assert rec["strategy"] == "fsdp" and rec["world_size"] == 2
        per_rank = rec["trainable_params_per_rank"]
        assert len(per_rank) == 2 and sum(per_rank) >= total  # FSDP pads a shard to an even split
        assert all(abs(n - total / 2) <= 0.05 * total for n in per_rank)  # each rank holds about half
    ddp = _log(ddp_run[0])[0]
    assert ddp["strategy"] == "ddp" and ddp["trainable_params_per_rank"] == [total, total]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["strategy"] == "fsdp" and summary["trainable_params_per_rank"] == log[0]["trainable_params_per_rank"]
    assert r.stderr.count("fsdp: 2 ranks (cpu:gloo)") == 1


def test_fsdp_matches_ddp(fsdp_run, ddp_run):
    """Same data, same mean gradients: loss per step and final weights within the stated tolerance."""
    f, d = _log(fsdp_run[0]), _log(ddp_run[0])
    for x, y in zip(f, d, strict=True):
        assert x["tokens"] == y["tokens"] and x["rank_tokens"] == y["rank_tokens"]
        assert x["loss"] == pytest.approx(y["loss"], rel=LOSS_RTOL)
        assert x["train_acc"] == pytest.approx(y["train_acc"], abs=1e-6)
    a = _weights(fsdp_run[0] / "checkpoints" / "step-0000003" / "trainable.safetensors")
    b = _weights(ddp_run[0] / "checkpoints" / "step-0000003" / "trainable.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=WEIGHT_ATOL) for k in a)
    # the export gathers the shards: the same drafter file as DDP's
    ea, eb = (_weights(x[0] / "drafter" / "model.safetensors") for x in (fsdp_run, ddp_run))
    assert ea.keys() == eb.keys() and all(torch.allclose(ea[k].float(), eb[k].float(), atol=1e-2) for k in ea)
    sf, sd = (json.loads((x[0] / "train_summary.json").read_text()) for x in (fsdp_run, ddp_run))
    assert sf["heldout_acc"] == pytest.approx(sd["heldout_acc"], abs=1e-3)


def test_fsdp_resume_equals_uninterrupted(fsdp_run, tiny_target, convs, tmp_path):
    """Full-tensor checkpoints (parameters + DCP's full optimizer state) resume exactly under FSDP."""
    recipe = _recipe(tmp_path, tiny_target, convs, EAGLE, time_budget_minutes=1e5, distributed=FSDP)
    _torchrun(recipe, tmp_path / "b", "--max-steps", "2")
    r = _torchrun(recipe, tmp_path / "b", "--resume")
    assert "resumed at step 2" in r.stderr
    a = _weights(fsdp_run[0] / "checkpoints" / "step-0000003" / "trainable.safetensors")
    b = _weights(tmp_path / "b" / "checkpoints" / "step-0000003" / "trainable.safetensors")
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in a)
    assert [x["loss"] for x in _log(fsdp_run[0])] == pytest.approx([x["loss"] for x in _log(tmp_path / "b")],
                                                                   rel=1e-6)


def test_resume_across_strategy_is_refused(ddp_run, tiny_target, convs, tmp_path):
    """A DDP checkpoint resumed under FSDP: exit 2, one line naming both launches; nothing is written."""
    import shutil

    out = tmp_path / "train"
    shutil.copytree(ddp_run[0], out)
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    r = _torchrun(_recipe(tmp_path, tiny_target, convs, EAGLE, max_steps=4, distributed=FSDP), out, "--resume",
                  ok=False)
    assert "error: --resume: checkpoint" in r.stderr and "strategy ddp on 2 process(es)" in r.stderr
    assert "this run is fsdp on 2" in r.stderr and "exitcode  : 2" in r.stderr  # our clean exit 2 (torchrun's
    # own report of a failed child follows it)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before


def test_launch_must_match_the_recipe(tiny_target, convs, tmp_path):
    """strategy none under a 2-process launch is refused, never run as DDP."""
    r = _torchrun(_recipe(tmp_path, tiny_target, convs, EAGLE, distributed=ONE), tmp_path / "x", ok=False)
    assert "distributed.strategy none, but the launcher started 2 processes" in r.stderr
    assert "exitcode  : 2" in r.stderr
    assert not (tmp_path / "x").exists()


def test_error_with_a_process_group_up_skips_interpreter_teardown(tmp_path):
    """A rank that fails while its gloo group is still up ends with ``os._exit`` after its one-line error (an
    interpreter teardown with the group up sometimes aborted with SIGABRT, which torchrun reported instead of
    our exit 2): exit 2, the message, and no atexit handler ran. Without a group, or in a process no launcher
    started, the exit is the ordinary one."""
    script = tmp_path / "rank.py"
    script.write_text(
        "import atexit, sys\n"
        "import torch.distributed as tdist\n"
        "atexit.register(lambda: print('teardown ran', file=sys.stderr))\n"
        "if sys.argv[1] == 'up':\n"
        f"    tdist.init_process_group('gloo', init_method='file://{tmp_path / 'store'}', rank=0, world_size=1)\n"
        "from trtllm_spec.cli import main\n"
        f"main(['train', '{tmp_path / 'missing.yaml'}'])\n")
    rank = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29599"}  # what torchrun sets for its ranks
    env = {k: v for k, v in os.environ.items() if k not in rank} | {"PYTHONPATH": str(REPO)}
    runs = {(arg, launched): subprocess.run([sys.executable, str(script), arg], env=env | (rank if launched else {}),
                                            capture_output=True, text=True, timeout=120)
            for arg, launched in (("up", True), ("down", True), ("up", False))}
    for r in runs.values():
        assert r.returncode == 2 and "missing.yaml" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "teardown ran" not in runs["up", True].stderr
    assert "teardown ran" in runs["down", True].stderr  # no group: the ordinary exit
    assert "teardown ran" in runs["up", False].stderr  # not a launched rank: never cut short


def test_dflash2_plugin_trains_under_ddp_and_fsdp(tiny_target, convs, tmp_path):
    """DFlash2's plugin on ModelOpt's DFlash mode (drafters/dflash2/train.py) under both strategies: the
    convolutions and the selector are trainable tensors of the draft module, so DDP all-reduces and FSDP shards
    them like the rest; the same data and steps end on the same tensors (within the FSDP tolerance above)."""
    head = {"type": "dflash2", "num_layers": 1, "block_size": 4, "mask_token": 3, "conv_group_size": 8,
            "selector_rank": 8, "selector_top_k": 6}
    outs = {}
    for name, strategy in (("ddp", {"strategy": "ddp", "nproc_per_node": 2}), ("fsdp", FSDP)):
        outs[name] = tmp_path / name
        _torchrun(_recipe(tmp_path, tiny_target, convs, head, max_steps=2, distributed=strategy), outs[name])
    a, b = (_weights(outs[x] / "checkpoints" / "step-0000002" / "trainable.safetensors") for x in ("ddp", "fsdp"))
    plugin = [k for k in a if "_conv." in k or "candidate_selector." in k]
    assert len(plugin) == 7 and a.keys() == b.keys()  # 2 convs x 2 tensors + 3 selector tensors
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=WEIGHT_ATOL) for k in a)
    assert any(not torch.equal(a[k], torch.zeros_like(a[k])) for k in plugin if "successor" in k)
    assert [x["loss"] for x in _log(outs["ddp"])] == pytest.approx([x["loss"] for x in _log(outs["fsdp"])],
                                                                   rel=LOSS_RTOL)
