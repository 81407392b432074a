"""MTP: the target's own multi-token-prediction module(s) (DeepSeek-V3/R1). A head trained with ModelOpt's
EAGLE-MTP preset is its own mechanism (drafters/eagle_mtp/)."""

from __future__ import annotations

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, DraftPass, Mechanism
from trtllm_spec.drafters.mtp.config import MTPDrafter
from trtllm_spec.planner.acceptance import AcceptanceModel, table

# TensorRT-LLM tech blog 1 (docs/source/blogs/tech_blog/blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-
# R1_Performance_on_NVIDIA_B200_GPUs.md), DeepSeek-R1 FP4 on 8xB200, batch 1, one MTP module reused
# autoregressively: acceptance length by number of MTP draft tokens.
MTP_AL = {1: 1.92, 2: 2.58, 3: 2.82, 4: 2.99, 5: 3.01}
MTP_SOURCE = ("TensorRT-LLM blog 1: DeepSeek-R1 FP4, 8xB200, bs1, MTP reused autoregressively "
              "(AL 1.92/2.58/2.82/2.99/3.01 at D=1..5)")


NATIVE_WHY = ("drafter.type mtp runs a target's own MTP layers (num_nextn_predict_layers); a head trained with "
              "ModelOpt's EAGLE-MTP preset is drafter.type eagle_mtp (train / measure / plan; 'build' refuses it), "
              "a bundle for this target: drafter.type eagle3")


class MTP(Mechanism):
    name = "mtp"
    config_class = MTPDrafter
    decoding_types = ("MTP",)
    llamacpp_refusal = ("llama.cpp's draft-mtp runs a target's own next-token layers (nextn, e.g. DeepSeek, GLM, "
                        "Qwen3.5) from the target's GGUF, not a drafter folder")
    title = "MTP"
    vllm_refusal = ("vLLM's MTP methods (deepseek_mtp, qwen3_next_mtp, ...) run a target's own MTP layers, which "
                    "SmolLM2 and the Llama family do not have")
    acceptance_kind = "chain"
    dynamic_draft_len_since = "1.3"  # PR #12262 (MTP, MTP-Eagle)
    implicit_tier = (1, 0)  # core.trtllm_gates.MAIN_STATES: MTP-Eagle one-model: back to 0, drafter kept warm
    summary = "native multi-token-prediction layer(s) over the target's last hidden state; sequential"

    def default_config(self) -> MTPDrafter:
        return MTPDrafter()

    def default_acceptance(self, target: ModelShape, cfg: MTPDrafter) -> AcceptanceModel:
        return table(MTP_AL, MTP_SOURCE)

    def unavailable_reason(self, target: ModelShape, cfg: MTPDrafter) -> str | None:
        if target is not None and not target.mtp_layers:
            return f"the target has no native MTP layers; {NATIVE_WHY}"
        return None

    def source(self, cfg: MTPDrafter, target: ModelShape) -> str:
        # the target's own MTP layers need nothing (needs_training stays False: that is what TensorRT-LLM serves)
        return "native"

    def obtain(self, cfg: MTPDrafter, recipe, target):
        if not target.shape.mtp_layers:
            from trtllm_spec.errors import UserError

            raise UserError(f"drafter.type: mtp -- target {recipe.target.model} has no native MTP layers; {NATIVE_WHY}")
        from trtllm_spec.core.artifacts import DrafterResult

        return DrafterResult("native", None, {"num_nextn_predict_layers": target.shape.mtp_layers,
                                              "note": "the target's own MTP layers; nothing to train"})

    def build_refusal(self, cfg: MTPDrafter, target: ModelShape) -> tuple[str, str] | None:
        return None if target is not None and target.mtp_layers else ("native MTP layers", NATIVE_WHY)

    def _layers(self, target: ModelShape, cfg: MTPDrafter) -> int:
        return cfg.num_layers or target.mtp_layers or 1

    def cost(self, target: ModelShape, cfg: MTPDrafter) -> DraftCost:
        # one MTP module = one full decoder layer of the target (MLA + MoE for DeepSeek) + eh_proj (2H -> H);
        # embeddings and lm_head are shared with the target
        h = target.hidden_size
        moe = target.moe.model_copy(update={"num_moe_layers": 1}) if target.moe else None
        module = target.model_copy(update={"num_layers": 1, "moe": moe, "mtp_layers": 0, "num_sliding_layers": 0,
                                           "name": "mtp-module"})
        eh_proj, vocab = 2 * h * h, target.vocab_size
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
        if cfg.sa_enhancer is not None:  # MTPDecodingConfig.sa_config (1.3+; drafters/suffix/)
            from trtllm_spec.drafters.suffix import sa_config

            out["sa_config"] = sa_config(cfg.sa_enhancer, profile, self.title)
        return out
