"""MTP: the target's own multi-token-prediction module(s) (DeepSeek-V3/R1), or a trained EAGLE-MTP head."""

from __future__ import annotations

from trtllm_spec.core.recipe import MTPDrafter
from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, DraftPass, Mechanism, dense_layer_shape, head_params
from trtllm_spec.planner.acceptance import AcceptanceModel, table

# TensorRT-LLM tech blog 1 (docs/source/blogs/tech_blog/blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-
# R1_Performance_on_NVIDIA_B200_GPUs.md), DeepSeek-R1 FP4 on 8xB200, batch 1, one MTP module reused
# autoregressively: acceptance length by number of MTP draft tokens.
MTP_AL = {1: 1.92, 2: 2.58, 3: 2.82, 4: 2.99, 5: 3.01}
MTP_SOURCE = ("TensorRT-LLM blog 1: DeepSeek-R1 FP4, 8xB200, bs1, MTP reused autoregressively "
              "(AL 1.92/2.58/2.82/2.99/3.01 at D=1..5)")


MTP_HEAD_WHY = ("'train' fits ModelOpt's EAGLE-MTP head and 'measure'/'plan' use it, but TensorRT-LLM serves MTP "
                "only as a target's own layers (num_nextn_predict_layers), so 'build' refuses it; use drafter.type "
                "eagle3 for a bundle")


class MTP(Mechanism):
    name = "mtp"
    llamacpp_refusal = ("llama.cpp's draft-mtp runs a target's own next-token layers (nextn, e.g. DeepSeek, "
                        "GLM, Qwen3.5), not ModelOpt's separately exported EAGLE-MTP head")
    title = "MTP"
    acceptance_kind = "chain"
    modelopt_mode, modelopt_preset = "eagle", "EAGLE_MTP_DEFAULT_CFG"  # the head for targets without MTP layers
    dynamic_draft_len_since = "1.3"  # PR #12262 (MTP, MTP-Eagle)
    doctor_layout, doctor_parity = "mtp", True  # train/doctor.LAYOUT_CHECKS
    draft_vocabulary = True  # ModelOpt eagle mode: draft_vocab_size and d2t
    summary = "native multi-token-prediction layer(s) over the target's last hidden state; sequential"

    def default_config(self) -> MTPDrafter:
        return MTPDrafter()

    def default_acceptance(self, target: ModelShape, cfg: MTPDrafter) -> AcceptanceModel:
        return table(MTP_AL, MTP_SOURCE + ("" if target.mtp_layers else "; assumed for a trained MTP head"))

    def source(self, cfg: MTPDrafter, target: ModelShape) -> str:
        # the target's own MTP layers need nothing (needs_training stays False: that is what TensorRT-LLM
        # serves); a target without them gets a trained EAGLE-MTP head
        if target is not None and target.mtp_layers:  # None: a family the planner cannot price (no MTP known)
            return "native"
        return "reuse" if cfg.checkpoint else "train"

    def obtain(self, cfg: MTPDrafter, recipe, target):
        if self.source(cfg, target.shape) != "native":
            return None
        from trtllm_spec.core.artifacts import DrafterResult

        return DrafterResult("native", None, {"num_nextn_predict_layers": target.shape.mtp_layers,
                                              "note": "the target's own MTP layers; nothing to train"})

    def trainable_params(self, cfg: MTPDrafter, target: ModelShape) -> int:
        return head_params(cfg, target, 2)  # ModelOpt's EAGLE-MTP head fuses [embedding; last hidden]

    def kept_logit_passes(self, cfg) -> int:
        from trtllm_spec.drafters.eagle3 import ttt_steps

        return ttt_steps(cfg)

    def build_refusal(self, cfg: MTPDrafter, target: ModelShape) -> tuple[str, str] | None:
        return None if target is not None and target.mtp_layers else ("native MTP layers", MTP_HEAD_WHY)

    def recognises(self, cfg: dict) -> bool:
        from trtllm_spec.drafters.eagle3 import is_eagle_layout

        return is_eagle_layout(cfg) and (cfg.get("eagle_config") or {}).get("use_aux_hidden_state") is False

    def load_runtime(self, folder, target, max_len: int):
        # an EAGLE-MTP head is an EAGLE layout without fc (see runtime/drafters/eagle3.py)
        from trtllm_spec.runtime.drafters.eagle3 import Eagle3Drafter as Runtime

        return Runtime(folder, target, max_len=max_len)

    def _layers(self, target: ModelShape, cfg: MTPDrafter) -> int:
        return cfg.num_layers or target.mtp_layers or 1

    def cost(self, target: ModelShape, cfg: MTPDrafter) -> DraftCost:
        h = target.hidden_size
        if target.mtp_layers:
            # one MTP module = one full decoder layer of the target (MLA + MoE for DeepSeek) + eh_proj (2H -> H);
            # embeddings and lm_head are shared with the target
            moe = target.moe.model_copy(update={"num_moe_layers": 1}) if target.moe else None
            module = target.model_copy(update={"num_layers": 1, "moe": moe, "mtp_layers": 0, "num_sliding_layers": 0,
                                               "name": "mtp-module"})
            eh_proj, vocab = 2 * h * h, target.vocab_size
        else:
            # ModelOpt's EAGLE-MTP head (Hugging Face flow): regular layer(s) over the target's final hidden state,
            # no eh_proj, its own lm_head over the draft vocabulary
            vocab = cfg.draft_vocab_size or target.vocab_size
            module = dense_layer_shape(target, 1, vocab, "mtp-head")
            eh_proj = 0
        per_module = module.attn_params_per_layer() + (module.dense_mlp_params() if not module.moe else
                                                      module.moe.num_experts * module.expert_params()
                                                      + module.shared_expert_params())
        return DraftCost(
            passes=(DraftPass(module, per_token=True, lm_head_vocab=vocab, extra_params=eh_proj),),
            drafter_layers=1,  # modules are run one per draft step
            weight_params=self._layers(target, cfg) * (per_module + eh_proj),
            kv_shape=module,
        )

    def trtllm_speculative_config(self, cfg: MTPDrafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, **extra) -> dict:
        # 1.2: num_nextn_predict_layers sets max_draft_len (its validator overwrites max_draft_len); 1.3 main:
        # max_draft_len is the knob and num_nextn_predict_layers is internal (llm_args.py MTPDecodingConfig).
        from trtllm_spec.core.releases import get

        out: dict = {"decoding_type": "MTP", get(profile).spelling["mtp_draft_len_key"]: max_draft_len}
        if speculative_model is not None:
            out["speculative_model"] = speculative_model  # a separately trained MTP head
        if cfg.sa_enhancer is not None:  # MTPDecodingConfig.sa_config (1.3+; drafters/suffix.py)
            from trtllm_spec.drafters.suffix import sa_config

            out["sa_config"] = sa_config(cfg.sa_enhancer, profile, self.title)
        return out
