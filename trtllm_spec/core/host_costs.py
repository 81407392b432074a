"""Host-cost profiles: the engine's costs the roofline does not see, per framework release.

The step model's six host terms (planner/step.py; fields of ``Overheads``, core/hardware.py) change from one engine
release to the next (CUDA graphs for the draft loop, async scheduling, one-model drafting hide host work), so they
are a profile of the release, not of the GPU:

    iteration_s       per target iteration (scheduler, sampling launch, host bookkeeping)
    sequence_s        ... per sequence in the batch
    spec_iteration_s  per speculative iteration (acceptance, KV rewind)
    spec_sequence_s   ... per sequence
    draft_step_s      per sequential draft step (per iteration for a block drafter)
    draft_sequence_s  ... per sequence

Each profile says which measurements fitted it and when (``fitted_on``, ``fitted``), which engine release those
measurements ran (``measured_release``) and which terms they identify (``note``): the per-sequence terms only where
a published sweep ran one setting at several batch sizes; a profile without one has them at 0 and carries their
size as an absolute uncertainty (``uncertainty_s``: PER_SEQUENCE_SD_S), which widens the plan's interval. The
planner takes the profile of the engine the recipe names: ``engine.serving`` (vLLM or SGLang and a version) when
set, else TensorRT-LLM's ``engine.trtllm_version``; ``benchmarks/planner_validation.py`` takes each published
point's framework and release. A release without its own fit is priced by RELEASE_RULE from the nearest fitted one
(the profile's ``rule`` says so, and the plan records it). A profile fitted from the user's own engine
(``plan --calibrate``, the bundle's ``replan.sh``, ``tune``) is a ``host_costs.json`` file of the same shape
(``planner.host_costs``).
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

# the step model's host terms (planner/step.py): per iteration, per speculative iteration and per draft step, each
# with its per-sequence part (issue 53)
HOST_TERMS = ("iteration_s", "sequence_s", "spec_iteration_s", "spec_sequence_s", "draft_step_s", "draft_sequence_s")
PER_SEQUENCE_TERMS = ("sequence_s", "spec_sequence_s", "draft_sequence_s")
HOST_COSTS_SCHEMA = "trtllm-spec/host_costs/v1"
Framework = Literal["TensorRT-LLM", "vLLM", "SGLang", "llama.cpp", "an OpenAI-compatible server"]
# a profile fitted on served runs of another engine than TensorRT-LLM (plan --calibrate with 'measure served' files):
# its release is this marker, and a plan with it predicts that engine's step times
SERVED_RELEASE = "served"


class HostProfile(StrictModel):
    """One engine release's host costs, with where they come from."""

    schema_: Literal["trtllm-spec/host_costs/v1"] = Field(HOST_COSTS_SCHEMA, alias="schema")
    name: str
    framework: Framework
    release: str = Field(description="the release the profile is for (TensorRT-LLM: a trtllm_version profile)")
    iteration_s: float = Field(ge=0)
    spec_iteration_s: float = Field(ge=0)
    draft_step_s: float = Field(ge=0)
    sequence_s: float = Field(0.0, ge=0, description="per sequence per iteration (0: no per-sequence measurement)")
    spec_sequence_s: float = Field(0.0, ge=0, description="per sequence per speculative iteration")
    draft_sequence_s: float = Field(0.0, ge=0, description="per sequence per draft step")
    measured_step: bool | None = Field(None, description="the terms carry the engine's whole step (fitted by "
                                       "'trtllm-spec tune' on a measured engine): the roofline is not used")
    prefill: dict[str, float] | None = Field(None, description="time to first token fitted on the engine's runs "
                                             "(tune): ttft_s + b ttft_sequence_s, plus spec_ttft_s + b "
                                             "spec_ttft_sequence_s with speculation (seconds)")
    moe_layer_units: float | None = Field(None, ge=0, description="kernel units per MoE layer (None: the GPU's)")
    per_expert_s: float | None = Field(None, ge=0, description="per expert touched (None: the GPU's)")
    measured_release: str = Field(description="the engine release(s) the fitting measurements ran")
    fitted_on: list[str] = Field(description="the measurements that fitted the terms")
    fitted: str = Field(description="when and how it was fitted")
    note: str = ""
    fit: dict[str, Any] | None = Field(None, description="a calibration's inputs and residuals (plan --calibrate)")
    rule: dict[str, Any] | None = Field(None, description="how the profile was chosen for its release "
                                        "(release_host_profile): fitted, or derived from a fitted one by RELEASE_RULE")
    overlap_hides: float | None = Field(None, ge=0, le=1, description="Overheads.overlap_hides (None: the GPU's)")
    overlap_with_speculation: bool | None = Field(None, description="Overheads.overlap_with_speculation (None: the "
                                                  "GPU's)")
    uncertainty: dict[str, float] | None = Field(None, description="log-space standard deviation of each host term "
                                                 "(planner/interval.py); None: HOST_TERM_LOG_SD")
    uncertainty_s: dict[str, float] | None = Field(None, description="absolute standard deviation (seconds) of each "
                                                   "term the profile's measurements do not identify and leave at 0 "
                                                   "(a log sd of 0 is 0): PER_SEQUENCE_SD_S (planner/interval.py)")

    def terms(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in HOST_TERMS}

    def overhead_fields(self) -> dict[str, float]:
        """The ``Overheads`` fields this profile sets."""
        extra = {k: getattr(self, k) for k in ("moe_layer_units", "per_expert_s", "overlap_hides",
                                               "overlap_with_speculation", "measured_step")
                 if getattr(self, k) is not None}
        return self.terms() | extra

    def summary(self) -> dict[str, Any]:
        """What a plan records about the profile it used (everything but the calibration detail)."""
        out = self.model_dump(mode="json", by_alias=True, exclude={"fit"}, exclude_none=True)
        if self.fit:
            out["identified"] = list(self.fit.get("identified") or [])
        return out


