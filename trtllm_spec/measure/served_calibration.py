"""``measure served`` files as step-time measurements for ``plan --calibrate`` / ``replan --calibrate``: the same
loop as with trtllm-bench reports (measure/calibration.py), for any OpenAI-compatible engine (vLLM here;
trtllm-serve, vLLM or SGLang on a GPU node).

A served measurement (``served_measurement.json``, or the folder holding it) counts when it says what the server
ran: ``server.serves`` = {drafter, draft_len}, written by ``measure served --serves-drafter T --serves-draft-len
D`` (``--serves-draft-len 0`` for the target alone) and checked there against the engine's own draft counters.
Each concurrency level is one measurement: batch = the level's concurrency, TPOT = the mean streamed TPOT over its
requests, AL = the engine's own (``server_acceptance.acceptance_length``; 1 for the target alone), ISL = the
suite's mean prompt length, OSL = the level's mean output tokens per request.

Refused, naming the file and field: a file that does not say what the server ran; files of different targets,
drafters or engines; only one draft length among the files (no plain run beside the speculative one, or the
reverse); a level whose achieved concurrency is below ``REACHED`` x the concurrency asked for (the engine or the
client did not keep that many in flight: its TPOT is not that batch's); a speculative level without the engine's
AL, or with AL outside [1, 1 + D].
"""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_spec.core.artifacts import SERVED_FILE, SERVED_SCHEMA
from trtllm_spec.errors import UserError
from trtllm_spec.planner.calibrate import StepMeasurement

REACHED = 0.8  # achieved / asked concurrency below this: the level did not run that batch


def served_file(path: Path) -> Path | None:
    """``path`` as a served measurement file (a folder holding one, or the file), else None (not one)."""
    p = Path(path)
    f = p / SERVED_FILE if p.is_dir() else p
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return f if isinstance(data, dict) and data.get("schema") == SERVED_SCHEMA else None


def _read(f: Path) -> dict:
    from trtllm_spec.core.artifacts import ServedMeasurement

    try:
        data = json.loads(f.read_text())
        ServedMeasurement.model_validate(data)
    except Exception as e:  # noqa: BLE001 - any malformed file is one message
        raise UserError(f"served measurement {f} is not a valid 'measure served' file ({str(e).splitlines()[0]}); "
                        "measure again with 'trtllm-spec measure served'") from None
    return data


def engine_of(data: dict) -> str:
    """The engine named by the server's ``/v1/models`` ``owned_by`` (recorded by ``measure served``)."""
    owner = str((data.get("server") or {}).get("owned_by") or "").lower()
    return {"vllm": "vLLM", "sglang": "SGLang", "tensorrt_llm": "TensorRT-LLM", "trtllm": "TensorRT-LLM",
            "llamacpp": "llama.cpp"}.get(owner, owner or "an OpenAI-compatible server")


def level_measurement(f: Path, i: int, lv: dict, d: int, isl: int) -> StepMeasurement:
    where = f"served measurement {f}: levels[{i}] (concurrency {lv.get('concurrency')})"
    c, achieved = lv.get("concurrency"), lv.get("achieved_concurrency")
    if not isinstance(c, int) or c < 1:
        raise UserError(f"{where}: concurrency {c!r} is not a number of requests in flight")
    if not isinstance(achieved, int | float) or achieved < REACHED * c:
        raise UserError(f"{where}: achieved_concurrency {achieved} is below {REACHED:.0%} of {c}: the level did not "
                        f"keep {c} requests in flight (too few requests, or a server limit such as vLLM's "
                        "--max-num-seqs below it), so its TPOT is not that batch's; calibrate with levels it reached")
    tpot = (lv.get("tpot_ms") or {}).get("mean")
    if not isinstance(tpot, int | float) or tpot <= 0:
        raise UserError(f"{where}: no tpot_ms.mean (every reply a single token?); measure with --max-new-tokens >= 8")
    acc = lv.get("server_acceptance") or {}
    if d == 0:
        al = 1.0
    else:
        al = acc.get("acceptance_length")
        if not isinstance(al, int | float):
            why = acc.get("note") or "not reported"
            raise UserError(f"{where}: server_acceptance.acceptance_length is missing ({why}): calibration needs "
                            "the engine's own AL; serve with its metrics on (vLLM: "
                            "/metrics; trtllm-serve: enable_iter_perf_stats; llama.cpp: --metrics)")
        if not 1.0 <= al <= 1.0 + d + 1e-9:
            raise UserError(f"{where}: server_acceptance.acceptance_length {al} is outside [1, {1 + d}] for D = "
                            f"{d} (server.serves.draft_len): the file's D is not what the server ran; measure again "
                            "with the D it was started with")
    reqs = max(1, int(lv.get("requests") or 1))
    osl = max(1, round((lv.get("output_tokens") or reqs) / reqs))
    return StepMeasurement(batch=c, draft_len=d, acceptance_length=float(al), isl=isl, osl=osl,
                           tpot_s=float(tpot) * 1e-3, source=f"{f}#c{c}")


