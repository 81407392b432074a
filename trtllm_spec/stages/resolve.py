"""Stage 1, resolve: the target (checkpoint folder, fetched asset or shape preset) and its shape."""

from __future__ import annotations

from trtllm_spec.core.targets import resolve_target
from trtllm_spec.errors import UserError
from trtllm_spec.stages.context import BuildContext, StageResult


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
