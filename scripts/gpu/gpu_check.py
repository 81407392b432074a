"""The GPU check (issue 14): everything the drafter path does on CUDA, on tiny random models built on the spot
(no network, nothing fetched), each beside the same work on this machine's CPU:

1. ``trtllm-spec train`` 50 steps on cuda in bf16 (1 process; with 2 GPUs also torchrun x 2 under ddp and fsdp),
2. ``regenerate`` a few conversations on cuda (with offline feature capture),
3. a lossless measurement: the trained EAGLE-3 head and n-gram drafting through the speculative decoder on cuda
   in fp32, outputs asserted equal to the target's own greedy decoding, tokens/s for both.

    bash scripts/gpu/gpu_check.sh                       # on the GPU machine, <= 10 minutes on one GPU
    python scripts/gpu/gpu_check.py --device cpu --steps 5   # the same code on a CPU (a smoke run)

Results: scripts/gpu/gpu_check.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def build_models(root: Path) -> tuple[Path, Path]:
    from tests.tiny import write_conversations, write_model

    # bigger than the test tier's target so the GPU has some work: 8 layers, hidden 256
    target = write_model(root / "target", layers=8, hidden=256, heads=8, kv=4, inter=768)
    return target, write_conversations(root / "conversations.jsonl", 96)


def recipe(root: Path, target: Path, data: Path, steps: int, device: str, dtype: str, strategy: str = "none",
           nproc: int = 1) -> Path:
    import yaml

    p = root / f"recipe-{device}-{strategy}-{nproc}.yaml"
    p.write_text(yaml.safe_dump({"name": "gpu-check", "target": {"model": str(target)},
                                 "drafter": {"type": "eagle3", "num_layers": 1, "draft_vocab_size": 128, "training": {
                                     "max_steps": steps, "batch_size": 8, "seq_len": 128, "lr": 1e-3,
                                     "warmup_steps": 2, "checkpoint_every": 1000, "device": device,
                                     "precision": dtype, "data": {"path": str(data), "eval_fraction": 0.1},
                                     "distributed": {"strategy": strategy, "nproc_per_node": nproc}}}}))
    return p


def train(rec: Path, out: Path, nproc: int) -> dict:
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    launch = ([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", str(nproc)]
              if nproc > 1 else [sys.executable])
    t0 = time.perf_counter()
    r = subprocess.run([*launch, "-m", "trtllm_spec", "train", str(rec), "--out", str(out)], env=env,
                       capture_output=True, text=True, timeout=400)
    if r.returncode != 0:
        raise SystemExit(f"train failed ({rec.name}):\n{r.stderr[-4000:]}")
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    s = json.loads((out / "train_summary.json").read_text())
    return {"steps": len(log), "tokens_per_s": log[-1]["tokens_per_s"], "wall_s": round(time.perf_counter() - t0, 1),
            "loss_first_last": [round(log[0]["loss"], 3), round(log[-1]["loss"], 3)],
            "placement": f"{s['placement']['device']} {s['placement']['dtype']}", "strategy": s["strategy"],
            "params_per_rank": s["trainable_params_per_rank"]}


def regen(target: Path, data: Path, out: Path, device: str, dtype: str, n: int) -> dict:
    from trtllm_spec.data.regenerate import read_done, regenerate

    class Item:
        def __init__(self, rec):
            self.id, self.source = rec["id"], "gpu-check"
            self.messages = [m for m in rec["messages"] if m["role"] == "user"]

    items = [Item(r) for r in list(read_done(data).values())[:n]]
    rep = regenerate(items, target, out, max_new_tokens=64, batch_size=8, device=device, dtype=dtype,
                     capture=(1, 4, 6))
    return {"conversations": rep.done, "tokens": rep.generated_tokens, "tokens_per_s": round(rep.tokens_per_s, 1),
            "placement": f"{rep.placement['device']} {rep.placement['dtype']}"}


def measure(target: Path, drafter: Path, device: str, prompts: int = 4, new: int = 48) -> dict:
    import torch

    from trtllm_spec.drafters.load import load_runtime_drafter
    from trtllm_spec.runtime.decoder import speculative_generate
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    model = LlamaModel.from_pretrained(target, dtype=torch.float32, device=device)
    g = torch.Generator().manual_seed(0)
    ps = [torch.randint(7, 200, (24,), generator=g).tolist() for _ in range(prompts)]
    out = {}
    for spec in (str(drafter), "ngram"):
        kind, d = load_runtime_drafter(spec, model, max_len=256)
        t_ref = t_spec = 0.0
        acc = []
        for p in ps:
            t0 = time.perf_counter()
            ref = generate(model, p, new)
            t1 = time.perf_counter()
            got, st = speculative_generate(model, d, p, new, 3, None, ())
            t2 = time.perf_counter()
            if got != ref:
                raise SystemExit(f"measure on {device}: {kind} output differs from the target's greedy decoding")
            t_ref, t_spec = t_ref + t1 - t0, t_spec + t2 - t1
            acc.append(st.acceptance_length())
        out[kind] = {"lossless": True, "mean_al": round(sum(acc) / len(acc), 3),
                     "target_tok_s": round(prompts * new / t_ref, 1), "spec_tok_s": round(prompts * new / t_spec, 1)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--cpu-steps", type=int, default=10, help="steps of the CPU comparison run")
    a = ap.parse_args()
    import torch

    from trtllm_spec.runtime.device import choose, cpu_capability

    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device is visible to torch here; run on a GPU machine or pass "
              "--device cpu for a smoke run", file=sys.stderr)
        raise SystemExit(2)
    gpus = torch.cuda.device_count() if a.device == "cuda" else 0
    print(f"machine: {platform.node()}, torch {torch.__version__}, CPU {cpu_capability(torch)} "
          f"({os.cpu_count()} cores), " + (f"{gpus} x {torch.cuda.get_device_name(0)}" if gpus else "no GPU used"))
    print(f"auto placement here: {choose('auto', 'auto').describe()}")
    rows: list[tuple[str, str, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target, data = build_models(root)
        dt = "bf16" if a.device == "cuda" else "fp32"
        res = train(recipe(root, target, data, a.steps, a.device, dt), root / "t1", 1)
        rows.append(("train x1", a.device, res))
        if gpus >= 2:
            for strategy in ("ddp", "fsdp"):
                res = train(recipe(root, target, data, a.steps, a.device, dt, strategy, 2), root / f"t2{strategy}", 2)
                rows.append((f"train x2 {strategy}", a.device, res))
        if a.device == "cuda":
            rows.append(("train x1", "cpu", train(recipe(root, target, data, a.cpu_steps, "cpu", "auto"),
                                                  root / "tc", 1)))
        rows.append(("regenerate", a.device, regen(target, data, root / "r" / "c.jsonl", a.device, dt, 16)))
        if a.device == "cuda":
            rows.append(("regenerate", "cpu", regen(target, data, root / "rc" / "c.jsonl", "cpu", "auto", 16)))
        for dev in dict.fromkeys([a.device, "cpu"]):
            rows.append(("measure", dev, measure(target, root / "t1" / "drafter", dev)))
    print(f"{'what':18s} {'device':6s} result")
    for what, dev, r in rows:
        print(f"{what:18s} {dev:6s} {json.dumps(r)}")


if __name__ == "__main__":
    main()
