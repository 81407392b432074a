"""The training loop around a ModelOpt-converted model: AdamW, warmup + cosine, gradient accumulation,
bf16 autocast where the device runs it (``runtime/device.py``'s rule), per-step ``train_acc`` per draft position,
atomic checkpoints and an exact ``--resume`` (same data order, optimizer, scheduler and RNG state). Models and
batches on the placement's device; distributed under ``torchrun`` (``train/distributed.py``: DDP or FSDP2).

Distributed (``world > 1``, a process group initialised, ``wrapped`` the DDP / FSDP model): each rank reads its
own micro-batches (``Schedule`` shards by rank), gradients are averaged by the engine on the last micro-batch of a
step, the logged loss / accuracy are means over ranks and ``tokens`` the sum of every rank's loss tokens
(``rank_tokens``: this step's per rank). Rank 0 writes the log and checkpoints (with every rank's RNG state, so
a resume is exact on every rank); held-out evaluation runs on rank 0 only (under FSDP on every rank: the
parameters are sharded, so every rank takes part in each forward).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as tdist

from trtllm_spec.core.files import write_json_atomic, write_text_atomic
from trtllm_spec.core.recipe import TrainingConfig
from trtllm_spec.errors import UserError
from trtllm_spec.train import distributed as dd
from trtllm_spec.train.modelopt_setup import target_logits_over_draft_vocab
from trtllm_spec.train.samples import Chunk, Schedule, stack_outputs, with_feature_noise


@dataclass
class TrainResult:
    steps: int
    tokens: int
    seconds: float
    train_acc: list[float]
    heldout_acc: list[float]
    stopped_by: str
    log: list[dict] = field(default_factory=list)


class Trainer:
    def __init__(self, model, cfg: TrainingConfig, schedule: Schedule, heldout: list[Chunk], out: Path,
                 log: Callable[[str], None] = print, rank: int = 0, world: int = 1, wrapped=None,
                 on_step: Callable[[dict], None] | None = None, device: str = "cpu", bf16: bool = False,
                 strategy: str | None = None, log_fields: dict | None = None) -> None:
        """``device`` / ``bf16``: the resolved placement (``runtime.device.choose``; the same on every rank);
        ``strategy``: none / ddp / fsdp (default: ddp when ``world > 1``); ``log_fields`` go into every log line."""
        self.model, self.cfg, self.schedule, self.heldout = model, cfg, schedule, heldout
        self.forward_model = wrapped or model  # DDP / FSDP model when distributed
        self.out, self.log, self.rank, self.world, self.on_step = out, log, rank, world, on_step
        self.device, self.autocast = device, bf16
        self.strategy = strategy or ("ddp" if world > 1 else "none")
        self.dist = dd.Dist(rank, world, strategy=self.strategy)
        self.log_fields = dict(log_fields or {})
        self.params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        if not self.params:
            raise UserError("the converted model has no trainable drafter parameters")
        self.opt = torch.optim.AdamW(self.params.values(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                     betas=(0.9, 0.95))
        total = cfg.max_steps
        warm = min(cfg.warmup_steps, max(0, total - 1))
        self.time_budget_s = cfg.time_budget_minutes * 60 if cfg.time_budget_minutes else None
        self._time_progress = 0.0  # rank 0's share of the budget after warmup, set before each scheduler step
        self.warm = warm

        def lr_factor(step: int) -> float:
            """Linear warmup, then cosine to 10% over the run's progress after warmup: steps or, with a time
            budget, minutes when those are further along (so a run that the budget ends still anneals; a step-only
            cosine left the overnight recipe at its peak rate on any machine slower than ours). Both count from
            the end of warmup, so at a steady step time the minutes lead only when max_steps would not fit in the
            budget: a run that fits gets the step cosine, the same on every machine."""
            if step < warm:
                return (step + 1) / (warm + 1)
            t = max((step - warm) / max(1, total - warm), self._time_progress)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))

        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_factor)
        self.step = 0
        self.tokens = 0
        self.elapsed = 0.0
        self.warm_elapsed: float | None = 0.0 if warm == 0 else None  # elapsed at the end of warmup
        self._step_started = time.perf_counter()

    @property
    def distributed(self) -> bool:
        return self.world > 1 and tdist.is_available() and tdist.is_initialized()

    # ---- one step ------------------------------------------------------------------------------------------
    def _forward(self, ids, attn, loss_mask, base_outputs=None, model=None):
        if hasattr(self.model, "_cached_attn_blk_masks"):
            self.model._cached_attn_blk_masks = {}  # ModelOpt caches TTT masks by step only, not by length
        extra = {"base_model_outputs": base_outputs} if base_outputs is not None else {}
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast), \
                target_logits_over_draft_vocab(self.model):
            return (model or self.forward_model)(input_ids=ids, attention_mask=attn, loss_mask=loss_mask, **extra)

    def _on_device(self, ids, attn, loss_mask, base_outputs):
        dev = self.device
        moved = {k: v.to(dev) for k, v in base_outputs.items()} if base_outputs is not None else None
        return ids.to(dev), attn.to(dev), loss_mask.to(dev), moved

    def train_step(self) -> dict:
        self.model.train()
        accs, losses, tokens = [], [], 0
        for micro in range(self.cfg.grad_accum):
            ids, attn, loss_mask, base_outputs = self.schedule.micro_batch(self.step, micro)
            if self.cfg.feature_noise and base_outputs is not None:
                base_outputs = with_feature_noise(base_outputs, self.cfg.feature_noise,
                                                  (self.cfg.seed, self.step, micro, self.rank))  # on the CPU
            ids, attn, loss_mask, base_outputs = self._on_device(ids, attn, loss_mask, base_outputs)
            last = micro == self.cfg.grad_accum - 1
            with dd.grad_sync(self.forward_model, self.dist if self.distributed else dd.Dist(), last):
                out = self._forward(ids, attn, loss_mask, base_outputs)
                (out.loss / self.cfg.grad_accum).backward()
            losses.append(float(out.loss.detach()))
            accs.append([float(a) for a in out.train_acc[0]])
            tokens += int(loss_mask.sum())
        loss = sum(losses) / len(losses)
        acc = [sum(a[i] for a in accs) / len(accs) for i in range(len(accs[0]))]
        rank_tokens = [tokens]
        if self.distributed:
            mine = torch.tensor([float(tokens), loss, *acc], dtype=torch.float64)
            every = [torch.zeros_like(mine) for _ in range(self.world)]
            tdist.all_gather(every, mine)
            rank_tokens = [int(e[0]) for e in every]
            loss = sum(float(e[1]) for e in every) / self.world
            acc = [sum(float(e[2 + i]) for e in every) / self.world for i in range(len(acc))]
            tokens = sum(rank_tokens)
        torch.nn.utils.clip_grad_norm_(self.params.values(), 1.0)
        self.opt.step()
        self._time_progress = self._progress_by_time()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += tokens
        rec = {"step": self.step, "loss": loss, "train_acc": acc, "tokens": self.tokens,
               "lr": self.sched.get_last_lr()[0], **self.log_fields}
        if self.world > 1:
            rec["rank_tokens"] = rank_tokens
        return rec

    def _progress_by_time(self) -> float:
        """Share of the time budget left after warmup that is spent so far, the step in flight included (0 without
        a budget or during warmup); rank 0's clock for every rank, so all ranks keep the same learning rate."""
        if not self.time_budget_s or self.warm_elapsed is None:
            return 0.0
        now = self.elapsed + time.perf_counter() - self._step_started
        after_warmup = self.time_budget_s - self.warm_elapsed
        progress = (now - self.warm_elapsed) / after_warmup if after_warmup > 0 else 1.0
        if self.distributed:
            t = torch.tensor([progress], dtype=torch.float64)
            tdist.broadcast(t, src=0)
            progress = float(t.item())
        return progress

    @torch.no_grad()
    def evaluate(self, chunks: list[Chunk] | None = None, max_chunks: int = 16) -> list[float]:
        """Held-out accuracy per draft position (training-mode forward without gradients: every TTT step)."""
        chunks = (chunks if chunks is not None else self.heldout)[:max_chunks]
        if not chunks:
            return []
        self.model.train()
        sums: list[float] = []
        for c in chunks:
            ids = torch.tensor([c.input_ids])  # the bare model: no DDP collectives (rank 0 evaluates alone)
            batch = self._on_device(ids, torch.ones_like(ids), torch.tensor([c.loss_mask], dtype=torch.float32),
                                    stack_outputs([c.base_outputs()]))
            out = self._forward(*batch, model=self.model)
            acc = [float(a) for a in out.train_acc[0]]
            sums = [s + a for s, a in zip(sums, acc, strict=True)] if sums else acc
        return [s / len(chunks) for s in sums]

    # ---- checkpoints ---------------------------------------------------------------------------------------
    @property
    def ckpt_dir(self) -> Path:
        return self.out / "checkpoints"

    def _rng_states(self) -> list[torch.Tensor]:
        """Every rank's RNG state, CPU then (on CUDA) the device's (ModelOpt samples anchors / TTT noise per rank);
        collective."""
        mine = torch.get_rng_state()
        if self.device == "cuda":
            mine = torch.cat([mine, torch.cuda.get_rng_state()])
        if not self.distributed:
            return [mine]
        every = [torch.zeros_like(mine) for _ in range(self.world)]
        tdist.all_gather(every, mine)
        return every

    def _set_rng_state(self, state: torch.Tensor) -> None:
        n = torch.get_rng_state().numel()
        torch.set_rng_state(state[:n])
        if self.device == "cuda" and state.numel() > n:
            torch.cuda.set_rng_state(state[n:])

    def save_checkpoint(self) -> Path | None:
        rng = self._rng_states()  # every rank takes part, rank 0 writes
        tensors = dd.full_tensors(self.params)  # collective under FSDP
        opt_state = dd.optimizer_state(self.forward_model, self.opt, self.strategy)  # collective under FSDP
        if self.rank != 0:
            return None
        from safetensors.torch import save_file

        final = self.ckpt_dir / f"step-{self.step:07d}"
        tmp = self.ckpt_dir / f".step-{self.step:07d}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file(tensors, str(tmp / "trainable.safetensors"))
        torch.save({"optimizer": opt_state, "scheduler": self.sched.state_dict(),
                    "rng": rng[0], "rng_per_rank": rng}, tmp / "optimizer.pt")
        write_json_atomic(tmp / "state.json", {"step": self.step, "tokens": self.tokens, "elapsed_s": self.elapsed,
                                               "warm_elapsed_s": self.warm_elapsed, "strategy": self.strategy,
                                               "world_size": self.world})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        write_text_atomic(self.ckpt_dir / "latest", final.name + "\n")
        for old in sorted(self.ckpt_dir.glob("step-*"))[:-self.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load_checkpoint(self) -> bool:
        from safetensors.torch import load_file

        pointer = self.ckpt_dir / "latest"
        if not pointer.is_file():
            return False
        folder = self.ckpt_dir / pointer.read_text().strip()
        if not (folder / "state.json").is_file():
            raise UserError(f"checkpoint {folder} is incomplete; delete it (and {pointer}) to restart")
        meta = json.loads((folder / "state.json").read_text())
        dd.check_resume(meta, folder, self.strategy, self.world)
        tensors = load_file(str(folder / "trainable.safetensors"))
        missing = set(self.params) - set(tensors)
        if missing:
            raise UserError(f"checkpoint {folder} does not match this drafter (missing {sorted(missing)[0]}); "
                            "was the recipe changed? Train into a new --out")
        dd.load_full(self.params, tensors)
        state = torch.load(folder / "optimizer.pt", weights_only=True)
        dd.load_optimizer_state(self.forward_model, self.opt, state["optimizer"], self.strategy)
        self.sched.load_state_dict(state["scheduler"])
        per_rank = state.get("rng_per_rank") or [state["rng"]]
        self._set_rng_state(per_rank[self.rank] if len(per_rank) == self.world else state["rng"])
        self.step, self.tokens, self.elapsed = meta["step"], meta["tokens"], meta["elapsed_s"]
        # checkpoints from before warm_elapsed_s count the budget from step 0 (as they were trained)
        self.warm_elapsed = meta.get("warm_elapsed_s", 0.0 if self.step >= self.warm else None)
        return True

    # ---- the loop ------------------------------------------------------------------------------------------
    def run(self, max_steps: int) -> TrainResult:
        """Train until ``max_steps`` or, with ``time_budget_minutes``, until the budget is spent."""
        log_path = self.out / "train_log.jsonl"
        history: list[dict] = []
        last_acc: list[float] = []
        stopped = "max_steps"
        while self.step < max_steps:
            self._step_started = time.perf_counter()
            rec = self.train_step()
            self.elapsed += time.perf_counter() - self._step_started
            if self.step == self.warm:
                self.warm_elapsed = self.elapsed
            rec.update(elapsed_s=round(self.elapsed, 2), tokens_per_s=round(self.tokens / max(self.elapsed, 1e-9), 1),
                       epoch=round(self.schedule.epoch_of(self.step), 3), max_steps=max_steps,
                       time_budget_s=self.time_budget_s)  # what a progress line needs for the time left
            last_acc = rec["train_acc"]
            history.append(rec)
            if self.rank == 0:
                with open(log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec) + "\n")
            if self.on_step:
                self.on_step(rec)
            if self.step % self.cfg.checkpoint_every == 0:
                self.save_checkpoint()
            if self.time_budget_s is not None and self._all(self.elapsed >= self.time_budget_s):
                stopped = "time_budget"
                break
        self.save_checkpoint()
        every_rank = self.distributed and self.strategy == "fsdp"  # sharded: each forward needs every rank
        heldout = self.evaluate() if self.rank == 0 or every_rank else []
        heldout = heldout if self.rank == 0 else []
        return TrainResult(self.step, self.tokens, self.elapsed, last_acc, heldout, stopped, history)

    def _all(self, flag: bool) -> bool:
        """``flag`` on rank 0 decides for every rank (ranks must stop at the same step)."""
        if not self.distributed:
            return flag
        t = torch.tensor([1 if flag else 0])
        tdist.broadcast(t, src=0)
        return bool(t.item())
