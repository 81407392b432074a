"""A strict, versioned mirror of the TensorRT-LLM LLM API fields we emit (``TorchLlmArgs``).

``tensorrt_llm`` cannot be imported here (no GPU; PyPI's ``tensorrt-llm`` is only a stub), so the options YAML we
write for ``trtllm-serve --extra_llm_api_options``, ``trtllm-bench`` and Triton's llmapi ``model.yaml`` is
validated against this mirror instead: unknown keys fail (upstream's ``StrictBaseModel`` is
``extra="forbid"``), tags and renamed fields follow each release, and the validators we depend on are
restated. Only fields we emit are mirrored. The decoding config classes and options models are generated
from one per-release field table (``BASE_FIELDS``, ``TAG_FIELDS``); only the field groups are written here.
Where ``tensorrt_llm`` imports (NVIDIA's container), ``validate_with_tensorrt_llm`` also checks against the real
classes.

Every field, tag and name we emit, per profile, with the upstream source that reads it and the test that pins it:
docs/trtllm_compat.md (keep it and these classes in step). Sources:
- R12: ``NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py`` of release 1.2.1 (late 2025, TRT backend still
  present): the "1.2" profile (TensorRT-LLM 1.2.1, nvcr.io/nvidia/tensorrt-llm/release:1.2.1). Parser A: other
  1.2-era versions of the same file (the ``DecodingBaseConfig.from_dict`` era), whose refusals a 1.2 bundle also
  avoids (``PARSER_A_12``).
- MAIN: ``NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py`` @0004396720054fd8e205cbf616f21f0b57c6b412
  (post 1.3.0rc2x main) and the 1.3.0rc27 API reference pages: the "1.3" profile.
- R14: the TensorRT-LLM 1.4.0rc1 and 1.4.0rc4 LLM API reference pages (nvidia.github.io/TensorRT-LLM/1.4.0rc1/
  and /1.4.0rc4/llm-api/reference/{Eagle3,MTP,DFlash,DSpark}DecodingConfig.html): the "1.4" profile. Fields added
  over 1.3, each with the release whose page shows it: ``moe_backend`` and ``spec_dec_variant`` on every
  decoding config (rc1), DFlash ``context_recompute_tail`` and ``skip_ctx_buffer_budget_check`` (rc1), DSpark
  ``enable_confidence_scheduling``, ``confidence_cost_table_path``, ``confidence_calibration_path``,
  ``confidence_min_predicted_gain``, ``enable_fused_confidence_scheduler`` (rc4); DSpark ``block_size``,
  ``markov_rank``, ``markov_head_type`` are already on the 1.3.0rc27 page. ``max_concurrency`` (1.3.0rc27 and
  1.4 pages): "speculation will be disabled at batch sizes above this value", exclusive with
  ``draft_len_schedule`` (DecodingBaseConfig description in llm_args.py). The TensorRT-engine backend is gone
  after 1.2 (docs/source/legacy/tensorrt-backend-removal.md), so only ``backend: pytorch`` exists in any profile.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AliasChoices,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    create_model,
    model_validator,
)

from trtllm_spec.core import releases
from trtllm_spec.core.sa import SA_POOL_MATCH_CAP, SA_THRESHOLD_DEFAULT
from trtllm_spec.core.schema import StrictModel, format_validation_error
from trtllm_spec.errors import UserError
from trtllm_spec.planner.schedule import check_schedule

# the releases, their decoding tags (with the release that first has each) and the misspellings we recognise:
# core/releases.py, one record per release
PROFILES = releases.names()
DECODING_TAGS = {r.name: r.tags for r in releases.RELEASES.values()}
TAG_SINCE = {t.tag: t.since for t in releases.DECODING_TAGS.values() if t.since != PROFILES[0]}
TAG_SPELLINGS = releases.TAG_ALIASES


# ---- shared sub-configs ---------------------------------------------------------------------------

class KvCacheConfig(StrictModel):
    # KvCacheConfig (R12 and MAIN): free_gpu_memory_fraction Optional[float]=0.9 in [0, 1]
    free_gpu_memory_fraction: float | None = Field(None, ge=0, le=1)
    enable_block_reuse: bool | None = None  # default True
    # dtype: str="auto"; MAIN documents auto|fp8|fp8_ds_mla|nvfp4; every release's
    # sync_quant_config_with_kv_cache_config_dtype handles auto and fp8 and only warns on anything else (a torch
    # dtype name such as bfloat16 is not synced): those are refused here (deploy/trtllm_options.KV_CACHE_DTYPES)
    dtype: Literal["auto", "fp8", "fp8_ds_mla", "nvfp4"] | None = None


class CudaGraphConfig(StrictModel):
    # CudaGraphConfig (R12 and MAIN): batch_sizes Optional[List[int]], max_batch_size NonNegativeInt=0,
    # enable_padding bool=False
    batch_sizes: list[PositiveInt] | None = None
    max_batch_size: NonNegativeInt = 0
    enable_padding: bool = False

    @model_validator(mode="after")
    def _max_matches_sizes(self) -> CudaGraphConfig:
        # upstream validate_cuda_graph_config: with both given, max_batch_size must equal max(batch_sizes)
        if self.batch_sizes and self.max_batch_size and self.max_batch_size != max(self.batch_sizes):
            raise ValueError(f"max_batch_size = {self.max_batch_size} must equal "
                             f"max(batch_sizes) = {max(self.batch_sizes)}; set it to 0 or to the largest size")
        return self


# ---- speculative configs: common base and per-release acceptance fields ------------------------------

class _Decoding(StrictModel):
    """DecodingBaseConfig fields we emit (R12 and MAIN agree)."""

    profile: ClassVar[str]
    max_draft_len: NonNegativeInt | None = None
    # speculative_model: HF id or local dir; alias speculative_model_dir (the 1.0/1.1 name) in both releases
    speculative_model: str | None = Field(
        None, validation_alias=AliasChoices("speculative_model", "speculative_model_dir"))
    draft_len_schedule: dict[int, int] | None = None

    def effective_max_draft_len(self) -> int | None:
        return self.max_draft_len

    @model_validator(mode="after")
    def _schedule(self) -> _Decoding:
        # 1.2: key 1 required and maps to max_draft_len; 1.3 (PR #10860): the smallest key does; both:
        # values in [0, max_draft_len] (validate_draft_len_schedule_and_sort); rules in planner.schedule
        if self.draft_len_schedule is not None:
            d = self.effective_max_draft_len()
            if d is None and self.draft_len_schedule:
                d = self.draft_len_schedule[min(self.draft_len_schedule)]
            try:
                check_schedule(self.draft_len_schedule, d or 0, self.profile)
            except UserError as exc:
                raise ValueError(str(exc)) from None
        return self


class _Acceptance12(StrictModel):
    # R12 DecodingBaseConfig: window over completed requests, threshold on acceptance *length*
    acceptance_window: NonNegativeInt | None = None
    acceptance_length_threshold: NonNegativeFloat | None = None


class _Acceptance13(StrictModel):
    # MAIN renamed them: window over speculation iterations, threshold on acceptance *rate* in [0, 1]
    acceptance_rate_window_size: NonNegativeInt | None = None
    acceptance_rate_threshold: float | None = Field(None, ge=0, le=1)


class _MaxConcurrency(StrictModel):
    # 1.3+ DecodingBaseConfig: max_concurrency PositiveInt | None; TensorRT-LLM translates it to
    # draft_len_schedule {max_concurrency: max_draft_len} and refuses both together
    max_concurrency: PositiveInt | None = None

    @model_validator(mode="after")
    def _exclusive(self) -> _MaxConcurrency:
        if self.max_concurrency is not None and self.draft_len_schedule is not None:  # type: ignore[attr-defined]
            raise ValueError("max_concurrency and draft_len_schedule are mutually exclusive (TensorRT-LLM turns "
                             "max_concurrency into the schedule {max_concurrency: max_draft_len}); give one")
        return self


MOE_BACKENDS_14 = ("AUTO", "CUTLASS", "CUTEDSL", "CUTEDSL_FC12", "TRTLLM", "DEEPGEMM", "DENSEGEMM", "VANILLA",
                   "TRITON", "MARLIN", "MEGAMOE_DEEPGEMM", "MEGAMOE_CUTEDSL")  # R14 (rc1 and rc4 pages)


class _Fields14(StrictModel):
    # R14: DecodingBaseConfig gains moe_backend (Literal, None = the target's) and spec_dec_variant (int > 0;
    # defaults differ per class: Eagle3 3, MTP/DSpark 1, DFlash None)
    moe_backend: Literal[MOE_BACKENDS_14] | None = None  # type: ignore[valid-type]
    spec_dec_variant: PositiveInt | None = None


def _positive_draft_len(cfg: _Decoding, who: str) -> None:
    if not cfg.max_draft_len:
        raise ValueError(f"max_draft_len must be > 0 for {who} (got {cfg.max_draft_len})")


# ---- per-mechanism fields and validators (mixins) --------------------------------------------------

class _EagleFields(StrictModel):
    # EagleDecodingConfig: eagle3_layers_to_capture Optional[Set[int]] (default {1, L//2-1, L-4})
    eagle3_layers_to_capture: list[int] | None = None

    @model_validator(mode="after")
    def _eagle(self) -> _EagleFields:
        # validate_eagle_config: "max_draft_len must be > 0 for Eagle"; validate_speculative_model: "Draft
        # model must be provided for EAGLE" (R12 and MAIN)
        _positive_draft_len(self, "Eagle")  # type: ignore[arg-type]
        if self.speculative_model is None:  # type: ignore[attr-defined]
            raise ValueError("speculative_model (the EAGLE-3 drafter folder or HF id) is required for Eagle3")
        return self


class _NGramFields(StrictModel):
    # NGramDecodingConfig (identical in R12 and MAIN); validate_ngram_config: max_draft_len > 0
    max_matching_ngram_size: PositiveInt = 2
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True

    @model_validator(mode="after")
    def _ngram(self) -> _NGramFields:
        _positive_draft_len(self, "NGram")  # type: ignore[arg-type]
        return self


class _DraftTargetFields(StrictModel):
    # DraftTargetDecodingConfig.validate_draft_target_config: max_draft_len > 0 and speculative_model set
    @model_validator(mode="after")
    def _draft_target(self) -> _DraftTargetFields:
        _positive_draft_len(self, "Draft_Target")  # type: ignore[arg-type]
        if self.speculative_model is None:  # type: ignore[attr-defined]
            raise ValueError("speculative_model (the draft model folder or HF id) is required for Draft_Target")
        return self


class _BlockFields(StrictModel):
    # DFlashDecodingConfig / DSparkDecodingConfig (MAIN, docs 1.3.0rc27): mask_token_id and
    # target_layer_ids default to the drafter's config.json; TorchLlmArgs asserts max_draft_len > 0
    mask_token_id: NonNegativeInt | None = None
    target_layer_ids: list[int] | None = None

    @model_validator(mode="after")
    def _block(self) -> _BlockFields:
        _positive_draft_len(self, self.decoding_type)  # type: ignore[arg-type, attr-defined]
        return self


class SAEnhancer(StrictModel):
    # SAEnhancerConfig (MAIN; 1.3.0rc27 and 1.4.0rc4 pages): threshold PositiveInt = 4, enable_global_pool = False.
    # Absent from R12: a 1.2 Eagle3/MTP config with sa_config is an unknown key.
    threshold: PositiveInt = SA_THRESHOLD_DEFAULT
    enable_global_pool: bool = False


class _SAConfigField(StrictModel):
    # Eagle3DecodingConfig / MTPDecodingConfig.sa_config: Optional[SAEnhancerConfig] (status beta; MAIN, 1.3.0rc27,
    # 1.4.0rc1/rc4 pages); not on the legacy EagleDecodingConfig ("Eagle" tag)
    sa_config: SAEnhancer | None = None


class _SAFields(StrictModel):
    # SADecodingConfig (MAIN @0004396, 1.3.0rc27 and 1.4.0rc4 pages) and its validate_sa_config
    max_matching_ngram_size: int = -1
    enable_global_pool: bool = False
    global_pool_size: PositiveInt | None = None

    @model_validator(mode="after")
    def _sa(self) -> _SAFields:
        if self.max_matching_ngram_size == 0 or self.max_matching_ngram_size < -1:
            raise ValueError("max_matching_ngram_size must be > 0 (fixed ngram) or -1 (longest match)")
        if self.enable_global_pool and self.max_matching_ngram_size > SA_POOL_MATCH_CAP:
            raise ValueError(f"max_matching_ngram_size must be -1 (longest match) or in [1, {SA_POOL_MATCH_CAP}] when "
                             "enable_global_pool is True")
        _positive_draft_len(self, "SA")  # type: ignore[arg-type]
        if self.global_pool_size is not None and not self.enable_global_pool:
            raise ValueError("global_pool_size requires enable_global_pool=True")
        return self


class _MTPLayers12(StrictModel):
    # R12 MTPDecodingConfig: num_nextn_predict_layers PositiveInt=1; its validator sets max_draft_len to it
    num_nextn_predict_layers: PositiveInt = 1

    def effective_max_draft_len(self) -> int | None:
        return self.num_nextn_predict_layers

    @model_validator(mode="after")
    def _layers_set_draft_len(self) -> _MTPLayers12:
        draft_len = self.max_draft_len  # type: ignore[attr-defined]
        if draft_len is not None and draft_len != self.num_nextn_predict_layers:
            raise ValueError(f"in TensorRT-LLM 1.2 num_nextn_predict_layers ({self.num_nextn_predict_layers}) "
                             f"overrides max_draft_len ({draft_len}); give num_nextn_predict_layers only")
        return self


class _DFlash14(StrictModel):
    # R14 rc1: context_recompute_tail int | None = 0 (prompt tokens recomputed after a prefix-cache hit so the
    # drafter sees target hidden states), skip_ctx_buffer_budget_check bool = False,
    # attention_backend Literal['VANILLA', 'TRTLLM', 'FA4'] = 'VANILLA'
    context_recompute_tail: NonNegativeInt | None = None
    skip_ctx_buffer_budget_check: bool | None = None
    attention_backend: Literal["VANILLA", "TRTLLM", "FA4"] | None = None


class _DSpark14(StrictModel):
    # 1.3.0rc27 and R14: block_size int > 0, markov_rank int, markov_head_type vanilla|gated|rnn (None = the
    # checkpoint's); R14 rc4: the confidence scheduler; rc1: attention_backend AUTO|VANILLA|TRTLLM|CUTEDSL
    block_size: PositiveInt | None = None
    markov_rank: NonNegativeInt | None = None
    markov_head_type: Literal["vanilla", "gated", "rnn"] | None = None
    # (rc4 page; newest main replaced the three inputs below: DSPARK_CONFIDENCE_MAIN, refused naming the release)
    enable_confidence_scheduling: bool | None = None  # default False
    confidence_cost_table_path: str | None = None
    confidence_calibration_path: str | None = None
    confidence_min_predicted_gain: NonNegativeFloat | None = None  # default 0.04
    enable_fused_confidence_scheduler: bool | None = None  # default True
    attention_backend: Literal["AUTO", "VANILLA", "TRTLLM", "CUTEDSL"] | None = None


# ---- the per-release field table: every decoding config class and options model is generated from it ------------
# A row holds from its release on, until a later row of the same table replaces it (numeric release order).
# DecodingBaseConfig's fields each release has beside the common ones (_Decoding). A release with no row of its own
# names its ``mirror_base`` (core/releases.py): its fields are that release's, unchanged.
BASE_FIELDS: dict[str, tuple[type, ...]] = {
    "1.2": (_Acceptance12,),
    "1.3": (_Acceptance13, _MaxConcurrency),  # PR #12905 renamed the acceptance fields; max_concurrency is new
    "1.4": (_Acceptance13, _MaxConcurrency, _Fields14),
}
# Each decoding tag's own fields over its release's base (a tag exists in a release per core/releases.DECODING_TAGS;
# a mechanism registered after import brings its fields as ``trtllm_mirror_fields``, from its tag's first release).
TAG_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    # "Eagle" is what 1.2 bundles write for EAGLE-3: parser A's only EAGLE tag, and R12's EagleDecodingConfig run
    # as EAGLE-3 on PyTorch (spec_dec_mode EAGLE3_ONE_MODEL / EAGLE3); main deprecates it (PR #10124)
    "Eagle": {"1.2": (_EagleFields,)},
    "Eagle3": {"1.2": (_EagleFields,), "1.3": (_EagleFields, _SAConfigField)},
    # MAIN: max_draft_len is the knob (None = from the checkpoint); num_nextn_predict_layers is init=False (a YAML
    # value is remapped with a deprecation warning), so we never emit it after 1.2; R14 rc4 lists
    # num_nextn_predict_layers: int | None = None again, and max_draft_len stays the knob we emit
    "MTP": {"1.2": (_MTPLayers12,), "1.3": (_SAConfigField,)},
    "NGram": {"1.2": (_NGramFields,)},
    "Draft_Target": {"1.2": (_DraftTargetFields,)},
    "DFlash": {"1.3": (_BlockFields,), "1.4": (_BlockFields, _DFlash14)},
    "DSpark": {"1.3": (_BlockFields,), "1.4": (_BlockFields, _DSpark14)},
    "SA": {"1.3": (_SAFields,)},  # R14 rc4 SADecodingConfig: 1.3's fields + the base's
}


def _row(rows: dict[str, Any], profile: str) -> Any:
    """The row of ``rows`` that holds at ``profile``: the newest one not after it (None before the first)."""
    held = [r for r in rows if releases.order(r) <= releases.order(profile)]
    return rows[max(held, key=releases.order)] if held else None


def _mirrored(profile: str) -> str:
    """The release whose row of ``BASE_FIELDS`` mirrors ``profile``: its own, or its record's ``mirror_base``."""
    seen = profile
    while seen not in BASE_FIELDS:
        base = releases.get(seen).mirror_base
        if base is None:
            raise UserError(f"TensorRT-LLM {profile}: no options mirror (deploy/trtllm_schema.BASE_FIELDS has no row "
                            "for it) and its release record names no mirror_base; docs/architecture.md, 'Adding a "
                            "TensorRT-LLM release'")
        seen = base
    return seen


