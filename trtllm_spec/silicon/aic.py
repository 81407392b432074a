"""The target's step from NVIDIA AIConfigurator's measured kernel tables (``planner.work: aiconfigurator``, issue 54).

AIConfigurator 0.12.0 (``aiconfigurator`` + ``aiconfigurator-core``, PyPI, Apache-2.0, CPU only) holds NVIDIA's
kernel measurements per GPU and framework release (GEMM, attention, MoE, communication) and prices a decode step
as the sum of its operations. It lives in a venv of its own (``scripts/setup_aic.sh`` makes ``<cache>/aic-venv``,
about 860 MB: pandas, scipy, pyarrow, plotly, its 95 MB of tables; ``$TRTLLM_SPEC_AIC_VENV`` overrides), never in
the project's: this module imports nothing of it, it starts ``aic_runner.py`` with that venv's Python.

What it prices: the target's pass at batch b and D drafted tokens per sequence, ``aiconfigurator cli estimate
--estimate-mode static_gen --nextn D --nextn-accepted 0`` (its decode step with a (D + 1) decode batch per sequence;
its MTP model scales the layers' compute by (L + D) / L, taken out here: the drafter is priced by the planner as
ever). The framework tables are its 'current' release for the GPU (``systems/query_versions.yaml``: TensorRT-LLM
1.3.0rc20, vLLM 0.24.0, SGLang 0.5.14 on H100 / H200 / B200 / B300 / GB200 / L40S; 1.0.0 / 0.14.0 / 0.5.10 on
A100), which the plan names. Answers are cached per query under ``<cache>/aic`` (a plan's 8 batch sizes x 9 draft
lengths cost ~45 s the first time, nothing after).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from trtllm_spec.errors import DependencyMissing, UserError

AIC_VERSION = "0.12.0"
SETUP_HINT = "run scripts/setup_aic.sh (it installs aiconfigurator 0.12.0 into <cache>/aic-venv)"
# our GPU names (core/hardware.CATALOGUE) -> AIConfigurator's systems
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200",
           "a100-80gb": "a100_sxm", "l40s": "l40s"}
BACKENDS = {"TensorRT-LLM": "trtllm", "vLLM": "vllm", "SGLang": "sglang"}
QUANT = {"fp8": {"gemm_quant_mode": "fp8", "moe_quant_mode": "fp8"},
         "nvfp4": {"gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"},
         "int4_awq": {"gemm_quant_mode": "int4_wo", "moe_quant_mode": "int4_wo"}}


def aic_venv() -> Path:
    from trtllm_spec.core.targets import cache_dir

    return Path(os.environ.get("TRTLLM_SPEC_AIC_VENV") or cache_dir() / "aic-venv").expanduser()


def find_aic(venv: Path | None = None) -> Path:
    """The AIConfigurator venv's Python, or DependencyMissing naming what is absent and how to install it (the
    version is read from the wheel's metadata folder; nothing is imported)."""
    venv = Path(venv) if venv else aic_venv()
    sites = sorted(venv.glob("lib/python3.*/site-packages"))
    if not (venv / "bin" / "python").exists() or not sites:
        raise DependencyMissing(f"planner.work: aiconfigurator needs AIConfigurator: no venv at {venv}; {SETUP_HINT} "
                                "or set TRTLLM_SPEC_AIC_VENV")
    if not sorted(sites[-1].glob(f"aiconfigurator-{AIC_VERSION}.dist-info")):
        raise DependencyMissing(f"planner.work: aiconfigurator needs aiconfigurator {AIC_VERSION} in {venv}; "
                                f"{SETUP_HINT}")
    return venv / "bin" / "python"


def system_of(gpu: str) -> str:
    if gpu not in SYSTEMS:
        raise UserError(f"planner.work: aiconfigurator has no kernel tables for hardware.gpu {gpu!r}; it covers "
                        f"{', '.join(sorted(SYSTEMS))}: use one of those or planner.work: roofline")
    return SYSTEMS[gpu]


