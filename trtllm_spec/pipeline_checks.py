"""Cheap cross-checks of a recipe's inputs (no torch): the target, hardware and acceptance file resolve."""

from __future__ import annotations

from trtllm_spec.core.recipe import Recipe


def check_recipe_inputs(recipe: Recipe) -> list[str]:
    """Raise on anything that cannot resolve; return notes worth telling the user."""
    from trtllm_spec.planner.inputs import plan_inputs

    inputs = plan_inputs(recipe)
    notes = []
    t = inputs.target
    if t.kind == "preset":
        notes.append(f"target {recipe.target.model!r} is a shape preset ({t.hf_id}): enough to plan; training, "
                     "measuring and building need the checkpoint (a path or 'trtllm-spec assets fetch')")
    if recipe.target.trust_remote_code:
        notes.append(f"target.trust_remote_code is true: TensorRT-LLM will import and run Python code shipped with "
                     f"{recipe.target.hf_id or recipe.target.model!r} (llm_api_options.yaml sets trust_remote_code); "
                     "review that code, or set it to false")
    return notes