def _compact(release: str) -> str:
    return release.replace(".", "")


@functools.cache
def _base(mirrored: str) -> type[_Decoding]:
    return type(f"_Base{_compact(mirrored)}", (_Decoding, *BASE_FIELDS[mirrored]),
                {"profile": mirrored, "__module__": __name__})


def _tag_rows(tag: str) -> dict[str, tuple[type, ...]] | None:
    if tag in TAG_FIELDS:
        return TAG_FIELDS[tag]
    from trtllm_spec.drafters.registry import MECHANISMS

    # the fields of a registered tag are those of the mechanism that introduced it (others may share the tag)
    mech = next((m for m in MECHANISMS.values() if tag in (t.tag for t in m.new_decoding_tags)), None)
    if mech is None:
        return None
    since = releases.tag_since(tag) or releases.names()[0]
    return {since: (mech.trtllm_mirror_fields,) if mech.trtllm_mirror_fields is not None else ()}


@functools.cache
def _generated(mirrored: str, tag: str, fields: tuple[type, ...]) -> type[_Decoding]:
    """The decoding config class: the tag's own fields, the release's base and ``decoding_type: Literal[tag]`` (the
    tag's mixins come first so that one may redefine how the draft length is read, as 1.2's MTP does)."""
    name = f"{tag.replace('_', '')}_{_compact(mirrored)}"
    return type(name, (*fields, _base(mirrored)), {"__annotations__": {"decoding_type": Literal[tag]},
                                                   "decoding_type": tag, "__module__": __name__})