def model_dir(config: dict) -> Path:
    """The target's config.json in a folder of its own (AIConfigurator reads a local folder's config.json)."""
    from trtllm_spec.core.targets import cache_dir

    text = json.dumps(config, sort_keys=True)
    folder = cache_dir() / "aic" / "models" / hashlib.sha256(text.encode()).hexdigest()[:16]
    if not (folder / "config.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(text, encoding="utf-8")
    return folder


def queries(model: Path, system: str, backend: str, weight: str, kv: str, tp: int, pp: int, ep: int, moe: bool,
            isl: int, osl: int, batches: tuple[int, ...], max_draft_len: int) -> list[dict]:
    base = {"model_path": str(model), "system_name": system, "backend_name": backend, "isl": isl, "osl": osl,
            "tp_size": tp, "pp_size": pp, "mode": "static_gen"} | QUANT.get(weight, {})
    if kv == "fp8":
        base["kvcache_quant_mode"] = "fp8"
    if moe:
        base |= {"moe_tp_size": max(1, tp // max(ep, 1)), "moe_ep_size": max(ep, 1)}
    return [base | {"id": f"{b}|{d}", "batch_size": b, "nextn": d, "nextn_accepted": 0.0}
            for b in batches for d in range(max_draft_len + 1)]


def answer_key(q: dict) -> str:
    """A query's cache key: its fields, the model named by its config's hash (the folder's name), not by where the
    cache is."""
    fields = {k: (Path(v).name if k == "model_path" else v) for k, v in q.items() if k != "id"}
    return hashlib.sha256((AIC_VERSION + json.dumps(fields, sort_keys=True)).encode()).hexdigest()[:24]


def run(qs: list[dict], python: Path | None = None) -> dict[str, dict]:
    """Every query's answer (``aic_runner.py`` in the AIConfigurator venv), from the cache where asked before."""
    from trtllm_spec.core.targets import cache_dir

    cache = cache_dir() / "aic" / "answers"
    out, todo = {}, []
    for q in qs:
        f = cache / f"{answer_key(q)}.json"
        if f.is_file():
            out[q["id"]] = json.loads(f.read_text(encoding="utf-8"))
        else:
            todo.append((q, f))
    if todo:
        python = python or find_aic()
        proc = subprocess.run([str(python), str(Path(__file__).with_name("aic_runner.py"))],
                              input=json.dumps([q for q, _f in todo]), capture_output=True, text=True, check=False)
        if proc.returncode:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"planner.work: aiconfigurator: AIConfigurator failed ({last}); run {SETUP_HINT}")
        got = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
        cache.mkdir(parents=True, exist_ok=True)
        for q, f in todo:
            r = {k: v for k, v in got[q["id"]].items() if k != "id"}
            if "error" not in r:
                f.write_text(json.dumps(r), encoding="utf-8")
            out[q["id"]] = r
    return out


def target_steps(config: dict, gpu: str, framework: str, weight: str, kv: str, tp: int, pp: int, ep: int,
                 isl: int, osl: int, batches: tuple[int, ...], max_draft_len: int, num_layers: int, moe: bool
                 ) -> tuple[dict[tuple[int, int], dict[str, float]], dict]:
    """(batch, D) -> the target's pass by kind of operation, seconds ({gemm, attention, comm, other}), and what
    priced it (AIConfigurator's version, system, framework release, data sources)."""
    qs = queries(model_dir(config), system_of(gpu), BACKENDS[framework], weight, kv, tp, pp, ep, moe, isl, osl,
                 batches, max_draft_len)
    answers = run(qs)
    table, versions, sources = {}, set(), {}
    for q in qs:
        r = answers[q["id"]]
        if "error" in r:
            raise UserError(f"planner.work: aiconfigurator cannot price this target on {gpu} ({r['error']}); use "
                            "planner.work: roofline")
        d = q["nextn"]
        step = r["tpot_ms"] * 1e-3 * num_layers / (num_layers + d)  # the MTP layers' compute taken out
        shares = r.get("shares") or {"gemm": 1.0}
        table[(q["batch_size"], d)] = {k: step * shares.get(k, 0.0) for k in ("gemm", "attention", "comm", "other")}
        versions.add(r["backend_version"])
        for tag, n in (r.get("sources") or {}).items():
            sources[tag] = sources.get(tag, 0) + n
    return table, {"aiconfigurator": AIC_VERSION, "system": system_of(gpu), "framework": framework,
                   "framework_release": ", ".join(sorted(versions)), "op_sources": sources}


def covered_steps(config: dict, gpu: str, framework: str, *_args, **_kwargs) -> tuple[dict, dict]:
    """What ``recipe validate`` checks of ``planner.work: aiconfigurator`` without asking anything: the GPU has
    tables (else one line naming the GPUs covered) and the framework has a backend; no step is priced."""
    return {}, {"aiconfigurator": AIC_VERSION, "system": system_of(gpu), "framework": framework,
                "framework_release": "not asked (recipe validate)", "backend": BACKENDS[framework]}
