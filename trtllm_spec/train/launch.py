"""How ``trtllm-spec train`` runs on the user's hardware: the checks before anything is written (``start``) and
the launch plan with a per-rank memory estimate (``dry_run``, no torch, no weights).

The estimate (rough, stated as such): fp32 weights of what each rank holds (the frozen target online, only its
embeddings / lm_head offline, since ModelOpt drops the target's decoder layers; divided by the world under FSDP),
the drafter's fp32 gradients and AdamW moments (divided under FSDP), and activations of one micro-batch (the
draft logits over every TTT step, kept for backward, dominate). Regeneration on rank 0 holds the target in the
run's precision and a KV cache for ``regen_batch_size`` sequences.
"""

from __future__ import annotations

import os

from trtllm_spec.errors import UserError

GB = 1e9


def start(recipe, shape, log=lambda _m: None):
    """(Dist, Placement) for this process: the recipe's launch checked against the environment, the device and
    precision resolved by ``runtime.device.choose`` (rank 0's precision for every rank), on CUDA the memory
    estimate checked against the device, the process group up."""
    import torch

    from trtllm_spec.runtime.device import Placement, choose
    from trtllm_spec.train.distributed import Dist, check_launch

    tc = recipe.drafter.training
    placement = choose(tc.device, tc.precision, torch)
    count = torch.cuda.device_count() if placement.device == "cuda" else 0
    check_launch(tc.distributed, placement.device, os.environ, count)
    if placement.device == "cuda" and shape is not None:  # None: a family the planner cannot size (no estimate)
        props = torch.cuda.get_device_properties(0)
        check_fits(recipe, shape, props.total_memory, props.name)
        if tc.data.regenerate and not tc.data.path:
            check_fits(recipe, shape, props.total_memory, props.name, "regenerate")
    dist = Dist.from_env(placement.device, tc.distributed.strategy)
    if dist.active:  # every rank must run the same numerics: rank 0's timing decides
        p = dist.from_rank0(placement.as_dict())
        placement = Placement(p["device"], p["dtype"], p["reason"], (p["requested_device"], p["requested_dtype"]))
    return dist, placement


def drafter_params(d, shape) -> int:
    """Trainable parameters of the recipe's drafter on ``shape`` (its descriptor's count)."""
    from trtllm_spec.drafters.registry import get

    return get(d.type).trainable_params(d, shape)


def estimate(recipe, shape) -> dict:
    """Per-rank memory (bytes) of training and of rank 0's regeneration; see the module docstring."""
    d = recipe.drafter
    tc = d.training
    dc = tc.distributed
    world = dc.nnodes * dc.nproc_per_node
    shard = world if dc.strategy == "fsdp" else 1
    from trtllm_spec.drafters.registry import get

    mech = get(d.type)
    offline = mech.trains_offline(d)
    embed = shape.embedding_params() * (1 if shape.tied_embeddings else 2)
    target_w = 4 * (embed if offline else shape.total_params()) / shard
    p = drafter_params(d, shape)
    states = 4 * p * 4 / shard  # fp32 weights, gradients, two AdamW moments
    vocab = getattr(d, "draft_vocab_size", None) or shape.vocab_size
    tokens = tc.batch_size * tc.seq_len
    ttt = mech.kept_logit_passes(d)
    act = tokens * 4 * (2 * ttt * vocab + 24 * shape.hidden_size * max(1, getattr(d, "num_layers", 1) or 1))
    if not offline:
        act += tokens * 4 * (shape.vocab_size + 4 * shape.hidden_size)  # the target's logits / hidden (no grad)
    regen_len = tc.data.max_prompt_tokens + tc.data.regen_max_new_tokens
    regen = 2 * shape.total_params() + tc.data.regen_batch_size * regen_len * shape.kv_bytes_per_token("bf16")
    return {"world_size": world, "drafter_params": p, "offline": offline,
            "target_weights": target_w, "drafter_states": states, "activations": act,
            "train_total": target_w + states + act, "regeneration": regen}


