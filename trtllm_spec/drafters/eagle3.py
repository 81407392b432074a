"""EAGLE-3: one (or a few) decoder layers over the concatenation of three target hidden states."""

from __future__ import annotations

from trtllm_spec.core.recipe import Eagle3Drafter
from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, DraftPass, Mechanism, dense_layer_shape, extended
from trtllm_spec.planner.acceptance import AcceptanceModel, chain

# ggml-org/llama.cpp PR #24536 logs an EAGLE-3 run at D=3: "mean acceptance length = 2.92, acceptance rate
# per position = (0.805, 0.632, 0.483)" -- marginal rates, i.e. conditional 0.805, 0.785, 0.764.
# Positions 4+ are extrapolated (-0.02 each, floor 0.5): an assumption, to be replaced by `measure`.
EAGLE3_RATES = extended([0.805, 0.632 / 0.805, 0.483 / 0.632], 64, 0.02, 0.5)
EAGLE3_SOURCE = ("assumption: llama.cpp PR #24536 EAGLE-3 per-position acceptance (0.805, 0.632, 0.483 at "
                 "D=3), positions 4+ extrapolated at -0.02 each")


def default_capture_layers(num_layers: int) -> list[int]:
    """TensorRT-LLM's and ModelOpt's default captured target layers (layer outputs, 0-based): the inputs of
    layers 2, L//2 and L-3 (SafeAILab EAGLE ``modeling_llama_kv.py``; TensorRT-LLM ``Eagle3SpecMetadata``)."""
    return sorted({1, max(0, num_layers // 2 - 1), max(0, num_layers - 4)})


def is_eagle_layout(cfg: dict) -> bool:
    """ModelOpt's EAGLE export (EAGLE-3, and its EAGLE-MTP head under the same architecture name)."""
    arch = (cfg.get("architectures") or [""])[0]
    return "dflash_config" not in cfg and arch != "DFlashDraftModel" and ("draft_vocab_size" in cfg
                                                                          or arch.endswith("Eagle3"))


class Eagle3(Mechanism):
    name = "eagle3"
    llamacpp_spec_type = "draft-eagle3"
    title = "EAGLE-3"
    acceptance_kind = "chain"
    needs_training = True
    modelopt_mode, modelopt_preset = "eagle", "EAGLE3_DEFAULT_CFG"
    trtllm_first_layer = True
    decoding_types = ("Eagle3", "Eagle")  # "Eagle": a legacy alias on the PyTorch backend
    summary = "1+ decoder layer + fc over 3 captured target hidden states; D sequential draft steps"

    def default_config(self) -> Eagle3Drafter:
        return Eagle3Drafter()

    def default_acceptance(self, target: ModelShape, cfg: Eagle3Drafter) -> AcceptanceModel:
        return chain(EAGLE3_RATES, EAGLE3_SOURCE)

    def recognises(self, cfg: dict) -> bool:
        # ModelOpt's EAGLE-MTP head is told apart by eagle_config.use_aux_hidden_state: false
        return is_eagle_layout(cfg) and (cfg.get("eagle_config") or {}).get("use_aux_hidden_state") is not False

    def load_runtime(self, folder, target, max_len: int):
        from trtllm_spec.runtime.drafters.eagle3 import Eagle3Drafter as Runtime

        return Runtime(folder, target, max_len=max_len)

    def cost(self, target: ModelShape, cfg: Eagle3Drafter) -> DraftCost:
        h = target.hidden_size
        vocab = cfg.draft_vocab_size or target.vocab_size
        layers = dense_layer_shape(target, cfg.num_layers, vocab, "eagle3-drafter")
        # the first layer's q/k/v read [embedding; hidden] = 2H inputs: H extra rows of q, k and v
        qkv_extra = h * (target.num_heads + 2 * target.num_kv_heads) * target.head_dim
        fc = 3 * h * h  # fuses three captured target layers, once per iteration over the verified tokens
        return DraftCost(
            passes=(DraftPass(layers, per_token=True, lm_head_vocab=vocab, extra_params=qkv_extra),
                    DraftPass(None, per_token=False, extra_params=fc)),
            drafter_layers=cfg.num_layers,
            weight_params=layers.num_layers * (layers.attn_params_per_layer() + layers.dense_mlp_params())
            + qkv_extra + fc + vocab * h,
            kv_shape=layers,
        )

    def trtllm_speculative_config(self, cfg: Eagle3Drafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, eagle3_layers_to_capture=None, **extra) -> dict:
        # decoding_type "Eagle3" is a Literal in both the 1.2-era and main llm_args.py (NVIDIA/TensorRT-LLM
        # tensorrt_llm/llmapi/llm_args.py, Eagle3DecodingConfig); "Eagle" is only a legacy alias on PyTorch.
        out: dict = {"decoding_type": "Eagle3", "max_draft_len": max_draft_len,
                     "speculative_model": speculative_model}
        layers = eagle3_layers_to_capture or cfg.layers_to_capture
        if layers:
            out["eagle3_layers_to_capture"] = sorted(int(i) for i in layers)
        return out
