"""Engine parity: each trained drafter measured by our reference decoder and by llama.cpp's own speculative
decoding on the same prompts (``trtllm-spec measure llamacpp``, comparison on), per category, with the
machine. A drafter type llama.cpp cannot run is listed with the reason the descriptor gives.

    .venv/bin/python benchmarks/engine_parity.py --drafter eagle3=out/smollm2-135m-eagle3-cpu/train/drafter \\
        [--drafter dflash=DIR] [--draft-len 3] [--num-prompts 3] [--max-new-tokens 64] [--out DIR]

Each drafter comes from its CPU recipe (``trtllm-spec train recipes/smollm2-135m-<type>-cpu.yaml``). Needs
``trtllm-spec assets fetch smollm2-135m prompts``; builds llama.cpp on first use. Results:
benchmarks/engine_parity.md; the run writes its record ``benchmarks/engine_parity.json`` (``--json`` elsewhere,
``--no-record`` not at all), from which README's table is rendered (``scripts/render_readme_table.py``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from _record import BENCHMARKS, write_record

NAMES = {"eagle3": "EAGLE-3", "dflash": "DFlash", "draft_model": "draft model", "dspark": "DSpark", "mtp": "EAGLE-MTP",
         "eagle_mtp": "EAGLE-MTP"}  # "mtp": the head's type in records written before issue 33 item 8


def readme_rows(results: list[dict], draft_len: int) -> list[dict]:
    """README's row: AL ratio per type, and how often the two engines agree to 4 decimals where outputs agree."""
    ran = [r for r in results if "comparison" in r]
    if not ran:
        return []
    prompts = ran[0]["comparison"]["overall"]["num_prompts"]
    ratios = ", ".join(f"{1 + r['comparison']['overall']['relative_difference']:.3f} ({NAMES.get(r['type'], r['type'])})"
                       for r in ran)
    same = [p for r in ran for p in r["comparison"]["prompts"] if p["same_output_both_engines"]]
    equal = sum(p["acceptance_length_llamacpp"] == p["acceptance_length_reference"] for p in same)
    lossless = sum(r["comparison"]["overall"]["identical_to_llamacpp_target_greedy"] for r in ran)
    refused = [NAMES.get(r["type"], r["type"]) for r in results if "error" in r]
    result = (f"AL ratio llama.cpp / ours {ratios}; same AL to 4 decimals on {equal} of {len(same)} prompts with the "
              f"same output on both engines; llama.cpp's output equals its own target-only greedy on "
              f"{lossless}/{prompts * len(ran)}" + (f"; not run by llama.cpp: {', '.join(refused)}" if refused else ""))
    return [{"what": f"llama.cpp's own speculative decoding vs our reference decoder, every type it runs ({prompts} "
                     f"speed-lite prompts, D = {draft_len}, f32)",
             "result": result, "where": "`benchmarks/engine_parity.md`"}]


def comparison_table(c: dict) -> list[str]:
    """``measure llamacpp``'s comparison per category and overall, as markdown rows."""
    out = ["| category | prompts | AL ours | AL llama.cpp | llama.cpp / ours | = llama.cpp greedy | = our greedy |",
           "|---|---|---|---|---|---|---|"]
    for name, r in [*sorted(c["categories"].items()), ("overall", c["overall"])]:
        out.append(f"| {name} | {r['num_prompts']} | {r['acceptance_length_reference']:.3f} | "
                   f"{r['acceptance_length_llamacpp']:.3f} | {1 + r['relative_difference']:.3f} | "
                   f"{r['identical_to_llamacpp_target_greedy']}/{r['num_prompts']} | "
                   f"{r['identical_to_reference_target_greedy']}/{r['num_prompts']} |")
    return out


def measure_greedy(drafter: str, draft_len: int, out: Path | None, num_prompts: int, max_new_tokens: int,
                   categories: list[str] | None = None) -> dict:
    """``measure llamacpp`` (comparison with our decoder on) for one SmolLM2-135M drafter on speed-lite, greedy
    fp32 on the CPU, progress on stderr: the profile, its ``comparison`` included."""
    from trtllm_spec.stages.llamacpp import run_measure_llamacpp

    return run_measure_llamacpp("smollm2-135m", drafter, draft_len, out=out, force=True, suite="speed-lite",
                                categories=categories, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                                temperature=0.0, seed=0, dtype="fp32", device="cpu",
                                progress=lambda m: print(f"  {m}", file=sys.stderr))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"{cpu}, {os.cpu_count()} cores, {platform.platform(terse=True)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", action="append", required=True, metavar="TYPE=DIR")
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=3, help="prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--categories", default=None)
    ap.add_argument("--out", type=Path, default=None, help="keep each measurement folder here")
    ap.add_argument("--json", type=Path, default=BENCHMARKS / "engine_parity.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    args = ap.parse_args()

    from trtllm_spec.errors import TrtllmSpecError
    print(f"machine: {machine()}")
    print(f"command: {' '.join(sys.argv)}")
    results = []
    for spec in args.drafter:
        kind, _, folder = spec.partition("=")
        t0 = time.perf_counter()
        try:
            prof = measure_greedy(folder, args.draft_len, args.out / kind if args.out else None, args.num_prompts,
                                  args.max_new_tokens, args.categories.split(",") if args.categories else None)
        except TrtllmSpecError as e:
            print(f"\n### {kind}: not run by llama.cpp\n\n{e}\n")
            results.append({"type": kind, "error": str(e)})
            continue
        c = prof["comparison"]
        print(f"\n### {kind} ({folder}), D={args.draft_len}, {time.perf_counter() - t0:.0f} s, "
              f"{prof['settings']['llamacpp']['version']}, spec type {prof['settings']['llamacpp']['spec_type']}\n")
        print("\n".join(comparison_table(c)))
        results.append({"type": kind, "comparison": {k: c[k] for k in ("overall", "categories", "prompts")},
                        "llamacpp": prof["settings"]["llamacpp"]["version"],
                        "spec_type": prof["settings"]["llamacpp"]["spec_type"],
                        "wall_s": round(time.perf_counter() - t0, 1)})
    print("\n" + json.dumps({"machine": machine(), "results": results}, indent=1)[:4000], file=sys.stderr)
    if not args.no_record:
        result = {"draft_len": args.draft_len, "num_prompts_per_category": args.num_prompts,
                  "max_new_tokens": args.max_new_tokens, "drafters": results}
        print(f"record: {write_record('engine_parity', result, readme_rows(results, args.draft_len), out=args.json)}")


if __name__ == "__main__":
    main()
