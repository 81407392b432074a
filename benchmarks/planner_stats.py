"""Statistics of benchmarks/planner_validation.py: errors, trend signs and interval coverage per split, framework
and source, and the benchmark JSON (benchmarks/planner_validation.json, the README's planner row)."""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
import subprocess
from importlib import metadata

SPLITS = ("calibration", "validation")


def model_log_sd(results: list[dict]) -> float:
    """The in-sample robust residual sd of the calibration split: 1.4826 x median |ln(predicted / measured)| (the
    interval's model term after a calibration, planner/interval.MODEL_LOG_SD_CALIBRATED; the held-out split never
    sets it)."""
    logs = [abs(math.log(1 + r["error"])) for res in results if res["split"] == "calibration" for r in res["rows"]]
    return 1.4826 * statistics.median(logs)


def trends(res: dict) -> list[dict]:
    """Every within-source trend of one sweep: along batch at each D with >= 2 batch sizes, along D at each batch
    with >= 2 draft lengths; the sign of (last - first), measured and predicted."""
    rows = res["rows"]
    out = []
    batches = {r["batch"] for r in rows}
    if len(batches) == len(rows) > 1 and len({r["draft_len"] for r in rows}) > 1:  # a sweep whose D moves with batch
        line = sorted(rows, key=lambda r: r["batch"])
        first, last = line[0], line[-1]
        out.append(_trend(res["point"], res["source_id"], res["split"], "batch (D as run)",
                          {"draft_len": f"{first['draft_len']}->{last['draft_len']}"}, first["batch"], last["batch"],
                          last["measured"] - first["measured"], last["predicted"] - first["predicted"],
                          first["measured"]))
    for axis, fixed in (("batch", "draft_len"), ("draft_len", "batch")):
        for f in sorted({r[fixed] for r in rows}):
            line = sorted((r for r in rows if r[fixed] == f), key=lambda r: r[axis])
            if len(line) < 2:
                continue
            first, last = line[0], line[-1]
            m, p = last["measured"] - first["measured"], last["predicted"] - first["predicted"]
            out.append(_trend(res["point"], res["source_id"], res["split"], axis, {fixed: f}, first[axis],
                              last[axis], m, p, first["measured"]))
    return out


FLAT = 0.02  # a measured change under 2% of the first speedup is a flat trend: its sign is noise, not counted


def _trend(point, source, split, axis, at, x0, x1, m, p, first) -> dict:
    flat = abs(m) < FLAT * first
    return {"point": point, "source": source, "split": split, "axis": axis, "at": at, "from": x0, "to": x1,
            "measured": round(m, 3), "predicted": round(p, 3), "flat": flat,
            "right": None if flat else (m > 0) == (p > 0)}


def cross_point_trends(results: list[dict]) -> list[dict]:
    """Model-size and TP trends: points of one source and split that share framework, drafter, batch and D but
    differ in target (size) or TP; the sign of the speedup change measured vs predicted."""
    out = []
    for axis in ("target_params", "tp"):
        groups: dict = {}
        for res in results:
            for r in res["rows"]:
                key = (res["source_id"], res["split"], res["drafter"], r["batch"], r["draft_len"],
                       res["tp"] if axis == "target_params" else res["target_params"])
                groups.setdefault(key, []).append((res[axis], r, res))
        for key, line in groups.items():
            if len({x for x, _r, _res in line}) < 2:
                continue
            line.sort(key=lambda t: t[0])
            (x0, a, r0), (x1, b, _r1) = line[0], line[-1]
            m, p = b["measured"] - a["measured"], b["predicted"] - a["predicted"]
            out.append(_trend(r0["point"], key[0], key[1], axis, {"batch": key[3], "draft_len": key[4]}, x0, x1, m,
                              p, a["measured"]))
    return out


