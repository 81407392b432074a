"""The planner beside NVIDIA AIConfigurator on every published point (issue 54).

Run:  .venv/bin/python benchmarks/planner_vs_aic.py --record   # ask AIConfigurator (its own venv, through
                                                               # trtllm_spec/silicon/aic_runner.py), write
                                                               # benchmarks/planner_vs_aic_aic.json (~2 min)
      .venv/bin/python benchmarks/planner_vs_aic.py            # the comparison: planner_vs_aic.json, the tables of
                                                               # planner_vs_aic.md (printed), from the recorded file
      .venv/bin/python benchmarks/planner_vs_aic.py --json     # raw numbers, nothing written

The peer: AIConfigurator 0.12.0 (``aiconfigurator`` + ``aiconfigurator-core``, PyPI, Apache-2.0; installed by
scripts/setup_aic.sh into its own venv, never the project's): per GPU and framework release it holds NVIDIA's
measured kernel tables (GEMM, attention, MoE, communication; "silicon") and prices one decode step as the sum of its
operations; speculation as MTP (``--nextn D --nextn-accepted A``: (L + nextn) / L of the layers' compute, a
(nextn + 1) decode batch, no drafter of its own and no host cost beside the kernels). The framework release is the
one its tables hold for the GPU (``query_versions.yaml`` 'current': TensorRT-LLM 1.3.0rc20, vLLM 0.24.0, SGLang
0.5.14 on H100 / H200 / B200), the nearest it has to every point here; an RTX 3090 it does not cover.

Per point (benchmarks/planner_points.py, the split fixed there) four speedups beside the measured one:

- ``planner (roofline)``: the planner as shipped (planner_validation.predict: the roofline's work, the release's
  six host terms fitted on the calibration split);
- ``planner (silicon)``: the same step model with AIConfigurator's kernel tables as the target's work -- the plain
  step T_AR(b) is its decode step at batch b, the verify pass its step at nextn = D (the tree's verified width for a
  tree) with the (L + D) / L layer scale taken out -- the roofline's drafter, and the host terms re-fitted on the
  calibration split with that work (planner_validation.fit_release on these components); where AIConfigurator has no
  tables (RTX 3090), the roofline's;
- ``AIConfigurator``: its own estimate on the same inputs: TPOT of ``cli estimate`` (its default aggregated mode)
  without speculation over TPOT with ``--nextn D --nextn-accepted AL - 1``;
- and the plain step where the source gives one: measured, the roofline's (+ host terms), AIConfigurator's alone and
  the silicon source's (+ its host terms), per split.

Median |error| and mean signed error per split and source family (framework), and the D each picks per sweep (among
D = 0 and the D's measured there, highest predicted speedup among those that fit in memory by the roofline's
capacity model), right when within 3% of the best measured (planner_validation.picks).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import planner_fit as pf
import planner_loso
import planner_stats
import planner_validation as pv
from _record import command, commit, machine, write_record
from planner_points import POINTS, Point

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.host_costs import HOST_TERMS, release_host_profile
from trtllm_spec.core.targets import resolve_shape, resolve_target
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.errors import UserError
from trtllm_spec.planner.cost import Precision
from trtllm_spec.planner.search import CostContext, Workload, draft_step
from trtllm_spec.silicon import aic

AIC_RECORD = Path(__file__).with_name("planner_vs_aic_aic.json")
RUNNER = Path(aic.__file__).with_name("aic_runner.py")
AIC_VERSION = aic.AIC_VERSION
FAMILIES = ("TensorRT-LLM", "vLLM", "SGLang")
# the families whose calibration points the silicon source prices closer than the roofline (recorded in
# planner_vs_aic.json "summary"; decided on the calibration split only): their target's work is AIConfigurator's
SILICON_FAMILIES = ("TensorRT-LLM", "SGLang")
SOURCES = ("roofline", "silicon", "decided", "aic")
SPLITS = ("calibration", "validation")


def system(p: Point) -> str | None:
    """AIConfigurator's system for the point's GPU (trtllm_spec/silicon/aic.SYSTEMS), None where it has none."""
    return aic.SYSTEMS.get(load_hardware(p.gpu).name) if isinstance(p.gpu, str) else None


def covered(p: Point) -> bool:
    return system(p) is not None


def verify_width(p: Point, d: int) -> int:
    """Draft tokens the target verifies per sequence: D for a chain, the tree's verified tokens - 1 for a tree."""
    return p.tree[2] - 1 if (p.tree and d) else d