def _decoding_class(profile: str, tag: str) -> type[_Decoding]:
    mirrored = _mirrored(profile)
    rows = _tag_rows(tag)
    fields = _row(rows, mirrored) if rows is not None else None
    if fields is None:
        raise UserError(f"TensorRT-LLM {profile}: decoding_type {tag!r} has no mirrored config class (no row of "
                        f"deploy/trtllm_schema.TAG_FIELDS holds at {mirrored})")
    return _generated(mirrored, tag, fields)


def decoding_classes(profile: str) -> dict[str, type[_Decoding]]:
    """Every decoding config class of ``profile``, by tag (the tags its release record knows)."""
    return {tag: _decoding_class(profile, tag) for tag in _tags(profile)}


# ---- top level (TorchLlmArgs) -------------------------------------------------------------------------

class _LlmApiOptions(StrictModel):
    # BaseLlmArgs / TorchLlmArgs fields (R12 and MAIN; notes §1.10)
    model: str | None = None  # required by LLM(); only in Triton's model.yaml (trtllm-serve takes it as argument)
    backend: Literal["pytorch"] | None = None  # TorchLlmArgs.backend: Literal["pytorch"]
    trust_remote_code: bool | None = None
    tensor_parallel_size: PositiveInt | None = None
    pipeline_parallel_size: PositiveInt | None = None
    moe_expert_parallel_size: PositiveInt | None = None
    max_batch_size: PositiveInt | None = None
    max_num_tokens: PositiveInt | None = None
    max_seq_len: PositiveInt | None = None
    kv_cache_config: KvCacheConfig | None = None
    cuda_graph_config: CudaGraphConfig | None = None  # default on (default_factory); null turns graphs off
    disable_overlap_scheduler: bool | None = None
    enable_iter_perf_stats: bool | None = None  # needed for llm.get_stats() / trtllm-serve /metrics
    # BaseLlmArgs.guided_decoding_backend: Optional[Literal["xgrammar", "llguidance"]] = None in R12 (llm_args.py of
    # release 1.2.1) and in parser A's 1.2-era versions of the same file; without a backend
    # trtllm-serve turns response_format into guided-decoding parameters that nothing enforces. The 1.3 / 1.4
    # profiles carry the same field (not re-read from their reference pages).
    guided_decoding_backend: Literal["xgrammar", "llguidance"] | None = None

    @model_validator(mode="after")
    def _expert_parallel(self) -> _LlmApiOptions:
        # Mapping splits the MoE tensor-parallel group as moe_tp x moe_ep = tp (inferred from Mapping)
        tp, ep = self.tensor_parallel_size or 1, self.moe_expert_parallel_size
        if ep is not None and tp % ep:
            raise ValueError(f"moe_expert_parallel_size = {ep} must divide tensor_parallel_size = {tp}")
        return self


