"""FAKE trtllm-bench reports for ``plan --calibrate`` with KNOWN host costs (TensorRT-LLM cannot run here).

The layout is upstream's ``--report_json`` (NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/dataclasses/reporting.py``
@0249976, ``ReportUtility.get_statistics_dict``: engine, machine, world_info, request_info, performance,
streaming_metrics, decoding_stats, dataset; trtllm-bench counts max_draft_len x iterations drafted per request and
its iterations include the context phase). Each TPOT is what the planner's step model gives on Llama-3.1-8B-Instruct
+ EAGLE-3 on one H100 when the engine's host costs are ``KNOWN_TERMS_S`` (an engine that hides more host work
than the 1.2 profile assumes): ``step / AL``. A calibration that inverts the model must find those terms again.

Regenerate the committed fixtures after an intended cost-model change:
``UPDATE_GOLDEN=1 pytest tests/unit/test_calibrate.py`` (or run this file).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "engine_reports"
# the step model's six host terms (planner/step.py): per iteration, per speculative iteration, per draft step, each
# with a per-sequence part; the reports at two concurrencies (FILES at 1, FILES_HIGH at HIGH) identify all of them
KNOWN_TERMS_S = {"iteration_s": 6.0e-4, "sequence_s": 4.0e-5, "spec_iteration_s": 3.5e-4, "spec_sequence_s": 3.0e-5,
                 "draft_step_s": 1.2e-4, "draft_sequence_s": 1.5e-5}
TARGET = "llama-3.1-8b-instruct"
HF_ID = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "h100"
PROFILE = "1.2"  # the recipe's engine.trtllm_version (reports say 1.2.1)
ISL, OSL, REQUESTS = 412, 256, 64
# accepted drafts per request (trtllm-bench's average) at each D: AL = 1 + A / (OSL - A - 1)
ACCEPTED = {1: 90.0, 2: 139.0, 3: 157.0, 4: 167.0, 5: 174.0, 6: 178.0, 7: 181.0}
FILES = {0: "fake_bench_plain_c1.json", 3: "fake_bench_eagle3_d3_c1.json", 2: "fake_bench_eagle3_d2_c1.json"}
HIGH = 8  # the second concurrency: one batch size cannot separate the per-sequence terms
FILES_HIGH = {d: name.replace("_c1.json", f"_c{HIGH}.json") for d, name in FILES.items()}


def recipe_dict(batch_sizes=(1, 8, 64)) -> dict:
    """The recipe the fixtures belong to (max_batch_size 64, free_gpu_memory_fraction 0.9 as in world_info)."""
    return {"name": "calib", "target": {"model": TARGET}, "drafter": {"type": "eagle3"}, "hardware": {"gpu": GPU},
            "workload": {"batch_sizes": list(batch_sizes), "isl": 1024, "osl": OSL},
            "engine": {"trtllm_version": "1.2"}}  # the fixtures ran TensorRT-LLM 1.2.1


def acceptance_length(d: int) -> float:
    a = ACCEPTED[d]
    return 1.0 + a / (OSL - a - 1.0)


def model_tpot_s(draft_len: int, batch: int = 1, terms: dict | None = None) -> float:
    """The planner's TPOT at (B, D) with the known host terms: what the FAKE engine 'measures'."""
    from trtllm_spec.core.hardware import load_hardware
    from trtllm_spec.core.targets import resolve_shape
    from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
    from trtllm_spec.drafters.registry import MECHANISMS
    from trtllm_spec.planner.calibrate import StepMeasurement, modelled_step_s
    from trtllm_spec.planner.cost import Parallelism, Precision
    from trtllm_spec.planner.search import CostContext, Workload

    shape = resolve_shape(TARGET)
    hw = load_hardware(GPU)
    # the engine's overlap behaviour is the release profile's (core/host_costs.py), its host terms the known ones
    from trtllm_spec.core.host_costs import host_cost_profile

    fields = host_cost_profile(PROFILE).overhead_fields() | (terms or KNOWN_TERMS_S)
    hw = hw.model_copy(update={"overheads": hw.overheads.model_copy(update=fields)})
    ctx = CostContext(shape, hw, Parallelism(), Precision(weight=shape.native_weight_dtype),
                      Workload((batch,), ISL, OSL))
    cost = MECHANISMS["eagle3"].cost(shape, Eagle3Drafter())
    al = acceptance_length(draft_len) if draft_len else 1.0
    m = StepMeasurement(batch, draft_len, al, ISL, OSL, 0.0, "fake")
    return modelled_step_s(ctx, cost, m, hw) / al