def base_query(p: Point, b: int) -> dict:
    """The planner's own inputs (trtllm_spec/silicon/aic.queries): the target's config.json, the GPU's system, the
    point's framework, weights, TP / EP, ISL / OSL, batch."""
    shape = resolve_shape(p.target)
    (q,) = aic.queries(aic.model_dir(resolve_target(p.target).config), system(p), aic.BACKENDS[p.framework],
                       p.weights, "bf16", p.par.tp, p.par.pp, p.par.ep or 1, shape.moe is not None, p.isl, p.osl,
                       (b,), 0)
    return {k: v for k, v in q.items() if k not in ("id", "mode", "nextn", "nextn_accepted", "batch_size")} \
        | {"batch_size": b}


def queries() -> list[dict]:
    """What AIConfigurator is asked, per covered point: its decode step (static_gen) at every batch without
    speculation and at every (batch, verified width) with nextn_accepted 0 (the step itself); its own estimate
    (agg, the CLI's default) without speculation and with nextn = D, nextn_accepted = AL - 1."""
    out = []
    for p in POINTS:
        if not covered(p):
            continue
        batches = sorted({b for b, _d in p.speedup} | set(p.base_step_s))
        for b in batches:
            out.append({"id": f"{p.name}|step|{b}|0"} | base_query(p, b) | {"mode": "static_gen"})
            out.append({"id": f"{p.name}|own|{b}|0"} | base_query(p, b) | {"mode": "agg"})
        for (b, d), _s in sorted(p.speedup.items()):
            w = verify_width(p, d)
            out.append({"id": f"{p.name}|step|{b}|{d}"} | base_query(p, b)
                       | {"mode": "static_gen", "nextn": w, "nextn_accepted": 0.0})
            out.append({"id": f"{p.name}|own|{b}|{d}"} | base_query(p, b)
                       | {"mode": "agg", "nextn": d, "nextn_accepted": round(p.al[d] - 1, 4)})
    return out


def record_aic(python: Path) -> None:
    """Ask AIConfigurator (in its own venv) every query and write its answers with machine, command and commit."""
    if not python.exists():
        sys.exit(f"no AIConfigurator venv at {python}: run scripts/setup_aic.sh (aiconfigurator {AIC_VERSION} in its "
                 "own venv), or give --aic-python PATH")
    qs = queries()
    run = subprocess.run([str(python), str(RUNNER)], input=json.dumps(qs), capture_output=True, text=True,
                         check=False)
    if run.returncode:
        sys.exit(f"aic_runner.py failed ({run.returncode}): {run.stderr.strip().splitlines()[-1:]}")
    got = json.loads(run.stdout)
    if got["aiconfigurator"] != AIC_VERSION:
        sys.exit(f"AIConfigurator {got['aiconfigurator']} in {python}; this record is for {AIC_VERSION}")
    by_id = {r["id"]: r for r in got["results"]}
    rec = {"benchmark": "planner_vs_aic_aic", "date": __import__("datetime").date.today().isoformat(),
           "commit": commit(), "command": command(), "machine": machine(),
           "aiconfigurator": got["aiconfigurator"], "aiconfigurator_core": got["aiconfigurator_core"],
           "queries": [q | {"model_path": f"<cache>/aic/models/{Path(q['model_path']).name} ({q['id'].split('|')[0]})",
                            "result": {k: v for k, v in by_id[q["id"]].items() if k != "id"}} for q in qs]}
    AIC_RECORD.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    bad = [q["id"] for q in rec["queries"] if "error" in q["result"]]
    print(f"wrote {AIC_RECORD.name}: {len(qs)} queries, {len(bad)} refused" + (f" ({bad[:3]})" if bad else ""))


def load_aic() -> tuple[dict, dict]:
    rec = json.loads(AIC_RECORD.read_text(encoding="utf-8"))
    return rec, {q["id"]: q["result"] for q in rec["queries"]}


# -- the silicon source: AIConfigurator's target work, the roofline's drafter, host terms re-fitted -----------------

