"""Stage 3, drafter: reuse | convert | train+export | native | none, as the descriptor decides
(``Mechanism.source``). ``trtllm-spec train`` and ``build`` call the same ``obtain_drafter``; ``build`` also
caches the trained drafter and may defer what cannot happen here (a hub download, training without weights)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trtllm_spec.core.artifacts import DrafterResult
from trtllm_spec.core.recipe import Recipe
from trtllm_spec.core.recipe_load import recipe_to_dict
from trtllm_spec.core.targets import ResolvedTarget
from trtllm_spec.errors import UserError
from trtllm_spec.stages.cache import StageCache, run_cached
from trtllm_spec.stages.context import BuildContext, StageResult, target_hash
from trtllm_spec.train.run import DRAFTER_DIR


def run_train(recipe: Recipe, out: Path, *, max_steps: int | None = None, resume: bool = False, force: bool = False,
              log: Callable[[str], None] = print, on_step: Callable[[dict], None] | None = None) -> DrafterResult:
    """``trtllm-spec train``: the recipe's drafter into ``out`` (``out/drafter`` when trained or converted).
    Training needs no planner shape: a family the planner cannot price still trains (``data_target``)."""
    from trtllm_spec.data.backends import data_target

    target = data_target(recipe.target.model, recipe.base_dir)
    return obtain_drafter(recipe, target, out, max_steps=max_steps, resume=resume, force=force, log=log,
                          on_step=on_step)


def launch_plan(recipe: Recipe, recipe_file: str) -> list[str]:
    """``train --dry-run``: the launch line and the per-rank memory estimate, as lines (loads nothing)."""
    from trtllm_spec.train.launch import dry_run

    return dry_run(recipe, recipe_file)


def obtain_drafter(recipe: Recipe, target: ResolvedTarget, out: Path, *, max_steps: int | None = None,
                   resume: bool = False, force: bool = False, log: Callable[[str], None] = print,
                   on_step: Callable[[dict], None] | None = None, deferrable: bool = False,
                   cache: StageCache | None = None) -> DrafterResult:
    """The one dispatch. ``deferrable`` (build): a hub checkpoint or training without local weights is a
    deferred outcome instead of an error. ``cache``: training runs in its stage-cache folder (``out`` unused)."""
    from trtllm_spec.drafters.registry import get

    d = recipe.drafter
    mech = get(d.type)
    own = mech.obtain(d, recipe, target)  # the mechanism's own way (native layers, an existing model)
    if own is not None:
        return own
    source = mech.source(d, target.shape)
    if source == "none":
        return DrafterResult("none", None, {"note": f"{mech.title} drafting needs no drafter (model-free)"})
    if source == "reuse":
        p = recipe.resolve_path(d.checkpoint)
        if p is not None and (p / "config.json").is_file():
            import json

            try:  # what the folder holds is read where it is used; here only a folder that is another mechanism's
                cfg = json.loads((p / "config.json").read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                cfg = None
            why = mech.folder_refusal(cfg, f"drafter.checkpoint {p}/config.json") if isinstance(cfg, dict) else None
            if why is not None:  # given as this type but another mechanism's (DFlash2's as dflash)
                raise UserError(why)
            return DrafterResult("reused", p, {"checkpoint": str(p)})
        if deferrable:
            return DrafterResult("hub", None, {"checkpoint": d.checkpoint})
        raise UserError(f"drafter.checkpoint {d.checkpoint} is not a drafter folder (no config.json)")
    if source == "train" and deferrable and not target.has_weights:
        return DrafterResult("deferred", None, {"note": "training needs the target's weights (a shape preset here)"})
    kind = "converted" if source == "convert" else "trained"

    def make(folder: Path, resume: bool, force: bool, log=log) -> DrafterResult:
        if source == "convert":
            return _convert(recipe, target, folder, resume=resume, force=force)
        from trtllm_spec.train.run import train_drafter

        return train_drafter(recipe, target, folder, max_steps=max_steps, resume=resume, force=force, log=log,
                             on_step=on_step)

    if cache is None:
        return make(out, resume, force)
    folder, summary, cached = run_cached(cache, "drafter", stage_inputs(recipe, target, source), force,
                                         lambda work: make(work, resume=True, force=False).summary)
    return DrafterResult(kind, folder / DRAFTER_DIR, {**summary, "cached": cached})


def _convert(recipe: Recipe, target: ResolvedTarget, out: Path, *, resume: bool, force: bool) -> DrafterResult:
    """drafter.convert_from: a SafeAILab EAGLE or speculators EAGLE-3 checkpoint, converted to the layout
    ModelOpt exports and TensorRT-LLM loads, checked against the target's config."""
    import json

    from trtllm_spec.drafters.eagle3.convert import convert_drafter
    from trtllm_spec.train.run import check_out

    cf = recipe.drafter.convert_from
    src = recipe.resolve_path(cf.path)
    if src is None or not src.is_dir():
        raise UserError(f"drafter.convert_from.path {cf.path} is not a folder; give the {cf.format} checkpoint "
                        "folder to convert")
    cfg = target.config if target.config else None
    if cfg is None and target.path is not None and (target.path / "config.json").is_file():
        cfg = json.loads((target.path / "config.json").read_text())
    check_out(out, resume, force)
    summary = convert_drafter(src, out / DRAFTER_DIR, cf.format, cfg, force=True)
    return DrafterResult("converted", out / DRAFTER_DIR, {"converted_from": cf.format, **summary})