@functools.cache
def _options_model(profile: str, tag: str | None) -> type[_LlmApiOptions]:
    """The profile's model. With a tag, ``speculative_config`` is narrowed to that one class, so that errors name
    plain key paths (``speculative_config.max_draft_len``) and the valid keys of that class; without one it is the
    release's tagged union."""
    if tag is None:
        union = tuple(decoding_classes(profile).values())
        spec: Any = Annotated[Union[union], Field(discriminator="decoding_type")]  # noqa: UP007 (a runtime tuple)
    else:
        spec = _decoding_class(profile, tag)
    return create_model(f"LlmApiOptions{_compact(profile)}{tag or ''}", __base__=_LlmApiOptions,
                        speculative_config=(spec | None, None))


def options_model(profile: str) -> type[_LlmApiOptions]:
    """The options model of ``profile`` (every tag it knows)."""
    releases.get(profile, "TensorRT-LLM profile")
    return _options_model(profile, None)


def _tags(profile: str) -> tuple[str, ...]:
    return releases.get(profile).tags


def _check_decoding_type(options: dict, profile: str) -> str | None:
    spec = options.get("speculative_config")
    if not isinstance(spec, dict):
        return None
    tags = _tags(profile)
    valid = ", ".join(tags)
    if "decoding_type" not in spec:
        raise UserError(f"TensorRT-LLM {profile} options: speculative_config.decoding_type is missing; "
                        f"set one of {valid}")
    tag = spec["decoding_type"]
    if tag in tags:
        return tag
    since = releases.tag_since(tag) if isinstance(tag, str) else None
    if since is not None and releases.order(since) > releases.order(profile):
        raise UserError(f"TensorRT-LLM {profile} options: speculative_config.decoding_type {tag!r} is not in "
                        f"TensorRT-LLM {profile}; it arrives in TensorRT-LLM {since}: use profile "
                        f"{since} (recipe engine.trtllm_version: '{since}')")
    hint = f"; spell it {TAG_SPELLINGS[tag]!r}" if tag in TAG_SPELLINGS else ""
    raise UserError(f"TensorRT-LLM {profile} options: speculative_config.decoding_type {tag!r} is unknown"
                    f"{hint}; valid: {valid}")