def stats(rows: list[dict], trend_rows: list[dict]) -> dict:
    if not rows:
        return {"points": 0}
    errs = [r["error"] for r in rows]
    inside = [r["low"] <= r["measured"] <= r["high"] for r in rows]
    widths = [(r["high"] - r["low"]) / r["predicted"] for r in rows]
    return {"points": len(rows), "median_abs_error": round(statistics.median(abs(e) for e in errs), 4),
            "mean_signed_error": round(statistics.fmean(errs), 4), "max_abs_error": round(max(abs(e) for e in errs), 4),
            "pessimistic": sum(e < 0 for e in errs), "trends": sum(t["right"] is not None for t in trend_rows),
            "trend_signs_right": sum(t["right"] is True for t in trend_rows),
            "flat_trends": sum(t["right"] is None for t in trend_rows),
            "inside_interval": round(sum(inside) / len(inside), 4),
            "median_interval_width": round(statistics.median(widths), 4)}


PICK_KINDS = ("draft length", "speculate or not")


def pick_stats(results: list[dict]) -> dict:
    """Per split and kind of decision (planner_validation.picks): settings with a pick, how many of those picks are
    within the tolerance of the measured best, and the settings where no candidate fits in memory (model)."""
    out = {}
    for split in SPLITS:
        rows = [k for res in results if res["split"] == split for k in res.get("picks", [])]
        out[split] = {kind: {"settings": sum(k["kind"] == kind and k["right"] is not None for k in rows),
                             "right": sum(k["kind"] == kind and k["right"] is True for k in rows),
                             "no_pick": sum(k["kind"] == kind and k["right"] is None for k in rows)}
                      for kind in PICK_KINDS}
    return out


def all_stats(results: list[dict]) -> dict:
    tr = [t for res in results for t in trends(res)] + cross_point_trends(results)
    out: dict = {"trends": tr}
    for split in SPLITS:
        mine = [res for res in results if res["split"] == split]
        rows = [r for res in mine for r in res["rows"]]
        block = {"all": stats(rows, [t for t in tr if t["split"] == split]), "by_framework": {}, "by_source": {}}
        for key, name in (("by_framework", "framework"), ("by_source", "source_id")):
            for v in sorted({res[name] for res in mine}):
                sub = [res for res in mine if res[name] == v]
                block[key][v] = stats([r for res in sub for r in res["rows"]],
                                      [t for t in tr if t["split"] == split and t["point"] in
                                       {res["point"] for res in sub}])
        out[split] = block
    for split, v in pick_stats(results).items():
        out[split]["picks"] = v
    return out