def dry_run(recipe, recipe_file: str) -> list[str]:
    """The launch and memory plan, as lines; raises nothing for a valid recipe and loads nothing."""
    from trtllm_spec.core.hardware import load_hardware
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.train.distributed import torchrun_line

    d = recipe.drafter
    tc = getattr(d, "training", None)
    if tc is None:
        return [f"drafter.type {d.type}: nothing to train (no launch)"]
    shape = resolve_target(recipe.target.model, recipe.base_dir).shape
    dc = tc.distributed
    e = estimate(recipe, shape)
    hw = load_hardware(recipe.hardware.gpu)
    launch = (f"python -m trtllm_spec train {recipe_file}" if dc.strategy == "none" and dc.nnodes == 1
              and dc.nproc_per_node == 1 else torchrun_line(dc, recipe_file))
    backend = {"auto": "nccl on CUDA (gloo where no GPU is visible)", "cuda": "nccl", "cpu": "gloo"}[tc.device]
    lines = [f"launch: {launch}",
             f"  nodes {dc.nnodes} x processes per node {dc.nproc_per_node} = world {e['world_size']}; strategy "
             f"{dc.strategy}; device {tc.device}, precision {tc.precision}; backend {backend}",
             f"  data: {'offline features (target hidden states from the features step)' if e['offline'] else 'online'}"
             f" over {tc.data.num_conversations} conversations; {tc.max_steps} steps of {tc.batch_size} x "
             f"{tc.grad_accum} x {tc.seq_len} tokens per rank",
             f"memory per rank (estimate, {shape.name}, drafter {e['drafter_params'] / 1e6:.1f} M parameters):",
             f"  target weights {e['target_weights'] / GB:.2f} GB fp32"
             + (" (embeddings / lm_head only)" if e["offline"] else "")
             + (f" / {e['world_size']} (fsdp)" if dc.strategy == "fsdp" else ""),
             f"  drafter weights + gradients + AdamW {e['drafter_states'] / GB:.2f} GB",
             f"  activations {e['activations'] / GB:.2f} GB", f"  total {e['train_total'] / GB:.2f} GB against "
             f"{hw.mem_bytes / GB:.0f} GB on one {hw.name} (hardware.gpu)"]
    lines.append(f"regeneration (rank 0): target bf16 + KV cache {e['regeneration'] / GB:.2f} GB")
    if e["train_total"] > hw.mem_bytes:
        lines.append(f"  DOES NOT FIT: training needs {e['train_total'] / GB:.1f} GB per rank; use strategy fsdp, "
                     "offline_features, a smaller batch_size or seq_len")
    if tc.data.regenerate and not tc.data.path and e["regeneration"] > hw.mem_bytes:
        lines.append(f"  DOES NOT FIT on one {hw.name}: in-process regeneration holds the whole target on rank 0; "
                     "regenerate with a serving engine and give data.path")
    return lines


def check_fits(recipe, shape, device_bytes: float, device_name: str, what: str = "train") -> None:
    """Refuse with the numbers when a CUDA run would not fit one device."""
    e = estimate(recipe, shape)
    need = e["train_total"] if what == "train" else e["regeneration"]
    if need > device_bytes:
        fix = ("set drafter.training.data.offline_features: true (EAGLE-3), strategy fsdp over more GPUs, or a "
               "smaller batch_size / seq_len" if what == "train" else
               "regenerate with a serving engine (vLLM / trtllm-serve) and give drafter.training.data.path")
        raise UserError(f"{what}: about {need / GB:.1f} GB per rank for {shape.name} ({e['target_weights'] / GB:.1f} "
                        f"GB target weights) but {device_name} has {device_bytes / GB:.1f} GB; {fix}")


def torchrun_script(dc, recipe_file: str, out: str = "train") -> str:
    """``train_torchrun.sh`` for the bundle: the launch ``check_launch`` accepts for ``dc`` (torchrun sets RANK /
    WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE; the trainer picks NCCL for CUDA tensors by itself). Run it on
    every node; more than one node needs MASTER_ADDR (the first node) and a shared folder."""
    import shlex

    if dc.nnodes > 1:
        rdzv = (f'--nnodes {dc.nnodes} --rdzv_id "${{RDZV_ID:-trtllm-spec-train}}" --rdzv_backend c10d '
                '--rdzv_endpoint "${MASTER_ADDR:?set MASTER_ADDR to the first node}:${MASTER_PORT:-29500}"')
    else:
        rdzv = "--standalone"
    return (f"#!/usr/bin/env bash\n# Train the drafter: {dc.strategy} on {dc.nnodes} node(s) x {dc.nproc_per_node} "
            "process(es), one per GPU (NCCL on GPUs, gloo on CPU: torch's default per device).\n"
            "# Generated by trtllm-spec; paths are relative to this folder. 'trtllm-spec train RECIPE --dry-run' "
            "prints the same launch with a memory estimate.\nset -euo pipefail\ncd \"$(dirname \"$0\")\"\n"
            f"torchrun {rdzv} --nproc_per_node {dc.nproc_per_node} \\\n"
            f'    -m trtllm_spec train {shlex.quote(recipe_file)} --out {shlex.quote(out)} "$@"\n')