# What a release no longer runs, and what it renamed: refused naming the release and the change (issue 22 item 5;
# docs/trtllm_compat.md, "Release 1.4"): each release record's ``removed`` and ``renamed`` (core/releases.py).
REMOVED_IN = {r.name: r.removed for r in releases.RELEASES.values() if r.name != PROFILES[0]}
RENAMED_AFTER_12 = releases.get("1.3").renamed


# The 1.2 form both stored 1.2-era parsers read (docs/trtllm_compat.md, "The two 1.2-era parsers"): parser A
# (a 1.2-era tensorrt_llm/llmapi/llm_args.py, the from_dict era) rejects what R12 (the same file in release 1.2.1)
# would accept here.
PARSER_A_12 = {
    "cuda_graph_config.max_batch_size": "beside cuda_graph_config.batch_sizes the 1.2-era parser A refuses it "
    "(TorchLlmArgs.validate_cuda_graph_config: \"Please don't set both cuda_graph_config.batch_sizes and "
    "cuda_graph_config.max_batch_size\" unless batch_sizes is exactly the list it generates); R12 derives it as "
    "max(batch_sizes): write batch_sizes only",
    "speculative_config.speculative_model": "the 1.2-era parser A knows only speculative_model_dir "
    "(DecodingBaseConfig, extra fields forbidden); R12 reads speculative_model_dir as an alias "
    "(AliasChoices): write speculative_model_dir",
}


