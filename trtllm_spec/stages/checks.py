"""Cheap cross-checks of a recipe's inputs (no torch): the target, hardware and acceptance file resolve."""

from __future__ import annotations

from trtllm_spec.core.recipe import Recipe


def check_recipe_inputs(recipe: Recipe) -> list[str]:
    """Raise on anything that cannot resolve; return notes worth telling the user."""
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.inputs import plan_inputs

    steps = None
    if recipe.planner.work == "aiconfigurator":  # the GPU has tables; nothing is asked (no AIConfigurator run)
        from trtllm_spec.silicon.aic import covered_steps as steps
    inputs = plan_inputs(recipe, mechanisms=MECHANISMS, target_steps=steps)
    notes = []
    t = inputs.target
    if t.kind == "preset":
        notes.append(f"target {recipe.target.model!r} is a shape preset ({t.hf_id}): enough to plan; training, "
                     "measuring and building need the checkpoint (a path or 'trtllm-spec assets fetch')")
    refusal = build_refusal(recipe, t.shape)
    if refusal:
        notes.append(f"drafter.type {recipe.drafter.type} on a target without {refusal[0]}: {refusal[1]}")
    from trtllm_spec.drafters.registry import get

    why = get(recipe.drafter.type).trtllm_refusal(recipe.drafter, recipe.trtllm_profile)
    if why:
        notes.append(f"build refuses this recipe: {why}")
    if recipe.target.trust_remote_code:
        notes.append(f"target.trust_remote_code is true: TensorRT-LLM will import and run Python code shipped with "
                     f"{recipe.target.hf_id or recipe.target.model!r} (llm_api_options.yaml sets trust_remote_code); "
                     "review that code, or set it to false")
    return notes


def build_refusal(recipe: Recipe, shape) -> tuple[str, str] | None:
    from trtllm_spec.drafters.registry import get

    return get(recipe.drafter.type).build_refusal(recipe.drafter, shape)


def check_buildable(recipe: Recipe) -> None:
    """What ``build`` refuses before it writes anything (the other stages check their own inputs)."""
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.drafters.registry import get
    from trtllm_spec.errors import UserError

    target = resolve_target(recipe.target.model, recipe.base_dir)
    refusal = build_refusal(recipe, target.shape)
    if refusal:
        raise UserError(f"drafter.type: {recipe.drafter.type} -- target {recipe.target.model} has no {refusal[0]}. "
                        + refusal[1])
    why = get(recipe.drafter.type).trtllm_refusal(recipe.drafter, recipe.trtllm_profile)
    if why:
        raise UserError(why)
