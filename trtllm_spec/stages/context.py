"""What the build stages share: the build context (the artifacts passed from stage to stage), the stage
result, and small helpers. A stage that cannot run here (no weights, no GPU, no TensorRT-LLM) says
``deferred`` with the exact command that does it, and never pretends."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_spec.core.artifacts import Plan
from trtllm_spec.core.files import sha256_file
from trtllm_spec.core.recipe import Recipe
from trtllm_spec.core.targets import ResolvedTarget
from trtllm_spec.stages.cache import StageCache, stage_key


@dataclass
class StageResult:
    name: str
    status: str  # done | cached | deferred | skipped
    seconds: float = 0.0
    detail: str = ""
    command: str | None = None
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2), "detail": self.detail}
        if self.command:
            out["command"] = self.command
        return out


@dataclass
class BuildContext:
    recipe: Recipe
    recipe_file: Path
    bundle: Path  # the temporary folder being written
    cache: StageCache
    force: bool
    log: callable
    target: ResolvedTarget | None = None
    served_target: Path | None = None  # quantized checkpoint, else the target folder
    drafter_dir: Path | None = None
    drafter_kind: str = "none"  # DrafterResult.kind of the drafter stage
    profile_path: Path | None = None
    plan: Plan | None = None
    options: dict | None = None
    model_ref: str = ""  # what serve.sh / Triton serve: "target" (copied) or an HF id
    bench_dataset: object = None  # stages.bench_dataset.BenchDataset (dataset.jsonl; sizes max_seq_len)
    results: list[StageResult] = field(default_factory=list)
    on_train_step: Callable[[dict], None] | None = None  # each training step's record (the CLI prints progress)

    @property
    def has_weights(self) -> bool:
        return self.target is not None and self.target.has_weights

    @property
    def mechanism(self):
        from trtllm_spec.drafters.registry import get

        return get(self.recipe.drafter.type)

    def recipe_cmd(self, command: str) -> str:
        return f"trtllm-spec {command} {self.recipe_file.name}"


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def target_hash(target: ResolvedTarget) -> str:
    """The cache key part that names a target: its config and weight files, or the preset's name."""
    if target.path is not None:
        cfg = target.path / "config.json" if target.path.is_dir() else target.path
        weights = sorted(target.path.glob("*.safetensors")) if target.path.is_dir() else []
        return stage_key("target", {"config": sha256_file(cfg),
                                    "weights": [(w.name, w.stat().st_size) for w in weights]})
    return stage_key("target", {"preset": target.spec})


def tree_hash(folder: Path) -> str:
    from trtllm_spec.core.provenance import hash_tree

    return stage_key("tree", hash_tree(folder)) if folder.is_dir() else str(folder)


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.partial", ".*"))


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def timed(fn, ctx: BuildContext) -> StageResult:
    t0 = time.perf_counter()
    res = fn(ctx)
    res.seconds = time.perf_counter() - t0
    return res