# DSparkDecodingConfig's confidence scheduling on newest main (NVIDIA/TensorRT-LLM tests/unittest/_torch/speculative/
# hw_agnostic/test_dspark_admission_resolution.py @88ba0c9417130fb7b42dcea13eddba4e389258e2,
# test_dspark_mixed_evidence.py @e105b32e51af778afd2a8935c540b693e5f6347c, and main's DSpark workload-admission
# start-up test, test_dspark_workload_admission_disables_before_runtime_construction), not in the 1.4 release pages
# (rc4 lists confidence_cost_table_path, confidence_calibration_path, confidence_min_predicted_gain; newest main
# refuses those as extra inputs)
DSPARK_CONFIDENCE_MAIN = ("confidence_sts_path", "confidence_sps_table_path", "confidence_sps_live_fingerprint_path",
                          "confidence_admission_receipt_path", "confidence_admission_receipt_sha256",
                          "confidence_mixed_evidence")
DSPARK_CONFIDENCE_MAIN_WHY = ("newest main's DSpark confidence scheduling (STS / SPS tables and an admission receipt), "
                              "after the 1.4 releases; 1.4.0rc4 reads confidence_cost_table_path, "
                              "confidence_calibration_path and confidence_min_predicted_gain instead (1.4.0rc1 none)")
