"""The build stages. Each takes the build context, returns a StageResult, and caches its output by a hash of
its inputs. A stage that cannot run here (no weights, no GPU, no TensorRT-LLM) says ``deferred`` with the
exact command that does it, and never pretends."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_spec.build.stage_cache import StageCache, stage_key
from trtllm_spec.core.files import sha256_file, write_json_atomic
from trtllm_spec.core.recipe import Recipe, recipe_to_dict
from trtllm_spec.core.targets import ResolvedTarget, resolve_target
from trtllm_spec.errors import UserError


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
    drafter_kind: str = "none"
    profile_path: Path | None = None
    plan: dict | None = None
    options: dict | None = None
    model_ref: str = ""  # what serve.sh / Triton serve: "target" (copied) or an HF id
    results: list[StageResult] = field(default_factory=list)

    @property
    def has_weights(self) -> bool:
        return self.target is not None and self.target.has_weights

    def recipe_cmd(self, command: str) -> str:
        return f"trtllm-spec {command} {self.recipe_file.name}"


def _gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _config_hash(target: ResolvedTarget) -> str:
    if target.path is not None:
        cfg = target.path / "config.json" if target.path.is_dir() else target.path
        weights = sorted(target.path.glob("*.safetensors")) if target.path.is_dir() else []
        return stage_key("target", {"config": sha256_file(cfg),
                                    "weights": [(w.name, w.stat().st_size) for w in weights]})
    return stage_key("target", {"preset": target.spec})


# ---- 1. resolve -------------------------------------------------------------------------------------------------

def resolve(ctx: BuildContext) -> StageResult:
    from trtllm_spec.core.targets import MODEL_ASSET_PRESETS

    ctx.target = resolve_target(ctx.recipe.target.model, ctx.recipe.base_dir)
    if ctx.target.kind == "preset" and ctx.recipe.target.model in MODEL_ASSET_PRESETS:
        raise UserError(f"target {ctx.recipe.target.model!r} is a model asset that is not fetched yet; run "
                        f"'trtllm-spec assets fetch {ctx.recipe.target.model.removesuffix('-bf16')}' (the only "
                        "command that uses the network), then build again")
    ctx.served_target = ctx.target.path if ctx.has_weights else None
    s = ctx.target.shape
    return StageResult("resolve", "done", detail=f"{ctx.target.kind} {ctx.target.spec}: {s.model_type}, {s.num_layers} "
                       f"layers, hidden {s.hidden_size}, {s.total_params() / 1e9:.3f} B params")


# ---- 2. quantize --------------------------------------------------------------------------------------------------

def quantize(ctx: BuildContext) -> StageResult:
    from trtllm_spec.build.quantize import check_quantization, quantize_target

    method = ctx.recipe.quantization.method
    if method == "none":
        return StageResult("quantize", "skipped", detail="quantization.method: none")
    reason = check_quantization(method, ctx.target.shape.hidden_size, _gpu_available())
    if reason or not ctx.has_weights:
        return StageResult("quantize", "deferred", detail=reason or "no local weights (shape preset)",
                           command=ctx.recipe_cmd("build") + " (on a GPU node with the checkpoint)")
    key = stage_key("quantize", {"target": _config_hash(ctx.target), "method": method,
                                 "calib": ctx.recipe.quantization.calib_size})
    folder = ctx.cache.folder("quantize", key) / "checkpoint"
    if not ctx.force and ctx.cache.done("quantize", key):
        ctx.served_target = folder
        return StageResult("quantize", "cached", detail=f"{method} checkpoint")
    from trtllm_spec.data.suite import training_conversations

    work = ctx.cache.start("quantize", key, ctx.force)
    texts = [m[0]["content"] for m in training_conversations(num_conversations=ctx.recipe.quantization.calib_size)]
    shutil.rmtree(work / "checkpoint", ignore_errors=True)
    info = quantize_target(ctx.target.path, method, work / "checkpoint", texts, ctx.log)
    ctx.cache.finish("quantize", key, info)
    ctx.served_target = folder
    return StageResult("quantize", "done", detail=f"{method}: a drafter trained on the bf16 target should be "
                       "re-measured on this checkpoint (the measure stage does)")


# ---- 3. drafter ---------------------------------------------------------------------------------------------------

def drafter(ctx: BuildContext) -> StageResult:
    from trtllm_spec.train_stage import DRAFTER_DIR, run_train

    d = ctx.recipe.drafter
    if d.type == "ngram":
        ctx.drafter_kind = "ngram"
        return StageResult("drafter", "skipped", detail="n-gram drafting needs no drafter")
    if d.type == "mtp" and ctx.target.shape.mtp_layers:
        ctx.drafter_kind = "native"
        return StageResult("drafter", "done", detail=f"native MTP: num_nextn_predict_layers = {ctx.target.shape.mtp_layers}")
    if d.checkpoint:
        p = ctx.recipe.resolve_path(d.checkpoint)
        if p is not None and (p / "config.json").is_file():
            ctx.drafter_dir, ctx.drafter_kind = p, "reused"
            return StageResult("drafter", "done", detail=f"reused {d.checkpoint}")
        ctx.drafter_kind = "hub"
        return StageResult("drafter", "done", detail=f"{d.checkpoint} (downloaded by TensorRT-LLM when serving)")
    if d.type == "draft_model":
        draft = resolve_target(d.model, ctx.recipe.base_dir)
        ctx.drafter_dir = draft.path if draft.has_weights else None
        ctx.drafter_kind = "draft_model"
        return StageResult("drafter", "done", detail=f"draft model {d.model}")
    if not ctx.has_weights:
        ctx.drafter_kind = "deferred"
        return StageResult("drafter", "deferred", detail="training needs the target's weights (a shape preset here)",
                           command=ctx.recipe_cmd("train") + " --out <dir> (GPU cluster; see slurm_train.sbatch)")
    key = stage_key("drafter", {"target": _config_hash(ctx.target),
                                "drafter": recipe_to_dict(ctx.recipe)["drafter"]})
    work = ctx.cache.folder("drafter", key)
    if not ctx.force and ctx.cache.done("drafter", key):
        ctx.drafter_dir, ctx.drafter_kind = work / DRAFTER_DIR, "trained"
        return StageResult("drafter", "cached", detail="trained drafter reused (same inputs)")
    ctx.cache.start("drafter", key, ctx.force)
    res = run_train(ctx.recipe, work, resume=True, log=ctx.log)
    ctx.cache.finish("drafter", key, res.summary)
    ctx.drafter_dir, ctx.drafter_kind = res.drafter_dir, "trained"
    acc = res.summary.get("heldout_acc")
    return StageResult("drafter", "done", detail=f"trained {d.type}: {res.summary.get('steps')} steps, held-out acc {acc}")


# ---- 4. measure ---------------------------------------------------------------------------------------------------

def _measure_spec(ctx: BuildContext) -> str | None:
    if ctx.drafter_kind == "ngram":
        return "ngram"
    if ctx.drafter_dir is not None and ctx.drafter_kind in ("trained", "reused", "draft_model"):
        return str(ctx.drafter_dir)
    return None


def measure(ctx: BuildContext) -> StageResult:
    m = ctx.recipe.measure
    if m.profile:
        p = ctx.recipe.resolve_path(m.profile)
        if p is None or not p.is_file():
            raise UserError(f"measure.profile {m.profile} does not exist")
        ctx.profile_path = p
        return StageResult("measure", "skipped", detail=f"recipe supplies {m.profile}")
    spec = _measure_spec(ctx)
    if spec is None or ctx.served_target is None:
        return StageResult("measure", "deferred", detail="needs the target's weights and the drafter",
                           command="trtllm-spec measure --engine trtllm --bundle <bundle> --out <dir> (GPU node)")
    from trtllm_spec.measure.run import measure as run_measure

    draft_len = _measure_draft_len(ctx)
    key = stage_key("measure", {"target": _config_hash(ctx.target), "served": str(ctx.served_target.name),
                                "drafter": _tree_hash(Path(spec)) if spec != "ngram" else "ngram",
                                "draft_len": draft_len, "measure": recipe_to_dict(ctx.recipe)["measure"]})
    folder = ctx.cache.folder("measure", key)
    path = folder / "speculation_profile.json"
    if not ctx.force and ctx.cache.done("measure", key):
        ctx.profile_path = path
        return StageResult("measure", "cached", detail="speculation profile reused")
    ctx.cache.start("measure", key, ctx.force)
    profile = run_measure(ctx.served_target, spec, draft_len, suite=m.suite, categories=m.categories,
                          num_prompts=m.num_prompts, max_new_tokens=m.max_new_tokens, temperature=m.temperature,
                          dtype=m.dtype, seed=m.seed, device=m.device, progress=lambda msg: ctx.log(f"measure: {msg}"))
    write_json_atomic(path, profile)
    ctx.cache.finish("measure", key, {"draft_len": draft_len})
    ctx.profile_path = path
    o = profile["overall"]
    return StageResult("measure", "done", detail=f"AL {o['mean_acceptance_length']:.2f} at D={draft_len}, reference "
                       f"decoder speedup {o['speedup']:.2f}x on this machine")


def _measure_draft_len(ctx: BuildContext) -> int:
    d = ctx.recipe.drafter
    if isinstance(ctx.recipe.draft_len, int):
        return ctx.recipe.draft_len
    if d.type in ("dflash", "dspark"):
        return min(d.block_size - 1, ctx.recipe.planner.max_draft_len)
    return ctx.recipe.planner.max_draft_len


def _tree_hash(folder: Path) -> str:
    from trtllm_spec.core.provenance import hash_tree

    return stage_key("tree", hash_tree(folder)) if folder.is_dir() else str(folder)


# ---- 5. plan ------------------------------------------------------------------------------------------------------

def plan(ctx: BuildContext) -> StageResult:
    from trtllm_spec.plan_stage import compute_plan

    recipe = ctx.recipe
    if ctx.profile_path is not None:
        data = recipe_to_dict(recipe)
        data["planner"]["acceptance"] = str(ctx.profile_path)
        from trtllm_spec.core.recipe import recipe_from_dict

        recipe = recipe_from_dict(data)
        recipe._base_dir = ctx.recipe.base_dir
    ctx.plan, _ = compute_plan(recipe)
    rec = ctx.plan["recommendation"]
    src = "measured" if ctx.profile_path else "assumed"
    return StageResult("plan", "done", detail=f"max_draft_len {rec['max_draft_len']}, schedule "
                       f"{rec['draft_len_schedule']} ({src} acceptance)")


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