def with_host_costs(hw: Hardware, fields: dict[str, float]) -> Hardware:
    """``hw`` with these ``Overheads`` fields replaced (a new object)."""
    return hw.model_copy(update={"overheads": hw.overheads.model_copy(update=fields)})


_FIT = ("2026-12-05, benchmarks/planner_validation.py --fit (issue 54: the six terms of planner/step.py), calibration "
        "split only, per release")
# Per-sequence terms a profile's measurements do not identify are 0 with this absolute standard deviation (seconds):
# the one published sweep that identifies them (the EAGLE-3 paper's SGLang 0.4.4 batch sweep, bs 2-64, the only
# calibration sweep at several batch sizes) fits 19.3 us per sequence per speculative iteration (its
# spec_sequence_s + 3 draft_sequence_s) and 0 per sequence per plain iteration; that size stands for every per-sequence
# term nobody measured (per draft step: a third of it, the sweep's D = 3). benchmarks/planner_validation.json records
# the fit.
PER_SEQUENCE_SD_S = {"sequence_s": 2e-5, "spec_sequence_s": 2e-5, "draft_sequence_s": 6.5e-6}
NOT_PER_SEQUENCE = ("no calibration sweep of this release varies the batch size: sequence_s, spec_sequence_s and "
                    "draft_sequence_s are not identified, 0 here, uncertain by PER_SEQUENCE_SD_S (the plan's interval "
                    "carries them); calibrate at two batch sizes (plan --calibrate, tune)")


def _published(framework: Framework, release: str, terms: dict[str, float], fitted_on: list[str],
               note: str = "", **moe: float) -> HostProfile:
    per_sequence = any(terms.get(k) for k in PER_SEQUENCE_TERMS) or "per-sequence terms fitted" in note
    return HostProfile(name=f"{framework.lower()}-{release}", framework=framework, release=release, **terms,
                       measured_release=release, fitted_on=fitted_on, fitted=_FIT,
                       note=note if per_sequence else "; ".join(x for x in (note, NOT_PER_SEQUENCE) if x),
                       uncertainty_s=None if per_sequence else dict(PER_SEQUENCE_SD_S), **moe)


