"""An external draft model: a small LLM with the same tokenizer, D sequential steps of its own shape."""

from __future__ import annotations

from collections.abc import Callable

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, DraftPass, Mechanism
from trtllm_spec.drafters.draft_model.config import DraftModelDrafter
from trtllm_spec.planner.acceptance import AcceptanceModel, chain

# Assumption: no first-hand per-position acceptance found for Llama-3.2-1B drafting for Llama-3.1-8B/70B;
# 0.75 flat is consistent with the >3x TensorRT-LLM reports for Llama-3.1-405B + Llama-3.2-1B on 4xH200
# (NVIDIA blog "TensorRT-LLM Speculative Decoding Boosts Inference Throughput by up to 3.6x").
DRAFT_MODEL_RATES = [0.75] * 64
DRAFT_MODEL_SOURCE = "assumption: 0.75 flat conditional acceptance for a same-family small draft model"


class DraftModel(Mechanism):
    name = "draft_model"
    config_class = DraftModelDrafter
    decoding_types = ("Draft_Target",)
    llamacpp_spec_type = "draft-simple"
    vllm_method = "draft_model"  # vllm/v1/spec_decode/draft_model.py: a smaller model of the same vocabulary
    title = "draft model"
    acceptance_kind = "chain"
    recognised_last = True
    shares_target_hidden = False  # its own model: only the vocabulary must match
    dynamic_draft_len_since = "1.3"  # PR #12262 (draft-target)
    implicit_tier = (1, 1)  # core.trtllm_gates.MAIN_STATES: draft-target keeps the floor
    summary = "a small independent LLM with the same tokenizer drafts D tokens sequentially"

    def __init__(self, resolve_shape: Callable[[str], ModelShape] | None = None) -> None:
        self._resolve = resolve_shape

    def default_config(self) -> DraftModelDrafter | None:
        return None  # needs a model name: only planned when the recipe or --draft-model names one

    def source(self, cfg: DraftModelDrafter, target: ModelShape) -> str:
        return "draft_model"  # drafter.model, an existing LLM: nothing to train

    def obtain(self, cfg: DraftModelDrafter, recipe, target):
        """drafter.model, an existing LLM: nothing to train; its vocabulary must be the target's."""
        from trtllm_spec.core.artifacts import DrafterResult
        from trtllm_spec.core.targets import resolve_target
        from trtllm_spec.errors import UserError

        draft = resolve_target(cfg.model, recipe.base_dir)
        if target.path is None or draft.path is None:
            return DrafterResult("draft_model", draft.path, {"draft_model": cfg.model,
                                                             "note": "presets: tokenizer check deferred to build"})
        from trtllm_spec.data.chat import load_tokenizer

        tt, dt = load_tokenizer(target.path), load_tokenizer(draft.path)
        tv, dv = tt.get_vocab(), dt.get_vocab()
        if tv != dv:
            only_t = sorted(set(tv) - set(dv))[:5]
            only_d = sorted(set(dv) - set(tv))[:5]
            moved = sorted(k for k in set(tv) & set(dv) if tv[k] != dv[k])[:5]
            raise UserError(f"draft model {cfg.model} has a different vocabulary than the target: only in "
                            f"target {only_t}, only in draft {only_d}, different ids {moved}")
        return DrafterResult("draft_model", draft.path, {"draft_model": cfg.model, "vocab": "identical"})

    def llamacpp_convert(self, converter, drafter_dir, target_dir, out_file, dtype, log) -> dict:
        from trtllm_spec.llamacpp import convert

        return convert.convert_target(converter, drafter_dir, out_file, dtype, log)

    def served_drafter_dir(self, cfg: DraftModelDrafter, drafter_dir, base_dir):
        # a config-only folder or a preset: nothing to copy or measure
        from trtllm_spec.core.targets import resolve_target

        draft = resolve_target(cfg.model, base_dir)
        return draft.path if draft.has_weights else None

    def bundle_drafter(self, cfg: DraftModelDrafter, kind, drafter_dir):
        """A draft model with weights is copied into ``draft_model/``; else the options name it (a preset by its
        HF id)."""
        if drafter_dir is not None and drafter_dir.is_dir():
            return "draft_model", "draft_model"
        from trtllm_spec.core.targets import preset_config

        preset = preset_config(cfg.model)
        return None, (preset["_preset"]["hf_id"] if preset else cfg.model)

    def recognises(self, cfg: dict) -> bool:
        return cfg.get("model_type") in ("llama", "mistral", "qwen2", "qwen3") and "dflash_config" not in cfg

    def load_runtime(self, folder, target, max_len: int):
        from trtllm_spec.drafters.draft_model.runtime import DraftModelDrafter as Runtime
        from trtllm_spec.errors import UserError
        from trtllm_spec.runtime.llama import LlamaModel

        model = LlamaModel.from_pretrained(folder, dtype=target.dtype, device=target.device)
        if model.cfg.vocab_size != target.cfg.vocab_size:
            raise UserError(f"draft model {folder} has vocab {model.cfg.vocab_size}, the target "
                            f"{target.cfg.vocab_size}: a draft model needs the target's tokenizer")
        return Runtime(model, max_len=max_len)

    def default_acceptance(self, target: ModelShape, cfg: DraftModelDrafter) -> AcceptanceModel:
        return chain(DRAFT_MODEL_RATES, DRAFT_MODEL_SOURCE)

    def draft_shape(self, cfg: DraftModelDrafter) -> ModelShape:
        if self._resolve is None:
            from trtllm_spec.core.targets import resolve_shape

            return resolve_shape(cfg.model)
        return self._resolve(cfg.model)

    def unavailable_reason(self, target: ModelShape, cfg: DraftModelDrafter) -> str | None:
        draft = self.draft_shape(cfg)
        if draft.vocab_size != target.vocab_size:
            return (f"draft model {cfg.model} has vocab {draft.vocab_size}, the target {target.vocab_size}; "
                    "a draft model needs the target's tokenizer")
        return None

    def cost(self, target: ModelShape, cfg: DraftModelDrafter) -> DraftCost:
        draft = self.draft_shape(cfg)
        return DraftCost(
            passes=(DraftPass(draft, per_token=True),),
            drafter_layers=draft.num_layers,
            weight_params=draft.total_params(),
            kv_shape=draft,
        )

    def trtllm_speculative_config(self, cfg: DraftModelDrafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, **extra) -> dict:
        # Draft_Target: the Literal of 1.2.1's parser (R12: NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py,
        # release 1.2.1), 1.3 and 1.4; the older 1.2-era parser A (the same file before 1.2.1, from_dict dispatch)
        # knows only "DraftTarget", so a 1.2 bundle targets 1.2.1 here (docs/trtllm_compat.md). The folder key is the
        # release's spelling (core/releases.py: 1.2 speculative_model_dir, which both 1.2-era parsers read).
        from trtllm_spec.core.releases import get

        key = get(profile).spelling["draft_model_key"]
        return {"decoding_type": "Draft_Target", "max_draft_len": max_draft_len, key: speculative_model}
