"""The recipe's schema: one YAML file naming a target, a drafter, hardware and workload.

Strict pydantic models (unknown keys fail naming the nearest valid key) and one tagged union for drafters.
Reading a recipe (the YAML file, ``extends: base.yaml``, ``--set a.b=value`` overrides, validation errors as one
line) is ``core/recipe_load.py``. Paths inside a recipe are relative to the recipe file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Union, get_args

from pydantic import Field, PrivateAttr, field_validator, model_validator

from trtllm_spec.core import releases
from trtllm_spec.core.devices import Device, Dtype
from trtllm_spec.core.request_mode import RequestMode
from trtllm_spec.core.schema import MULTILINE, SafeName, StrictModel
from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.errors import RecipeError

# the release profiles and what each allows: one record per release (core/releases.py)
TRTLLM_PROFILES = releases.names()
# The TensorRT-engine backend (trtllm-build, TrtLlmArgs, convert_checkpoint.py) is removed after 1.2
# (NVIDIA/TensorRT-LLM docs/source/legacy/tensorrt-backend-removal.md); 1.2.1's wheel still ships it
TENSORRT_BACKEND_PROFILES = tuple(r.name for r in releases.RELEASES.values() if r.tensorrt_backend)
TENSORRT_REMOVAL = ("TensorRT-LLM removed the TensorRT-engine backend (trtllm-build, TrtLlmArgs, convert_checkpoint.py) "
                    "after 1.2: docs/source/legacy/tensorrt-backend-removal.md")
MAX_DRAFT_LEN_LIMIT = 64


def block_drafts(block_size: int, shift_label: bool) -> tuple[int, str]:
    """(drafts per block, the formula) for a block drafter. Block position 0 holds the anchor (the last
    verified token): DFlash predicts positions 1..block_size-1; a drafter trained with next-token alignment
    (``shift_label``, DSpark's only mode) predicts from position 0, so all block_size positions are drafts
    (sources on ``drafters.dspark.DSpark``)."""
    return (block_size, "block_size") if shift_label else (block_size - 1, "block_size - 1")


# ---- drafter training --------------------------------------------------------------------------------

class RegenServerConfig(StrictModel):
    """``regen_backend: openai``: OpenAI-compatible chat-completions servers that write the replies."""

    urls: list[str] = Field(default_factory=list, description="base URLs (http://host:port[/v1]); several spread "
                            "the work")
    concurrency: int = Field(8, ge=1, le=4096, description="requests in flight (over all servers)")
    timeout_s: float = Field(600.0, gt=0, description="one request's wall-clock deadline (the whole "
                             "request, not each read)")
    retries: int = Field(3, ge=0, le=100, description="retries per request (exponential backoff) before it is "
                         "recorded as failed and left to the next run")
    max_failures: int = Field(32, ge=1, description="stop the run once this many requests failed")
    model: str | None = Field(None, description="the served model's id (default: the only one /v1/models lists)")


class DataConfig(StrictModel):
    """Training conversations, built from packaged prompts (never the measurement suite)."""

    sources: list[str] = Field(default_factory=lambda: ["humaneval", "mmath", "squad", "hotpotqa", "writingbench",
                                                        "dataset_build"],
                               description="prompt sources (train pools only; MT-Bench is evaluation-only)")
    num_conversations: int = Field(512, ge=1, le=1_000_000)
    regenerate: bool = Field(True, description="the target writes the assistant turns itself")
    path: str | None = Field(None, description="your own conversations (JSONL of {id, messages}) instead")
    max_prompt_tokens: int = Field(256, ge=8, le=131072, description=(
        "skip a training prompt whose first turn is longer than this many of the target's tokens, chat "
        "template included (QA/RAG/passage prompts are cut to fit instead)"))
    offline_features: bool = Field(True, description="EAGLE-3: capture the target's hidden states over the "
                                   "conversations once ('data features', after regeneration) and train without a "
                                   "target pass per step (ModelOpt offline mode)")
    features_dtype: Literal["bf16", "fp8", "fp32"] = Field(
        "bf16", description="how the captured features are stored (fp8: float8_e4m3fn with a per-row scale, half "
        "the disk of bf16)")
    features_path: str | None = Field(None, description="offline features computed elsewhere: a 'data features' "
                                      "folder or a TensorRT-LLM SaveState dump (*.pt); None = captured into the "
                                      "training folder")
    loss_on: Literal["assistant", "all"] = Field(
        "assistant", description="positions that train the drafter: the assistant replies only, or every token "
        "(ModelOpt distils the target's own next-token distribution, so prompt positions teach too)")
    regen_max_new_tokens: int = Field(256, ge=1, le=32768)
    regen_batch_size: int = Field(8, ge=1, le=4096)
    regen_backend: Literal["auto", "ours", "hf", "openai"] = Field(
        "auto", description="who writes the replies: ours (the in-process Llama-family decoder), hf (transformers "
        "generate, any architecture), openai (a chat-completions server, see server), auto (ours where it runs "
        "the family, else hf)")
    server: RegenServerConfig = RegenServerConfig()
    eval_fraction: float = Field(0.05, ge=0, lt=1)
    seed: int = 0


class DistributedConfig(StrictModel):
    """How ``trtllm-spec train`` runs across processes (launched by torchrun / SLURM, see ``train --dry-run``):
    none = one process; ddp = DistributedDataParallel (every rank holds the drafter); fsdp = torch FSDP2
    ``fully_shard`` (drafter and frozen target sharded across ranks). NCCL on GPUs, gloo on CPU (torch's
    default per device). The launched world must match nnodes x nproc_per_node."""

    strategy: Literal["none", "ddp", "fsdp"] = "none"
    nproc_per_node: int = Field(1, ge=1, le=64)
    nnodes: int = Field(1, ge=1, le=4096)


class TrainingConfig(StrictModel):
    max_steps: int = Field(300, ge=1, le=10_000_000)
    time_budget_minutes: float | None = Field(None, gt=0)
    batch_size: int = Field(4, ge=1, le=4096)
    grad_accum: int = Field(1, ge=1, le=1024)
    seq_len: int = Field(512, ge=16, le=131072)
    lr: float = Field(3e-4, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0, le=1)
    warmup_steps: int = Field(20, ge=0)
    checkpoint_every: int = Field(100, ge=1)
    keep_checkpoints: int = Field(2, ge=1, le=1000, description="how many recent checkpoints to keep")
    seed: int = 0
    precision: Dtype = Field(
        "auto", description="training autocast and regeneration precision: auto = bf16 on CUDA, on a CPU bf16 only "
        "where a timed GEMM shows it faster than fp32 (runtime/device.py)")
    device: Device = Field(
        "auto", description="where regeneration, feature capture and training run: auto = CUDA when visible")
    init_from_target: Literal["none", "lm_head", "last_layer"] = Field(
        "none", description="EAGLE-3 start: none (ModelOpt's random init), lm_head (the target's final norm and "
        "lm_head rows of the draft vocabulary; the layer random), last_layer (also the target's last decoder layer)")
    ttt_steps: int | None = Field(None, ge=1, le=16, description="EAGLE test-time-training steps")
    feature_noise: float = Field(
        0.0, ge=0, le=1, description="EAGLE-3 offline training: Gaussian noise on the captured target layers, as a "
        "fraction of each channel's standard deviation (regularises a head that memorises little data; 0 = off)")
    data: DataConfig = DataConfig()
    distributed: DistributedConfig = DistributedConfig()


class ConvertSource(StrictModel):
    """A third-party drafter checkpoint to convert into our (TensorRT-LLM) layout."""

    format: Literal["eagle", "speculators"]
    path: str


# ---- drafters (tagged union on `type`) -------------------------------------------------------------

class DrafterSection(StrictModel):
    """A drafter section: the base of every mechanism's recipe section, which lives in its package
    (``trtllm_spec/drafters/<name>/config.py``) and joins the recipe's union when the mechanism registers. The class
    variables and ``check`` are the recipe-side facts of the mechanism (its descriptor reads them, so each is
    written once)."""

    # TensorRT-LLM release whose LLM API first has this decoding config
    min_trtllm: ClassVar[str] = "1.2"
    # the legacy TensorRT-engine backend runs only draft/target speculation (1.2 docs)
    tensorrt_backend: ClassVar[bool] = False

    checkpoint: str | None = Field(None, description="an exported drafter folder to reuse as is")

    def check(self, recipe: Recipe) -> None:
        """Rules that tie this section to the rest of the recipe; raise ValueError naming the field."""

    def offline_features(self) -> bool:
        """Whether training reads the target's features from the features step (EAGLE-3 only)."""
        return False

    def required_trtllm(self) -> str:
        """The first TensorRT-LLM release whose LLM API has everything this section asks for."""
        return self.min_trtllm


class TrainedSection(DrafterSection):
    """The fields every trained drafter's section has (layers, the training run)."""

    num_layers: int = Field(1, ge=1, le=64)
    training: TrainingConfig = TrainingConfig()

    def check(self, recipe: Recipe) -> None:
        if self.training.feature_noise and not self.offline_features():
            raise ValueError(f"drafter.training.feature_noise = {self.training.feature_noise} perturbs the target "
                             "features of offline EAGLE-3 training; set it to 0 or use drafter.type: eagle3 with "
                             "drafter.training.data.offline_features: true")
        if self.training.data.features_path and not self.offline_features():
            raise ValueError(f"drafter.training.data.features_path = {self.training.data.features_path} gives offline "
                             "features, which only offline EAGLE-3 training reads; drop it or use drafter.type: "
                             "eagle3 with drafter.training.data.offline_features: true")


# The recipe's tagged union over the registered mechanisms' sections, in registration order: each mechanism's package
# holds its section (drafters/<name>/config.py) and ``drafters.registry.register`` adds it here; the built-in ones
# register when ``trtllm_spec.drafters`` is imported (core imports no mechanism: the dependency rule). Until then the
# union is empty and a recipe is refused in one line (Recipe._mechanisms_registered).
DRAFTER_CLASS: dict[str, type[DrafterSection]] = {}
DRAFTER_CLASSES: tuple[type[DrafterSection], ...] = ()
DRAFTER_TYPES: tuple[str, ...] = ()
# the drafter a recipe-less command plans / measures with (plan --target, measure served, a served profile without
# --bundle); drafters/__init__.py checks it is registered
DEFAULT_DRAFTER = "eagle3"


def section_type(cls: type[DrafterSection]) -> str:
    """The ``type`` tag of a drafter section class (``type: Literal['name']``); RecipeError for anything else."""
    fields = getattr(cls, "model_fields", {}) if isinstance(cls, type) else {}
    args = get_args(fields["type"].annotation) if "type" in fields else ()
    if not (isinstance(cls, type) and issubclass(cls, DrafterSection)) or len(args) != 1:
        raise RecipeError(f"drafter section {cls!r}: a subclass of core.recipe.DrafterSection with type: "
                          "Literal['name']")
    return args[0]


def register_drafter_class(cls: type[DrafterSection]) -> str:
    """Add a drafter section to the recipe's tagged union (``drafters.registry.register`` calls it: a mechanism's
    one registration); returns its type tag."""
    global DRAFTER_CLASSES, DRAFTER_TYPES
    name = section_type(cls)
    if name in DRAFTER_CLASS and DRAFTER_CLASS[name] is not cls:
        raise RecipeError(f"drafter type {name!r} is already registered")
    DRAFTER_CLASS[name] = cls
    DRAFTER_CLASSES, DRAFTER_TYPES = tuple(DRAFTER_CLASS.values()), tuple(DRAFTER_CLASS)
    _rebuild_drafter_union()
    return name


def unregister_drafter_class(name: str) -> None:
    global DRAFTER_CLASSES, DRAFTER_TYPES
    DRAFTER_CLASS.pop(name, None)
    DRAFTER_CLASSES, DRAFTER_TYPES = tuple(DRAFTER_CLASS.values()), tuple(DRAFTER_CLASS)
    _rebuild_drafter_union()


def _rebuild_drafter_union() -> None:
    field = Recipe.model_fields["drafter"]
    if len(DRAFTER_CLASSES) > 1:
        field.annotation = Union[DRAFTER_CLASSES]  # noqa: UP007 (a runtime tuple of classes)
        field.discriminator = "type"
    else:  # one section (or none yet): no union to discriminate
        field.annotation = DRAFTER_CLASSES[0] if DRAFTER_CLASSES else DrafterSection
        field.discriminator = None
    Recipe.model_rebuild(force=True)


# ---- the other sections -----------------------------------------------------------------------------

class TargetConfig(StrictModel):
    model: str = Field(description="HF checkpoint folder or config.json, preset name, or fetched asset")
    hf_id: str | None = Field(None, description="model id TensorRT-LLM serves when the folder is not shipped")
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    trust_remote_code: bool = False
    chat_template: str | None = Field(None, description="a Jinja file when the tokenizer has none")


class HardwareConfig(StrictModel):
    gpu: str = Field("h100-sxm", description="catalogue name or a file written by 'hw probe'")
    num_gpus: int = Field(1, ge=1, le=100_000)
    tp: int = Field(1, ge=1, le=1024)
    pp: int = Field(1, ge=1, le=1024)
    ep: int = Field(1, ge=1, le=1024)
    gpus_per_node: int = Field(8, ge=1, le=1024)
    overrides: dict[str, Any] = Field(default_factory=dict, description="any Hardware field, e.g. efficiency.gemm")

    @model_validator(mode="after")
    def _parallelism(self) -> HardwareConfig:
        if self.tp * self.pp > self.num_gpus:
            raise ValueError(f"tp*pp = {self.tp * self.pp} exceeds num_gpus = {self.num_gpus}; "
                             "raise num_gpus or lower tp/pp")
        if self.num_gpus % (self.tp * self.pp):
            raise ValueError(f"num_gpus = {self.num_gpus} is not a multiple of tp*pp = {self.tp * self.pp}")
        if self.ep > 1 and self.tp % self.ep:
            raise ValueError(f"ep = {self.ep} must divide tp = {self.tp} (TensorRT-LLM splits MoE tp into ep x tp)")
        return self

    @property
    def nodes(self) -> int:
        return -(-self.tp * self.pp // self.gpus_per_node)


class WorkloadConfig(StrictModel):
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 8, 32, 64])
    concurrency: int | None = Field(None, ge=1, le=1_000_000, description="added to batch_sizes")
    isl: int = Field(1024, ge=1, le=10_000_000, description="input (prompt) length in tokens")
    osl: int = Field(512, ge=1, le=10_000_000, description="output length in tokens")
    latency_target_ms: float | None = Field(None, gt=0, description="time per output token target")
    request_mode: RequestMode = Field(default_factory=RequestMode, description="how the deployment's requests are "
                                      "made (chat-template arguments, structured output, sampling): every measure "
                                      "applies it and plan --acceptance checks a profile was measured in it")

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("batch_sizes is empty; give at least one batch size, e.g. [1, 8, 64]")
        bad = [b for b in v if b < 1 or b > 1_000_000]
        if bad:
            raise ValueError(f"batch sizes must be in 1..1000000, not {bad}")
        return sorted(set(v))

    def all_batch_sizes(self) -> list[int]:
        return sorted(set(self.batch_sizes) | ({self.concurrency} if self.concurrency else set()))


