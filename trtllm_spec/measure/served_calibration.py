"""``measure served`` files as step-time measurements for ``plan --calibrate`` / ``replan --calibrate``: the same
loop as with trtllm-bench reports (measure/calibration.py), for any OpenAI-compatible engine (vLLM here;
trtllm-serve, vLLM or SGLang on a GPU node).

A served measurement (``served_measurement.json``, or the folder holding it) counts when it says what the server
ran: ``server.serves`` = {drafter, draft_len}, written by ``measure served --serves-drafter T --serves-draft-len
D`` (``--serves-draft-len 0`` for the target alone) and checked there against the engine's own draft counters.
Each concurrency level is one measurement: batch = the level's concurrency, TPOT = the mean streamed TPOT over its
requests, AL = the engine's own (``server_acceptance.acceptance_length``; 1 for the target alone), ISL = the
suite's mean prompt length, OSL = the level's mean output tokens per request.

A file's target is the calibrated one when both resolve to the same checkpoint (``core.targets.target_identity``:
the config.json hash ``measure served`` records, else what the names resolve to here: a folder, a fetched asset),
whatever each is called (``smollm2-135m`` and a bundle's ``target/`` copy of it are one model); only where either
side resolves to no checkpoint here (a preset, a folder of another machine) are the names compared.

Refused, naming the file and field: a file that is not readable JSON (where it breaks); a file that does not say
what the server ran; engine counters that cannot be true (measure/counters.py); files of different targets,
drafters or engines; only one draft length among the files (no plain run beside the speculative one, or the
reverse); a level whose achieved concurrency is below ``REACHED`` x the concurrency asked for (the engine or the
client did not keep that many in flight: its TPOT is not that batch's); a speculative level without the engine's
AL, or with AL outside [1, 1 + D].
"""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_spec.core.artifacts import SERVED_FILE, SERVED_SCHEMA
from trtllm_spec.core.targets import TargetIdentity
from trtllm_spec.errors import UserError
from trtllm_spec.measure.counters import check_counts
from trtllm_spec.planner.calibrate import StepMeasurement

REACHED = 0.8  # achieved / asked concurrency below this: the level did not run that batch


def served_file(path: Path) -> Path | None:
    """``path`` as a served measurement file, else None (not one): a folder holding ``served_measurement.json`` or
    a file of that name (whatever it holds: ``_read`` says what is wrong with it), or another JSON file whose
    schema is the served measurement's."""
    p = Path(path)
    f = p / SERVED_FILE if p.is_dir() else p
    if not f.is_file():
        return None
    if f.name == SERVED_FILE:
        return f
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return f if isinstance(data, dict) and data.get("schema") == SERVED_SCHEMA else None


WRITER = "'trtllm-spec measure served ... --out DIR' writes it"


def _read(f: Path) -> dict:
    """The file, checked: readable JSON (else where it breaks), the served measurement's schema, its fields."""
    from trtllm_spec.core.artifacts import ServedMeasurement
    from trtllm_spec.core.files import read_text

    text = read_text(f, "served measurement", UserError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"served measurement {f} is not readable JSON: {e.msg} at line {e.lineno}, column {e.colno} "
                        f"(the file is cut short or damaged; {WRITER}): measure again, or restore the file") from None
    if not isinstance(data, dict) or data.get("schema") != SERVED_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UserError(f"served measurement {f} has schema {got!r}, not {SERVED_SCHEMA!r}: it is not a 'measure "
                        f"served' file ({WRITER}); give the --out folder of 'measure served'")
    try:
        ServedMeasurement.model_validate(data)
    except Exception as e:  # noqa: BLE001 - any malformed file is one message
        raise UserError(f"served measurement {f} is not a valid 'measure served' file ({str(e).splitlines()[0]}); "
                        f"{WRITER}: measure again") from None
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
    counts = {f"server_acceptance.{k}": acc[k] for k in ("num_drafts", "num_requests_with_draft_tokens",
                                                          "num_draft_tokens", "num_accepted_tokens")
              if acc.get(k) is not None}
    check_counts(where, counts, whole=counts.keys(),
                 at_most=[("server_acceptance.num_accepted_tokens", "server_acceptance.num_draft_tokens")],
                 fix="the engine's counters were broken when it was measured: measure again with a fixed engine")
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


def same_target(tgt: dict, model_ids: tuple[str, ...], identity: TargetIdentity | None, f: Path, where: str
                ) -> TargetIdentity:
    """A file's ``target`` record, checked to be the calibrated target: by what both resolve to where both resolve
    to a checkpoint (module docstring), else by name (``model_ids``: the names the target goes by). Returns the
    file's identity; refuses another model, naming both resolutions."""
    from trtllm_spec.core.targets import target_identity

    mine = target_identity(tgt.get("spec"), tgt.get("path"), tgt.get("config_sha256"))
    if identity is not None and identity.key and mine.key:
        same = mine.key == identity.key
    else:
        norm = {Path(str(m)).name.lower() for m in model_ids if m} | {str(m).lower() for m in model_ids if m}
        names = {str(tgt.get("spec") or "").lower(), Path(str(tgt.get("path") or "")).name.lower(),
                 Path(str(tgt.get("spec") or "")).name.lower()} - {""}
        same = bool(names & norm)
    if not same:
        theirs = identity.label if identity is not None else " / ".join(sorted(model_ids))
        raise UserError(f"served measurement {f}: target {tgt.get('spec')!r} resolves to {mine.label}; the {where}'s "
                        f"target resolves to {theirs} (also named {' / '.join(sorted(model_ids))}): another model's "
                        "runs cannot calibrate it; measure a server of this target ('measure served --target ...')")
    return mine


def read_served_measurements(paths: list[Path], model_ids: tuple[str, ...], drafter_type: str, where: str,
                             identity: TargetIdentity | None = None) -> tuple[list[StepMeasurement], list[dict], str]:
    """(measurements, provenance of each file, the engine) from served measurement files that belong to the target
    of ``where`` (the recipe or bundle calibrated: ``identity``, what its target resolves to, and ``model_ids``,
    the names it goes by) and its drafter ``drafter_type``."""
    from trtllm_spec.core.files import sha256_file

    out: list[StepMeasurement] = []
    files: list[dict] = []
    seen: dict[str, set] = {"target": set(), "drafter": set(), "engine": set(), "draft_len": set()}
    labels: dict[str, str] = {}  # a target's key -> how it is named
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
        mine = same_target(tgt, model_ids, identity, f, where)
        if d > 0 and drafter != drafter_type:
            raise UserError(f"served measurement {f}: server.serves.drafter {drafter!r}; the {where}'s drafter is "
                            f"{drafter_type}: another drafter's step times cannot calibrate it")
        tkey = mine.key or str(tgt.get("path") or tgt.get("spec"))
        seen["target"].add(tkey)
        labels.setdefault(tkey, mine.label if mine.key else tkey)
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
            said = sorted(labels.get(v, v) for v in seen[key])
            raise UserError(f"--calibrate: the served measurements mix {key}s ({', '.join(said)}); "
                            f"give runs of one {key}")
    if len(seen["draft_len"]) < 2 or 0 not in seen["draft_len"]:
        only = ", ".join(str(d) for d in sorted(seen["draft_len"]))
        raise UserError(f"--calibrate: the served measurements all run D = {only}; calibration needs the target "
                        "alone (--serves-draft-len 0) and a speculative run (D > 0) of the same server settings")
    return out, files, seen["engine"].pop()
