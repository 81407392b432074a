"""EAGLE-MTP: a head trained with ModelOpt's ``EAGLE_MTP_DEFAULT_CFG`` for a target without native MTP layers
(regular decoder layer(s) over the target's final hidden state). Trained, measured and planned here; TensorRT-LLM
serves MTP only as a target's own layers (``num_nextn_predict_layers``), so ``build`` refuses it."""

from __future__ import annotations

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, DraftPass, Mechanism, dense_layer_shape, head_params
from trtllm_spec.drafters.eagle_mtp.config import EagleMTPDrafter
from trtllm_spec.drafters.mtp import MTP_AL, MTP_SOURCE
from trtllm_spec.planner.acceptance import AcceptanceModel, table

HEAD_WHY = ("'train' fits ModelOpt's EAGLE-MTP head and 'measure'/'plan' use it, but TensorRT-LLM serves MTP "
            "only as a target's own layers (num_nextn_predict_layers), so 'build' refuses drafter.type eagle_mtp; "
            "use drafter.type eagle3 for a bundle")


class EagleMTP(Mechanism):
    name = "eagle_mtp"
    config_class = EagleMTPDrafter
    decoding_types = ()  # no decoding config: TensorRT-LLM cannot serve it (HEAD_WHY)
    llamacpp_refusal = ("llama.cpp's draft-mtp runs a target's own next-token layers (nextn, e.g. DeepSeek, "
                        "GLM, Qwen3.5), not ModelOpt's separately exported EAGLE-MTP head")
    title = "EAGLE-MTP"
    vllm_refusal = ("vLLM's MTP methods run a target's own MTP layers; ModelOpt's separately exported EAGLE-MTP "
                    "head has no vLLM loader (vllm/config/speculative.py lists none for it)")
    acceptance_kind = "chain"
    needs_training = True
    modelopt_mode, modelopt_preset = "eagle", "EAGLE_MTP_DEFAULT_CFG"
    dynamic_draft_len_since = "1.3"  # as MTP (PR #12262, MTP and MTP-Eagle), for the planner's what-if
    implicit_tier = (1, 0)  # core.trtllm_gates.MAIN_STATES: as MTP-Eagle one-model
    draft_vocabulary = True  # ModelOpt eagle mode: draft_vocab_size and d2t
    summary = "trained EAGLE-MTP head (ModelOpt) over the target's last hidden state; sequential; not servable"

    def default_config(self) -> EagleMTPDrafter:
        return EagleMTPDrafter()

    def default_acceptance(self, target: ModelShape, cfg: EagleMTPDrafter) -> AcceptanceModel:
        return table(MTP_AL, MTP_SOURCE + "; assumed for a trained MTP head")

    def unavailable_reason(self, target: ModelShape, cfg: EagleMTPDrafter) -> str | None:
        if target is not None and target.mtp_layers:
            return "the target has native MTP layers: use drafter.type mtp"
        return None

    def trainable_params(self, cfg: EagleMTPDrafter, target: ModelShape) -> int:
        return head_params(cfg, target, 2)  # ModelOpt's EAGLE-MTP head fuses [embedding; last hidden]

    def kept_logit_passes(self, cfg) -> int:
        from trtllm_spec.drafters.eagle3 import ttt_steps

        return ttt_steps(cfg)

    def trtllm_refusal(self, cfg: EagleMTPDrafter, profile: str) -> str | None:
        return HEAD_WHY

    def recognises(self, cfg: dict) -> bool:
        from trtllm_spec.drafters.eagle3 import is_eagle_layout

        return is_eagle_layout(cfg) and (cfg.get("eagle_config") or {}).get("use_aux_hidden_state") is False

    def load_runtime(self, folder, target, max_len: int):
        # an EAGLE-MTP head is an EAGLE layout without fc (see drafters/eagle3/runtime.py)
        from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter as Runtime

        return Runtime(folder, target, max_len=max_len)

    def cost(self, target: ModelShape, cfg: EagleMTPDrafter) -> DraftCost:
        # ModelOpt's EAGLE-MTP head (Hugging Face flow): regular layer(s) over the target's final hidden state,
        # no eh_proj, its own lm_head over the draft vocabulary
        vocab = cfg.draft_vocab_size or target.vocab_size
        module = dense_layer_shape(target, 1, vocab, "mtp-head")
        per_module = module.attn_params_per_layer() + module.dense_mlp_params()
        return DraftCost(
            passes=(DraftPass(module, per_token=True, lm_head_vocab=vocab, extra_params=0),),
            drafter_layers=1,  # modules are run one per draft step
            weight_params=cfg.num_layers * per_module,
            kv_shape=module,
        )

    def modelopt_config(self, target_cfg, cfg, *, draft_vocab_size, mask_token_id, offline) -> dict:
        from trtllm_spec.drafters.eagle3.modelopt import (
            mode_config,  # ModelOpt's eagle mode, its EAGLE-MTP preset
        )

        return mode_config(target_cfg, cfg, draft_vocab_size or target_cfg["vocab_size"], offline)

    def doctor_checks(self, cfg: dict, tensors: dict, target_cfg: dict) -> list:
        from trtllm_spec.drafters.eagle_mtp.doctor import static

        return static(cfg, tensors, target_cfg)

    def doctor_parity(self, drafter_dir, target_dir, heldout, tolerance, placement=None):
        from trtllm_spec.drafters.eagle3.doctor import parity

        return parity(drafter_dir, target_dir, heldout, tolerance, placement)

