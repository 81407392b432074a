"""Acceptance per request mode (issue 38): the CPU default's target (SmolLM2-135M) and an EAGLE-3 head measured by our
reference decoder and by llama.cpp's own speculative decoding on the same prompts, in each mode:

- default: the checkpoint's chat template, greedy;
- JSON schema: speed-lite-modes' json_mode and tool_call prompts, each with its schema (xgrammar masks in our
  decoder; llama-server's json_schema grammar), greedy;
- T=0.7: sampling (our rejection sampling; llama.cpp samples the target and accepts a draft equal to the sample),
  with our greedy AL beside it;
- thinking on/off: SmolLM2's chat template does not read enable_thinking, so the mode is refused (the refusal is
  recorded); the fast tier tests a Qwen3-style template (tests/unit/test_request_mode.py).

    flock /tmp/heavy.lock .venv/bin/python benchmarks/request_modes.py --drafter DIR [--draft-len 3] \\
        [--categories coding,humanities,qa,writing] [--num-prompts 2] [--max-new-tokens 64] [--sample-seeds 3]

Needs ``trtllm-spec assets fetch smollm2-135m prompts``; builds llama.cpp on first use. Writes
benchmarks/request_modes.json (the benchmark JSON convention) and prints the markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def machine() -> dict:
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        mem = None
    import torch

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem,
            "isa": sorted(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags),
            "python": platform.python_version(), "torch": torch.__version__}


def commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def one_mode(args, mode, seed: int, suite: str = "speed-lite", categories: str | None = None) -> dict:
    from trtllm_spec.stages.llamacpp import run_measure_llamacpp

    t0 = time.perf_counter()
    prof = run_measure_llamacpp("smollm2-135m", args.drafter, args.draft_len, out=None, force=False,
                                suite=suite, categories=(categories or args.categories).split(","),
                                num_prompts=args.num_prompts, max_new_tokens=args.max_new_tokens,
                                temperature=mode.temperature, seed=seed, dtype="fp32", device="cpu",
                                request_mode=mode, allow_long=True, progress=lambda m: print(m, file=sys.stderr))
    c = prof["comparison"]
    row = {"al_llamacpp": c["overall"]["acceptance_length_llamacpp"],
           "al_reference": c["overall"]["acceptance_length_reference"],
           "relative_difference": c["overall"]["relative_difference"],
           "categories": {k: {"al_llamacpp": v["acceptance_length_llamacpp"],
                              "al_reference": v["acceptance_length_reference"]} for k, v in c["categories"].items()},
           "num_prompts": c["overall"]["num_prompts"],
           "identical_to_llamacpp_target_only": c["overall"]["identical_to_llamacpp_target_greedy"],
           "identical_to_reference_target_only": c["overall"]["identical_to_reference_target_greedy"],
           "wall_s": round(time.perf_counter() - t0, 1)}
    for key in ("structured_output", "structured_output_reference", "greedy_comparison_reference"):
        if key in prof or key in c:
            row[key] = prof.get(key, c.get(key))
    return row


def served_modes(drafter: str) -> dict:
    """``--served``: llama-server with the head (``assets serve --drafter``'s stage), measured by ``measure --engine
    openai`` in two modes; per-request AL (response timings.draft_n*) beside the level's /metrics counters."""
    from trtllm_spec.core.request_mode import RequestMode
    from trtllm_spec.serve.llamacpp import free_port
    from trtllm_spec.stages.llamacpp import speculative_server
    from trtllm_spec.stages.served import run_served

    out = {}
    server = speculative_server("smollm2-135m", Path(drafter), 3, host="127.0.0.1", port=free_port(), threads=2,
                                ctx=2048, parallel=1)
    with server:
        for name, mode in {"default": RequestMode(), "json_object": RequestMode(response_format="json_object")}.items():
            d = run_served(server_url=server.url, server_model=None, concurrency="1", target="smollm2-135m",
                           recipe_file=None, gpu=None, suite="speed-lite", categories=["coding", "qa"], num_prompts=2,
                           max_new_tokens=48, temperature=0.0, seed=0, chat_template=None, training_data=None,
                           allow_overlap=False, timeout_s=300, out=None, force=False, request_mode=mode,
                           progress=lambda m: print(m, file=sys.stderr))
            lv = d["levels"][0]
            out[name] = {"per_request_acceptance": lv["per_request_acceptance"],
                         "counters_acceptance_length": lv["server_acceptance"].get("acceptance_length")}
    return out


def markdown(doc: dict) -> str:
    r, m = doc["result"], doc["machine"]
    lines = ["# Acceptance per request mode: our decoder vs llama.cpp", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, ISA {', '.join(m['isa'])}; python "
             f"{m['python']}, torch {m['torch']}. Commit {doc['commit']}, {doc['date']}.  ",
             f"Command: `{doc['command']}`.  ",
             f"SmolLM2-135M (fp32) + a quick EAGLE-3 head (60 steps on 24 regenerated conversations), D = "
             f"{r['draft_len']}, up to {r['max_new_tokens']} new tokens, {r['num_prompts_per_category']} prompts per "
             "category; both engines on the same prompt token ids.", "",
             "| mode | prompts (suite: categories) | AL llama.cpp | AL ours | relative | within 5% | outputs = "
             "target-only (llama.cpp / ours) | JSON valid (llama.cpp / ours) |", "|---|---|---|---|---|---|---|---|"]
    for name, row in r["modes"].items():
        first = row["seeds"][0] if "seeds" in row else row
        n = sum(x["num_prompts"] for x in row["seeds"]) if "seeds" in row else row["num_prompts"]
        cats = ", ".join(first["categories"])
        same = ("n/a (sampled)" if "seeds" in row else
                f"{row['identical_to_llamacpp_target_only']}/{n} / {row['identical_to_reference_target_only']}/{n}")
        so, sr = first.get("structured_output"), first.get("structured_output_reference")
        valid = (f"{so['valid']}/{so['num_outputs']} / {sr['valid']}/{sr['num_outputs']}" if so and sr else "-")
        lines.append(f"| {name} | {n} ({first.get('suite', 'speed-lite')}: {cats}) | {row['al_llamacpp']:.3f} | "
                     f"{row['al_reference']:.3f} | {row['relative_difference']:+.1%} | "
                     f"{'yes' if row['within_5_percent'] else 'NO'} | {same} | {valid} |")
    lines += ["", "Per category (AL llama.cpp / ours):", ""]
    for name, row in r["modes"].items():
        rows = row.get("seeds", [row])
        for k, x in enumerate(rows):
            tag = f"{name}" + (f", seed {k}" if "seeds" in row else "")
            lines.append(f"- {tag}: " + "; ".join(f"{c} {v['al_llamacpp']:.3f} / {v['al_reference']:.3f}"
                                                   for c, v in x["categories"].items()))
    g = [x.get("greedy_comparison_reference") for x in r["modes"].get("T=0.7", {}).get("seeds", [])]
    if any(g):
        lines += ["", "Greedy vs sampled on our decoder (same prompts): " + "; ".join(
            f"seed {k}: greedy {x['overall']['greedy']:.3f}, T=0.7 {x['overall']['sampled']:.3f}"
            for k, x in enumerate(g) if x)]
    sv = r.get("served_per_request")
    if sv:
        lines += ["", f"Served (`{sv['command']}`): llama-server with the head at D = 3, `measure served`, "
                  "2 coding + 2 qa prompts, 48 tokens; per-request AL from each response's timings.draft_n / "
                  "draft_n_accepted beside the level's /metrics counters:", "",
                  "| mode | per-request AL p10 / p50 / p90 | counters AL |", "|---|---|---|"]
        for name, v in sv["modes"].items():
            o = v["per_request_acceptance"]["overall"]
            lines.append(f"| {name} | {o['p10']:.3f} / {o['p50']:.3f} / {o['p90']:.3f} | "
                         f"{v['counters_acceptance_length']:.3f} |")
    lines += ["", *(f"Note: {n}" for n in r.get("notes", []))]
    lines += ["", f"Thinking on/off: {r['thinking']}. A Qwen3-style template with the switch is tested in the fast "
              "tier (tests/unit/test_request_mode.py: the prompts differ by the empty think block, the pair is "
              "measured as two categories of speed-lite-modes).", ""]
    return "\n".join(lines)


# the quick EAGLE-3 head the recorded run used (``--train-head DIR`` trains it: ~2 min of training on 2 cores)
QUICK_HEAD = {"type": "eagle3", "draft_vocab_size": 4096, "training": {
    "max_steps": 60, "batch_size": 2, "seq_len": 256, "lr": 0.002, "warmup_steps": 4, "checkpoint_every": 60,
    "init_from_target": "lm_head",
    "data": {"num_conversations": 24, "regen_max_new_tokens": 64, "regen_batch_size": 12, "max_prompt_tokens": 96,
             "eval_fraction": 0.125, "loss_on": "all"}}}


def train_head(out: Path) -> Path:
    import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
    from trtllm_spec.core.recipe_load import recipe_from_dict
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.stages.drafter import run_train

    recipe = recipe_from_dict({"name": "request-modes-head", "target": {"model": str(fetch_model("smollm2-135m"))},
                               "drafter": QUICK_HEAD})
    return run_train(recipe, out, log=lambda m: print(m, file=sys.stderr)).drafter_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", help="an exported EAGLE-3 head for SmolLM2-135M")
    ap.add_argument("--train-head", type=Path, metavar="DIR", help="train the quick head (QUICK_HEAD) into DIR first")
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--categories", default="coding,humanities,qa,writing")
    ap.add_argument("--num-prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--sample-seeds", type=int, default=3, help="seeds of the T=0.7 mode (AL pooled over them)")
    ap.add_argument("--json", type=Path, default=HERE / "request_modes.json")
    ap.add_argument("--served", action="store_true", help="only the served check (llama-server, per-request AL)")
    ap.add_argument("--render", type=Path, help="only write the markdown of this result JSON beside it")
    args = ap.parse_args()
    if args.render:
        args.render.with_suffix(".md").write_text(markdown(json.loads(args.render.read_text())))
        return
    if args.train_head:
        args.drafter = str(train_head(args.train_head))
    if not args.drafter:
        ap.error("give --drafter DIR or --train-head DIR")
    if args.served:
        print(json.dumps(served_modes(args.drafter), indent=1))
        return
    from trtllm_spec.core.request_mode import RequestMode
    from trtllm_spec.data.chat import check_template_kwargs, load_tokenizer
    from trtllm_spec.data.model_assets import fetch_model
    from trtllm_spec.errors import UserError

    try:
        check_template_kwargs(load_tokenizer(fetch_model("smollm2-135m")), {"enable_thinking": False})
        thinking = "SmolLM2's template reads enable_thinking (unexpected)"
    except UserError as exc:
        thinking = f"refused: {exc}".replace(str(fetch_model("smollm2-135m")), "<smollm2-135m>")
    # name -> (mode, suite, categories): JSON mode on speed-lite-modes' json_mode / tool_call categories (prompts
    # that ask for JSON, each with its schema: data/mode_suite.py); the others on speed-lite's prompts
    modes = {"default (greedy)": (RequestMode(), "speed-lite", None),
             "JSON schema (greedy)": (RequestMode(), "speed-lite-modes", "json_mode,tool_call"),
             "T=0.7": (RequestMode(temperature=0.7), "speed-lite", None)}
    result: dict = {"head": QUICK_HEAD if args.train_head else "given with --drafter", "draft_len": args.draft_len, "max_new_tokens": args.max_new_tokens,
                    "categories": args.categories.split(","), "num_prompts_per_category": args.num_prompts,
                    "thinking": thinking, "modes": {}}
    for name, (mode, suite, cats) in modes.items():
        seeds = range(args.sample_seeds) if mode.samples else [0]
        rows = [{"suite": suite, **one_mode(args, mode, s, suite, cats)} for s in seeds]
        if len(rows) == 1:
            result["modes"][name] = rows[0]
            continue
        # sampled: AL pooled over seeds (each seed's runs hold the same prompts; mean of the per-seed ALs)
        mean = {k: round(sum(r[k] for r in rows) / len(rows), 6) for k in ("al_llamacpp", "al_reference")}
        result["modes"][name] = {**mean, "relative_difference": round(mean["al_llamacpp"] / mean["al_reference"] - 1,
                                                                      6), "seeds": rows}
    for r in result["modes"].values():
        r["within_5_percent"] = abs(r["relative_difference"]) <= 0.05
    readme = [{"what": f"AL(D={args.draft_len}) per request mode, SmolLM2-135M + quick EAGLE-3 head: {name}",
               "result": f"llama.cpp {r['al_llamacpp']:.3f} vs ours {r['al_reference']:.3f} "
                         f"({r['relative_difference']:+.1%})", "where": "benchmarks/request_modes.md"}
              for name, r in result["modes"].items()]
    argv = " ".join(a if not a.startswith("/") else "<" + Path(a).name + ">" for a in sys.argv[1:])
    doc = {"benchmark": "request_modes", "date": datetime.date.today().isoformat(), "commit": commit(),
           "command": f".venv/bin/python benchmarks/request_modes.py {argv}",
           "machine": machine(), "result": result, "readme": readme}
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    args.json.with_suffix(".md").write_text(markdown(doc))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