class QuantizationConfig(StrictModel):
    method: Literal["none", "fp8", "int4_awq", "nvfp4"] = "none"
    kv_cache_dtype: Literal["auto", "bf16", "fp8"] = "auto"
    calib_size: int = Field(64, ge=1, le=100_000)


SERVING_FRAMEWORKS = {"vllm": "vLLM", "sglang": "SGLang"}  # engine.serving.framework -> core/host_costs Framework


class ServingEngine(StrictModel):
    """The engine the plan prices when it is not TensorRT-LLM (issue 54): its release's host-cost profile
    (core/host_costs.release_host_profile: its own fit, else the release rule from the nearest fitted one)."""

    framework: Literal["vllm", "sglang"] = Field(description="the serving engine the user runs")
    version: str = Field(description="its release, as text (e.g. '0.10.2'); a release without a fitted host-cost "
                         "profile is priced by the release rule from the nearest fitted one, and the plan says so")

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        if isinstance(value, float | int) and not isinstance(value, bool):
            raise ValueError(f"engine.serving.version {value!r} is a number; write the release as quoted text, e.g. "
                             "version: '0.10.2' (0.10 unquoted reads as 0.1)")
        return value

    @field_validator("version")
    @classmethod
    def _release_number(cls, value: str) -> str:
        import re

        if not re.fullmatch(r"\d+\.\d+(\.\d+)*([.+-]?[a-z0-9]+)*", value):
            raise ValueError(f"engine.serving.version {value!r} is not a release number; write one such as '0.10.2' "
                             "or '0.5.1.post3'")
        return value

    @property
    def host_cost_framework(self) -> str:
        return SERVING_FRAMEWORKS[self.framework]


