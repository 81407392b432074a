"""Suffix decoding (TensorRT-LLM's SA) against n-gram, with and without the cross-request pool, and EAGLE-3 with
and without the SA enhancer: acceptance length and CPU speedup of the reference decoder, side by side in one
run, per speed-lite category and on a repetitive multi-turn suite built here from the shipped prompt data.

Run (under the heavy lock on a shared machine):
    flock /tmp/heavy.lock .venv/bin/python benchmarks/suffix.py [--eagle out/<train>/drafter] [--draft-len 4] \\
        [--num-prompts 2] [--max-new-tokens 64] [--tasks 4] [--json benchmarks/suffix.json] [--no-record]

The multi-turn suite ("agentic" repetition): the first N speed-lite coding prompts (turn 1); the target's own
greedy reply to each (decoded here, so the suite follows from the prompt data and the model); a follow-up turn
that quotes that reply and asks for the complete function again with a change (category ``requote``: the
repetition is inside the request); and the same task asked again later in a new session (category ``repeat``:
the repetition is in another request, which only the global pool sees). Suite order is file order: turn-1
items, then the follow-ups, then the repeats, so the pool holds exactly the earlier requests.

Every configuration is measured by ``trtllm_spec.measure.run.measure`` (greedy, fp32, outputs compared token by
token with target-only decoding: a configuration that is not lossless fails the run). Speedup is wall clock of
the reference decoder on this CPU against target-only decoding, on the prompts it times alone (one per category);
AL is over all prompts. Prints markdown with the machine, and writes the record ``benchmarks/suffix.json``
(``benchmarks/_record.py``: result, README rows, machine, command, commit, date; ``--json`` names another file,
``--no-record`` writes none) after every configuration, from which README's table is rendered.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _record import BENCHMARKS, read_record, write_record

FOLLOW_UP = ("Rewrite the function you just wrote with clearer variable names and a one-line docstring, keeping the "
             "same logic. Reply with the complete function.")
REPEAT = "A colleague asked me the same thing earlier. {}"


def multi_turn_suite(target_dir: Path, path: Path, tasks: int, reply_tokens: int) -> list[dict]:
    """Write the repetitive multi-turn suite (JSONL) and return its rows."""
    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.suite import build_suite
    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    items = build_suite(categories=["coding"], num_prompts=tasks)
    tok = load_tokenizer(target_dir)
    model = LlamaModel.from_pretrained(target_dir)
    eos = tuple({*model.cfg.eos_token_ids, tok.eos_token_id} - {None})
    rows: list[dict] = []
    follow, repeat = [], []
    for it in items:
        first = it.messages
        reply = tok.decode(generate(model, prompt_ids(tok, first), reply_tokens, eos), skip_special_tokens=True)
        rows.append({"id": f"t1-{it.prompt_id}", "category": "first_turn", "messages": first})
        follow.append({"id": f"t2-{it.prompt_id}", "category": "requote",
                       "messages": [*first, {"role": "assistant", "content": reply},
                                    {"role": "user", "content": FOLLOW_UP}]})
        repeat.append({"id": f"again-{it.prompt_id}", "category": "repeat",
                       "messages": [{"role": "user", "content": REPEAT.format(first[-1]["content"])}]})
    rows += follow + repeat
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def configs(args) -> dict[str, tuple[str, dict | None]]:
    out = {"n-gram (k=3)": ("ngram", {"max_matching_ngram_size": 3, "is_use_oldest": True}),
           "suffix": ("suffix", {"max_matching_ngram_size": -1, "enable_global_pool": False, "pool_slots": None}),
           "suffix + global pool": ("suffix", {"max_matching_ngram_size": -1, "enable_global_pool": True,
                                               "pool_slots": 64})}
    if args.eagle:
        out["EAGLE-3"] = (str(args.eagle), None)
        out[f"EAGLE-3 + SA (threshold {args.threshold})"] = (
            str(args.eagle), {"sa_enhancer": {"threshold": args.threshold, "enable_global_pool": False,
                                              "pool_slots": None}})
    if args.eagle and args.enhancer_pool:
        out[f"EAGLE-3 + SA (threshold {args.threshold}) + pool"] = (
            str(args.eagle), {"sa_enhancer": {"threshold": args.threshold, "enable_global_pool": True,
                                              "pool_slots": 64}})
    return out


def run(args) -> dict:
    from trtllm_spec.measure.run import measure, target_checkpoint

    target_dir, _ = target_checkpoint(args.target)
    results: dict = {"draft_len": args.draft_len, "max_new_tokens": args.max_new_tokens,
                     "num_prompts_per_category": args.num_prompts, "suites": {}}
    with tempfile.TemporaryDirectory() as tmp:
        suite_file = Path(tmp) / "multi_turn.jsonl"
        t0 = time.perf_counter()
        rows = multi_turn_suite(target_dir, suite_file, args.tasks, args.reply_tokens)
        results["multi_turn_rows"] = len(rows)
        results["multi_turn_build_s"] = round(time.perf_counter() - t0, 1)
        # the multi-turn suite first (small, where repetition shows); the JSON is rewritten after every configuration
        suites = {"multi-turn": (str(suite_file), args.tasks, None),
                  "speed-lite": ("speed-lite", args.num_prompts, args.categories)}
        for suite_name, (suite, n, cats) in suites.items():
            per = results["suites"][suite_name] = {}
            for name, (spec, options) in configs(args).items():
                t0 = time.perf_counter()
                p = measure(target_dir, spec, args.draft_len, suite=suite, num_prompts=n, categories=cats,
                            max_new_tokens=args.max_new_tokens, dtype="fp32", device="cpu", drafter_options=options)
                o = p["overall"]
                if o["identical_outputs"] != o["num_prompts"]:
                    raise SystemExit(f"{name} on {suite_name}: {o['identical_outputs']}/{o['num_prompts']} outputs "
                                     "equal target-only decoding: not lossless")
                per[name] = {"overall": _row(o), "categories": {c: _row(s) for c, s in p["categories"].items()},
                             "wall_s": round(time.perf_counter() - t0, 1)}
                print(f"{suite_name} / {name}: AL {o['mean_acceptance_length']:.2f}, speedup {o['speedup']}", flush=True)
                save(args, results)
    return results


def save(args, results: dict) -> None:
    if not args.no_record:
        write_record("suffix", results, readme_rows(results), out=args.json)


def readme_rows(r: dict) -> list[dict]:
    """README's row from a result: AL overall per configuration on both suites."""
    def al(suite: str, name: str, category: str | None = None) -> str:
        row = r["suites"].get(suite, {}).get(name)
        if row is None:
            return "-"
        s = row["overall"] if category is None else row["categories"].get(category)
        return "-" if s is None else f"{s['mean_acceptance_length']:.2f}"

    mt, sl = r["suites"].get("multi-turn", {}), r["suites"].get("speed-lite", {})
    if not mt or not sl:
        return []
    enh = next((n for n in mt if n.startswith("EAGLE-3 + SA")), None)
    eagle = ("EAGLE-3" in mt) and enh is not None
    multi = (f"multi-turn AL: n-gram {al('multi-turn', 'n-gram (k=3)')}, suffix {al('multi-turn', 'suffix')}, "
             f"suffix + pool {al('multi-turn', 'suffix + global pool')} (repeats "
             f"{al('multi-turn', 'suffix', 'repeat')} -> {al('multi-turn', 'suffix + global pool', 'repeat')})")
    lite = (f"speed-lite: {al('speed-lite', 'n-gram (k=3)')} / {al('speed-lite', 'suffix')} / "
            f"{al('speed-lite', 'suffix + global pool')}")
    if eagle:
        multi += f", EAGLE-3 {al('multi-turn', 'EAGLE-3')} -> {al('multi-turn', enh)} with the enhancer"
        lite += f", EAGLE-3 {al('speed-lite', 'EAGLE-3')} -> {al('speed-lite', enh)}"
    return [{"what": "suffix decoding (TensorRT-LLM SA) vs n-gram vs EAGLE-3 (+ SA enhancer), "
                     f"D = {r['draft_len']}, on a repetitive multi-turn suite and speed-lite "
                     f"({r.get('num_prompts_per_category', '?')} prompts per category)",
             "result": f"{multi}; {lite}", "where": "`benchmarks/suffix.md`"}]