def roofline_draft_work(p: Point, b: int, d: int) -> float:
    """The drafter's GPU work by the roofline (host terms 0), as the planner prices it (a tree: S steps over B topk
    rows, planner_validation.tree_candidates)."""
    if d == 0:
        return 0.0
    hw = pv.hardware_for(p, pv.GEMM_OVERLAP, pv.profile_of(p)[0] | dict.fromkeys(HOST_TERMS, 0.0))
    shape = resolve_shape(p.target)
    ctx = CostContext(shape, hw, p.par, Precision(weight=p.weights), Workload((b,), p.isl, p.osl))
    cost = MECHANISMS[p.drafter.type].cost(shape, p.drafter)
    rows, steps = (b * p.tree[1], p.tree[0]) if p.tree else (b, d)
    return draft_step(ctx, cost, rows, steps).total_s


def silicon_components(p: Point, aic: dict) -> dict | None:
    """The roofline's components with the target's work replaced by AIConfigurator's step (module docstring); None
    where AIConfigurator does not cover the point or refused a query."""
    if not covered(p):
        return None
    comp = pv.components(p)
    layers = resolve_shape(p.target).num_layers
    out = {}
    for (b, d), c in comp.items():
        r = aic.get(f"{p.name}|step|{b}|{d}", {})
        if "tpot_ms" not in r:
            return None
        w = verify_width(p, d)
        target = r["tpot_ms"] * 1e-3 * layers / (layers + w)
        out[(b, d)] = {"work": target + roofline_draft_work(p, b, d), "coef": c["coef"]}
    return out


def silicon_fits(aic: dict) -> dict[tuple[str, str], pf.ReleaseFit]:
    """Host terms per release re-fitted on the calibration split with the silicon work (covered points only)."""
    calib = [p for p in POINTS if p.split == "calibration" and covered(p)]
    out = {}
    for rel in sorted({(p.framework, p.release) for p in calib}):
        pts = [p for p in calib if (p.framework, p.release) == rel]
        base = pv.profile_of(pts[0])[0]

        def n_steps(p: Point, d: int) -> float:
            b = min(bb for bb, dd in p.speedup if dd == d)
            return pv.components(p)[(b, d)]["coef"]["draft_step_s"]

        cols, notes = pf.columns(pts, base, n_steps)
        out[rel] = pf.fit(pf.equations(pts, lambda p: silicon_components(p, aic)), cols, notes, base)
    return out


def silicon_terms(p: Point, fits: dict) -> dict[str, float]:
    """The point's host terms for the silicon source: its release's silicon fit, else the silicon fit of the release
    the release rule takes for it (core/host_costs.release_host_profile: the nearest fitted one; the rule's
    features applied the same way), else the roofline profile's."""
    prof = release_host_profile(p.framework, p.release)
    base = (prof.rule or {}).get("base_release") or p.release
    if (p.framework, base) not in fits:
        return {k: pv.profile_of(p)[0][k] for k in HOST_TERMS}
    return dict(fits[(p.framework, base)].terms)


def silicon_rows(p: Point, aic: dict, x: dict[str, float], model_sd: float) -> list[dict]:
    """The silicon source's speedup at every measured (batch, D) of ``p`` with host terms ``x``, its error and its
    interval (planner_validation.interval: the release's host uncertainty, ``model_sd`` on top)."""
    comp = silicon_components(p, aic)
    host_sd, host_sd_s = pv.release_uncertainty(p)
    out = []
    for (b, d), s in sorted(p.speedup.items()):
        pred = p.al[d] * pf.step(comp[(b, 0)], x) / pf.step(comp[(b, d)], x)
        lo, hi, host = pv.interval(comp, x, b, d, pred, host_sd, host_sd_s, pv.iv.DEFAULT_LEVEL, model_sd)
        out.append({"batch": b, "draft_len": d, "measured": s, "predicted": round(pred, 4),
                    "error": round(pred / s - 1, 4), "low": round(lo, 4), "high": round(hi, 4),
                    "host_log_sd": round(host, 4)})
    return out


