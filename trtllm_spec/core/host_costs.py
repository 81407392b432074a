"""Host-cost profiles: the engine's per-iteration costs the roofline does not see, per framework release.

Three terms of ``Overheads`` (core/hardware.py) change from one engine release to the next (CUDA graphs for the
draft loop, async scheduling, one-model drafting hide host work), so they are a profile of the release, not of
the GPU:

    iteration_s       per target iteration (scheduler, sampling launch, host bookkeeping)
    spec_iteration_s  per speculative iteration (acceptance, KV rewind)
    draft_step_s      per sequential draft step (per iteration for a block drafter)

Each profile says which measurements fitted it and when (``fitted_on``, ``fitted``) and which engine release
those measurements ran (``measured_release``). The planner takes the profile of the bundle's
``engine.trtllm_version``; ``benchmarks/planner_validation.py`` takes each published point's framework and
release. A profile fitted from the user's own engine (``plan --calibrate``, the bundle's ``replan.sh``) is a
``host_costs.json`` file of the same shape (``planner.host_costs``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from trtllm_spec.core.hardware import Hardware
from trtllm_spec.core.releases import RELEASES
from trtllm_spec.core.releases import get as get_release
from trtllm_spec.core.schema import StrictModel, format_validation_error
from trtllm_spec.errors import UserError

HOST_TERMS = ("iteration_s", "spec_iteration_s", "draft_step_s")
HOST_COSTS_SCHEMA = "trtllm-spec/host_costs/v1"
Framework = Literal["TensorRT-LLM", "vLLM", "SGLang"]


class HostProfile(StrictModel):
    """One engine release's host costs, with where they come from."""

    schema_: Literal["trtllm-spec/host_costs/v1"] = Field(HOST_COSTS_SCHEMA, alias="schema")
    name: str
    framework: Framework
    release: str = Field(description="the release the profile is for (TensorRT-LLM: a trtllm_version profile)")
    iteration_s: float = Field(ge=0)
    spec_iteration_s: float = Field(ge=0)
    draft_step_s: float = Field(ge=0)
    moe_layer_units: float | None = Field(None, ge=0, description="kernel units per MoE layer (None: the GPU's)")
    per_expert_s: float | None = Field(None, ge=0, description="per expert touched (None: the GPU's)")
    measured_release: str = Field(description="the engine release(s) the fitting measurements ran")
    fitted_on: list[str] = Field(description="the measurements that fitted the terms")
    fitted: str = Field(description="when and how it was fitted")
    note: str = ""
    fit: dict[str, Any] | None = Field(None, description="a calibration's inputs and residuals (plan --calibrate)")

    def terms(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in HOST_TERMS}

    def overhead_fields(self) -> dict[str, float]:
        """The ``Overheads`` fields this profile sets."""
        extra = {k: getattr(self, k) for k in ("moe_layer_units", "per_expert_s") if getattr(self, k) is not None}
        return self.terms() | extra

    def summary(self) -> dict[str, Any]:
        """What a plan records about the profile it used (everything but the calibration detail)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"fit"}, exclude_none=True)


def with_host_costs(hw: Hardware, fields: dict[str, float]) -> Hardware:
    """``hw`` with these ``Overheads`` fields replaced (a new object)."""
    return hw.model_copy(update={"overheads": hw.overheads.model_copy(update=fields)})


_FIT = "2026-12-02, benchmarks/planner_validation.py --fit (branch i27), calibration split only, per release"


def _published(framework: Framework, release: str, terms: tuple[float, float, float], fitted_on: list[str],
               note: str = "", **moe: float) -> HostProfile:
    it, spec, step = terms
    return HostProfile(name=f"{framework.lower()}-{release}", framework=framework, release=release, iteration_s=it,
                       spec_iteration_s=spec, draft_step_s=step, measured_release=release, fitted_on=fitted_on,
                       fitted=_FIT, note=note, **moe)


# Per framework release, fitted on that release's published calibration points only (--fit output, recorded here).
# Keys: (framework, release); the release is the engine version the measurements ran (or its era when the source
# names none: see benchmarks/planner_validation.md).
PUBLISHED_HOST_PROFILES: dict[tuple[str, str], HostProfile] = {(p.framework, p.release): p for p in (
    _published("TensorRT-LLM", "0.20-1.0rc", (1.5e-3, 2.5e-4, 4e-4), [
        "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1 (DeepSeek-R1 FP4, 8x B200, MTP D = 1..5, bs 1, base "
        "step; 2025-05)",
        "NVIDIA/TensorRT-LLM PR #5146 (Llama-3.3-70B + EAGLE-3 one-model, H200 TP8, concurrency 4; 2025-06)"],
        moe_layer_units=3.0, per_expert_s=0.0),
    _published("vLLM", "0.8.5", (2e-3, 2e-3, 2e-4), [
        "vllm-project/vllm PR #16937 (V1, 2025-04: Llama-3.1-8B, H100, bs 1, EAGLE-1 K = 2, 4, 7 and EAGLE-3 K = 2, "
        "vanilla 133 tok/s)"]),
    _published("vLLM", "0.9.2", (1.25e-3, 1e-3, 8e-4), [
        "vllm-project/vllm issue #20780 (V1, 2025-07: Llama-3.1-8B + EAGLE-3, H100, bs 1, K = 2..7, TPOT; vanilla "
        "7.07 ms)"]),
    _published("SGLang", "0.4.4", (1e-4, 0.0, 1e-3), [
        "EAGLE-3 paper (arXiv 2503.01840v3) Table 3 (SGLang v0.4.4, H100, Llama-3.1-8B, chain of 3, bs 2-64)"],
        note="one D only: the split between spec_iteration_s and draft_step_s is not identified"),
    _published("SGLang", "0.5", (1e-4, 4e-3, 1.25e-3), [
        "Tencent/AngelSlim issue #163 (SGLang via SpecForge, 2025-12: Qwen3-30B-A3B, 4x H100 TP4, EAGLE-3 tree "
        "(4, 4, 16), bs 1-64)"], moe_layer_units=3.0, per_expert_s=0.0),
)}

_TRTLLM_MEASURED = PUBLISHED_HOST_PROFILES[("TensorRT-LLM", "0.20-1.0rc")]
_NO_NEWER = ("no published speculative-decoding step times of TensorRT-LLM {r} were found (searched 2026-12-02); "
             "the terms are those fitted on 0.20-1.0rc measurements (the newest with any). Fit your engine's with "
             "`trtllm-spec plan --calibrate` (a plain and a speculative trtllm-bench report).")


def _trtllm(release: str) -> HostProfile:
    base = _TRTLLM_MEASURED
    return base.model_copy(update={"name": f"tensorrt-llm-{release}", "release": release,
                                   "measured_release": f"{base.release} (blog 1, 2025-05; PR #5146, 2025-06)",
                                   "note": _NO_NEWER.format(r=release)})


# Per TensorRT-LLM profile (engine.trtllm_version). A release without its own measurements says so in its note.
TRTLLM_HOST_PROFILES: dict[str, HostProfile] = {r.host_cost_key: _trtllm(r.host_cost_key)
                                                for r in RELEASES.values()}


def _key(release: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", release))


def published_host_profile(framework: str, release: str) -> tuple[HostProfile, str]:
    """(the profile, how it was chosen) for a framework release: its own, else the newest earlier one fitted."""
    if (framework, release) in PUBLISHED_HOST_PROFILES:
        return PUBLISHED_HOST_PROFILES[(framework, release)], "its own"
    older = sorted((r for f, r in PUBLISHED_HOST_PROFILES if f == framework and _key(r) < _key(release)), key=_key)
    if not older:
        known = ", ".join(f"{f} {r}" for f, r in PUBLISHED_HOST_PROFILES)
        raise UserError(f"no host-cost profile for {framework} {release}; known: {known}")
    return PUBLISHED_HOST_PROFILES[(framework, older[-1])], f"inherited from {older[-1]}"


def trtllm_host_profile(release: str) -> HostProfile:
    key = get_release(release, "TensorRT-LLM release of the host-cost profile").host_cost_key
    if key not in TRTLLM_HOST_PROFILES:  # a release registered after import: the newest measurements' profile
        TRTLLM_HOST_PROFILES[key] = _trtllm(key)
    return TRTLLM_HOST_PROFILES[key]


def load_host_profile(path: Path) -> HostProfile:
    """A ``host_costs.json`` written by ``plan --calibrate`` / ``replan`` (``planner.host_costs``)."""
    if not path.is_file():
        raise UserError(f"planner.host_costs {path} does not exist; give a host_costs.json written by "
                        "'trtllm-spec plan --calibrate' or the bundle's replan.sh")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"planner.host_costs {path} is not JSON ({exc}); regenerate it with "
                        "'trtllm-spec plan --calibrate'") from None
    try:
        return HostProfile.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, HostProfile, str(path))) from None