def _row(s: dict) -> dict:
    out = {k: s.get(k) for k in ("num_prompts", "mean_acceptance_length", "speedup", "identical_outputs")}
    if "sources" in s:
        out["sources"] = s["sources"]
        out["enhancer_time_share"] = s.get("enhancer_time_share")
    return out


def markdown(rec: dict) -> str:
    r, m = rec["result"], rec.get("machine")
    if isinstance(m, dict):
        m = (f"{m.get('cpu')}, {m.get('cores')} cores, flags {', '.join(m.get('flags') or []) or 'not recorded'}, "
             f"torch {m.get('torch')}")
    lines = [f"Machine: {m}.  ", f"Command: `{rec.get('command')}`; D = {r['draft_len']}, "
             f"{r['max_new_tokens']} new tokens per prompt, greedy fp32, every output identical to target-only "
             "decoding.", ""]
    for suite, per in r["suites"].items():
        names = list(per)
        cats = sorted({c for v in per.values() for c in v["categories"]})
        lines += [f"### {suite}: AL / CPU speedup", "", "| category | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(names)]
        for c in [*cats, "overall"]:
            cells = []
            for n in names:
                s = per[n]["overall"] if c == "overall" else per[n]["categories"].get(c)
                cells.append("-" if s is None else f"{s['mean_acceptance_length']:.2f} / {s['speedup'] or 0:.2f}x")
            label = f"**{c}**" if c == "overall" else c
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        enh = {n: v["overall"] for n, v in per.items() if "sources" in v["overall"]}
        if enh:
            lines += ["", "SA enhancer sources (iterations drafted / acceptance rate of its drafts):", ""]
            for n, o in enh.items():
                parts = [f"{src} {v['iterations']} it / {v['acceptance_rate'] or 0:.2f}" for src, v in o["sources"].items()]
                lines.append(f"- {n}: " + ", ".join(parts) + f"; automaton {o['enhancer_time_share'] or 0:.1%} of the "
                             "time")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--eagle", type=Path, help="an exported EAGLE-3 folder for the target (trtllm-spec train)")
    ap.add_argument("--draft-len", type=int, default=4)
    ap.add_argument("--threshold", type=int, default=4, help="the SA enhancer's sa_config.threshold")
    ap.add_argument("--enhancer-pool", action="store_true", help="also EAGLE-3 + SA with the global pool")
    ap.add_argument("--num-prompts", type=int, default=2, help="speed-lite prompts per category")
    ap.add_argument("--categories", type=lambda v: v.split(","), help="speed-lite categories (default: all)")
    ap.add_argument("--tasks", type=int, default=4, help="coding tasks of the multi-turn suite (3 prompts each)")
    ap.add_argument("--reply-tokens", type=int, default=96, help="the turn-1 reply the follow-up quotes")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--json", type=Path, default=BENCHMARKS / "suffix.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    ap.add_argument("--from-json", type=Path, help="print the markdown of an earlier run's record")
    args = ap.parse_args()
    if args.from_json:
        rec = read_record(args.from_json)
    else:
        results = run(args)
        save(args, results)
        rec = read_record(args.json) if not args.no_record else {"result": results, "command": " ".join(sys.argv)}
    print(markdown(rec))


if __name__ == "__main__":
    main()
