"""The recipe's schema: one YAML file naming a target, a drafter, hardware and workload.

Strict pydantic models (unknown keys fail naming the nearest valid key) and one tagged union for drafters.
Reading a recipe (the YAML file, ``extends: base.yaml``, ``--set a.b=value`` overrides, validation errors as one
line) is ``core/recipe_load.py``. Paths inside a recipe are relative to the recipe file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Field, PrivateAttr, field_validator, model_validator

from trtllm_spec.core import releases
from trtllm_spec.core.devices import Device, Dtype
from trtllm_spec.core.request_mode import RequestMode
from trtllm_spec.core.sa import SA_POOL_MATCH_CAP, SAEnhancerConfig, enhancer_release, sa_since
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
    (sources on ``drafters.dflash.DSpark``)."""
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

class _Drafter(StrictModel):
    """A drafter section. The class variables and ``check`` are the recipe-side facts of the mechanism (the
    descriptor in ``trtllm_spec.drafters`` reads them, so each is written once)."""

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


class _Trained(_Drafter):
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


class Eagle3Drafter(_Trained):
    type: Literal["eagle3"] = "eagle3"
    draft_vocab_size: int | None = Field(None, ge=1, description="None = the target's full vocabulary")
    layers_to_capture: list[int] | None = None
    convert_from: ConvertSource | None = Field(None, description="a SafeAILab EAGLE or speculators EAGLE-3 "
                                               "checkpoint to convert instead of training")
    sa_enhancer: SAEnhancerConfig | None = Field(None, description="suffix-automaton drafts override the head's "
                                                 "where the match reaches the threshold (TensorRT-LLM 1.3+)")

    def offline_features(self) -> bool:
        return self.training.data.offline_features

    def required_trtllm(self) -> str:
        return enhancer_release(self.sa_enhancer, self.min_trtllm)

    @model_validator(mode="after")
    def _one_source(self) -> Eagle3Drafter:
        if self.convert_from is not None and self.checkpoint:
            raise ValueError("drafter.checkpoint and drafter.convert_from both name a drafter; keep one")
        return self


class MTPDrafter(_Trained):
    """The target's own (native) MTP layers, e.g. DeepSeek-V3/R1's ``num_nextn_predict_layers``: nothing to train,
    TensorRT-LLM runs them. A head trained with ModelOpt's EAGLE-MTP preset is ``drafter.type: eagle_mtp``."""

    type: Literal["mtp"] = "mtp"
    num_layers: int | None = Field(None, ge=1, le=64, description="None: the target's native MTP layers, else 1")
    sa_enhancer: SAEnhancerConfig | None = Field(None, description="suffix-automaton drafts override the MTP "
                                                 "drafts where the match reaches the threshold (TensorRT-LLM 1.3+)")

    @model_validator(mode="before")
    @classmethod
    def _no_head_fields(cls, data: Any) -> Any:
        # the old spelling of a trained EAGLE-MTP head (drafter.type: mtp with a head's fields) points to its type
        if isinstance(data, dict):
            head = [k for k in ("checkpoint", "draft_vocab_size") if data.get(k) is not None]
            if "training" in data and TrainingConfig.model_validate(data["training"] or {}) != TrainingConfig():
                head.append("training")
            if head:
                raise ValueError(f"drafter.{head[0]} belongs to a trained EAGLE-MTP head, which is drafter.type: "
                                 "eagle_mtp (drafter.type: mtp is the target's own MTP layers); set drafter.type: "
                                 "eagle_mtp")
        return data

    def required_trtllm(self) -> str:
        return enhancer_release(self.sa_enhancer, self.min_trtllm)


