"""Training-settings sweep for a trained drafter, side by side in one run: regenerate the recipe's data once
(offline features kept), then train each variant from exactly that data and measure its acceptance with the
reference decoder on the same prompts.

    .venv/bin/python benchmarks/drafter_sweep.py recipes/smollm2-135m-eagle3-cpu.yaml --steps 120 \\
        --variant none:drafter.training.init_from_target=none \\
        --variant lm_head_all:drafter.training.init_from_target=lm_head,drafter.training.data.loss_on=all

A variant is NAME:KEY=VALUE[,KEY=VALUE...] (recipe `--set` overrides). Prints one markdown row per variant
(held-out accuracy per draft position, training seconds, AL per category). Findings: benchmarks/drafter_training.md.
The run writes its record ``drafter_sweep.json`` in this folder (``benchmarks/_record.py``; ``--record`` elsewhere,
``--no-record`` none); README's table shows its row (``scripts/render_readme_table.py``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _record import BENCHMARKS, write_record


def readme_rows(result: dict) -> list[dict]:
    """README's row: the spread of AL and held-out first-step accuracy over the variants, and the best one."""
    rows = result["rows"]
    if not rows:
        return []
    als = [r["al"] for r in rows]
    first = [r["heldout_acc"][0] for r in rows if r.get("heldout_acc")]
    best = max(rows, key=lambda r: r["al"])
    acc = f" (held-out first-step accuracy {min(first):.2f}-{max(first):.2f})" if first else ""
    return [{"what": f"training variants of `{result['recipe']}` from one regeneration ({len(rows)} heads, "
                     f"{result['num_prompts']} prompts per category at D = {result['draft_len']})",
             "result": f"AL {min(als):.2f}-{max(als):.2f}{acc}; best: {best['variant']} ({best['al']:.2f})",
             "where": "`benchmarks/drafter_training.md`"}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--variant", action="append", default=[], help="NAME:KEY=VALUE[,KEY=VALUE...]")
    ap.add_argument("--steps", type=int, default=None, help="max_steps for every variant (default: the recipe's)")
    ap.add_argument("--work", type=Path, default=Path("out/drafter_sweep"))
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=2, help="speed-lite prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--record", type=Path, default=BENCHMARKS / "drafter_sweep.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    args = ap.parse_args()

    import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.measure.run import measure
    from trtllm_spec.stages.drafter import run_train
    from trtllm_spec.train.run import conversations, require_checkpoint

    variants = [("recipe", [])] + [_parse(v) for v in args.variant]
    base = load_recipe(args.recipe, ())
    target_dir = require_checkpoint(resolve_target(base.target.model, base.base_dir), "the sweep")
    data = args.work / "data" / "conversations.jsonl"
    t = time.perf_counter()
    convs = conversations(base, target_dir, data.parent, print, file_name=data.name)
    print(f"data: {len(convs)} conversations in {data} ({time.perf_counter() - t:.0f} s)")
    steps = [f"drafter.training.max_steps={args.steps}"] if args.steps else []
    rows = []
    for name, sets in variants:
        recipe = load_recipe(args.recipe, tuple(sets + steps + [f"drafter.training.data.path={data.resolve()}"]))
        t = time.perf_counter()
        res = run_train(recipe, args.work / name, force=True, log=lambda m: None)
        train_s = time.perf_counter() - t
        prof = measure(target_dir, res.drafter_dir, args.draft_len, num_prompts=args.num_prompts,
                       max_new_tokens=args.max_new_tokens, categories=None)
        o = prof["overall"]
        row = {"variant": name, "sets": sets, "heldout_acc": res.summary.get("heldout_acc"),
               "train_s": round(train_s, 1), "al": o["mean_acceptance_length"],
               "categories": {c: round(v["mean_acceptance_length"], 2) for c, v in prof["categories"].items()}}
        rows.append(row)
        (args.work / name / "sweep.json").write_text(json.dumps(row, indent=1))
        print(f"{name}: AL {row['al']:.3f}, held-out {row['heldout_acc']}, {train_s:.0f} s", flush=True)
    print(f"\n| variant | overrides | held-out acc | train s | AL (D={args.draft_len}) |\n|---|---|---|---|---|")
    for r in rows:
        acc = " / ".join(f"{a:.2f}" for a in r["heldout_acc"] or [])
        print(f"| {r['variant']} | {', '.join(r['sets']) or '-'} | {acc} | {r['train_s']} | {r['al']:.3f} |")
    if not args.no_record:
        result = {"recipe": args.recipe.as_posix(), "steps": args.steps, "draft_len": args.draft_len,
                  "num_prompts": args.num_prompts, "max_new_tokens": args.max_new_tokens,
                  "conversations": len(convs), "rows": rows}
        print(f"record: {write_record('drafter_sweep', result, readme_rows(result), out=args.record)}")


def _parse(spec: str) -> tuple[str, list[str]]:
    name, _, sets = spec.partition(":")
    if not name or not sets or any("=" not in s for s in sets.split(",")):
        raise SystemExit(f"--variant {spec!r}: expected NAME:KEY=VALUE[,KEY=VALUE...]")
    return name, sets.split(",")


if __name__ == "__main__":
    main()
