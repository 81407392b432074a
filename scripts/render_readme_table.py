"""Render README's "Measured on this CPU" table from the benchmarks' records (``benchmarks/<name>.json``, the
convention of ``benchmarks/_record.py``): every record's ``readme`` rows, in ORDER, each row's "where" followed by
the record's date, commit and machine (and its ``stale`` reason, for a record kept although not current). The table sits between ``<!-- measured:begin -->`` and
``<!-- measured:end -->`` in README.md.

    .venv/bin/python scripts/render_readme_table.py           # rewrite README's table from the records
    .venv/bin/python scripts/render_readme_table.py --check   # exit 1 (and show the difference) when README differs

Pure Python, no project import: it runs from a bare checkout.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"
# the table's order; a record not named here follows, by name
ORDER = ["build", "drafter_training", "learning_curve", "regen_engines", "ecosystem", "reference_decoder",
         "planner_validation", "planner_vs_aic", "engine_parity", "dflash2_parity", "dflash2_vs_dflash", "vllm_engine", "tune",
         "suffix"]


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def machine_summary(m: dict | None) -> str:
    """'2-core AMD EPYC, AVX2 only' from a record's machine."""
    if not m:
        return "machine not recorded"
    if m.get("summary"):
        return m["summary"]
    cpu = str(m.get("cpu") or "CPU")
    for noise in ("(VM)", "(R)", "(TM)", "Processor", "CPU"):
        cpu = cpu.replace(noise, "")
    cpu = " ".join(cpu.split()[:3]) or "CPU"
    flags = m.get("flags")
    if flags is None:
        isa = ""
    elif any(f.startswith("amx") for f in flags):
        isa = "AMX"
    elif "avx512_bf16" in flags:
        isa = "AVX-512 BF16, no AMX"
    elif "avx512f" in flags:
        isa = "AVX-512, no BF16"
    elif "avx2" in flags:
        isa = "AVX2 only"
    else:
        isa = "no AVX2"
    cores = f"{m['cores']}-core " if m.get("cores") else ""
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ""
    return f"{cores}{cpu}" + (f", {isa}" if isa else "") + gpu


def load_records(bench: Path) -> list[dict]:
    recs = []
    for path in sorted(bench.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            fail(f"error: benchmarks/{path.name}: not JSON ({exc}); fix or remove the file")
        if isinstance(data, dict) and "readme" in data:
            missing = [k for k in ("benchmark", "date", "commit", "command", "machine", "result") if k not in data]
            if missing:
                fail(f"error: benchmarks/{path.name}: a record with readme rows lacks {', '.join(missing)} "
                     "(the convention of benchmarks/_record.py)")
            recs.append(data)
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(recs, key=lambda r: (rank.get(r["benchmark"], len(ORDER)), r["benchmark"]))


def render(records: list[dict]) -> str:
    lines = ["| what | result | where (date, commit, machine) |", "|---|---|---|"]
    for rec in records:
        commit = str(rec.get("commit") or "commit not recorded")[:7]
        stamp = f"{rec['date']}, {commit}, {machine_summary(rec.get('machine'))}"
        if rec.get("stale"):  # a record its benchmark's index marks not current: say so beside its numbers
            stamp += f"; not current: {rec['stale']}"
        for row in rec["readme"]:
            cells = [row["what"], row["result"], f"{row['where']} ({stamp})"]
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines)


def splice(readme: str, table: str) -> str:
    if readme.count(BEGIN) != 1 or readme.count(END) != 1 or readme.index(BEGIN) > readme.index(END):
        fail(f"error: README.md must hold one {BEGIN} ... {END} block; add the two markers around the "
             "measured table")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README's table differs from the records")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--benchmarks", type=Path, default=ROOT / "benchmarks")
    args = ap.parse_args(argv)
    old = args.readme.read_text()
    new = splice(old, render(load_records(args.benchmarks)))
    if args.check:
        if new != old:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "README.md",
                                                       "README.md (rendered from benchmarks/*.json)"))
            print("README's measured table differs from benchmarks/*.json: run "
                  ".venv/bin/python scripts/render_readme_table.py")
            return 1
        return 0
    if new != old:
        tmp = args.readme.with_name(args.readme.name + ".tmp")
        tmp.write_text(new)
        tmp.replace(args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
