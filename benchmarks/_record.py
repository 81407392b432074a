"""The record every kept benchmark writes, ``benchmarks/<name>.json`` (README's "Measured on this CPU" table is
rendered from these files by ``scripts/render_readme_table.py``):

    benchmark  the name (the file's stem)
    date       ISO date (UTC) of the run
    commit     the checkout's commit (``+dirty`` when its tracked files differ)
    command    the command line, paths inside the repository relative, others cut to ``.../<last two parts>``
    machine    CPU model, cores, memory, the ISA flags that decide speed (AVX2, AVX-512, BF16, AMX), Python, torch
    result     the benchmark's own data
    readme     rows ``{"what", "result", "where"}`` of README's table
    stale      (optional, set by hand) why a record kept in README is not current; README shows it beside the row
    source     (optional) where a record not written by its script came from ("transcribed from X.md")

Import it from a benchmark script (``benchmarks/`` is ``sys.path[0]`` when the script runs):
``from _record import write_record``. Loads nothing heavy: torch is asked only when the script already imported it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
# the CPU flags that decide which kernels run (bf16 vs fp32, AMX tiles): /proc/cpuinfo names
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_bf16", "amx_int8")


def _cpuinfo() -> tuple[str, list[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), []
    model, flags = platform.processor() or platform.machine(), set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
    return model, [f for f in ISA_FLAGS if f in flags]


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict:
    """This machine as README's table needs it; torch details only if the caller already imported torch."""
    model, flags = _cpuinfo()
    out = {"cpu": model, "cores": os.cpu_count(), "memory_gib": _memory_gib(), "flags": flags,
           "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
           "torch": _version("torch")}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_threads"] = torch.get_num_threads()
        cap = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
        out["torch_cpu_capability"] = cap() if cap else None
        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return out


def commit() -> str | None:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short=10", "HEAD")
        return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def portable_arg(arg: str) -> str:
    """One argument without the machine's absolute paths: inside the repository relative, elsewhere the last two
    parts (``--x=/abs/p`` forms too)."""
    if "=" in arg and arg.startswith("-"):
        key, _, value = arg.partition("=")
        return f"{key}={portable_arg(value)}"
    if not os.path.isabs(arg):
        return arg
    path = Path(arg)
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return ".../" + "/".join(path.parts[-2:])


def command(argv: list[str] | None = None) -> str:
    """The command line that ran, as a user would retype it from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    script = portable_arg(argv[0]) if argv else ""
    return " ".join([".venv/bin/python", script] + [portable_arg(a) for a in argv[1:]])


def write_record(name: str, result, readme: list[dict], *, argv: list[str] | None = None,
                 out: Path | None = None, **extra) -> Path:
    """Write ``benchmarks/<name>.json`` (or ``out``) atomically; returns the path."""
    for row in readme:
        if set(row) != {"what", "result", "where"}:
            raise ValueError(f"a readme row has the keys what, result, where; got {sorted(row)}")
    record = {"benchmark": name, "date": _dt.datetime.now(_dt.timezone.utc).date().isoformat(), "commit": commit(),
              "command": command(argv), "machine": machine(), **extra, "result": result, "readme": readme}
    path = out or BENCHMARKS / f"{name}.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def read_record(path: Path) -> dict:
    """A record, or an older file that holds the result alone (read as its ``result``)."""
    data = json.loads(Path(path).read_text())
    return data if isinstance(data, dict) and "benchmark" in data and "result" in data else {"result": data}
