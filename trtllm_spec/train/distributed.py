"""Distributed drafter training on torch's maintained engines: DistributedDataParallel (``strategy: ddp``) and
FSDP2 ``torch.distributed.fsdp.fully_shard`` (``strategy: fsdp``), under ``torchrun`` (or SLURM + torchrun).

- The process group is torch's default for the device (``init_process_group()`` without a backend: NCCL for
  CUDA tensors, gloo for CPU tensors); on CUDA each rank first binds ``cuda:LOCAL_RANK``.
- ``check_launch``: the launched world must be the recipe's (``nnodes x nproc_per_node``, strategy none only in
  one process, ddp/fsdp only under a launcher, no more processes per node than visible GPUs); one-line refusals.
- FSDP2 shards every decoder layer (the drafter's and, online, the frozen target's) as its own unit and the
  rest of the model (embeddings, lm_heads, fc, norms) as the root unit: each rank holds ~1/world of the
  trainable parameters (``trainable_params_per_rank``). ModelOpt calls ``eagle_module.fc`` / ``.lm_head`` from
  the model's forward, so those stay in the root unit, gathered for the whole forward.
- Checkpoints under FSDP hold full tensors (``full_tensor`` and DCP's full optimizer state dict), and a resume
  is refused across a different strategy or world size (the RNG streams and data shards are per rank).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from trtllm_spec.core.devices import LAUNCH_ENV, launched  # noqa: F401  (re-exported)
from trtllm_spec.errors import UserError

STRATEGIES = ("none", "ddp", "fsdp")


def torchrun_line(dc, recipe_file: str = "RECIPE") -> str:
    """The launch line matching ``dc`` (one node: --standalone; more: a c10d rendezvous)."""
    if dc.nnodes > 1:
        rdzv = f"--nnodes {dc.nnodes} --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500"
    else:
        rdzv = "--standalone"
    return f"torchrun {rdzv} --nproc_per_node {dc.nproc_per_node} -m trtllm_spec train {recipe_file}"


def check_launch(dc, device: str, env=None, cuda_count: int = 0) -> None:
    """Refuse a launch that does not match ``drafter.training.distributed`` (``dc``) before anything runs."""
    env = os.environ if env is None else env
    field = "drafter.training.distributed"
    if dc.strategy not in STRATEGIES:
        raise UserError(f"{field}.strategy {dc.strategy!r}: choose none, ddp or fsdp")
    expected = dc.nnodes * dc.nproc_per_node
    if device == "cuda" and dc.nproc_per_node > cuda_count:
        raise UserError(f"{field}.nproc_per_node {dc.nproc_per_node}: only {cuda_count} GPU(s) visible here; set "
                        f"nproc_per_node <= {cuda_count} (one process per GPU) or run on a node with more GPUs")
    if not launched(env):
        if dc.nnodes > 1:
            raise UserError(f"{field}.nnodes {dc.nnodes}: a multi-node run needs a launcher; start it with "
                            f"'{torchrun_line(dc)}' on every node (or the bundle's slurm_train.sbatch)")
        if dc.strategy != "none" or dc.nproc_per_node > 1:
            what = (f"strategy {dc.strategy}" if dc.strategy != "none" else f"nproc_per_node {dc.nproc_per_node}")
            raise UserError(f"{field}.{what} with one process: launch it with '{torchrun_line(dc)}', or set "
                            f"{field}.strategy=none and nproc_per_node=1 to train in this process")
        return
    world, local = int(env["WORLD_SIZE"]), int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
    if dc.strategy == "none" and world > 1:
        raise UserError(f"{field}.strategy none, but the launcher started {world} processes; set strategy ddp or "
                        "fsdp, or launch one process")
    if world != expected or local != dc.nproc_per_node:
        raise UserError(f"{field}: the recipe asks for {dc.nnodes} node(s) x {dc.nproc_per_node} processes, the "
                        f"launcher started {world} process(es), {local} per node; launch '{torchrun_line(dc)}' "
                        f"or set nnodes/nproc_per_node to what you launch")
    if device == "cuda" and local > cuda_count:
        raise UserError(f"{field}.nproc_per_node {local}: only {cuda_count} GPU(s) visible on this node")


@dataclass
class Dist:
    """This process's place in a distributed run (rank 0 of 1 when not under a launcher)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owned: bool = False  # we initialised the process group, so we destroy it
    backend: str = "none"
    strategy: str = "none"

    @classmethod
    def from_env(cls, device: str = "cpu", strategy: str = "none") -> Dist:
        if not launched():
            return cls(strategy=strategy)
        import torch
        import torch.distributed as tdist

        local = int(os.environ["LOCAL_RANK"])
        owned = False
        if not tdist.is_initialized():
            kw = {}
            if device == "cuda":
                torch.cuda.set_device(local)
                kw["device_id"] = torch.device("cuda", local)
            tdist.init_process_group(**kw)  # torch's default per device: nccl for CUDA, gloo for CPU tensors
            owned = True
        return cls(tdist.get_rank(), tdist.get_world_size(), local, owned, str(tdist.get_backend_config()), strategy)

    @property
    def active(self) -> bool:
        return self.world > 1

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as tdist

            tdist.barrier()

    def from_rank0(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if not self.active:
            return obj
        import torch.distributed as tdist

        box = [obj]
        tdist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self, ok: bool = True) -> None:
        """Destroy the process group we created. After a failure we leave it (torchrun stops the other ranks;
        a teardown racing their collectives could hang)."""
        if self.owned and ok:
            import gc

            import torch.distributed as tdist

            gc.collect()  # DDP reducers still referencing the group go first
            if tdist.is_initialized():
                tdist.barrier()  # no rank tears down while another still talks to it
                tdist.destroy_process_group()
        self.owned = False