# Per framework release, fitted on that release's published calibration points only (--fit output, recorded here:
# benchmarks/planner_validation.json "fit"). Keys: (framework, release); the release is the engine version the
# measurements ran (or its era when the source names none: see benchmarks/planner_validation.md).
PUBLISHED_HOST_PROFILES: dict[tuple[str, str], HostProfile] = {(p.framework, p.release): p for p in (
    _published("TensorRT-LLM", "0.20-1.0rc", {"iteration_s": 1.21e-3, "spec_iteration_s": 1.0e-4,
                                              "draft_step_s": 4.64e-4}, [
        "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1 (DeepSeek-R1 FP4, 8x B200, MTP D = 1..5, bs 1, base "
        "step; 2025-05)",
        "NVIDIA/TensorRT-LLM PR #5146 (Llama-3.3-70B + EAGLE-3 one-model, H200 TP8, concurrency 4; 2025-06)"],
        note="bs 1 and 4 come from two sources (models, GPUs): no sweep varies the batch size",
        moe_layer_units=3.0, per_expert_s=0.0),
    _published("vLLM", "0.8.5", {"iteration_s": 1.71e-3, "spec_iteration_s": 1.84e-3, "draft_step_s": 1.83e-4}, [
        "vllm-project/vllm PR #16937 (V1, 2025-04: Llama-3.1-8B, H100, bs 1, EAGLE-1 K = 2, 4, 7 and EAGLE-3 K = 2, "
        "vanilla 133 tok/s)"]),
    _published("SGLang", "0.4.4", {"iteration_s": 0.0, "spec_iteration_s": 0.0, "draft_step_s": 8.67e-4,
                                   "spec_sequence_s": 1.93e-5}, [
        "EAGLE-3 paper (arXiv 2503.01840v3) Table 3 (SGLang v0.4.4, H100, Llama-3.1-8B, chain of 3, bs 2-64)"],
        note="per-sequence terms fitted on the bs 2-64 sweep (sequence_s 0; the speculative pair as its sum, 19.3 us "
             "per sequence, on spec_sequence_s: the prior had neither); one D only: spec_iteration_s + 3 "
             "draft_step_s is identified, split in the prior's ratio (all on draft_step_s); iteration_s 0: speedups "
             "alone (no plain step published) put no per-iteration cost beside the roofline's"),
)}
# Retired (issue 54): profiles fitted on sources the split rule holds out (benchmarks/planner_points.SPLIT_RULE: a
# source that reports its own numbers as a performance bug). Neither release has another calibration source, so
# "re-fit without it" has nothing to fit: their versions are priced by RELEASE_RULE from the fitted ones. The
# held-out numbers behind the decision are in benchmarks/planner_validation.json ("retired").
RETIRED_HOST_PROFILES = {
    ("vLLM", "0.9.2"): {"terms_s": {"iteration_s": 1.25e-3, "spec_iteration_s": 1e-3, "draft_step_s": 8e-4},
                        "fitted_on": "vllm-project/vllm issue #20780 (EAGLE-3 column; held out by the split rule)",
                        "fitted_sweeps": ["Llama-3.1-8B EAGLE-3 K-sweep, bs1"]},
    ("SGLang", "0.5"): {"terms_s": {"iteration_s": 1e-4, "spec_iteration_s": 4e-3, "draft_step_s": 1.25e-3},
                        "moe": {"moe_layer_units": 3.0, "per_expert_s": 0.0},
                        "fitted_on": "Tencent/AngelSlim issue #163 (held out by the split rule)",
                        "fitted_sweeps": ["Qwen3-30B-A3B EAGLE-3 tree (4, 4, 16), bs 1-64"]},
}

# With AIConfigurator's kernel tables as the target's work (planner.work: aiconfigurator, trtllm_spec/silicon/aic.py)
# the host terms beside them are fitted again, on the same calibration points (benchmarks/planner_vs_aic.py, recorded
# in planner_vs_aic.json "silicon_host_terms"). Only the families whose calibration points the tables price closer
# than the roofline (TensorRT-LLM 0.8% vs 4.0% median |error|, SGLang 4.5% vs 5.0%; vLLM 3.0% vs 2.6%: roofline).
_SILICON_FIT = ("2026-12-07, benchmarks/planner_vs_aic.py (AIConfigurator 0.12.0's kernel tables as the target's work), "
                "calibration split only, per release")


