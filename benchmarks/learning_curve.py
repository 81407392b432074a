"""Learning curve of a drafter: acceptance length vs training tokens and minutes, on this machine.

Trains the recipe with a checkpoint every K steps (all kept), then exports every checkpoint and measures its
AL on a fixed slice of speed-lite with the reference decoder.

Run:  .venv/bin/python benchmarks/learning_curve.py recipes/smollm2-135m-eagle3-cpu.yaml --every 50 \
          --out out/curve [--num-prompts 1] [--max-new-tokens 48] [--draft-len 3] [--set key=value ...]
Prints a markdown table; the raw rows go to OUT/curve.json, and the run writes its record
``benchmarks/learning_curve.json`` (``benchmarks/_record.py``; ``--record`` elsewhere, ``--no-record`` none), from
which README's table is rendered. Run again on the same OUT (e.g. with a larger
``--set drafter.training.time_budget_minutes=``) to resume the training and measure only the new checkpoints.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _record import BENCHMARKS, write_record


def readme_rows(result: dict) -> list[dict]:
    """README's row: AL at the first and the last checkpoint, with minutes and training tokens."""
    rows = result["rows"]
    if not rows:
        return []
    first, last = rows[0], rows[-1]
    d = result["draft_len"]

    def al(r: dict) -> float:  # AL at D from the chain's AL(d) (the table's column), else the run's mean
        return (r.get("al_by_d") or {}).get(str(d), r["al"])

    slice_ = len(last.get("categories") or {}) * result["num_prompts"]
    return [{"what": f"learning curve of `{result['recipe']}` ({result['overrides'] or 'as written'})",
             "result": f"AL({d}) {al(first):.2f} after {first['minutes']:.0f} min ({first['tokens'] / 1e6:.2f}M "
                       f"training tokens) -> {al(last):.2f} after {last['minutes']:.0f} min "
                       f"({last['tokens'] / 1e6:.2f}M) on its {slice_}-prompt slice",
             "where": "`benchmarks/learning_curve.md`"}]


def export_checkpoint(recipe, target_dir: Path, final_drafter: Path, ckpt: Path, out: Path) -> None:
    """Rebuild the converted model, load a checkpoint's trainable tensors and export it like the final one."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from trtllm_spec.train import modelopt_setup as ms
    from trtllm_spec.train.export import export_drafter, read_meta

    cfg = json.loads((target_dir / "config.json").read_text())
    final = load_file(str(final_drafter / "model.safetensors"))
    meta = read_meta(final_drafter)
    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    kw = {"draft_vocab_size": json.loads((final_drafter / "config.json").read_text()).get("draft_vocab_size")} \
        if recipe.drafter.type == "eagle3" else {"mask_token_id": meta["training"]["mask_token_id"]}
    ms.convert(model, cfg, recipe.drafter, **kw)
    if "d2t" in final:
        ms.load_d2t(model, final["d2t"])
    tensors = load_file(str(ckpt / "trainable.safetensors"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in tensors:
                p.copy_(tensors[name])
    export_drafter(model, out, "bf16", meta)


def main() -> None:
    import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.measure.run import measure
    from trtllm_spec.stages.drafter import run_train

    ap = argparse.ArgumentParser()
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--num-prompts", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--record", type=Path, default=BENCHMARKS / "learning_curve.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    args = ap.parse_args()
    recipe = load_recipe(args.recipe, [*args.overrides, f"drafter.training.checkpoint_every={args.every}",
                                       "drafter.training.keep_checkpoints=1000"])
    target_dir = resolve_target(recipe.target.model, recipe.base_dir).path
    res = run_train(recipe, args.out, resume=True, log=print)
    log = [json.loads(line) for line in (args.out / "train_log.jsonl").read_text().splitlines()]
    settings = {"num_prompts": args.num_prompts, "max_new_tokens": args.max_new_tokens, "draft_len": args.draft_len}
    curve = args.out / "curve.json"  # a resumed run measures only checkpoints not measured with these settings
    measured = {r["step"]: r for r in (json.loads(curve.read_text()) if curve.is_file() else [])
                if r.get("measured_with") == settings}
    rows = []
    for ckpt in sorted((args.out / "checkpoints").glob("step-*")):
        step = int(ckpt.name.split("-")[1])
        if step in measured:
            rows.append(measured[step])
            continue
        rec = next((r for r in log if r["step"] == step), log[-1])
        with tempfile.TemporaryDirectory() as tmp:
            export_checkpoint(recipe, target_dir, res.drafter_dir, ckpt, Path(tmp) / "d")
            prof = measure(target_dir, str(Path(tmp) / "d"), args.draft_len, num_prompts=args.num_prompts,
                           max_new_tokens=args.max_new_tokens)
        o = prof["overall"]
        rows.append({"step": step, "tokens": rec["tokens"], "minutes": round(rec["elapsed_s"] / 60, 2),
                     "train_acc": [round(a, 3) for a in rec["train_acc"]], "al": o["mean_acceptance_length"],
                     "al_by_d": o["acceptance_length"], "speedup": o["speedup"],
                     "categories": {c: v["mean_acceptance_length"] for c, v in prof["categories"].items()},
                     "measured_with": settings})
        print(json.dumps(rows[-1]))
    curve.write_text(json.dumps(rows, indent=2))
    print(f"\n| step | loss tokens | train minutes | train acc | AL (D={args.draft_len}) | speedup |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['step']} | {r['tokens']} | {r['minutes']} | {r['train_acc']} | {r['al']:.2f} | {r['speedup']:.2f}x |")
    if not args.no_record:
        result = {"recipe": args.recipe.as_posix(), "overrides": ", ".join(args.overrides), **settings, "rows": rows}
        print(f"record: {write_record('learning_curve', result, readme_rows(result), out=args.record)}")


if __name__ == "__main__":
    main()
