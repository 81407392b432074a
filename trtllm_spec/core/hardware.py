"""Hardware catalogue: datasheet peaks, with achievable fractions as separate, documented defaults.

Datasheet numbers are dense (no 2:4 sparsity), per GPU. Sources: NVIDIA datasheets as copied into NVIDIA's
planner ``ai-dynamo/aiconfigurator`` (``systems/*.yaml``, which cite the datasheet URLs) and the H100/H200,
Blackwell and Blackwell-Ultra datasheets. NVLink numbers are per direction (NVIDIA quotes bidirectional).

Achievable fractions (``Efficiency``): a measured H200 ran ~790 TFLOP/s bf16 GEMM (0.80 of 989) and ~4.3 TB/s
copy (0.90 of 4.8); aiconfigurator uses 0.8 of HBM bandwidth. Decode attention kernels (FlashInfer/XQA-style)
reach a lower fraction of the tensor-core peak than large GEMMs; 0.5 is our default. Overheads: per-iteration
host/scheduler/sampling time and a per-kernel-launch gap, CUDA graphs assumed (aiconfigurator: 3 us per
memory-bound op; ~1.5 ms residual for Llama-3.1-8B bs1 on H100 in SGLang, 6.32 ms/token vs a 4.8 ms floor).
Every number can be overridden in a recipe (``hardware.overrides``) or replaced by a probed file.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator

from trtllm_spec.core.schema import StrictModel, format_validation_error
from trtllm_spec.errors import HardwareError

GEMM_OVERLAP = 0.0  # Efficiency.gemm_overlap default: fitted on the calibration set of benchmarks/planner_validation.md
TFLOPS = 1e12
TB = 1e12
GB = 1e9


class Efficiency(StrictModel):
    """Achievable fractions of the datasheet peaks."""

    gemm: float = Field(0.80, gt=0, le=1, description="fraction of peak FLOP/s large GEMMs reach")
    attention: float = Field(0.50, gt=0, le=1, description="fraction of peak FLOP/s decode attention reaches")
    memory: float = Field(0.90, gt=0, le=1, description="fraction of peak memory bandwidth streams reach")
    interconnect: float = Field(0.80, gt=0, le=1, description="fraction of NVLink bandwidth all-reduce reaches")
    gemm_overlap: float = Field(GEMM_OVERLAP, ge=0, le=1, description="fraction of the shorter of weight streaming "
                                "and tensor-core work that hides under the longer in a small-M GEMM (1 = roofline "
                                "max, 0 = sum); fitted in benchmarks/planner_validation.py")


class Overheads(StrictModel):
    """Fixed costs the roofline does not see (CUDA graphs assumed).

    Calibrated (benchmarks/planner_validation.md) on published TensorRT-LLM measurements: Llama-3.1-8B bs1 step
    time (6.32 ms in SGLang on H100 vs a 5.0 ms roofline: 0.6 ms + 32 layers x 20 us); DeepSeek-R1 FP4 on
    8xB200 (blog 1: 9.0 ms per iteration, +0.6-1.0 ms per MTP draft token: MoE/MLA layers weigh more kernel
    units; aiconfigurator uses 3 us per memory-bound op); EAGLE-3 one-model on 8xH200 (PR #5146: a D=3 step costs
    1.45x a plain one), which needs ~0.4 ms per draft step plus ~0.25 ms per speculative iteration beyond the
    roofline. Re-fitted with the MoE terms free (benchmarks/planner_validation.md): no per-expert cost beyond the
    weight stream, 3 kernel units per MoE layer.
    """

    iteration_s: float = Field(1.5e-3, ge=0, description="per target iteration: scheduler, sampling, host")
    per_layer_s: float = Field(2e-5, ge=0, description="per dense decoder layer per forward: kernel gaps")
    per_expert_s: float = Field(0.0, ge=0, description="per expert touched per GPU per MoE layer, beyond streaming "
                                "its weights (fitted: 0; Triton fused_moe kernel times grow by one expert's weight "
                                "stream per extra expert touched, vllm PRs #19049 and #31448)")
    moe_layer_units: float = Field(3.0, ge=0, description="kernel-launch units (of per_layer_s) an MoE layer adds "
                                   "beyond a dense one: routing, permute, grouped GEMMs, finalize; an engine "
                                   "property (TensorRT-LLM's DeepSeek-R1 path: 3; fitted per framework in "
                                   "benchmarks/planner_validation.py)")
    draft_step_s: float = Field(4e-4, ge=0, description="per sequential draft step: sampling, bookkeeping")
    spec_iteration_s: float = Field(2.5e-4, ge=0, description="per speculative iteration: acceptance, KV rewind")
    # per-sequence terms (issue 53): what grows with the number of requests in the batch, beside the GPU work the
    # roofline prices. Fitted by 'trtllm-spec tune' / 'plan --calibrate' from runs at two batch sizes or more; a
    # release prior without per-sequence measurements has them at 0 (plan.json step_terms says so).
    sequence_s: float = Field(0.0, ge=0, description="per sequence per iteration: per-request scheduling, "
                              "sampling and output processing")
    spec_sequence_s: float = Field(0.0, ge=0, description="per sequence per speculative iteration: proposer, "
                                   "rejection sampler, per-request draft metadata")
    draft_sequence_s: float = Field(0.0, ge=0, description="per sequence per draft step (chain) or per draft "
                                    "token (a measured step)")
    measured_step: bool = Field(False, description="the engine's own step was measured ('trtllm-spec tune' on an "
                                "engine whose kernels the roofline does not price): the target's and the drafter's "
                                "passes are not priced, the fitted terms carry them (per draft token for every "
                                "drafter kind)")
    allreduce_latency_s: float = Field(1e-5, ge=0, description="per all-reduce call (p2p latency)")
    overlap_hides: float = Field(0.0, ge=0, le=1, description="fraction of iteration_s an overlap scheduler hides "
                                 "behind the previous step's GPU work on plain decoding")
    overlap_with_speculation: bool = Field(False, description="whether that hiding also applies to speculative "
                                           "iterations (TensorRT-LLM PR #5146 ran EAGLE-3 with "
                                           "disable_overlap_scheduler: true)")

    def exposed_iteration_s(self, speculative: bool) -> float:
        """The per-iteration host time a step waits for: an overlap scheduler hides ``overlap_hides`` of it on
        plain decoding, and on speculative iterations only when ``overlap_with_speculation``."""
        hidden = self.overlap_hides if (not speculative or self.overlap_with_speculation) else 0.0
        return self.iteration_s * (1.0 - hidden)

    def exposed_spec_iteration_s(self) -> float:
        """The speculative iteration's own host work (acceptance bookkeeping, KV rewind, the next drafts' inputs):
        an overlap scheduler that runs with speculation processes iteration n's results on the host while the GPU
        runs n + 1 (TensorRT-LLM's overlap scheduler, vLLM's async scheduling), so it hides the same share of it
        as of ``iteration_s``."""
        return self.spec_iteration_s * (1.0 - (self.overlap_hides if self.overlap_with_speculation else 0.0))


class Hardware(StrictModel):
    """One accelerator (or a probed CPU). Units are in the field names."""

    name: str
    kind: Literal["gpu", "cpu"] = "gpu"
    description: str = ""
    source: str = ""
    peak_flops_per_s: dict[str, float] = Field(description="dense peak per dtype: fp32, bf16, fp8, fp4")
    mem_bytes_per_s: float = Field(gt=0)
    mem_bytes: float = Field(gt=0)
    interconnect_bytes_per_s: float = Field(0.0, ge=0, description="NVLink per GPU per direction; 0 = none")
    attention_tile_rows: int = Field(128, ge=1)
    sm_count: int = Field(0, ge=0, description="streaming multiprocessors, for GEMM wave quantisation (0 = none)")
    gemm_tile_m: int = Field(128, ge=1, description="GEMM output tile rows (wave quantisation)")
    gemm_tile_n: int = Field(128, ge=1, description="GEMM output tile columns (wave quantisation)")
    gemm_row_granularity: int = Field(8, ge=1, description="rows a GEMM kernel computes at least (M is rounded up "
                                      "to a multiple: the MMA's narrow side once small-M kernels swap A and B)")
    runtime_reserve_bytes: float = Field(3.5 * 2**30, ge=0, description="activations, workspace, CUDA context "
                                         "(aiconfigurator's other_mem default: 3.5 GiB)")
    efficiency: Efficiency = Efficiency()
    overheads: Overheads = Overheads()
    attention_kv_bytes_per_s: float | None = Field(None, gt=0, description="measured decode-attention KV streaming "
                                                   "rate ('hw probe --target'); replaces the memory bandwidth in "
                                                   "the attention term")
    # Measured GEMM throughput by M (probe): {dtype: {M: FLOP/s}}. When present it replaces peak*efficiency.
    gemm_flops_by_m: dict[str, dict[int, float]] | None = None
    probe: dict | None = Field(None, description="provenance of a probed entry")

    @field_validator("peak_flops_per_s")
    @classmethod
    def _dtypes(cls, v: dict[str, float]) -> dict[str, float]:
        allowed = {"fp32", "bf16", "fp16", "fp8", "fp4", "int8"}
        for k, x in v.items():
            if k not in allowed:
                raise ValueError(f"unknown dtype {k!r} in peak_flops_per_s; allowed: {sorted(allowed)}")
            if x <= 0:
                raise ValueError(f"peak_flops_per_s[{k}] must be > 0")
        return v

    def compute_dtype(self, dtype: str) -> str:
        """The tensor-core dtype a weight dtype runs its GEMMs in (falls back to bf16, then fp32)."""
        wanted = {"fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "fp8": "fp8", "int4_awq": "bf16"}.get(dtype, dtype)
        for d in (wanted, "bf16", "fp32"):
            if d in self.peak_flops_per_s:
                return d
        return next(iter(self.peak_flops_per_s))

    def gemm_flops_per_s(self, dtype: str, m: int) -> float:
        """Achievable GEMM FLOP/s at GEMM-M rows: probed curve (log-log interpolated: exact where F grows as M,
        i.e. memory-bound) or peak * efficiency."""
        cd = self.compute_dtype(dtype)
        curve = (self.gemm_flops_by_m or {}).get(cd)
        if curve:
            return _interp_log(curve, m)
        return self.peak_flops_per_s[cd] * self.efficiency.gemm

    def has_gemm_curve(self, dtype: str) -> bool:
        """Whether GEMM times come from a probed curve (measured times at each M) for this weight dtype."""
        return bool((self.gemm_flops_by_m or {}).get(self.compute_dtype(dtype)))

    def attention_flops_per_s(self, dtype: str) -> float:
        cd = self.compute_dtype(dtype)
        curve = (self.gemm_flops_by_m or {}).get(cd)
        if curve:
            return max(curve.values()) * self.efficiency.attention
        return self.peak_flops_per_s[cd] * self.efficiency.attention

    @property
    def achievable_mem_bytes_per_s(self) -> float:
        return self.mem_bytes_per_s * self.efficiency.memory


def _interp_log(curve: dict[int, float], m: int) -> float:
    import math

    points = sorted((int(k), float(v)) for k, v in curve.items())
    if m <= points[0][0]:
        return points[0][1]
    if m >= points[-1][0]:
        return points[-1][1]
    for (m0, f0), (m1, f1) in zip(points, points[1:], strict=False):
        if m0 <= m <= m1:
            t = (math.log(m) - math.log(m0)) / (math.log(m1) - math.log(m0))
            return math.exp(math.log(f0) + t * (math.log(f1) - math.log(f0)))
    return points[-1][1]


def _gpu(name, description, bf16, fp8, fp4, hbm_tb_s, hbm_gb, nvlink_dir_gb_s, source, sms=0) -> Hardware:
    peaks = {"bf16": bf16 * TFLOPS, "fp16": bf16 * TFLOPS}
    if fp8:
        peaks["fp8"] = fp8 * TFLOPS
    if fp4:
        peaks["fp4"] = fp4 * TFLOPS
    return Hardware(
        name=name,
        description=description,
        source=source,
        peak_flops_per_s=peaks,
        mem_bytes_per_s=hbm_tb_s * TB,
        mem_bytes=hbm_gb * GB,
        interconnect_bytes_per_s=nvlink_dir_gb_s * GB,
        sm_count=sms,
    )


_AIC = "datasheet via ai-dynamo/aiconfigurator aic-core/.../systems/{}.yaml"
CATALOGUE: dict[str, Hardware] = {
    h.name: h
    for h in (
        _gpu("h100-sxm", "NVIDIA H100 SXM 80GB (HBM3)", 989, 1979, None, 3.35, 80, 450,
             _AIC.format("h100_sxm") + "; H100 datasheet", 132),
        _gpu("h200", "NVIDIA H200 SXM 141GB (HBM3e)", 989, 1979, None, 4.8, 141, 450,
             _AIC.format("h200_sxm") + "; H200 datasheet", 132),
        _gpu("b200", "NVIDIA B200 (HGX, 1000 W) 180GB", 2250, 4500, 9000, 7.7, 180, 900,
             _AIC.format("b200_sxm") + "; Blackwell datasheet (7.7 TB/s per aiconfigurator, 8 TB/s marketing)", 148),
        _gpu("gb200", "NVIDIA GB200 NVL72, per GPU (1200 W) 186GB", 2500, 5000, 10000, 8.0, 186, 900,
             _AIC.format("gb200") + "; Blackwell datasheet", 148),
        _gpu("b300", "NVIDIA B300 (HGX Blackwell Ultra) 288GB", 2250, 4500, 14000, 7.75, 288, 900,
             _AIC.format("b300_sxm") + "; Blackwell Ultra datasheet (fp4 dense 13.5-14 PF across sources); SMs "
             "assumed as B200", 148),
        _gpu("a100-80gb", "NVIDIA A100 SXM 80GB (HBM2e), no fp8", 312, None, None, 2.039, 80, 300,
             _AIC.format("a100_sxm") + "; A100 datasheet", 108),
        _gpu("l40s", "NVIDIA L40S 48GB GDDR6, PCIe only", 362.05, 733, None, 0.864, 48, 32,
             _AIC.format("l40s") + "; L40S datasheet (PCIe Gen4 x16: 64 GB/s bidirectional)", 142),
    )
}

_ALIASES = {"h100": "h100-sxm", "h100sxm": "h100-sxm", "h200sxm": "h200", "a100": "a100-80gb",
            "a10080gb": "a100-80gb", "hgxb200": "b200", "hgxb300": "b300", "gb200nvl72": "gb200"}


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def gpu_names() -> list[str]:
    return sorted(CATALOGUE)


def load_hardware(spec: str | Path, overrides: dict | None = None) -> Hardware:
    """A catalogue name (case/punctuation-insensitive) or a JSON/YAML file written by ``hw probe``."""
    text = str(spec)
    path = Path(text)
    if path.suffix.lower() in {".json", ".yaml", ".yml"} or path.is_file():
        hw = _load_file(path)
    else:
        key = {_norm(k): k for k in CATALOGUE}.get(_norm(text)) or _ALIASES.get(_norm(text))
        if key is None:
            near = difflib.get_close_matches(text.lower(), gpu_names(), n=1, cutoff=0.4)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            raise HardwareError(
                f"unknown GPU {text!r}; valid: {', '.join(gpu_names())}, or a file written by "
                f"'trtllm-spec hw probe'.{hint}"
            )
        hw = CATALOGUE[key].model_copy(deep=True)
    if overrides:
        hw = apply_overrides(hw, overrides, source=f"hardware.overrides ({text})")
    return hw


def apply_overrides(hw: Hardware, overrides: dict, source: str) -> Hardware:
    data = hw.model_dump()
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    try:
        return Hardware.model_validate(data)
    except ValidationError as exc:
        raise HardwareError(format_validation_error(exc, Hardware, source)) from None


def _load_file(path: Path) -> Hardware:
    if not path.is_file():
        raise HardwareError(f"hardware file {path} does not exist; give a GPU name ({', '.join(gpu_names())}) "
                            "or a file written by 'trtllm-spec hw probe --out FILE'")
    try:
        raw = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            data = json.loads(raw)
        else:
            import yaml

            data = yaml.safe_load(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HardwareError(f"hardware file {path} is not valid JSON/YAML ({exc}); regenerate it with "
                            "'trtllm-spec hw probe --out FILE'") from None
    if not isinstance(data, dict):
        raise HardwareError(f"hardware file {path} must hold a mapping of Hardware fields")
    data = data.get("hardware", data)
    try:
        return Hardware.model_validate(data)
    except ValidationError as exc:
        raise HardwareError(format_validation_error(exc, Hardware, str(path))) from None