def _silicon(p: HostProfile, terms: dict[str, float], note: str = "") -> HostProfile:
    per_sequence = any(terms.get(k) for k in PER_SEQUENCE_TERMS) or "per-sequence terms fitted" in note
    return p.model_copy(update=dict.fromkeys(HOST_TERMS, 0.0) | terms | {
        "name": f"{p.name}-aiconfigurator", "fitted": _SILICON_FIT,
        "note": note if per_sequence else "; ".join(x for x in (note, NOT_PER_SEQUENCE) if x),
        "uncertainty_s": None if per_sequence else dict(PER_SEQUENCE_SD_S)})


SILICON_HOST_PROFILES: dict[tuple[str, str], HostProfile] = {
    ("TensorRT-LLM", "0.20-1.0rc"): _silicon(PUBLISHED_HOST_PROFILES[("TensorRT-LLM", "0.20-1.0rc")], {
        "iteration_s": 2.74e-3, "spec_iteration_s": 0.0, "draft_step_s": 3.21e-4}),
    ("SGLang", "0.4.4"): _silicon(PUBLISHED_HOST_PROFILES[("SGLang", "0.4.4")], {"draft_step_s": 1.06e-3},
                                  note="per-sequence terms fitted on the bs 2-64 sweep: 0 with these kernels; one D "
                                       "only: spec_iteration_s + 3 draft_step_s identified, split in the prior's ratio"),
}

# ---- releases without a fitted profile: the rule (issue 36) ------------------------------------------------------
# Host-cost uncertainty, log-space standard deviation per term:
# - a fitted profile: 0.25, set in i36 as the resolution of the grid search that fitted the terms then (adjacent grid
#   values 20-50% apart); kept for issue 54's least-squares fit, which has no grid and 5-9 equations per release (not
#   re-derived: the model's out-of-sample term, planner/interval.MODEL_LOG_SD, carries what the fit misses);
# - each minor release away from the fitted one adds the one measured movement between two fitted releases of the
#   same framework: vLLM 0.8.5 -> 0.9.2 moved iteration_s 2.0 -> 1.25 ms (ln 1.6 = 0.47) on the same model and GPU
#   (the speculative terms moved more, but their sum at D = 3 moved by 1%: 4.6 vs 4.65 ms, so the split, not the
#   total, is what one release pair identifies). One pair gives a size, not a direction: the rule moves no term, it
#   widens the interval. Combined in quadrature. (The 0.9.2 fit is retired, RETIRED_HOST_PROFILES: its source is
#   held out; the size is kept as the only measured movement, not re-derived.)
HOST_TERM_LOG_SD = 0.25
RELEASE_STEP_LOG_SD = 0.47
MAX_LOG_SD = 1.39  # ln 4: beyond a factor 4 either way a release's host terms are simply unknown; calibrate
RELEASE_RULE = ("nearest fitted release of the same framework (by version; a tie goes to the later one, host costs "
                "shrink with releases), its terms kept, host-cost features the release has and the fitted one lacks "
                "applied (RELEASE_FEATURES), each term's uncertainty widened by 0.47 (log) per minor release of "
                "distance (the one measured movement between fitted releases, vLLM 0.8.5 -> 0.9.2), at most a factor 4")