def silicon_loso(aic: dict, fits: dict) -> list[dict]:
    """planner_loso for the silicon source: each calibration source priced without itself (its release's host terms
    re-fitted with the silicon work on its other sources, or, with none left, the silicon fit of the planner's
    default prior: another engine's host costs)."""
    calib = [p for p in POINTS if p.split == "calibration" and covered(p)]
    out = []
    for source in sorted({p.source_id for p in calib}):
        held = [p for p in calib if p.source_id == source]
        for rel in sorted({(p.framework, p.release) for p in held}):
            pts = [p for p in held if (p.framework, p.release) == rel]
            rest = [p for p in calib if (p.framework, p.release) == rel and p not in held]
            if rest:
                base = pv.profile_of(rest[0])[0]

                def n_steps(p: Point, d: int) -> float:
                    b = min(bb for bb, dd in p.speedup if dd == d)
                    return pv.components(p)[(b, d)]["coef"]["draft_step_s"]

                cols, notes = pf.columns(rest, base, n_steps)
                x = pf.fit(pf.equations(rest, lambda q: silicon_components(q, aic)), cols, notes, base).terms
                how = f"re-fitted on {len(rest)} other calibration sweep(s) of {rel[0]} {rel[1]}"
            else:
                x = fits[pv.DEFAULT_PRIOR].terms
                how = f"no other fitted {rel[0]} release: the default prior's silicon fit ({' '.join(pv.DEFAULT_PRIOR)})"
            out += [{"point": p.name, "loso": how, "rows": silicon_rows(p, aic, x, 0.0)} for p in pts]
    return out


def coverage_width(rows: list[dict]) -> dict:
    inside = [r["low"] <= r["measured"] <= r["high"] for r in rows]
    return {"points": len(rows), "inside_interval": round(sum(inside) / len(inside), 4),
            "median_interval_width": round(statistics.median((r["high"] - r["low"]) / r["predicted"] for r in rows), 4)}


def intervals(aic: dict, fits: dict, points: list[dict]) -> dict:
    """The 80% intervals per split: the roofline's (the shipped planner's, MODEL_LOG_SD), the silicon source's with
    its own model term out of sample (silicon_loso), and the source decided on the calibration split per family."""
    loso = silicon_loso(aic, fits)
    sd = planner_loso.calibrated_sd(loso, pv.iv.DEFAULT_LEVEL)
    silicon = {p.name: silicon_rows(p, aic, silicon_terms(p, fits), sd) for p in POINTS if covered(p)}
    out = {"silicon_model_log_sd": sd, "silicon_loso": planner_loso.summary(loso), "by_split": {}}
    for split in SPLITS:
        mine = [pt for pt in points if pt["split"] == split]
        roof = [{"measured": r["measured"], "predicted": r["roofline"], "low": r["low"], "high": r["high"]}
                for pt in mine for r in pt["rows"]]
        sil = [r for pt in mine if pt["point"] in silicon for r in silicon[pt["point"]]]
        dec = [r for pt in mine for r in (silicon[pt["point"]] if pt["point"] in silicon and pt["framework"]
                                          in SILICON_FAMILIES else
                                          [{"measured": x["measured"], "predicted": x["roofline"], "low": x["low"],
                                            "high": x["high"]} for x in pt["rows"]])]
        out["by_split"][split] = {"roofline": coverage_width(roof), "silicon (covered points)": coverage_width(sil),
                                  "decided": coverage_width(dec)}
    return out


# -- per point -------------------------------------------------------------------------------------------------------