def drafter(ctx: BuildContext) -> StageResult:
    """The build's drafter stage: ``obtain_drafter`` (deferrable, cached), described for the stage table."""
    d = ctx.recipe.drafter
    res = obtain_drafter(ctx.recipe, ctx.target, ctx.bundle, log=ctx.log, deferrable=True, cache=ctx.cache,
                         force=ctx.force, on_step=ctx.on_train_step)
    from trtllm_spec.drafters.registry import get

    ctx.drafter_kind = res.kind
    ctx.drafter_dir = get(d.type).served_drafter_dir(d, res.drafter_dir, ctx.recipe.base_dir)
    s = res.summary
    details = {
        "none": ("skipped", s.get("note", "")),
        "native": ("done", f"native MTP: num_nextn_predict_layers = {s.get('num_nextn_predict_layers')}"),
        "reused": ("done", f"reused {d.checkpoint}"),
        "hub": ("done", f"{d.checkpoint} (downloaded by TensorRT-LLM when serving)"),
        "converted": ("cached" if s.get("cached") else "done", f"converted {s.get('converted_from')} checkpoint"),
        "draft_model": ("done", f"draft model {getattr(d, 'model', '')}"),
        "deferred": ("deferred", s.get("note", "")),
        "trained": ("cached", "trained drafter reused (same inputs)") if s.get("cached") else
                   ("done", f"trained {d.type}: {s.get('steps')} steps, held-out acc {s.get('heldout_acc')}"),
    }
    status, detail = details[res.kind]
    command = (ctx.recipe_cmd("train") + " --out <dir> (GPU cluster; see slurm_train.sbatch)"
               if res.kind == "deferred" else None)
    return StageResult("drafter", status, detail=detail, command=command)


def check_drafter(drafter_dir: Path, target: str, heldout: Path | None, device: str = "auto", dtype: str = "auto",
                  request_mode=None):
    """``trtllm-spec doctor``: a drafter folder against its target. Returns (kind, findings, placement): where
    the parity check ran the target (``runtime.device.choose``), None when no weights are local. ``request_mode``
    (a recipe's): a drafter trained in another chat-template mode is a warning (training_mode_finding)."""
    from trtllm_spec.train.doctor import run_doctor

    if not drafter_dir.is_dir():
        raise UserError(f"{drafter_dir} is not a folder; give the exported drafter folder")
    from trtllm_spec.data.backends import data_target

    t = data_target(target)  # a checkpoint the planner cannot price is still checked
    target_dir = t.path if t.path is not None and t.path.is_dir() and any(t.path.glob("*.safetensors")) else None
    where = None
    if target_dir is not None:  # the parity check runs the target
        from trtllm_spec.runtime.device import choose

        where = choose(device, dtype)
    kind, findings = run_doctor(drafter_dir, target_dir, t.config, heldout, placement=where)
    if request_mode is not None:
        findings.append(training_mode_finding(drafter_dir, request_mode))
    return kind, findings, where


def training_mode_finding(drafter_dir: Path, mode):
    """Train in the mode you serve: the chat-template arguments the drafter's training data was regenerated with
    (trtllm_spec_drafter.json training.chat_template_kwargs; none recorded = the template's defaults) against the
    request mode's. A thinking switch that differs moves acceptance (SpecForge#296, z-lab/dflash#60)."""
    import json

    from trtllm_spec.train.doctor import Finding

    meta_path = drafter_dir / "trtllm_spec_drafter.json"
    trained = None
    if meta_path.is_file():
        try:
            trained = (json.loads(meta_path.read_text(encoding="utf-8")).get("training") or {}).get(
                "chat_template_kwargs")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            trained = None
    if trained is None:
        return Finding("info", "request_mode", "the drafter records no training mode (not trained here, or before "
                       "request modes): its chat-template arguments are unknown")
    want = dict(sorted(mode.chat_template_kwargs.items()))
    if dict(sorted(trained.items())) != want:
        return Finding("warning", "request_mode", f"trained with chat-template arguments {trained or '{}'} but the "
                       f"recipe serves {want or '{}'} (workload.request_mode.chat_template_kwargs): acceptance in "
                       "serving will differ from training; retrain in the served mode")
    return Finding("ok", "request_mode", f"trained in the served chat-template mode {want or '(template defaults)'}")


def stage_inputs(recipe: Recipe, target, source: str) -> dict:
    """What the cached drafter depends on: the target, the recipe's drafter section, the converted checkpoint's
    files, and for prompts the target regenerates, the rule that selects them (``data.chat.PROMPT_RULE``: the
    same recipe selects other prompts under another rule)."""
    inputs = {"target": target_hash(target), "drafter": recipe_to_dict(recipe)["drafter"]}
    if source == "train" and recipe.drafter.training.data.regenerate and not recipe.drafter.training.data.path:
        from trtllm_spec.data.chat import PROMPT_RULE

        inputs["prompts"] = PROMPT_RULE
        from trtllm_spec.core.request_mode import recipe_mode

        kw = recipe_mode(recipe).chat_template_kwargs
        if kw:  # keyed only when set: the target regenerates in the request mode (caches without one stay valid)
            inputs["chat_template_kwargs"] = dict(sorted(kw.items()))
    if source == "convert":
        from trtllm_spec.stages.context import tree_hash

        inputs["source"] = tree_hash(recipe.resolve_path(recipe.drafter.convert_from.path))
    return inputs
