"""Stage 9, trtllm: validate the options with TensorRT-LLM's own classes and warm it up over the suite where
TensorRT-LLM exists; deferred (with the command) everywhere else."""

from __future__ import annotations

from trtllm_spec.stages.context import BuildContext, StageResult, write_json


def trtllm(ctx: BuildContext) -> StageResult:
    from trtllm_spec.core.releases import get as release
    from trtllm_spec.deploy.trtllm_schema import validate_with_tensorrt_llm

    note = validate_with_tensorrt_llm(ctx.options)
    if note is not None:
        return StageResult("trtllm", "deferred", detail="TensorRT-LLM is not installed here: options validated against "
                           "our versioned mirror only; serving and warm-up not run",
                           command=f"bash serve.sh  # in {release(ctx.recipe.trtllm_profile).image}, then: bash bench.sh")
    if ctx.served_target is None:
        return StageResult("trtllm", "deferred", detail="TensorRT-LLM is here but the target weights are not local",
                           command="trtllm-spec measure trtllm --target <checkpoint> --bundle <bundle>")
    from trtllm_spec.core.bundle import TRTLLM_PROFILE_PATH, bundle_in_build
    from trtllm_spec.core.recipe_load import recipe_to_dict
    from trtllm_spec.data.user_suite import recipe_suite_check
    from trtllm_spec.stages.measure import measure_profile, recipe_settings

    r = ctx.recipe
    record = bundle_in_build(ctx.bundle, r.trtllm_profile, r.drafter.type, recipe_to_dict(r))
    profile = measure_profile(ctx.served_target, None, None, engine="trtllm", bundle=record, progress=ctx.log,
                              suite_check=recipe_suite_check(ctx.recipe, ctx.log), **recipe_settings(ctx))
    write_json(ctx.bundle / TRTLLM_PROFILE_PATH, profile)
    return StageResult("trtllm", "done", detail=f"TensorRT-LLM warm-up over the suite: AL "
                       f"{profile['overall'].get('mean_acceptance_length')}")
