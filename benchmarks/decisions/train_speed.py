"""Training tokens/s of the CPU default (smollm2-135m-eagle3-cpu: 1-layer EAGLE-3, 4k draft vocabulary, offline
features, batch 4 x 384 tokens) through the real Trainer, for the code on PYTHONPATH; ``--compare DIR`` also
runs another checkout (e.g. the tree before issue 14) in a subprocess on the same data and prints both, side by
side. ``--profile`` adds torch.profiler's top ops of one step. Offline features come from one prefill of the
target over real training prompts (what regeneration stores), so no regeneration is needed.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/decisions/train_speed.py --steps 30 --compare <another checkout> --profile

Needs `trtllm-spec assets fetch smollm2-135m prompts`. Results: benchmarks/decisions/train_speed.md.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def features(n_prompts: int, seq_len: int):
    """Chunks with the target's captured layers over real training prompts (one fp32 prefill each)."""
    import torch

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.suite import training_items
    from trtllm_spec.runtime.llama import LlamaModel
    from trtllm_spec.train.samples import pack

    d = model_dir("smollm2-135m")
    tok, model = load_tokenizer(d), LlamaModel.from_pretrained(d, dtype=torch.float32)
    items = training_items(None, n_prompts, 0, max_prompt_chars=4 * seq_len)
    seqs, feats = [], []
    for it in items:
        ids = prompt_ids(tok, it.messages[:1])[:seq_len]
        cache = model.new_cache(1, len(ids) + 1)
        with torch.no_grad():
            _, aux, normed = model.forward(torch.tensor([ids]), torch.tensor([0]), cache, capture=(1, 14, 26))
        seqs.append((ids, [1] * len(ids)))
        feats.append((torch.cat(aux, -1)[0].to(torch.bfloat16) if isinstance(aux, (list, tuple)) else
                      aux[0].to(torch.bfloat16), normed[0].to(torch.bfloat16)))
    return d, pack(seqs, seq_len, tok.pad_token_id or 0, feats)


def run(steps: int, profile: bool) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
    from trtllm_spec.core.recipe_load import load_recipe
    from trtllm_spec.train import modelopt_setup as ms
    from trtllm_spec.train.samples import Schedule
    from trtllm_spec.train.trainer import Trainer

    repo = Path(__file__).resolve().parents[2]
    recipe = load_recipe(repo / "recipes" / "smollm2-135m-eagle3-cpu.yaml")
    d, tc = recipe.drafter, recipe.drafter.training
    target_dir, chunks = features(16, tc.seq_len)
    cfg = json.loads((target_dir / "config.json").read_text())
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    ms.convert(model, cfg, d, draft_vocab_size=d.draft_vocab_size, offline=True)
    kw = {}
    params = inspect.signature(Trainer).parameters
    placement = None
    if "bf16" in params:  # issue 14: the shared rule decides (fp32 on an AVX2-only CPU)
        from trtllm_spec.runtime.device import choose

        placement = choose(tc.device, tc.precision)
        kw = {"device": placement.device, "bf16": placement.bf16}
    tc = tc.model_copy(update={"max_steps": steps + 2, "time_budget_minutes": None})
    with tempfile.TemporaryDirectory() as out:
        tr = Trainer(model, tc, Schedule(chunks, tc.batch_size, tc.grad_accum, tc.seed), [], Path(out),
                     log=lambda m: None, **kw)
        for _ in range(2):  # warm-up steps: allocations, first-call costs
            tr.train_step()
        t0, tokens0 = time.perf_counter(), tr.tokens
        for _ in range(steps):
            tr.train_step()
        secs = time.perf_counter() - t0
        positions = steps * tc.batch_size * tc.seq_len
        import trtllm_spec

        res = {"code": str(Path(trtllm_spec.__file__).parents[1]), "steps": steps, "seconds": round(secs, 2),
               "loss_tokens_per_s": round((tr.tokens - tokens0) / secs, 1),
               "positions_per_s": round(positions / secs, 1), "s_per_step": round(secs / steps, 3),
               "bf16_autocast": bool(tr.autocast), "placement": placement.as_dict() if placement else None}
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as prof

            with prof(activities=[ProfilerActivity.CPU]) as p:
                tr.train_step()
            res["profile"] = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--compare", type=Path, help="another checkout to time the same way (subprocess)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="with --compare: alternate the two trees A B B A ... "
                    "(each a fresh subprocess) so a shared machine's load hits both alike; medians printed")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.json:  # a subprocess timing another checkout: only what every version of the code has
        print("RESULT " + json.dumps(run(a.steps, False)))
        return
    rows = []
    if a.compare:
        def timed(tree: Path) -> dict:
            env = os.environ | {"PYTHONPATH": str(tree)}
            r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--steps", str(a.steps), "--json"],
                               env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{tree} failed:\n{r.stderr[-3000:]}")
            res = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))[7:])
            print(f"{res['code']}: {res['s_per_step']} s/step", file=sys.stderr)
            return res

        here = REPO_ROOT
        runs: dict[str, list[dict]] = {str(a.compare): [], str(here): []}
        for i in range(a.rounds):
            for tree in ((a.compare, here) if i % 2 == 0 else (here, a.compare)):
                runs[str(tree)].append(timed(tree))
        for rs in runs.values():
            med = sorted(rs, key=lambda x: x["s_per_step"])[len(rs) // 2]
            rows.append({**med, "all_s_per_step": [x["s_per_step"] for x in rs]})
    import torch

    from trtllm_spec.runtime.device import cpu_capability

    mine = run(1, True) if a.profile else (rows[-1] if rows else run(a.steps, False))
    if not rows:
        rows.append(mine)
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, CPU capability "
          f"{cpu_capability(torch)}, {torch.get_num_threads()} threads; command: {' '.join(sys.argv)}")
    print(f"{'code':40s} {'s/step':>8s} {'positions/s':>12s} {'loss tok/s':>11s} {'bf16':>5s}")
    for r in rows:
        print(f"{r['code']:40s} {r['s_per_step']:8.3f} {r['positions_per_s']:12.1f} {r['loss_tokens_per_s']:11.1f} "
              f"{str(r['bf16_autocast']):>5s}  s/step of each round: {r.get('all_s_per_step', [r['s_per_step']])}")
    if len(rows) == 2:
        print(f"ratio (this tree / {rows[0]['code']}): {rows[1]['positions_per_s'] / rows[0]['positions_per_s']:.3f}")
    if rows[-1].get("placement"):
        print(f"placement: {rows[-1]['placement']}")
    if mine.get("profile"):
        print("profile of one step (this tree):\n" + mine["profile"])


if __name__ == "__main__":
    main()
