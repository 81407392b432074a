"""Cheap cross-checks of a recipe's inputs (no torch): the target, hardware and acceptance file resolve."""

from __future__ import annotations

from trtllm_spec.core.recipe import Recipe


def check_recipe_inputs(recipe: Recipe) -> list[str]:
    """Raise on anything that cannot resolve; return notes worth telling the user."""
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.inputs import plan_inputs

    inputs = plan_inputs(recipe, mechanisms=MECHANISMS)
    notes = []
    t = inputs.target
    if t.kind == "preset":
        notes.append(f"target {recipe.target.model!r} is a shape preset ({t.hf_id}): enough to plan; training, "
                     "measuring and building need the checkpoint (a path or 'trtllm-spec assets fetch')")
    if mtp_head_without_native_layers(recipe, t.shape.mtp_layers):
        notes.append(MTP_HEAD_NOTE)
    if recipe.target.trust_remote_code:
        notes.append(f"target.trust_remote_code is true: TensorRT-LLM will import and run Python code shipped with "
                     f"{recipe.target.hf_id or recipe.target.model!r} (llm_api_options.yaml sets trust_remote_code); "
                     "review that code, or set it to false")
    return notes


MTP_HEAD_WHY = ("'train' fits ModelOpt's EAGLE-MTP head and 'measure'/'plan' use it, but TensorRT-LLM serves MTP "
                "only as a target's own layers (num_nextn_predict_layers), so 'build' refuses it; use drafter.type "
                "eagle3 for a bundle")
MTP_HEAD_NOTE = "drafter.type mtp on a target without native MTP layers: " + MTP_HEAD_WHY


def mtp_head_without_native_layers(recipe: Recipe, native_mtp_layers: int) -> bool:
    return recipe.drafter.type == "mtp" and not native_mtp_layers


def check_buildable(recipe: Recipe) -> None:
    """What ``build`` refuses before it writes anything (the other stages check their own inputs)."""
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.errors import UserError

    target = resolve_target(recipe.target.model, recipe.base_dir)
    if mtp_head_without_native_layers(recipe, target.shape.mtp_layers):
        raise UserError(f"drafter.type: mtp -- target {recipe.target.model} has no native MTP layers. "
                        + MTP_HEAD_WHY)
