"""The bundle's training launchers match the trainer: the torchrun lines in train_torchrun.sh and
slurm_train.sbatch, parsed by torchrun's own argument parser, start the world that train/distributed.py's
``check_launch`` accepts for the recipe (nodes, processes per node, strategy), with a c10d rendezvous across nodes,
and no backend forced on the trainer (torch picks NCCL for CUDA tensors)."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.conftest import RECIPES
from trtllm_spec.core.recipe_load import load_recipe

pytest.importorskip("torch")


def _torchrun_args(script: str, nnodes: int):
    from torch.distributed.run import get_args_parser

    body = script.split("torchrun ", 1)[1].replace("\\\n", " ").splitlines()[0]
    body = body.replace('"$SLURM_NNODES"', str(nnodes)).replace('"$@"', "")
    body = re.sub(r'"\$\{[^"]*\}(:\$\{[^"]*\})?"', "host:29500", body)  # rendezvous endpoint / id variables
    body = body.replace('"$SLURM_JOB_ID"', "1").replace('"$MASTER_ADDR:$MASTER_PORT"', "host:29500")
    return get_args_parser().parse_args(shlex.split(body))


def _world_env(args) -> dict:
    nnodes = int(str(args.nnodes).split(":")[-1])
    per = int(args.nproc_per_node)
    return {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(nnodes * per), "LOCAL_WORLD_SIZE": str(per)}


@pytest.mark.parametrize("name", ["llama-3.1-8b-eagle3-h100.yaml", "llama-3.3-70b-eagle3-h200-tp4.yaml"])
def test_generated_launchers_start_the_recipes_world(name):
    from trtllm_spec.deploy.scripts import slurm_train_sbatch
    from trtllm_spec.train.distributed import check_launch
    from trtllm_spec.train.launch import torchrun_script

    dc = load_recipe(RECIPES / name).drafter.training.distributed
    sh = torchrun_script(dc, name)
    sbatch = slurm_train_sbatch(job_name="t", nodes=dc.nnodes, gpus_per_node=dc.nproc_per_node,
                                train_command=["trtllm-spec", "train", name, "--out", "train"])
    for text, module in ((sh, True), (sbatch, False)):
        args = _torchrun_args(text, dc.nnodes)
        assert int(args.nproc_per_node) == dc.nproc_per_node
        check_launch(dc, "cuda", _world_env(args), cuda_count=dc.nproc_per_node)  # the trainer accepts it
        if dc.nnodes > 1:
            assert args.rdzv_backend == "c10d" and args.rdzv_endpoint == "host:29500"
        else:
            assert args.standalone or "SLURM" in text
        if module:
            assert args.module and args.training_script == "trtllm_spec"
            assert args.training_script_args[:2] == ["train", name]
        else:
            assert args.no_python and args.training_script == "trtllm-spec"
            assert args.training_script_args[:2] == ["train", name]
        assert "--backend" not in text and "gloo" not in text.split("torchrun", 1)[1]  # NCCL chosen by torch
    assert f"#SBATCH --nodes={dc.nnodes}" in sbatch and f"#SBATCH --gpus-per-node={dc.nproc_per_node}" in sbatch


def test_a_wrong_launch_is_refused_by_the_trainer():
    """The same parser on a launch that does not match: the trainer refuses it (the test above can fail)."""
    from trtllm_spec.errors import UserError
    from trtllm_spec.train.distributed import check_launch

    dc = load_recipe(RECIPES / "llama-3.3-70b-eagle3-h200-tp4.yaml").drafter.training.distributed
    args = _torchrun_args("torchrun --standalone --nproc_per_node 8 -m trtllm_spec train r.yaml\n", 1)
    with pytest.raises(UserError, match="asks for 2 node"):
        check_launch(dc, "cuda", _world_env(args), cuda_count=8)