# Host-cost features per framework release, where documented. Only features that change which terms a step waits
# for are listed; each names its source.
FEATURE_SOURCES = {
    "overlap_with_speculation": "NVIDIA/TensorRT-LLM issue #9421 (2025-11-25): 'the overlap scheduler is currently "
    "enabled for speculative decoding with the PyTorch backend, when using the chain drafter and using a TRTLLM "
    "attention backend'; PR #5146 (the fitted 0.20-1.0rc measurements) ran disable_overlap_scheduler: true",
    "async_scheduling_with_speculation": "vllm-project/vllm PR #24799 (2025-10, async scheduling x spec decoding, "
    "opt-in) and PR #31998 (2026-01-08: on by default with EAGLE / MTP; in v0.14.0, 2026-01-17)",
}
# Both hide the iteration's host work (iteration_s and the speculative iteration's spec_iteration_s) behind the
# GPU's work on the previous step. The one measured size: vllm-project/vllm PR #25872 (async scheduling with EAGLE-3,
# Llama-3.1-8B, K = 4, concurrency 1, L20): mean ITL 28.14 -> 27.17 ms, 0.97 ms hidden per iteration, 43% of the
# 2.25 ms (iteration_s + spec_iteration_s) of the nearest fitted vLLM profile (0.9.2). The share is uncertain
# (another engine for TensorRT-LLM): FEATURE_LOG_SD adds ln 2 to iteration_s and spec_iteration_s.
HIDDEN_SHARE = 0.43
FEATURE_EFFECTS = {"overlap_with_speculation": {"overlap_with_speculation": True, "overlap_hides": HIDDEN_SHARE},
                   "async_scheduling_with_speculation": {"overlap_with_speculation": True,
                                                         "overlap_hides": HIDDEN_SHARE}}
FEATURE_LOG_SD = {f: {"iteration_s": 0.69, "spec_iteration_s": 0.69} for f in FEATURE_EFFECTS}
RELEASE_FEATURES: dict[tuple[str, str], frozenset[str]] = {
    ("TensorRT-LLM", "0.20-1.0rc"): frozenset(),
    ("TensorRT-LLM", "1.2"): frozenset({"overlap_with_speculation"}),
    ("TensorRT-LLM", "1.3"): frozenset({"overlap_with_speculation"}),
    ("TensorRT-LLM", "1.4"): frozenset({"overlap_with_speculation"}),
}


def release_features(framework: str, release: str) -> frozenset[str]:
    """The documented host-cost features of a release (vLLM: async scheduling with EAGLE / MTP by default from
    0.14, PR #31998)."""
    if (framework, release) in RELEASE_FEATURES:
        return RELEASE_FEATURES[(framework, release)]
    if framework == "vLLM" and _key(release)[:2] >= (0, 14):
        return frozenset({"async_scheduling_with_speculation"})
    if framework == "TensorRT-LLM" and _key(release)[:2] >= (1, 2):  # a release registered later (core/releases.py)
        return frozenset({"overlap_with_speculation"})
    return frozenset()


