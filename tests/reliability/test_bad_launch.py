"""Bad device, precision and launch requests (issue 14): each exits 2 with one line naming the option or field,
the bad value, what is allowed and the fix, no traceback, nothing written. This machine has no GPU, so
``--device cuda`` is always a request torch cannot serve here."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import assert_clean_failure, snapshot
from tests.reliability.test_bad_inputs import Ctx

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a visible GPU serves --device cuda")

EAGLE = {"type": "eagle3", "num_layers": 1, "draft_vocab_size": 64,
         "training": {"max_steps": 2, "batch_size": 2, "seq_len": 32, "precision": "fp32"}}


def _train(c: Ctx, distributed: dict | None = None, *extra):
    drafter = {**EAGLE, "training": {**EAGLE["training"], **({"distributed": distributed} if distributed else {})}}
    return ["train", c.tiny_recipe(drafter), "--out", c.w / "train", *extra]


CUDA = ("--device cuda", "no CUDA device", "--device cpu")
CASES = {
    "train-device-cuda": (lambda c: _train(c, None, "--device", "cuda"), CUDA),
    "regenerate-device-cuda": (lambda c: ["data", "regenerate", c.tiny_recipe(EAGLE), "--device", "cuda",
                                          "--out", c.w / "d" / "c.jsonl"], CUDA),
    "doctor-device-cuda": (lambda c: [*_drafter_dir(c), "--device", "cuda"], CUDA),
    "measure-device-cuda": (lambda c: ["measure", "reference", "--target", c.target, "--drafter", "ngram", "--draft-len", "2",
                                       "--num-prompts", "1", "--max-new-tokens", "4", "--device", "cuda",
                                       "--out", c.w / "m"], CUDA),
    "hw-probe-device-cuda": (lambda c: ["hw", "probe", "--out", c.w / "hw.json", "--quick", "--device", "cuda"], CUDA),
    "train-fsdp-one-process": (lambda c: _train(c, {"strategy": "fsdp", "nproc_per_node": 2}),
                               ("distributed.strategy fsdp with one process", "torchrun --standalone "
                                "--nproc_per_node 2", "strategy=none")),
    "train-ddp-one-process": (lambda c: _train(c, {"strategy": "ddp", "nproc_per_node": 1}),
                              ("strategy ddp with one process", "torchrun")),
    "train-nproc-one-process": (lambda c: _train(c, {"nproc_per_node": 4}),
                                ("nproc_per_node 4 with one process", "torchrun")),
    "train-nnodes-outside-launcher": (lambda c: _train(c, {"strategy": "fsdp", "nproc_per_node": 2, "nnodes": 2}),
                                      ("distributed.nnodes 2", "needs a launcher", "slurm_train.sbatch")),
    "train-nproc-above-gpus": (lambda c: _train(c, {"strategy": "ddp", "nproc_per_node": 2}, "--device", "cuda"),
                               CUDA),  # here the missing GPU is refused first; test_device covers 2 > 1 GPU
}


def _drafter_dir(c: Ctx) -> list:
    d = c.w / "drafter"
    d.mkdir()
    return ["doctor", d, "--target", c.target]


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_launch(name, cli, tmp_path, tiny_target, tiny_draft, tiny_suite, monkeypatch):
    w = tmp_path / "w"
    w.mkdir()
    monkeypatch.setenv("TRTLLM_SPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(w)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    make, names = CASES[name]
    args = make(Ctx(w, tiny_target, tiny_draft))
    before = snapshot(w)
    r = cli(*args)
    assert_clean_failure(r.output, r.exit_code, 2, names, before, snapshot(w))