def _decoder_layers(model):
    """Every ``layers`` ModuleList under ``model`` (the target's and the drafter's decoder layers)."""
    import torch

    for name, mod in model.named_modules():
        if name.split(".")[-1] == "layers" and isinstance(mod, torch.nn.ModuleList):
            yield from mod


def wrap(model, dist: Dist, device: str, log=lambda _m: None):
    """Move ``model`` to ``device`` and wrap it for ``dist.strategy``; returns (forward model, info for the log:
    strategy, world_size, backend, trainable_params_per_rank)."""
    model.to(device)
    wrapped = None
    if dist.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # Only the drafter trains. The frozen target and the buffers (RoPE tables, d2t from rank 0's vocabulary)
        # are identical on every rank: DDP neither broadcasts nor reduces them.
        same = [n for n, p in model.named_parameters() if not p.requires_grad] + [n for n, _ in model.named_buffers()]
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, same)
        wrapped = DistributedDataParallel(model, device_ids=[dist.local_rank] if device == "cuda" else None)
    elif dist.strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device, (dist.world,))  # the run's device, not the accelerator torch finds
        for layer in list(_decoder_layers(model)):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    mine = sum(_local(p).numel() for p in model.parameters() if p.requires_grad)
    per_rank = all_gather_ints(dist, mine)
    info = {"strategy": dist.strategy, "world_size": dist.world, "backend": dist.backend,
            "trainable_params_per_rank": per_rank}
    if dist.active:
        log(f"{dist.strategy}: {dist.world} ranks ({dist.backend}), trainable parameters per rank {per_rank}")
    return wrapped or model, info


def _local(p):
    return p.to_local() if hasattr(p, "to_local") else p


def all_gather_ints(dist: Dist, value: int) -> list[int]:
    if not dist.active:
        return [value]
    import torch
    import torch.distributed as tdist

    mine = torch.tensor([value], dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(dist.world)]
    tdist.all_gather(every, mine)
    return [int(e.item()) for e in every]


def grad_sync(forward_model, dist: Dist, last: bool):
    """Gradient synchronisation on the step's last micro-batch only (DDP ``no_sync`` / FSDP2
    ``set_requires_gradient_sync``)."""
    if not dist.active:
        return contextlib.nullcontext()
    if dist.strategy == "ddp" and not last:
        return forward_model.no_sync()
    if dist.strategy == "fsdp":
        forward_model.set_requires_gradient_sync(last)
    return contextlib.nullcontext()


def full_tensors(params: dict) -> dict:
    """Full (unsharded) CPU copies of ``params``; collective under FSDP (every rank must call it)."""
    out = {}
    for n, p in params.items():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[n] = t.detach().to("cpu").contiguous().clone()
    return out


def load_full(params: dict, tensors: dict) -> None:
    """Copy full tensors into ``params`` (sharded DTensors take their own shard)."""
    import torch

    with torch.no_grad():
        for n, p in params.items():
            t = tensors[n]
            if hasattr(p, "device_mesh"):
                from torch.distributed.tensor import distribute_tensor

                p.copy_(distribute_tensor(t.to(p.device), p.device_mesh, p.placements))
            else:
                p.copy_(t)


def optimizer_state(model, opt, strategy: str) -> dict:
    """The optimizer state to save: DCP's full state dict under FSDP (collective), else ``opt.state_dict()``."""
    if strategy != "fsdp":
        return opt.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model, opt, state: dict, strategy: str) -> None:
    if strategy != "fsdp":
        opt.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, opt, state, options=StateDictOptions(full_state_dict=True))


def check_resume(meta: dict, folder, strategy: str, world: int) -> None:
    """Refuse (never reshard) a checkpoint written by another strategy or world size."""
    was = (meta.get("strategy") or ("ddp" if meta.get("world_size", 1) > 1 else "none"), meta.get("world_size", 1))
    if was != (strategy, world):
        raise UserError(f"--resume: checkpoint {folder} was written by strategy {was[0]} on {was[1]} process(es), "
                        f"this run is {strategy} on {world}; resharding is not supported (data shards and RNG "
                        "streams are per rank): resume with the same launch, or train into a new --out")


def export_state(model, dist: Dist) -> dict | None:
    """Under FSDP, the full state dict that export reads (drafter tensors and the base lm_head; collective,
    every rank calls; rank 0 gets the tensors, the others None). Without FSDP: None (export reads the model)."""
    if dist.strategy != "fsdp":
        return None
    keep = {n: t for n, t in model.state_dict().items()
            if "eagle_module." in n or "dflash_module." in n or n == "lm_head.weight"}
    full = full_tensors(keep)
    return full if dist.rank == 0 else None