def _pct(avg: float, spread: float = 0.1) -> dict:
    return {"p50": avg, "p90": avg * (1 + spread), "p95": avg * (1 + 1.2 * spread), "p99": avg * (1 + 1.5 * spread),
            "minimum": avg * (1 - 2 * spread), "maximum": avg * (1 + 2 * spread), "average": avg}


def fake_report(draft_len: int, concurrency: float = 1.0, tpot_s: float | None = None, **engine) -> dict:
    tpot_ms = round((tpot_s if tpot_s is not None else model_tpot_s(draft_len, round(concurrency))) * 1e3, 5)
    latency_ms = 18.4 + tpot_ms * (OSL - 1)
    rep = {
        "_fake": "FAKE: written by tests/calibration_fakes.py from the documented schema (NVIDIA/TensorRT-LLM "
                 "tensorrt_llm/bench/dataclasses/reporting.py get_statistics_dict @0249976); TPOT from the step "
                 f"model with known host costs {KNOWN_TERMS_S}; not a real run",
        "engine": {"model": HF_ID, "model_path": "None", "engine_dir": "None", "version": "1.2.1",
                   "backend": "Pytorch", "dtype": "bfloat16", "kv_cache_dtype": None, "quantization": None} | engine,
        "machine": {"name": "NVIDIA H100 80GB HBM3", "memory.total": 79.19, "clocks.mem": 2.619},
        "world_info": {"tp_size": 1, "pp_size": 1, "ep_size": 1, "world_size": 1, "max_batch_size": 64,
                       "max_num_tokens": 8192, "scheduling_policy": "GUARANTEED_NO_EVICT",
                       "kv_cache_percentage": 0.9, "issue_rate": 1.2e9},
        "request_info": {"num_requests": REQUESTS, "avg_num_concurrent_requests": concurrency,
                         "avg_input_length": float(ISL), "avg_output_length": float(OSL)},
        "performance": {"total_latency_ms": latency_ms * REQUESTS / concurrency,
                        "avg_request_latency_ms": latency_ms, "request_throughput_req_s": 1e3 / latency_ms,
                        "system_output_throughput_tok_s": OSL * 1e3 / latency_ms * concurrency,
                        "output_throughput_per_user_tok_s": OSL * 1e3 / latency_ms,
                        "request_latency_percentiles_ms": _pct(latency_ms)},
        "streaming_metrics": {"token_output_speed_tok_s": 1e3 / tpot_ms, "avg_ttft_ms": 18.4,
                              "avg_tpot_ms": tpot_ms, "tpot_percentiles": _pct(tpot_ms),
                              "ttft_percentiles": _pct(18.4)},
        "dataset": {"avg_isl": ISL, "avg_osl": OSL, "max_isl": 1500, "max_osl": OSL, "num_requests": REQUESTS},
    }
    if draft_len:
        a = ACCEPTED[draft_len]
        iters = OSL - a  # trtllm-bench: decode iterations + 1 (the context phase)
        rep["decoding_stats"] = {
            "mode": "Eagle3", "num_draft_tokens_percentiles": _pct(draft_len * iters),
            "num_accepted_draft_tokens_percentiles": _pct(a),
            "draft_acceptance_rate_percentiles": _pct(a / (draft_len * iters)),
            "acceptance_length_percentiles": _pct(OSL / iters)}
    return rep


def expected_files() -> dict[str, dict]:
    return {name: fake_report(d) for d, name in FILES.items()} | {
        name: fake_report(d, float(HIGH)) for d, name in FILES_HIGH.items()}


def write_fixtures() -> list[Path]:
    out = []
    for name, rep in expected_files().items():
        path = FIXTURES / name
        path.write_text(json.dumps(rep, indent=2) + "\n")
        out.append(path)
    return out


def variant(name: str, **changes) -> dict:
    """A committed fixture with nested keys changed, e.g. variant(F, engine={"model": "x"})."""
    rep = copy.deepcopy(json.loads((FIXTURES / name).read_text()))
    for section, values in changes.items():
        if isinstance(values, dict):
            rep[section] = {**rep.get(section, {}), **values}
        else:
            rep[section] = values
    return rep


if __name__ == "__main__":
    for p in write_fixtures():
        print(p)
