"""Regeneration tokens/s of every engine we can start on this machine, side by side in one run on the same
prompts: our in-process decoder (fp32 and bf16, with and without capturing hidden states, with idle OpenMP
threads sleeping or spinning), transformers (`hf` backend) and llama.cpp's OpenAI-compatible server
(native llama-server, what `assets serve` starts, with as many slots as the largest concurrency; `openai` backend)
at 1/4/8 concurrent requests. Every engine goes through the same entry
point a build uses (`data.regenerate.regenerate` / `data.regen_openai.regenerate_openai`).

    .venv/bin/python benchmarks/regen_engines.py --prompts 16 --max-new-tokens 64

Each in-process engine runs in a child process, so its OpenMP wait policy is set before torch loads (the CLI's
short spin, ``GOMP_SPINCOUNT=10000``, unless a row says otherwise). The short
rows (bf16 is ~70x slower than fp32 on an AVX2-only CPU; spinning threads are ~10x slower on a shared CPU) use
--short-prompts x --short-tokens, with an fp32 row of that size to compare against. Needs
`trtllm-spec assets fetch smollm2-135m prompts` and, for the server rows, `trtllm-spec assets build-llamacpp`.
Results: benchmarks/regen_engines.md; the run writes its record ``benchmarks/regen_engines.json``
(``benchmarks/_record.py``; ``--json`` elsewhere, ``--no-record`` none), from which README's table is rendered.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import BENCHMARKS, write_record

CAPTURE = (1, 14, 26)


def items_for(n: int, max_prompt_tokens: int):
    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.suite import training_items

    tok = load_tokenizer(model_dir("smollm2-135m"))
    items = training_items(None, 4 * n, 0, max_prompt_chars=4 * max_prompt_tokens)
    return [it for it in items if len(prompt_ids(tok, it.messages[:1])) <= max_prompt_tokens][:n]


def replies(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        out[rec["id"]] = rec["messages"][-1]["content"]
    return out


def child(args) -> None:
    """One in-process engine: print {tokens, seconds, replies}."""
    import torch

    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.regenerate import regenerate

    engine = None
    if args.engine == "hf":
        from trtllm_spec.data.regen_hf import HFEngine

        engine = HFEngine(model_dir("smollm2-135m"), dtype=args.dtype, device="cpu")
    items = items_for(args.n, args.max_prompt_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "conversations.jsonl"
        writer = None
        if args.capture:  # what a build does: the states of the captured layers written as feature shards
            from trtllm_spec.data.features import FeatureWriter, spec_for

            writer = FeatureWriter(Path(tmp) / "features", spec_for(model_dir("smollm2-135m"), "smollm2-135m",
                                                                      CAPTURE, "bf16"))
        rep = regenerate(items, model_dir("smollm2-135m"), out, max_new_tokens=args.tokens, batch_size=args.batch,
                         dtype=args.dtype, device="cpu", engine=engine, features=writer)
        print(json.dumps({"tokens": rep.generated_tokens, "seconds": rep.seconds, "replies": replies(out),
                          "threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}))


def run_child(engine: str, dtype: str, n: int, tokens: int, batch: int, capture: bool, cli_spin: bool,
              max_prompt_tokens: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if cli_spin:  # what the CLI sets (cli/common.short_omp_spin): idle threads spin briefly, then sleep
        env["GOMP_SPINCOUNT"] = "10000"
    cmd = [sys.executable, __file__, "--child", engine, "--dtype", dtype, "--n", str(n), "--tokens", str(tokens),
           "--batch", str(batch), "--max-prompt-tokens", str(max_prompt_tokens)] + (["--capture"] if capture else [])
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["wall"] = time.perf_counter() - t0
    return out


def run_server(n: int, tokens: int, concurrency: list[int], max_prompt_tokens: int) -> list[tuple[int, dict]]:
    from trtllm_spec.core.recipe import RegenServerConfig
    from trtllm_spec.data.model_assets import fetch_gguf, model_dir
    from trtllm_spec.data.regen_openai import regenerate_openai
    from trtllm_spec.serve.llamacpp import NativeServer
    from trtllm_spec.stages.llamacpp import build_llamacpp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    items = items_for(n, max_prompt_tokens)
    rows = []
    binary = build_llamacpp(download=True)[0].binary("llama-server")
    slots = max(concurrency)
    with tempfile.TemporaryDirectory() as tmp, NativeServer(binary, fetch_gguf("smollm2-135m"), port=port, ctx=4096,
                                                            parallel=slots, alias="smollm2-135m",
                                                            log_file=Path(tmp) / "server.log") as srv:
        for c in concurrency:
            out = Path(tmp) / f"c{c}.jsonl"
            cfg = RegenServerConfig(urls=[srv.url], concurrency=c)
            rep = regenerate_openai(items, model_dir("smollm2-135m"), out, cfg, max_new_tokens=tokens)
            rows.append((c, {"tokens": rep.generated_tokens, "seconds": rep.seconds, "replies": replies(out),
                             "failed": rep.failed, "mismatched": rep.mismatched}))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-prompt-tokens", type=int, default=128)
    ap.add_argument("--short-prompts", type=int, default=4)
    ap.add_argument("--short-tokens", type=int, default=8)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 4, 8])
    ap.add_argument("--skip", nargs="*", default=[], choices=["bf16", "spin", "hf", "server", "capture"])
    ap.add_argument("--child", choices=["ours", "hf"])
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--n", type=int)
    ap.add_argument("--tokens", type=int)
    ap.add_argument("--capture", action="store_true")
    ap.add_argument("--json", type=Path, default=BENCHMARKS / "regen_engines.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    args = ap.parse_args()
    if args.child:
        args.engine = args.child
        return child(args)

    n, t, b, mp = args.prompts, args.max_new_tokens, args.batch, args.max_prompt_tokens
    sn, st = args.short_prompts, args.short_tokens
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; "
          f"{n} prompts x max {t} new tokens, batch {b} (short rows: {sn} x {st})", flush=True)
    print("| engine | tokens | seconds | tok/s | vs ours fp32 | replies identical to ours fp32 |")
    print("|---|---|---|---|---|---|", flush=True)
    refs: dict[bool, dict] = {}
    rows: list[dict] = []

    def row(name: str, r: dict, short: bool = False) -> None:  # printed as it comes: a long run keeps its rows
        base = refs.setdefault(short, r)
        rate, base_rate = r["tokens"] / r["seconds"], base["tokens"] / base["seconds"]
        same = sum(r["replies"].get(k) == v for k, v in base["replies"].items())
        print(f"| {'[short] ' if short else ''}{name} | {r['tokens']} | {r['seconds']:.1f} | {rate:.1f} "
              f"| {rate / base_rate:.2f}x | {same}/{len(base['replies'])} |", flush=True)
        rows.append({"engine": name, "short": short, "tokens": r["tokens"], "seconds": round(r["seconds"], 1),
                     "tok_s": round(rate, 1), "vs_ours": round(rate / base_rate, 2), "identical": same,
                     "of": len(base["replies"])})

    row(f"ours fp32, batch {b}, no capture", run_child("ours", "fp32", n, t, b, False, True, mp))
    if "capture" not in args.skip:
        row(f"ours fp32, batch {b}, capture {CAPTURE}", run_child("ours", "fp32", n, t, b, True, True, mp))
    if "hf" not in args.skip:
        row(f"hf (transformers generate) fp32, batch {b}", run_child("hf", "fp32", n, t, b, False, True, mp))
    if "server" not in args.skip:
        for c, r in run_server(n, t, args.concurrency, mp):
            row(f"llama.cpp llama-server (native, GGUF Q4_1), {c} concurrent", r)
    if "bf16" not in args.skip or "spin" not in args.skip:
        row(f"ours fp32, batch {b}", run_child("ours", "fp32", sn, st, b, False, True, mp), short=True)
    if "spin" not in args.skip:
        row(f"ours fp32, batch {b}, OpenMP threads spinning (libgomp default)",
            run_child("ours", "fp32", sn, st, b, False, False, mp), short=True)
    if "bf16" not in args.skip:
        row(f"ours bf16, batch {b}", run_child("ours", "bf16", sn, st, b, False, True, mp), short=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if not args.no_record:
        result = {"prompts": n, "max_new_tokens": t, "batch": b, "short": [sn, st], "rows": rows}
        print(f"record: {write_record('regen_engines', result, readme_rows(result), out=args.json)}")


def readme_rows(result: dict) -> list[dict]:
    """README's row: each engine's speed against our fp32 decoder, and whether the server reproduces its replies."""
    rows = [r for r in result["rows"] if not r["short"]]
    if not rows:
        return []
    parts = [f"ours fp32 {rows[0]['tok_s']:.1f} tok/s"]
    hf = next((r for r in rows if r["engine"].startswith("hf ")), None)
    if hf:
        parts.append(f"transformers {hf['vs_ours']:.2f}x")
    server = [r for r in rows if "llama-server" in r["engine"]]
    if server:
        conc = [r["engine"].rsplit(", ", 1)[1].split()[0] for r in server]
        differ = max(r["of"] - r["identical"] for r in server)
        parts.append(f"native llama-server (Q4_1 GGUF, what `assets serve` starts) {server[0]['vs_ours']:.2f}x "
                     f"({conc[0]} stream) / {server[-1]['vs_ours']:.2f}x ({conc[-1]})"
                     + (f" but {differ}/{server[0]['of']} replies differ from the checkpoint's: `auto` keeps ours"
                        if differ else ""))
    bf16 = next((r for r in result["rows"] if r["short"] and "bf16" in r["engine"]), None)
    if bf16:
        parts.append(f"bf16 {bf16['vs_ours']:.2f}x (short rows)")
    return [{"what": "regeneration engines side by side (same prompts, one run)", "result": "; ".join(parts),
             "where": "`benchmarks/regen_engines.md`"}]

if __name__ == "__main__":
    main()