class EagleMTPDrafter(_Trained):
    """A head trained with ModelOpt's EAGLE-MTP preset for a target without native MTP layers (trained, measured
    and planned here; TensorRT-LLM serves MTP only as a target's own layers, so ``build`` refuses it)."""

    type: Literal["eagle_mtp"] = "eagle_mtp"
    draft_vocab_size: int | None = Field(None, ge=1, description="None = the target's full vocabulary")
    sa_enhancer: SAEnhancerConfig | None = Field(None, description="suffix-automaton drafts override the head's "
                                                 "drafts where the match reaches the threshold (reference decoder)")

    def required_trtllm(self) -> str:
        return enhancer_release(self.sa_enhancer, self.min_trtllm)

    def check(self, recipe: Recipe) -> None:
        if self.training.init_from_target == "last_layer":
            raise ValueError("drafter.training.init_from_target: last_layer is an EAGLE-3 start (it fills the 2H-wide "
                             "first layer and fc); for an eagle_mtp head use none or lm_head")
        super().check(recipe)


class DFlashDrafter(_Trained):
    # DFlash/DSpark decoding configs first appear in TensorRT-LLM 1.3 (1.3.0rc docs: DFlashDecodingConfig)
    min_trtllm: ClassVar[str] = "1.3"
    shift_label: ClassVar[bool] = False  # see block_drafts

    type: Literal["dflash"] = "dflash"
    num_layers: int = Field(2, ge=1, le=64)
    block_size: int = Field(16, ge=2, le=64)
    mask_token: str | int | None = Field(None, description="token (or id) the block is filled with")
    target_layer_ids: list[int] | None = None
    num_anchors: int = Field(512, ge=1, le=4096, description="blocks drawn per training sequence, each at a random "
                             "anchor (ModelOpt's dflash_num_anchors; its default 512): every block adds block_size "
                             "rows to the drafter's forward and LM head, so fewer train faster on a CPU")
    # fields only training reads: refused beside a checkpoint, which is reused as it is
    training_only: ClassVar[tuple[str, ...]] = ("num_anchors",)

    @property
    def max_draft_len(self) -> int:
        return block_drafts(self.block_size, self.shift_label)[0]

    def check(self, recipe: Recipe) -> None:
        if self.checkpoint:
            fields = type(self).model_fields
            for name in self.training_only:
                if getattr(self, name) != fields[name].default:
                    raise ValueError(f"drafter.{name} = {getattr(self, name)} only changes training, but "
                                     "drafter.checkpoint reuses a trained head; drop one of them")
        most, formula = block_drafts(self.block_size, self.shift_label)
        if isinstance(recipe.draft_len, int) and recipe.draft_len > most:
            raise ValueError(f"draft_len = {recipe.draft_len} exceeds what a block of {self.block_size} drafts "
                             f"({formula} = {most}); raise drafter.block_size")
        if self.training.seq_len % self.block_size:
            raise ValueError(f"drafter.training.seq_len = {self.training.seq_len} is not divisible by "
                             f"drafter.block_size = {self.block_size}; DFlash trains on whole blocks")
        super().check(recipe)


class DSparkDrafter(DFlashDrafter):
    shift_label: ClassVar[bool] = True  # ModelOpt's DSpark trains next-token aligned only (block_drafts)

    type: Literal["dspark"] = "dspark"
    markov_head_type: Literal["vanilla", "gated", "rnn"] = "vanilla"
    markov_rank: int = Field(64, ge=1, le=4096, description="rank of the Markov head's low-rank transition "
                             "(markov_w1: vocab -> rank, markov_w2: rank -> vocab)")

    def check(self, recipe: Recipe) -> None:
        # TensorRT-LLM runs DSpark only at max_draft_len == block_size (drafters.dflash.DSpark.only_draft_len);
        # more than the block is refused by DFlashDrafter.check ("raise drafter.block_size")
        if isinstance(recipe.draft_len, int) and recipe.draft_len < self.block_size:
            raise ValueError(f"draft_len = {recipe.draft_len}: TensorRT-LLM runs DSpark only at D = drafter.block_size "
                             f"= {self.block_size}; set draft_len: {self.block_size} (or auto), or change "
                             "drafter.block_size")
        asked = recipe.planner.max_draft_len
        if asked < self.block_size and asked != PlannerConfig.model_fields["max_draft_len"].default:
            # a limit below the only D DSpark runs at is refused, not silently exceeded (the default limit does not
            # apply to DSpark, and the plan's draft_len_rule says so: a resolved recipe holds it explicitly)
            raise ValueError(f"planner.max_draft_len = {asked} (--max-draft-len) is below D = drafter.block_size = "
                             f"{self.block_size}, the only D TensorRT-LLM runs DSpark at; set drafter.block_size: "
                             f"{asked} for a shorter block (--set drafter.block_size={asked}), or drop the limit")
        super().check(recipe)


