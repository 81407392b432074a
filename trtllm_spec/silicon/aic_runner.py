"""Run NVIDIA AIConfigurator's single-point estimate for a list of queries, in AIConfigurator's own venv.

Executed with the Python of the AIConfigurator venv (scripts/setup_aic.sh: ``aiconfigurator`` 0.12.0 and
``aiconfigurator-core`` 0.12.0 from PyPI), never imported by trtllm-spec: it imports only AIConfigurator and the
standard library. ``trtllm_spec/silicon/aic.py`` and ``benchmarks/planner_vs_aic.py`` start it. Reads a JSON list of
queries on stdin, each the keyword arguments of ``aiconfigurator.cli.api.cli_estimate`` (the documented programmatic
form of ``aiconfigurator cli estimate``) plus an ``id``; writes one JSON object to stdout:
{"aiconfigurator": version, "aiconfigurator_core": version, "results": [{"id", "tpot_ms", "ttft_ms",
"backend_version", "mode", "shares": {gemm, attention, comm, other}, "sources": {tag: ops}, "kv_cache_warning"} or
{"id", "error"}]}. ``shares``: the decode phase's time per kind of operation (static modes only), by op name.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import warnings
from importlib import metadata

COMM = ("_ar", "ar_", "allreduce", "all_reduce", "p2p", "alltoall", "all_to_all", "dispatch", "combine", "comm")


def _kind(op: str) -> str:
    name = op.lower()
    if any(k in name for k in COMM):
        return "comm"
    if "attention" in name or "mla" in name:
        return "attention"
    if "gemm" in name or "moe" in name or "ffn" in name:
        return "gemm"
    return "other"


def _shares(res) -> dict[str, float]:
    summary = getattr(res, "summary", None)
    gen = summary.get_generation_latency_dict() if summary is not None else None
    if not gen:
        return {}
    total = sum(float(v) for v in gen.values()) or 1.0
    out = dict.fromkeys(("gemm", "attention", "comm", "other"), 0.0)
    for op, v in gen.items():
        out[_kind(str(op))] += float(v) / total
    return out


def _sources(res) -> dict[str, int]:
    summary = getattr(res, "summary", None)
    src = summary.get_generation_source_dict() if summary is not None else None
    phases = [src] if src else [p for p in (res.per_ops_source or {}).values() if isinstance(p, dict)]
    out: dict[str, int] = {}
    for phase in phases:
        for tag in phase.values():
            out[str(tag)] = out.get(str(tag), 0) + 1
    return out


def main() -> None:
    os.environ.setdefault("AICONFIGURATOR_LOG_LEVEL", "ERROR")
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    queries = json.load(sys.stdin)
    with contextlib.redirect_stdout(io.StringIO()):  # the library prints progress; stdout carries the JSON only
        from aiconfigurator.cli.api import cli_estimate

        results = []
        for q in queries:
            kw = {k: v for k, v in q.items() if k != "id"}
            try:
                res = cli_estimate(**kw)
            except Exception as exc:  # an unsupported combination: recorded, not fatal
                results.append({"id": q["id"], "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
                continue
            results.append({"id": q["id"], "tpot_ms": res.tpot, "ttft_ms": res.ttft,
                            "backend_version": res.backend_version, "mode": res.mode, "shares": _shares(res),
                            "sources": _sources(res), "kv_cache_warning": res.kv_cache_warning})
    json.dump({"aiconfigurator": metadata.version("aiconfigurator"),
               "aiconfigurator_core": metadata.version("aiconfigurator-core"), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