def _key(release: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", release))


def _distance(a: str, b: str) -> float:
    """Minor releases between two versions (a range such as 0.20-1.0rc counts as its newest end; 0.x -> 1.0 as one
    step; a patch release of the same minor as half a step)."""
    ka, kb = ((_key(v.split("-")[-1]) + (0, 0, 0))[:3] for v in (a, b))
    minor = abs((ka[0] * 100 + ka[1]) - (kb[0] * 100 + kb[1]))
    if ka[0] != kb[0]:  # across a major version: count the minors of the newer major only, plus one
        newer = max(ka, kb)
        minor = newer[1] + 1
    return float(minor) if minor else (0.5 if ka[2] != kb[2] else 0.0)


def release_host_profile(framework: str, release: str, work: str = "roofline") -> HostProfile:
    """The host-cost profile for a framework release: its own fitted one, else RELEASE_RULE from the nearest fitted
    one. The result's ``rule`` says which, and ``uncertainty`` holds each term's log-space standard deviation.
    ``work``: what prices the GPU work the terms sit beside (planner.work): the roofline's profiles, or those fitted
    with AIConfigurator's kernel tables (SILICON_HOST_PROFILES)."""
    table = SILICON_HOST_PROFILES if work == "aiconfigurator" else PUBLISHED_HOST_PROFILES
    sd = dict.fromkeys(HOST_TERMS, HOST_TERM_LOG_SD)
    if (framework, release) in table:
        prof = table[(framework, release)]
        return prof.model_copy(update={"rule": {"rule": "fitted", "base": prof.name, "distance": 0, "features": []},
                                       "uncertainty": sd})
    fitted = [r for f, r in table if f == framework]
    if work == "aiconfigurator" and not fitted:
        raise UserError(f"planner.work: aiconfigurator prices {' and '.join(sorted({f for f, _r in table}))} (its "
                        f"kernel tables were closer than the roofline on their calibration points, "
                        f"benchmarks/planner_vs_aic.md); for {framework} the roofline was: use planner.work: roofline")
    if not fitted or not _key(release):
        known = ", ".join(f"{f} {r}" for f, r in table)
        raise UserError(f"no host-cost profile for {framework} {release}; known: {known}")
    base_rel = min(fitted, key=lambda r: (_distance(r, release), _key(r.split("-")[-1]) < _key(release)))
    base = table[(framework, base_rel)]
    dist = _distance(base_rel, release)
    added = sorted(release_features(framework, release) - release_features(framework, base_rel))
    sd = {k: (HOST_TERM_LOG_SD ** 2 + (dist * RELEASE_STEP_LOG_SD) ** 2) ** 0.5 for k in HOST_TERMS}
    effects: dict[str, Any] = {}
    for f in added:
        effects |= FEATURE_EFFECTS.get(f, {})
        for k, v in FEATURE_LOG_SD.get(f, {}).items():
            sd[k] = (sd[k] ** 2 + v ** 2) ** 0.5
    sd = {k: min(v, MAX_LOG_SD) for k, v in sd.items()}
    rule = {"rule": "nearest fitted release", "text": RELEASE_RULE, "base": base.name, "base_release": base_rel,
            "distance": dist, "features": [{"feature": f, "effect": FEATURE_EFFECTS.get(f, {}),
                                            "source": FEATURE_SOURCES.get(f, "")} for f in added]}
    retired = RETIRED_HOST_PROFILES.get((framework, release))
    why = (f"its only published step times ({retired['fitted_on']}) are not fitted" if retired else
           f"no published step times of {framework} {release} were found (searched 2026-12-02/03)")
    note = (f"{why}: derived from {base.name} by the release rule ({dist} minor release(s) away"
            + (f"; features applied: {', '.join(added)}" if added else "; no documented host-cost feature differs")
            + "). Fit your engine's with `trtllm-spec plan --calibrate` (plain and speculative runs at two "
            "concurrencies) or `trtllm-spec tune`." + (f" {base.name}: {NOT_PER_SEQUENCE}" if base.uncertainty_s else ""))
    suffix = "-aiconfigurator" if work == "aiconfigurator" else ""
    return base.model_copy(update={"name": f"{framework.lower()}-{release}{suffix}", "release": release,
                                   "measured_release": base_rel, "note": note, "rule": rule, "uncertainty": sd,
                                   **effects})


def published_host_profile(framework: str, release: str, work: str = "roofline") -> tuple[HostProfile, str]:
    """(the profile, how it was chosen) for a framework release (release_host_profile)."""
    prof = release_host_profile(framework, release, work)
    r = prof.rule or {}
    return prof, ("its own" if r.get("rule") == "fitted" else
                  f"rule: nearest fitted {r['base_release']}, {r['distance']} minor away"
                  + (f", + {', '.join(f['feature'] for f in r['features'])}" if r["features"] else ""))


def host_cost_profile(release: str, work: str = "roofline") -> HostProfile:
    """The host-cost profile of a TensorRT-LLM release (engine.trtllm_version), by its record's ``host_cost_key``
    (core/releases.py; an unknown release is refused there). Fitted where measurements exist, else derived by
    RELEASE_RULE (the profile's ``rule`` says which)."""
    if ("TensorRT-LLM", release) not in PUBLISHED_HOST_PROFILES:
        release = get_release(release, "TensorRT-LLM release of the host-cost profile").host_cost_key
    return release_host_profile("TensorRT-LLM", release, work)


TRTLLM_HOST_PROFILES: dict[str, HostProfile] = {r.host_cost_key: host_cost_profile(r.name) for r in RELEASES.values()}


def trtllm_host_profile(release: str, work: str = "roofline") -> HostProfile:
    return host_cost_profile(release, work)


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