# our 1.2 tags parser A's from_dict also knows (it has no "Eagle3" and spells draft-target "DraftTarget")
PARSER_A_TAGS = ("Eagle", "MTP", "NGram")


def _check_release_changes(options: dict, profile: str) -> None:
    spec = options.get("speculative_config")
    record = releases.get(profile)
    graphs = options.get("cuda_graph_config")
    if not record.cuda_graph_max_batch_size and isinstance(graphs, dict) and graphs.get("batch_sizes") \
            and graphs.get("max_batch_size"):
        raise UserError(f"TensorRT-LLM {profile} options: cuda_graph_config.max_batch_size: "
                        f"{PARSER_A_12['cuda_graph_config.max_batch_size']}")
    if record.spelling["draft_model_key"] != "speculative_model" and isinstance(spec, dict) \
            and "speculative_model" in spec and spec.get("decoding_type") in PARSER_A_TAGS:
        raise UserError(f"TensorRT-LLM {profile} options: speculative_config.speculative_model: "
                        f"{PARSER_A_12['speculative_config.speculative_model']}")
    if not isinstance(spec, dict):
        return
    main_only = [k for k in DSPARK_CONFIDENCE_MAIN if k in spec] if spec.get("decoding_type") == "DSpark" else []
    if main_only and _DSpark14 in (_row(TAG_FIELDS["DSpark"], _mirrored(profile)) or ()):
        # the release's DSpark mirror has the rc4 confidence fields: name what newest main reads instead
        raise UserError(f"TensorRT-LLM {profile} options: speculative_config.{main_only[0]}: "
                        f"{DSPARK_CONFIDENCE_MAIN_WHY}")
    for (key, value), why in record.removed.items():
        if key in spec and spec[key] is value:
            raise UserError(f"TensorRT-LLM {profile} options: speculative_config.{key}: {value}: {why}")
    for key, new in record.renamed.items():
        if key in spec:
            raise UserError(f"TensorRT-LLM {profile} options: speculative_config.{key} is the 1.2 name; TensorRT-LLM "
                            f"{profile} reads {new} instead (PR #12905)")


