"""Typed artifacts passed between stages. Each one's ``to_json()`` is the JSON the stage has always written,
so files and golden outputs do not change when the code reads a field instead of a dict key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# How the drafter stage obtained the drafter (one vocabulary for `train` and `build`):
#   none        the mechanism needs no model (n-gram)
#   native      the target's own layers (native MTP)
#   reused      drafter.checkpoint, a local exported folder
#   hub         drafter.checkpoint, a hub id TensorRT-LLM downloads when serving (build only)
#   converted   drafter.convert_from, a third-party layout converted to the export layout
#   draft_model an external draft model (drafter.model)
#   trained     trained with ModelOpt and exported here
#   deferred    training needs the target's weights, which are not here (build only)
DrafterKind = Literal["none", "native", "reused", "hub", "converted", "draft_model", "trained", "deferred"]

# A trained drafter's files beside its export (train/export.py and train/run.py write them; doctor reads them): the
# training record inside the exported folder, and the held-out chunks next to it that training scored
META_FILE = "trtllm_spec_drafter.json"
HELDOUT_FILE = "heldout_chunks.json"


def read_meta(folder: Path) -> dict:
    """The training record of an exported drafter folder ({} when it has none)."""
    import json

    p = folder / META_FILE
    return json.loads(p.read_text()) if p.is_file() else {}


@dataclass(frozen=True)
class DrafterResult:
    kind: DrafterKind
    drafter_dir: Path | None
    summary: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "drafter_dir": str(self.drafter_dir) if self.drafter_dir else None,
                "summary": self.summary}


# ---- the plan (plan.json) and the speculation profile (speculation_profile.json) ------------------------------
# Pydantic models over the JSON the planner and the measurers write. Keys are declared in the order they are
# written, optional ones are left out when absent (exclude_unset), so ``to_json(from_json(d)) == d`` key for key.

class _Artifact(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    @classmethod
    def from_json(cls, data: dict):
        return cls.model_validate(data)

    def to_json(self) -> dict:
        # python mode: values pass through as the writer made them (no NaN -> null and the like)
        return self.model_dump(by_alias=True, exclude_unset=True)


class Recommendation(_Artifact):
    mechanism: str
    max_draft_len: int
    draft_len_schedule: dict[str, int] | None
    max_concurrency: int | None = None  # speculation off above this batch (mechanisms with one D, e.g. DSpark)
    draft_len_rule: str | None = None  # what the engine does at each batch size when it is not a plain schedule
    trtllm_profile: str
    speculation_recommended: bool
    by_batch: list[dict[str, Any]]
    infeasible_batch_sizes: list[int]
    largest_feasible_batch: dict[str, int]
    latency_target: dict[str, Any] | None = None
    speculation_limit: dict[str, Any] | None = None
    speculation_pays_up_to: int | None = None
    memory: dict[str, Any] | None = None
    note: str | None = None
    uncertainty_note: str | None = None  # where the speedup interval changes the decision (planner/interval.py)

    def schedule(self) -> dict[int, int] | None:
        """``draft_len_schedule`` with integer batch sizes, as TensorRT-LLM's options take it."""
        s = self.draft_len_schedule
        return {int(k): v for k, v in s.items()} if s else None


PLAN_SCHEMA = "trtllm-spec/plan/v1"


class Plan(_Artifact):
    schema_: Literal["trtllm-spec/plan/v1"] = Field(alias="schema")
    trtllm_spec_version: str
    target: dict[str, Any]
    hardware: dict[str, Any]
    parallelism: dict[str, int]
    precision: dict[str, str]
    workload: dict[str, Any]
    drafter: dict[str, Any]
    guidelines: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    recommendation: Recommendation
    frontier: list[dict[str, Any]]
    assumptions: list[str]
    host_costs: dict[str, Any] | None = None  # the host-cost profile used (core/host_costs.py)
    uncertainty: dict[str, Any] | None = None  # the speedup intervals: level, how, calibration narrowing
    robustness: dict[str, Any] | None = None  # the pick with each host term halved and doubled
    step_terms: list[dict[str, Any]] | None = None  # every term of the step model and its source (planner/step.py)
    speedup_kinds: dict[str, str] | None = None  # what each predicted number is (TPOT vs server throughput)


PROFILE_SCHEMA = "trtllm-spec/speculation_profile/v1"


class ProfileDrafter(_Artifact):
    type: str
    path: str | None
    draft_len: int
    max_draft_len: int | None = None
    block_sweep: list[int] | None = None
    acceptance_kind: Literal["chain", "block"]
    al_method: Literal["chain_analytic", "measured_per_draft_len", "measured_at_bundle_draft_len"]
    bundle: str | None = None
    # the drafter's settings in the reference decoder (Mechanism.runtime_options: the suffix automaton's, the SA
    # enhancer's); absent when it has none
    options: dict[str, Any] | None = None


class SpeculationProfile(_Artifact):
    """One profile, whichever engine measured it (``measure.profile.build_profile``: the PyTorch reference
    decoder; ``measure.trtllm_engine``: TensorRT-LLM). ``prompts``: per-prompt records (reference decoder)."""

    schema_: Literal["trtllm-spec/speculation_profile/v1"] = Field(PROFILE_SCHEMA, alias="schema")
    engine: Literal["pytorch", "trtllm", "llamacpp", "vllm"]
    # where the numbers come from when the engine measured them itself (measure --from-trtllm-bench/-metrics)
    source: dict[str, Any] | None = None
    drafter: ProfileDrafter
    target: dict[str, Any]
    suite: dict[str, Any]
    settings: dict[str, Any]
    overall: dict[str, Any]
    categories: dict[str, dict[str, Any]]
    prompts: list[dict[str, Any]] | None = None
    # engine llamacpp | vllm: the reference decoder's numbers on the same prompts (measure/engine_compare.py)
    comparison: dict[str, Any] | None = None

    @classmethod
    def build(cls, **fields) -> dict:
        """The profile's JSON from its parts (the one builder both engines use)."""
        return cls(schema=PROFILE_SCHEMA, **fields).to_json()


SERVED_SCHEMA = "trtllm-spec/served_measurement/v1"
SERVED_FILE = "served_measurement.json"  # what 'measure served' writes in its --out folder


class ServedMeasurement(_Artifact):
    """``measure served``: a served endpoint measured from streamed responses at each concurrency
    (measure/served.py), with the planner's prediction for the same batch sizes beside it."""

    schema_: Literal["trtllm-spec/served_measurement/v1"] = Field(SERVED_SCHEMA, alias="schema")
    engine: Literal["openai"]
    server: dict[str, Any]
    target: dict[str, Any]
    suite: dict[str, Any]
    settings: dict[str, Any]
    levels: list[dict[str, Any]]
    prediction: dict[str, Any]

    @classmethod
    def build(cls, **fields) -> dict:
        return cls(schema=SERVED_SCHEMA, **fields).to_json()
