"""README's main job, timed: wall clock and peak RSS of the README's first line (setup, assets, build) in a fresh
clone with an empty asset and stage cache, the stage times and the measured acceptance the bundle records, then a
cached rebuild of the same bundle; writes the record ``benchmarks/build.json`` (``benchmarks/_record.py``), from
which README's table is rendered (``scripts/render_readme_table.py``). Results and history: benchmarks/build.md.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/build.py                 # README's line, fresh clone (~20 min)
    .venv/bin/python benchmarks/build.py --in-place --recipe recipes/smollm2-135m-ngram-cpu.yaml --no-record

``--in-place`` builds in this checkout with its venv and cache (no setup, no clone: a smoke run of the script).
The clone is of this checkout's HEAD (commit what you measure). Peak RSS is the largest of the processes the job
waited for (``getrusage(RUSAGE_CHILDREN)``, what ``/usr/bin/time -v`` reports for the same line).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import BENCHMARKS, REPO, write_record

RECIPE = "recipes/smollm2-135m-eagle3-cpu.yaml"


def readme_line(recipe: str, out: str) -> str:
    """README's first command for ``recipe`` (the exact line for the default)."""
    return (f"scripts/setup.sh && .venv/bin/trtllm-spec assets fetch smollm2-135m prompts && "
            f".venv/bin/trtllm-spec build {recipe} --out {out} --overwrite")


def timed(cmd: str, cwd: Path, env: dict) -> tuple[float, float, int]:
    """Run ``cmd`` under bash; (wall seconds, peak RSS in GB of any process it waited for, exit status)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    rc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env).returncode
    wall = time.perf_counter() - t0
    peak_kib = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before)
    return wall, peak_kib / 2**20, rc


def bundle_facts(bundle: Path) -> dict:
    """Stage times (manifest), the measured profile and the plan the bundle carries."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    report = json.loads((bundle / "report" / "overhead.json").read_text())
    profile_file = bundle / "report" / "measured" / "speculation_profile.json"
    profile = json.loads(profile_file.read_text()) if profile_file.is_file() else None
    rec = report["recommendation"]
    out = {"stages": {s["name"]: {"status": s["status"], "seconds": s["seconds"], "detail": s.get("detail", "")}
                      for s in manifest["stages"]},
           "max_draft_len": rec.get("max_draft_len"), "speculation_recommended": rec.get("speculation_recommended")}
    if profile:
        o = profile["overall"]
        out["measured"] = {k: o.get(k) for k in ("num_prompts", "mean_acceptance_length", "acceptance_length",
                                                  "speedup", "identical_outputs")}
    return out


def readme_rows(result: dict) -> list[dict]:
    """README's rows: the main job's time and memory, and the head it trained."""
    wall = round(result["wall_s"])
    stages = result["bundle"]["stages"]
    parts = [f"{stages[s]['seconds']:.0f} s {s}" for s in ("drafter", "measure") if s in stages]
    where = "`benchmarks/build.md`"
    what = ("main job (README's first line, fresh clone, setup included)"
            if result["fresh_clone"] and result["recipe"] == RECIPE
            else f"`trtllm-spec build {result['recipe']}`" + (", fresh clone, setup included" if result["fresh_clone"]
                                                               else " in place (cached stages reused)"))
    rows = [{"what": what,
             "result": f"{wall // 60} min {wall % 60:02d} s, {result['peak_rss_gb']:.2f} GB peak RSS"
                       + (f" ({', '.join(parts)})" if parts else "")
                       + (f"; cached rebuild {result['cached_rebuild_s']:.1f} s" if result.get("cached_rebuild_s") else ""),
             "where": where}]
    m = result["bundle"].get("measured")
    if m and m.get("acceptance_length"):
        d = max(m["acceptance_length"], key=int)
        plan = (f"max_draft_len {result['bundle']['max_draft_len']}" if result["bundle"]["speculation_recommended"]
                else "no speculation")
        rows.append({"what": f"the drafter of that build (`{result['recipe']}`), measured by it",
                     "result": f"AL({d}) {m['acceptance_length'][d]:.2f} on {m['num_prompts']} speed-lite prompts, "
                               f"lossless {m['identical_outputs']}/{m['num_prompts']}; the plan for the recipe's GPU: "
                               f"{plan}",
                     "where": where})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default=RECIPE, help="a recipe path relative to the repository (default: README's)")
    ap.add_argument("--in-place", action="store_true", help="build in this checkout (no clone, no setup)")
    ap.add_argument("--json", type=Path, default=BENCHMARKS / "build.json", help="the record to write")
    ap.add_argument("--no-record", action="store_true", help="write no record (a trial run)")
    args = ap.parse_args()
    out = "out/" + Path(args.recipe).stem
    with tempfile.TemporaryDirectory(prefix="trtllm-spec-mainjob-") as tmp:
        env = dict(os.environ)
        if args.in_place:
            work = REPO
            line = f".venv/bin/trtllm-spec build {shlex.quote(args.recipe)} --out {out} --overwrite"
        else:
            work = Path(tmp) / "clone"
            subprocess.run(["git", "clone", "-q", str(REPO), str(work)], check=True)
            env["TRTLLM_SPEC_CACHE"] = str(Path(tmp) / "cache")
            line = readme_line(shlex.quote(args.recipe), out)
        print(f"running: {line}", flush=True)
        wall, rss, rc = timed(line, work, env)
        if rc != 0:
            raise SystemExit(f"the main job exited {rc} after {wall:.0f} s: nothing recorded")
        facts = bundle_facts(work / out)
        rebuild, _, rc = timed(f".venv/bin/trtllm-spec build {shlex.quote(args.recipe)} --out {out} --overwrite",
                               work, env)
    result = {"recipe": args.recipe, "fresh_clone": not args.in_place, "line": line.replace(str(REPO), "."),
              "wall_s": round(wall, 1), "peak_rss_gb": round(rss, 2),
              "cached_rebuild_s": round(rebuild, 1) if rc == 0 else None, "bundle": facts}
    print(json.dumps(result, indent=1))
    for row in readme_rows(result):
        print(f"| {row['what']} | {row['result']} | {row['where']} |")
    if not args.no_record:
        print(f"record: {write_record('build', result, readme_rows(result), out=args.json)}")


if __name__ == "__main__":
    sys.exit(main())