class DFlash2Drafter(DFlashDrafter):
    """DFlash2 (z-lab's ``DFlash2DraftModel``, docs/dflash2.md): DFlash plus a grouped dynamic causal convolution
    around each sublayer and a top-K candidate selector over the target's logits. TensorRT-LLM runs it under the
    DFlash decoding config from 1.4 (drafters/dflash2). Reused from ``checkpoint`` (a z-lab-format folder), or
    trained on ModelOpt's DFlash mode with the convolutions and the selector added as a plugin
    (drafters/dflash2/train.py; ModelOpt 0.47 has no DFlash2 mode)."""

    min_trtllm: ClassVar[str] = "1.4"
    training_only: ClassVar[tuple[str, ...]] = ("num_anchors", "selector_loss_alpha")

    type: Literal["dflash2"] = "dflash2"
    conv_kernel_size: int = Field(2, ge=1, le=64, description="taps of each block convolution (<= block_size)")
    conv_group_size: int = Field(16, ge=1, description="channels sharing one dynamic coefficient (divides the "
                                 "target's hidden size)")
    selector_rank: int = Field(64, ge=1, le=4096, description="rank of the selector's bilinear transition score")
    selector_top_k: int = Field(16, ge=1, le=4096, description="candidates per drafted position (llama.cpp needs "
                                "hidden_size >= K * (K + 1))")
    selector_loss_alpha: float = Field(1.0, gt=0, le=100, description="weight of the selector's cross-entropy over "
                                       "its K candidates beside DFlash's loss (training only)")

    def check(self, recipe: Recipe) -> None:
        if self.conv_kernel_size > self.block_size:
            raise ValueError(f"drafter.conv_kernel_size = {self.conv_kernel_size} exceeds drafter.block_size = "
                             f"{self.block_size} (a tap reaches before the block); lower it")
        super().check(recipe)


class DraftModelDrafter(_Drafter):
    tensorrt_backend: ClassVar[bool] = True

    type: Literal["draft_model"] = "draft_model"
    model: str = Field(description="path, preset name or fetched asset of a small LLM with the same tokenizer")


class NGramDrafter(_Drafter):
    type: Literal["ngram"] = "ngram"
    max_matching_ngram_size: int = Field(3, ge=1, le=64)
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True