def read_served_measurements(paths: list[Path], model_ids: tuple[str, ...], drafter_type: str, where: str
                             ) -> tuple[list[StepMeasurement], list[dict], str]:
    """(measurements, provenance of each file, the engine) from served measurement files that belong to the target
    ``model_ids`` and drafter ``drafter_type`` of ``where`` (the recipe or bundle calibrated)."""
    from trtllm_spec.core.files import sha256_file

    out: list[StepMeasurement] = []
    files: list[dict] = []
    seen: dict[str, set] = {"target": set(), "drafter": set(), "engine": set(), "draft_len": set()}
    norm = {Path(str(m)).name.lower() for m in model_ids if m} | {str(m).lower() for m in model_ids if m}
    for p in paths:
        f = served_file(p)
        if f is None:
            raise UserError(f"--calibrate {p}: not a served measurement ({SERVED_FILE}, or its folder); give "
                            "'measure served' outputs, or trtllm-bench reports (not both kinds together)")
        data = _read(f)
        serves = (data.get("server") or {}).get("serves")
        if not isinstance(serves, dict) or not isinstance(serves.get("draft_len"), int):
            raise UserError(f"served measurement {f}: server.serves is missing: the file does not say what the "
                            "server ran; measure again with --serves-drafter TYPE --serves-draft-len D "
                            "(--serves-draft-len 0 for the target alone)")
        d, drafter = serves["draft_len"], serves.get("drafter")
        tgt = data.get("target") or {}
        names = {str(tgt.get("spec") or "").lower(), Path(str(tgt.get("path") or "")).name.lower(),
                 Path(str(tgt.get("spec") or "")).name.lower()} - {""}
        if not names & norm:
            raise UserError(f"served measurement {f}: target {tgt.get('spec')!r} is not the {where}'s "
                            f"({' / '.join(sorted(model_ids))}): another model's runs cannot calibrate it")
        if d > 0 and drafter != drafter_type:
            raise UserError(f"served measurement {f}: server.serves.drafter {drafter!r}; the {where}'s drafter is "
                            f"{drafter_type}: another drafter's step times cannot calibrate it")
        seen["target"].add(str(tgt.get("path") or tgt.get("spec")))
        seen["engine"].add(engine_of(data))
        seen["draft_len"].add(d)
        isl = round((data.get("suite") or {}).get("prompt_tokens_mean") or 0) or 1
        for i, lv in enumerate(data.get("levels") or []):
            out.append(level_measurement(f, i, lv, d, isl))
        files.append({"file": str(f.resolve()), "sha256": sha256_file(f), "engine": engine_of(data),
                      "draft_len": d, "drafter": drafter, "levels": [lv.get("concurrency") for lv in
                                                                     data.get("levels") or []]})
    for key in ("target", "engine"):
        if len(seen[key]) > 1:
            raise UserError(f"--calibrate: the served measurements mix {key}s ({', '.join(sorted(seen[key]))}); "
                            f"give runs of one {key}")
    if len(seen["draft_len"]) < 2 or 0 not in seen["draft_len"]:
        only = ", ".join(str(d) for d in sorted(seen["draft_len"]))
        raise UserError(f"--calibrate: the served measurements all run D = {only}; calibration needs the target "
                        "alone (--serves-draft-len 0) and a speculative run (D > 0) of the same server settings")
    return out, files, seen["engine"].pop()