class EngineConfig(StrictModel):
    trtllm_version: str = Field(
        "auto", description="TensorRT-LLM release profile (core/releases.py); auto = the newest stable release that "
        "runs the drafter and backend, 1.3 (docs/trtllm_compat.md, 'Which release auto picks')")
    backend: Literal["pytorch", "tensorrt"] = "pytorch"
    free_gpu_memory_fraction: float = Field(0.9, gt=0, le=1)
    enable_block_reuse: bool = True
    max_batch_size: int | None = Field(None, ge=1)
    max_seq_len: int | None = Field(None, ge=1)
    cuda_graphs: bool = True
    serving: ServingEngine | None = Field(None, description="the engine the plan predicts when you serve vLLM or "
                                          "SGLang (framework and version; its host-cost profile prices the step); "
                                          "unset: TensorRT-LLM at trtllm_version. The bundle's TensorRT-LLM options "
                                          "are written either way")

    @field_validator("trtllm_version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        """An unquoted ``trtllm_version: 1.3`` is a YAML float: the release it spells is meant, so it is read as
        that text; any other number is refused with 'quote it' (1.10 would read as 1.1)."""
        if isinstance(value, float | int) and not isinstance(value, bool):
            if str(value) in releases.RELEASES:
                return str(value)
            raise ValueError(f"engine.trtllm_version {value!r} is a number; write the release as quoted text, one "
                             f"of 'auto', {', '.join(repr(v) for v in releases.names())} (quote it: "
                             "trtllm_version: '1.3')")
        return value

    @field_validator("trtllm_version")
    @classmethod
    def _known_release(cls, value: str) -> str:
        """'auto' or a release with a record; a newer or unknown one says which are known."""
        if value == "auto" or value in releases.RELEASES:
            return value
        from trtllm_spec.errors import UserError

        try:
            releases.get(value)
        except UserError as exc:
            raise ValueError(str(exc)) from None
        return value


class PlannerConfig(StrictModel):
    max_draft_len: int = Field(8, ge=1, le=MAX_DRAFT_LEN_LIMIT, description="largest D the search considers (a "
                               "drafter TensorRT-LLM runs at one D only, DSpark, is planned at that D: block_size)")
    acceptance: str | None = Field(None, description="acceptance / speculation_profile.json to plan with")
    work: Literal["roofline", "aiconfigurator"] = Field(
        "roofline", description="what prices the target's GPU work in the step model: the roofline, or NVIDIA "
        "AIConfigurator's measured kernel tables (scripts/setup_aic.sh installs it in its own venv; TensorRT-LLM and "
        "SGLang on the GPUs it covers: closer on the published calibration points, benchmarks/planner_vs_aic.md)")
    host_costs: str | None = Field(None, description="host_costs.json fitted from your engine's trtllm-bench reports "
                                   "(plan --calibrate, replan.sh) instead of the release's host-cost profile")
    compare_mechanisms: bool = Field(True, description="also evaluate the other mechanisms (guideline 5)")
    compare_acceptance: dict[str, str] = Field(default_factory=dict, description="measured acceptance of the "
                                               "other mechanisms guideline 5 compares: {drafter type: acceptance / "
                                               "speculation_profile.json}; the rest use their published defaults")

    @field_validator("compare_acceptance")
    @classmethod
    def _compared(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(set(v) - set(DRAFTER_TYPES))
        if bad:
            raise ValueError(f"compare_acceptance names {', '.join(bad)}: not a drafter type; valid: "
                             f"{', '.join(DRAFTER_TYPES)}")
        return v


class MeasureConfig(StrictModel):
    suite: str = Field(SUITE_NAME, min_length=1, description="'speed-lite', or your own prompts: a JSONL file or a "
                       "folder of them (OpenAI messages, prompt, ShareGPT conversations), relative to the recipe")
    allow_overlap: bool = Field(False, description="measure a suite that shares prompts with the training "
                                "conversations (warns with the count) instead of refusing it")
    categories: list[str] | None = None
    num_prompts: int = Field(10, ge=1, le=10_000)
    max_new_tokens: int = Field(128, ge=1, le=100_000)
    temperature: float = Field(0.0, ge=0, le=10)
    dtype: Literal["auto", "fp32", "bf16"] = "fp32"
    device: Device = "auto"
    reference_engine: Literal["auto", "ours", "hf"] = Field(
        "auto", description="what runs the target in the PyTorch reference decoder: ours (the Llama family, "
        "faster), hf (transformers, any architecture), auto (ours where it runs the target, else hf)")
    seed: int = 0
    draft_len: int | None = Field(None, ge=1, le=MAX_DRAFT_LEN_LIMIT, description="the D the reference decoder "
                                  "drafts at (one chain run gives AL(d) for every d <= D; the planner holds AL flat "
                                  "beyond it); None = the recipe's draft_len, else the largest D the planner considers")
    profile: str | None = Field(None, description="a measured speculation_profile.json: skip measuring")


class OutputConfig(StrictModel):
    dir: str | None = Field(None, description="the bundle folder 'build' writes without --out (relative to the "
                            "recipe file); None = out/<recipe name>")


class Recipe(StrictModel):
    name: SafeName = Field("recipe", description="the folder (out/<name>) and job names")
    description: str = Field("", json_schema_extra=MULTILINE)
    target: TargetConfig
    drafter: DrafterSection  # the registered sections' union (_rebuild_drafter_union)
    draft_len: Literal["auto"] | int = "auto"
    hardware: HardwareConfig = HardwareConfig()
    workload: WorkloadConfig = WorkloadConfig()
    quantization: QuantizationConfig = QuantizationConfig()
    engine: EngineConfig = EngineConfig()
    planner: PlannerConfig = PlannerConfig()
    measure: MeasureConfig = MeasureConfig()
    output: OutputConfig = OutputConfig()

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)

    @model_validator(mode="before")
    @classmethod
    def _mechanisms_registered(cls, data: Any) -> Any:
        if not DRAFTER_CLASS:
            raise ValueError("no drafting mechanism is registered, so no drafter section can be read: import "
                             "trtllm_spec.drafters (it registers the built-in ones) before reading a recipe")
        return data

    @field_validator("draft_len", mode="before")
    @classmethod
    def _draft_len(cls, v: Any) -> Any:
        ok = v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_DRAFT_LEN_LIMIT)
        if not ok:
            raise ValueError(f"draft_len must be 'auto' or an integer in 1..{MAX_DRAFT_LEN_LIMIT}")
        return v

    @model_validator(mode="after")
    def _consistency(self) -> Recipe:
        d = self.drafter
        if isinstance(self.draft_len, int) and self.draft_len > self.planner.max_draft_len:
            raise ValueError(f"draft_len = {self.draft_len} exceeds planner.max_draft_len = "
                             f"{self.planner.max_draft_len}; raise planner.max_draft_len")
        if d.type in self.planner.compare_acceptance:
            raise ValueError(f"planner.compare_acceptance.{d.type}: the recipe's own drafter is planned with "
                             "planner.acceptance (or the measure stage); move the file there")
        m = self.measure.draft_len
        if m is not None and self.measure.profile:
            raise ValueError("measure.draft_len and measure.profile: a supplied profile is not measured again; "
                             "drop measure.draft_len")
        if m is not None and isinstance(self.draft_len, int) and m < self.draft_len:
            raise ValueError(f"measure.draft_len = {m} is below draft_len = {self.draft_len}: the bundle's D would "
                             "not be measured; raise measure.draft_len or drop it")
        rm = self.workload.request_mode
        if self.measure.temperature and rm.temperature and self.measure.temperature != rm.temperature:
            raise ValueError(f"measure.temperature = {self.measure.temperature} and workload.request_mode.temperature "
                             f"= {rm.temperature} differ; the deployment's temperature is measured: drop "
                             "measure.temperature")
        d.check(self)
        need, version = d.required_trtllm(), self.engine.trtllm_version
        if version != "auto" and releases.order(version) < releases.order(need):
            what = ("drafter.sa_enhancer needs TensorRT-LLM {need}+ (sa_config / SAEnhancerConfig is not in "
                    "TensorRT-LLM {version})" if need != d.min_trtllm else
                    "drafter {type} needs TensorRT-LLM {need}+ (its decoding config arrived in {need}; not in "
                    "TensorRT-LLM {version})")
            raise ValueError(what.format(need=need, version=version, type=d.type)
                             + f"; set engine.trtllm_version: '{need}'")
        if self.engine.backend == "tensorrt" and not d.tensorrt_backend:
            raise ValueError(f"engine.backend 'tensorrt' does not run {d.type} (EAGLE-3, MTP, n-gram and DFlash are "
                             "PyTorch-backend only); use engine.backend: pytorch")
        if self.engine.backend == "tensorrt" and self.trtllm_profile not in TENSORRT_BACKEND_PROFILES:
            raise ValueError(f"engine.backend 'tensorrt' needs engine.trtllm_version: '1.2' (got "
                             f"'{self.engine.trtllm_version}'): {TENSORRT_REMOVAL}; use engine.backend: pytorch")
        return self

    @property
    def trtllm_profile(self) -> str:
        """The release the bundle is for: the recipe's, or for ``auto`` the newest stable release that runs the
        drafter and the backend (``core.releases.auto_release``: 1.3 for the PyTorch backend, 1.2 for TensorRT)."""
        if self.engine.trtllm_version != "auto":
            return self.engine.trtllm_version
        return releases.auto_release(self.drafter.required_trtllm(), self.engine.backend == "tensorrt")

    @property
    def serving_engine(self) -> tuple[str, str]:
        """(framework, release) of the engine the plan prices (core/host_costs): ``engine.serving`` when set, else
        TensorRT-LLM at the bundle's release."""
        s = self.engine.serving
        return (s.host_cost_framework, s.version) if s is not None else ("TensorRT-LLM", self.trtllm_profile)

    @property
    def base_dir(self) -> Path:
        return self._base_dir

    def resolve_path(self, value: str | None) -> Path | None:
        """A recipe path: absolute, relative to the recipe file, or relative to the working directory."""
        if value is None:
            return None
        p = Path(value).expanduser()
        if p.is_absolute():
            return p
        candidate = self._base_dir / p
        return candidate if candidate.exists() or not p.exists() else p