def validate_options(options: dict, profile: str) -> None:
    """Raise ``UserError`` naming the key path if ``options`` would not validate in TensorRT-LLM ``profile``."""
    releases.get(profile, "TensorRT-LLM profile")  # unknown or newer than any record: one line
    if not isinstance(options, dict):
        raise UserError(f"TensorRT-LLM {profile} options must be a mapping, got {type(options).__name__}")
    tag = _check_decoding_type(options, profile)  # a tag the release lacks first: the most basic refusal
    _check_release_changes(options, profile)
    model = _options_model(profile, tag)
    try:
        model.model_validate(options)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, model, f"TensorRT-LLM {profile} options")) from None


def validate_with_tensorrt_llm(options: dict) -> str | None:
    """Check ``options`` against the installed TensorRT-LLM's own ``TorchLlmArgs`` field types.

    Returns None when checked, or a note saying the check is deferred when ``tensorrt_llm`` does not import
    (always the case off NVIDIA's container). Raises ``UserError`` when the real classes reject a key.
    Cross-field validators of ``TorchLlmArgs`` itself are not run: constructing it needs a loadable model.
    """
    try:
        from tensorrt_llm.llmapi.llm_args import TorchLlmArgs  # lazy: heavy, GPU-only
    except Exception as exc:  # ImportError, or CUDA/driver errors raised while importing
        return (f"deferred: tensorrt_llm is not importable here ({type(exc).__name__}); the options were checked "
                "against trtllm-spec's mirror and are checked by TensorRT-LLM itself when the bundle starts")
    from pydantic import TypeAdapter

    fields = TorchLlmArgs.model_fields
    by_name = {name: name for name in fields}
    for name, field in fields.items():
        for alias in getattr(field.validation_alias, "choices", None) or [field.alias]:
            if isinstance(alias, str):
                by_name.setdefault(alias, name)
    for key, value in options.items():
        if key == "triton_config" or value is None:
            continue
        if key not in by_name:
            raise UserError(f"TensorRT-LLM (installed) options: unknown key {key!r}")
        try:
            TypeAdapter(fields[by_name[key]].annotation).validate_python(value)
        except ValidationError as exc:
            first: dict[str, Any] = exc.errors()[0]
            where = ".".join(str(p) for p in (key, *first.get("loc", ())))
            raise UserError(f"TensorRT-LLM (installed) options: {where}: {first.get('msg')}") from None
    return None