def point_rows(p: Point, aic: dict, fits: dict) -> dict:
    res = pv.predict(p)
    comp_r = pv.components(p)
    comp_s = silicon_components(p, aic)
    x_r = {k: pv.profile_of(p)[0][k] for k in HOST_TERMS}
    x_s = silicon_terms(p, fits)
    rows = []
    for r in res["rows"]:
        b, d = r["batch"], r["draft_len"]
        row = {"batch": b, "draft_len": d, "al": r["al"], "measured": r["measured"], "roofline": r["predicted"],
               "fits": r["fits"], "low": r["low"], "high": r["high"]}
        if comp_s is not None:
            row["silicon"] = round(r["al"] * pf.step(comp_s[(b, 0)], x_s) / pf.step(comp_s[(b, d)], x_s), 4)
            own0, own1 = aic.get(f"{p.name}|own|{b}|0", {}), aic.get(f"{p.name}|own|{b}|{d}", {})
            if "tpot_ms" in own0 and "tpot_ms" in own1:
                row["aic"] = round(own0["tpot_ms"] / own1["tpot_ms"], 4)
        else:
            row["silicon"] = r["predicted"]  # no tables: the roofline stays
        # the planner with the source decided on the calibration split: the tables for SILICON_FAMILIES they cover
        row["decided"] = row["silicon"] if comp_s is not None and p.framework in SILICON_FAMILIES else r["predicted"]
        rows.append(row)
    plain = []
    for b, t in sorted(p.base_step_s.items()):
        one = {"batch": b, "measured_ms": round(t * 1e3, 3), "roofline_ms": round(pf.step(comp_r[(b, 0)], x_r) * 1e3, 3)}
        if comp_s is not None:
            one["aic_ms"] = round(aic[f"{p.name}|step|{b}|0"]["tpot_ms"], 3)
            one["silicon_ms"] = round(pf.step(comp_s[(b, 0)], x_s) * 1e3, 3)
        plain.append(one)
    out = {"point": p.name, "source": p.source_id, "split": p.split, "framework": p.framework, "release": p.release,
           "profile": res["profile"], "gpu": p.gpu if isinstance(p.gpu, str) else p.gpu.name, "tp": p.par.tp,
           "isl": p.isl, "osl": p.osl, "tree": list(p.tree) if p.tree else None, "aic_covered": comp_s is not None,
           "rows": rows, "plain_steps": plain}
    out["picks"] = {src: pv.picks(p, {(r["batch"], r["draft_len"]): {"speedup": r[src], "feasible": r["fits"]}
                                      for r in rows if src in r}
                                  | {(b, 0): {"speedup": 1.0, "feasible": True} for b, _d in p.speedup})
                    for src in SOURCES if all(src in r for r in rows)}
    return out


def _err(pred: float, meas: float) -> float:
    return pred / meas - 1


def stats(points: list[dict], src: str) -> dict:
    errs = [_err(r[src], r["measured"]) for pt in points for r in pt["rows"] if src in r]
    if not errs:
        return {"points": 0}
    return {"points": len(errs), "median_abs_error": round(statistics.median(abs(e) for e in errs), 4),
            "mean_signed_error": round(statistics.fmean(errs), 4)}


def summary(points: list[dict]) -> dict:
    out = {}
    for split in SPLITS:
        mine = [pt for pt in points if pt["split"] == split]
        covered_pts = [pt for pt in mine if pt["aic_covered"]]
        block = {"all": {src: stats(mine, src) for src in SOURCES if src != "aic"},
                 "aic_covered": {src: stats(covered_pts, src) for src in SOURCES},
                 "by_family": {}, "all_by_family": {}}
        for fam in FAMILIES:
            f = [pt for pt in covered_pts if pt["framework"] == fam]
            if f:
                block["by_family"][fam] = {src: stats(f, src) for src in SOURCES}
            f = [pt for pt in mine if pt["framework"] == fam]
            if f:
                block["all_by_family"][fam] = {src: stats(f, src) for src in SOURCES if src != "aic"}
        plain = [s for pt in mine for s in pt["plain_steps"] if "aic_ms" in s]
        if plain:
            block["plain_step"] = {k: round(statistics.median(abs(s[k] / s["measured_ms"] - 1) for s in plain), 4)
                                   for k in ("roofline_ms", "silicon_ms", "aic_ms")} | {"points": len(plain)}
        picks = {}
        for src in SOURCES:
            ks = [k for pt in mine for k in pt["picks"].get(src, []) if k["kind"] == "draft length" and k["right"]
                  is not None]
            picks[src] = {"right": sum(k["right"] for k in ks), "settings": len(ks)}
        block["d_picks"] = picks
        block["trend_signs"] = {}
        for src in SOURCES:
            tr = [t for pt in mine if all(src in r for r in pt["rows"]) for t in planner_stats.trends(
                {"point": pt["point"], "source_id": pt["source"], "split": split,
                 "rows": [r | {"predicted": r[src]} for r in pt["rows"]]})]
            block["trend_signs"][src] = {"right": sum(t["right"] is True for t in tr),
                                         "counted": sum(t["right"] is not None for t in tr),
                                         "wrong": [f"{t['point']} ({t['axis']})" for t in tr if t["right"] is False]}
        out[split] = block
    return out