class SuffixDrafter(_Drafter):
    """Suffix decoding with TensorRT-LLM's suffix automaton (``decoding_type: SA``, ``SADecodingConfig``; 1.3.0rc27
    and 1.4.0rc4 API pages; validators in ``tensorrt_llm/llmapi/llm_args.py`` @0004396): drafts the continuation
    of the longest suffix of the request's tokens that occurred before, for up to D tokens. No model."""

    min_trtllm: ClassVar[str] = sa_since()

    type: Literal["suffix"] = "suffix"
    max_matching_ngram_size: int = Field(-1, ge=-1, le=1_000_000, description="-1: the longest suffix match (the "
                                         "automaton); k > 0: fixed-size matching, sizes k down to 1; 0 is invalid")
    enable_global_pool: bool = Field(False, description="match across the other requests as well (measure: the "
                                     "suite's earlier prompts and outputs, in suite order)")
    global_pool_size: int | None = Field(None, ge=1, le=1_000_000, description="automaton slots in the global pool "
                                         "(None: max(64, max batch size)); completed requests stay until it is full, "
                                         "then the oldest is evicted; needs enable_global_pool")

    @field_validator("max_matching_ngram_size")
    @classmethod
    def _not_zero(cls, v: int) -> int:
        if v == 0:
            raise ValueError("max_matching_ngram_size 0 is invalid: use -1 (longest match) or k > 0 (fixed size)")
        return v

    @model_validator(mode="after")
    def _pool(self) -> SuffixDrafter:
        # SADecodingConfig.validate_sa_config (llm_args.py @0004396)
        if self.global_pool_size is not None and not self.enable_global_pool:
            raise ValueError(f"drafter.global_pool_size = {self.global_pool_size} needs drafter.enable_global_pool: "
                             "true (TensorRT-LLM refuses it otherwise); set it or drop global_pool_size")
        if self.enable_global_pool and self.max_matching_ngram_size > SA_POOL_MATCH_CAP:
            raise ValueError(f"drafter.max_matching_ngram_size = {self.max_matching_ngram_size}: with "
                             f"enable_global_pool it must be -1 or in 1..{SA_POOL_MATCH_CAP} (TensorRT-LLM caps pool "
                             f"matching at {SA_POOL_MATCH_CAP} tokens)")
        return self

    def pool_slots(self, max_batch_size: int) -> int:
        """Automaton slots of the global pool: global_pool_size, else max(64, max_batch_size) (SADecodingConfig)."""
        from trtllm_spec.core.sa import pool_slots

        return pool_slots(self.global_pool_size, max_batch_size)

    def check(self, recipe: Recipe) -> None:
        largest = recipe.engine.max_batch_size or max(recipe.workload.all_batch_sizes())
        if self.global_pool_size is not None and self.global_pool_size < largest:
            raise ValueError(f"drafter.global_pool_size = {self.global_pool_size} is below the largest batch size "
                             f"{largest} (TensorRT-LLM: 'must be >= max_batch_size'); raise it to {largest} or more")


DRAFTER_CLASSES = (Eagle3Drafter, MTPDrafter, DFlashDrafter, DSparkDrafter, DraftModelDrafter, NGramDrafter,
                   SuffixDrafter, EagleMTPDrafter, DFlash2Drafter)
# the recipe's tagged union over DRAFTER_CLASSES, written once (a registered mechanism rebuilds it)
DrafterConfig = Annotated[Union[DRAFTER_CLASSES], Field(discriminator="type")]  # noqa: UP007 (a runtime tuple)
# the drafter-type list, defined once: the tags of the union (CLI choices and the registry follow it)
DRAFTER_TYPES = tuple(get_args(c.model_fields["type"].annotation)[0] for c in DRAFTER_CLASSES)
DRAFTER_CLASS = dict(zip(DRAFTER_TYPES, DRAFTER_CLASSES, strict=True))
# the drafter a recipe-less command plans / measures with (plan --target, measure served, a served
# profile without --bundle): the first of DRAFTER_CLASSES
DEFAULT_DRAFTER = DRAFTER_TYPES[0]


def register_drafter_class(cls: type[_Drafter]) -> str:
    """Add a drafter section to the recipe's tagged union (``drafters.registry.register`` calls it: a mechanism's
    one registration); returns its type tag."""
    global DRAFTER_CLASSES, DRAFTER_TYPES
    args = get_args(cls.model_fields["type"].annotation) if "type" in cls.model_fields else ()
    if not (isinstance(cls, type) and issubclass(cls, _Drafter)) or len(args) != 1:
        raise RecipeError(f"drafter section {cls!r}: a subclass of core.recipe._Drafter with type: Literal['name']")
    name = args[0]
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
    field.annotation = Union[DRAFTER_CLASSES]  # noqa: UP007 (a runtime tuple of classes)
    field.discriminator = "type"
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
    drafter: DrafterConfig
    draft_len: Literal["auto"] | int = "auto"
    hardware: HardwareConfig = HardwareConfig()
    workload: WorkloadConfig = WorkloadConfig()
    quantization: QuantizationConfig = QuantizationConfig()
    engine: EngineConfig = EngineConfig()
    planner: PlannerConfig = PlannerConfig()
    measure: MeasureConfig = MeasureConfig()
    output: OutputConfig = OutputConfig()

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)

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
