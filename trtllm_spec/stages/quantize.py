"""Stage 2, quantize: optional ModelOpt post-training quantization of the target (cached)."""

from __future__ import annotations

import shutil

from trtllm_spec.stages.cache import run_cached
from trtllm_spec.stages.context import BuildContext, StageResult, gpu_available, target_hash


def quantize(ctx: BuildContext) -> StageResult:
    from trtllm_spec.deploy.quantize import check_quantization, quantize_target

    method = ctx.recipe.quantization.method
    if method == "none":
        return StageResult("quantize", "skipped", detail="quantization.method: none")
    reason = check_quantization(method, ctx.target.shape.hidden_size, gpu_available())
    if reason or not ctx.has_weights:
        return StageResult("quantize", "deferred", detail=reason or "no local weights (shape preset)",
                           command=ctx.recipe_cmd("build") + " (on a GPU node with the checkpoint)")

    def work(folder):
        from trtllm_spec.data.suite import training_conversations

        n = ctx.recipe.quantization.calib_size
        texts = [m[0]["content"] for m in training_conversations(num_conversations=n)]
        shutil.rmtree(folder / "checkpoint", ignore_errors=True)
        return quantize_target(ctx.target.path, method, folder / "checkpoint", texts, ctx.log)

    inputs = {"target": target_hash(ctx.target), "method": method, "calib": ctx.recipe.quantization.calib_size}
    folder, _, cached = run_cached(ctx.cache, "quantize", inputs, ctx.force, work)
    ctx.served_target = folder / "checkpoint"
    if cached:
        return StageResult("quantize", "cached", detail=f"{method} checkpoint")
    return StageResult("quantize", "done", detail=f"{method}: a drafter trained on the bf16 target should be "
                       "re-measured on this checkpoint (the measure stage does)")