def render_intervals(iv_rec: dict) -> list[str]:
    lines = ["### 80% intervals", "", f"The silicon source's model term out of sample (each calibration source priced "
             f"without itself, as planner_loso does for the roofline): **{iv_rec['silicon_model_log_sd']}** "
             f"(planner/interval.MODEL_LOG_SD_SILICON); the roofline's: planner/interval.MODEL_LOG_SD.", "",
             "| calibration sweep | priced without itself by | points | median abs error | mean signed error |",
             "|---|---|---|---|---|"]
    for sw in iv_rec["silicon_loso"]["sweeps"]:
        lines.append(f"| {sw['sweep']} | {sw['priced_by']} | {sw['points']} | {sw['median_abs_error']:.1%} | "
                     f"{sw['mean_signed_error']:+.1%} |")
    lines += ["", "| split | source | points | inside the 80% interval | median width |", "|---|---|---|---|---|"]
    for split, blk in iv_rec["by_split"].items():
        for src, v in blk.items():
            lines.append(f"| {split} | {src} | {v['points']} | {v['inside_interval']:.0%} | "
                         f"{v['median_interval_width']:.0%} |")
    return lines + [""]


def render(points: list[dict], st: dict, rec: dict) -> str:
    name = {"roofline": "planner (roofline)", "silicon": "planner (silicon)", "decided": "planner (as decided)",
            "aic": "AIConfigurator"}

    def cell(v: dict) -> str:
        return f"{v['median_abs_error']:.1%}, {v['mean_signed_error']:+.1%}" if v.get("points") else "-"

    lines = ["### Per split and source family", "",
             "| split | family | points | " + " | ".join(f"{name[s]}: median abs, mean signed" for s in name) + " |",
             "|---|---|---|---|---|---|---|"]
    for split in SPLITS:
        blk = st[split]
        for fam, v in [("**points AIConfigurator covers**", blk["aic_covered"])] + list(blk["by_family"].items()):
            lines.append(f"| {split} | {fam} | {v['roofline']['points']} | " + " | ".join(cell(v[s]) for s in name)
                         + " |")
        for fam, v in [("**every point** (RTX 3090: no tables, the roofline)", blk["all"])] + [
                (f"every {f} point", v) for f, v in blk["all_by_family"].items()]:
            lines.append(f"| {split} | {fam} | {v['roofline']['points']} | " + " | ".join(
                cell(v[s]) if s in v else "-" for s in name) + " |")
    lines += ["", "### The plain step T_AR (points that publish one)", "",
              "| split | sweep | batch | measured ms | roofline + host ms | AIConfigurator ms | silicon + host ms |",
              "|---|---|---|---|---|---|---|"]
    for pt in points:
        for s in pt["plain_steps"]:
            lines.append(f"| {pt['split']} | {pt['point']} ({pt['framework']} {pt['release']}) | {s['batch']} | "
                         f"{s['measured_ms']:.2f} | {s['roofline_ms']:.2f} | "
                         + (f"{s['aic_ms']:.2f} | {s['silicon_ms']:.2f} |" if "aic_ms" in s else "- | - |"))
    lines += ["", "Median |error| of the plain step per split: " + "; ".join(
        f"{split} ({st[split]['plain_step']['points']} points): roofline {st[split]['plain_step']['roofline_ms']:.1%}, "
        f"AIConfigurator {st[split]['plain_step']['aic_ms']:.1%}, silicon {st[split]['plain_step']['silicon_ms']:.1%}"
        for split in SPLITS if "plain_step" in st[split]) + ".", ""]
    lines += ["### Trend signs (within a source: batch, D)", "", "| split | " + " | ".join(name.values()) + " |",
              "|---|---|---|---|---|"]
    for split in SPLITS:
        ts = st[split]["trend_signs"]
        lines.append(f"| {split} | " + " | ".join(
            f"{ts[k]['right']}/{ts[k]['counted']}" + (f" (wrong: {'; '.join(ts[k]['wrong'])})" if ts[k]["wrong"] else "")
            for k in name) + " |")
    lines += ["", "### D picks per sweep (draft-length settings: within 3% of the best measured)", "",
              "| split | " + " | ".join(name.values()) + " |", "|---|---|---|---|---|"]
    for split in SPLITS:
        pk = st[split]["d_picks"]
        lines.append(f"| {split} | " + " | ".join(f"{pk[s]['right']}/{pk[s]['settings']}" for s in name) + " |")
    lines += ["", "| split | sweep | batch | best measured | " + " | ".join(name.values()) + " |",
              "|---|---|---|---|---|---|---|---|"]
    for pt in points:
        for i, k in enumerate(pt["picks"].get("roofline", [])):
            if k["kind"] != "draft length":
                continue
            cells = []
            for s in name:
                ks = pt["picks"].get(s)
                cells.append("-" if not ks else f"D={ks[i]['planner_d']} ({'right' if ks[i]['right'] else '**wrong**'})")
            lines.append(f"| {pt['split']} | {pt['point']} | {k['batch']} | D={k['measured_best_d']} "
                         f"{k['measured_best']:.2f}x | " + " | ".join(cells) + " |")
    lines += ["", "### Every point", "", "| split | sweep | framework release | GPU x TP | batch | D | AL | measured | "
              + " | ".join(name.values()) + " |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pt in points:
        for r in pt["rows"]:
            cell = {s: (f"{r[s]:.2f}x ({_err(r[s], r['measured']):+.0%})" if s in r else "-") for s in name}
            lines.append(f"| {pt['split'][:3]} | {pt['point']} | {pt['framework']} {pt['release']} | {pt['gpu']} x "
                         f"{pt['tp']} | {r['batch']} | {r['draft_len']} | {r['al']:.2f} | {r['measured']:.2f}x | "
                         + " | ".join(cell[k] for k in name) + " |")
    lines += ["", f"AIConfigurator {rec['aiconfigurator']} (core {rec['aiconfigurator_core']}), framework tables: "
              + ", ".join(sorted({f"{AIC_BACKEND_NAME[q['backend_name']]} {q['result']['backend_version']}"
                                  for q in rec["queries"] if "backend_version" in q["result"]}))
              + f"; asked {rec['date']} ({rec['commit']}): `{rec['command']}`."]
    return "\n".join(lines)


AIC_BACKEND_NAME = {v: k for k, v in aic.BACKENDS.items()}


def main() -> None:
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        return
    if "--record" in sys.argv:
        i = sys.argv.index("--aic-python") + 1 if "--aic-python" in sys.argv else None
        try:
            record_aic(Path(sys.argv[i]) if i else aic.find_aic())
        except UserError as exc:
            sys.exit(f"error: {exc}")
        return
    rec, answers = load_aic()
    fits = silicon_fits(answers)
    points = [point_rows(p, answers, fits) for p in POINTS]
    st = summary(points)
    silicon_profiles = {f"{f} {r}": {"terms_s": {k: float(f"{v:.4g}") for k, v in fit.terms.items()},
                                     "columns": fit.columns, "notes": fit.notes, "loss": round(fit.loss, 5)}
                        for (f, r), fit in fits.items()}
    result = {"aiconfigurator": {"version": rec["aiconfigurator"], "core": rec["aiconfigurator_core"],
                                 "record": AIC_RECORD.name, "asked": rec["date"], "asked_at_commit": rec["commit"]},
              "silicon_families": list(SILICON_FAMILIES), "silicon_host_terms": silicon_profiles, "summary": st,
              "intervals": intervals(answers, fits, points), "points": points}
    if "--json" in sys.argv:
        print(json.dumps(result, indent=1))
        return
    print(render(points, st, rec))
    print("\n" + "\n".join(render_intervals(result["intervals"])))
    held, cal = st["validation"], st["calibration"]
    hc = held["aic_covered"]
    fam = "; ".join(f"{f} {v['roofline']['median_abs_error']:.0%} / {v['decided']['median_abs_error']:.0%} vs "
                    f"{v['aic']['median_abs_error']:.0%}" for f, v in held["by_family"].items())
    row = (f"held-out points AIConfigurator covers ({hc['roofline']['points']}): median |error| planner "
           f"{hc['roofline']['median_abs_error']:.1%} (roofline) / {hc['decided']['median_abs_error']:.1%} (its "
           f"kernel tables as the work for TensorRT-LLM and SGLang), AIConfigurator {AIC_VERSION} "
           f"{hc['aic']['median_abs_error']:.1%}; per family (roofline / as decided vs AIConfigurator) {fam}; "
           f"calibration: {cal['aic_covered']['roofline']['median_abs_error']:.1%} / "
           f"{cal['aic_covered']['decided']['median_abs_error']:.1%} vs {cal['aic_covered']['aic']['median_abs_error']:.1%}")
    write_record("planner_vs_aic", result, [{"what": "Planner vs NVIDIA AIConfigurator on published speculative-"
                                             "decoding speedups (pure math, no GPU)", "result": row,
                                             "where": "benchmarks/planner_vs_aic.md"}])


if __name__ == "__main__":
    main()