def render_stats(st: dict, level: float) -> list[str]:
    lines = [f"| split | group | points | median abs error | mean signed error | max abs error | pessimistic | "
             f"trend signs right | inside the {level:.0%} interval | median interval width |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for split in SPLITS:
        block = st[split]
        groups = [("**all**", block["all"])] + [(f"framework {k}", v) for k, v in block["by_framework"].items()] + \
            [(f"source {k}", v) for k, v in block["by_source"].items()]
        for name, s in groups:
            if not s.get("points"):
                continue
            lines.append(f"| {split} | {name} | {s['points']} | {s['median_abs_error']:.1%} | "
                         f"{s['mean_signed_error']:+.1%} | {s['max_abs_error']:.1%} | {s['pessimistic']}/{s['points']} "
                         f"| {s['trend_signs_right']}/{s['trends']} | {s['inside_interval']:.0%} | "
                         f"{s['median_interval_width']:.1%} |")
    return lines


def render_picks(results: list[dict], st: dict) -> list[str]:
    """The count per split and kind, then every draft-length setting (the speculate-or-not ones only where wrong)."""
    lines = ["| split | draft length: picks within 3% of the best | speculate or not: within 3% | no candidate fits |",
             "|---|---|---|---|"]
    for split in SPLITS:
        pk = st[split]["picks"]
        lines.append(f"| {split} | {pk['draft length']['right']}/{pk['draft length']['settings']} | "
                     f"{pk['speculate or not']['right']}/{pk['speculate or not']['settings']} | "
                     f"{sum(v['no_pick'] for v in pk.values())} |")
    lines += ["", "| split | sweep | batch | D measured | best measured | planner's D (predicted) | its measured | of "
              "the best | right |", "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for k in res.get("picks", []):
            if k["kind"] != "draft length" and k["right"] is not False:
                continue
            d = ", ".join(map(str, k["measured_d"]))
            if k["right"] is None:
                lines.append(f"| {res['split']} | {res['point']} | {k['batch']} | {d} | D={k['measured_best_d']} "
                             f"{k['measured_best']:.2f}x | - | - | - | {k['note']} |")
                continue
            lines.append(f"| {res['split']} | {res['point']} | {k['batch']} | {d} | D={k['measured_best_d']} "
                         f"{k['measured_best']:.2f}x | D={k['planner_d']} ({k['planner_predicted']:.2f}x) | "
                         f"{k['planner_measured']:.2f}x | {k['of_best']:.1%} | "
                         f"{'yes' if k['right'] else '**no**'} |")
    return lines


def render_trends(st: dict) -> list[str]:
    lines = ["| split | sweep | axis | at | from -> to | measured change | predicted change | sign |",
             "|---|---|---|---|---|---|---|---|"]
    for t in sorted(st["trends"], key=lambda t: (t["split"], t["point"], t["axis"])):
        at = ", ".join(f"{k} {v}" for k, v in t["at"].items())
        lines.append(f"| {t['split']} | {t['point']} | {t['axis']} | {at} | {t['from']} -> {t['to']} | "
                     f"{t['measured']:+.3f} | {t['predicted']:+.3f} | "
                     + ("flat (< 2%: not counted)" if t["right"] is None else "right" if t["right"] else "**wrong**")
                     + " |")
    return lines


def machine() -> dict:
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
        name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), None)
        flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
        info["cpu"] = name or info["cpu"]
        info["isa"] = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags]
        with open("/proc/meminfo", encoding="utf-8") as f:
            kb = int(f.readline().split()[1])
        info["memory_gb"] = round(kb / 2**20, 1)
    except (OSError, ValueError, StopIteration):
        pass
    try:
        info["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        info["torch"] = None
    return info


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def benchmark_json(results: list[dict], st: dict, level: float, command: str, excluded: list[dict],
                   terms: dict, split_rule: dict | None = None, extra: dict | None = None) -> dict:
    """The benchmark record; ``terms``: the interval's model terms (out of sample and in sample, the LOSO summary);
    ``split_rule``: the split as assigned beside the split after the rule (planner_validation.split_rule_record)."""
    held, cal = st["validation"]["all"], st["calibration"]["all"]
    hp, cp = st["validation"]["picks"]["draft length"], st["calibration"]["picks"]["draft length"]
    row = (f"held-out {held['points']} points: median |error| {held['median_abs_error']:.1%}, mean signed "
           f"{held['mean_signed_error']:+.1%}, trend signs {held['trend_signs_right']}/{held['trends']}, "
           f"{held['inside_interval']:.0%} inside the {level:.0%} interval (median width "
           f"{held['median_interval_width']:.0%}); calibration {cal['points']} points: "
           f"{cal['median_abs_error']:.1%}; planner's D within 3% of the measured best: held-out {hp['right']}/"
           f"{hp['settings']}, calibration {cp['right']}/{cp['settings']}")
    return {"benchmark": "planner_validation", "date": datetime.date.today().isoformat(), "commit": commit(),
            "command": command, "machine": machine(),
            "result": {"level": level, "model_log_sd": round(terms["model_log_sd"], 4),
                       "model_log_sd_in_sample": round(terms["model_log_sd_in_sample"], 4), "loso": terms["loso"],
                       "stats": {k: st[k] for k in SPLITS},
                       "trends": st["trends"], "points": results, "excluded": excluded, "split_rule": split_rule}
            | (extra or {}),
            "readme": [{"what": "Planner: predicted vs published speculative-decoding speedups (pure math, no GPU)",
                        "result": row, "where": "benchmarks/planner_validation.md"}]}
