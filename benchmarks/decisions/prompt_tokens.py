"""The training prompts a recipe selects, counted in the target's tokens (chat template included): the rule
``data.max_prompt_tokens`` follows now (``data/chat.recipe_training_items``) beside the old one (4 characters a
token), same sources, seed and count. Prints totals, median, max, prompts over the limit, non-English prompts, the
most characters per token of a request, prompts per source, and the time the selection took.

    .venv/bin/python benchmarks/decisions/prompt_tokens.py recipes/smollm2-135m-eagle3-cpu.yaml --old-limit 128

Needs `trtllm-spec assets fetch smollm2-135m prompts`. Results: benchmarks/build.md (stop 21).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--old-limit", type=int, default=128, help="the max_prompt_tokens the old rule read as 4x chars")
    args = ap.parse_args()

    import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.data.chat import load_tokenizer, prompt_token_counter, recipe_training_items
    from trtllm_spec.data.suite import training_items

    recipe = load_recipe(args.recipe)
    d = recipe.drafter.training.data
    target = resolve_target(recipe.target.model, recipe.base_dir).path
    count = prompt_token_counter(load_tokenizer(target, recipe.resolve_path(recipe.target.chat_template)))
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}; "
          f"recipe {args.recipe}: {d.num_conversations} conversations, seed {d.seed}, sources {', '.join(d.sources)}")
    runs = [(f"old: {4 * args.old_limit} characters (max_prompt_tokens {args.old_limit} x 4)",
             lambda: training_items(d.sources, d.num_conversations, d.seed, max_prompt_chars=4 * args.old_limit),
             args.old_limit),
            (f"now: {d.max_prompt_tokens} target tokens", lambda: recipe_training_items(recipe, target),
             d.max_prompt_tokens)]
    for name, select, limit in runs:
        started = time.perf_counter()
        items = select()
        took = time.perf_counter() - started
        n = [count(it.messages[0]["content"]) for it in items]
        frame = count("")  # the chat template's own tokens around an empty request
        per_token = max(len(it.messages[0]["content"]) / max(1, k - frame) for it, k in zip(items, n, strict=True))
        per = {}
        for it in items:
            per[it.source] = per.get(it.source, 0) + 1
        print(f"{name}: {len(n)} prompts, {sum(n)} prompt tokens, median {statistics.median(n)}, max {max(n)}, "
              f"{sum(x > limit for x in n)} over {limit}, {sum(it.language != 'en' for it in items)} non-English, at most {per_token:.1f} "
              f"characters per request token; "
              f"per source {per}; selected in {took:.2f} s")


if __name__ == "__main__":
    main()
