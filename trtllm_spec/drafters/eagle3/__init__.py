"""EAGLE-3: one (or a few) decoder layers over the concatenation of three target hidden states."""

from __future__ import annotations

from trtllm_spec.core.shape import ModelShape, default_capture_layers
from trtllm_spec.drafters.base import (
    DraftCost,
    DraftPass,
    Mechanism,
    dense_layer_shape,
    extended,
    head_params,
)
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.planner.acceptance import AcceptanceModel, chain

# ggml-org/llama.cpp PR #24536 logs an EAGLE-3 run at D=3: "mean acceptance length = 2.92, acceptance rate
# per position = (0.805, 0.632, 0.483)" -- marginal rates, i.e. conditional 0.805, 0.785, 0.764.
# Positions 4+ are extrapolated (-0.02 each, floor 0.5): an assumption, to be replaced by `measure`.
EAGLE3_RATES = extended([0.805, 0.632 / 0.805, 0.483 / 0.632], 64, 0.02, 0.5)
EAGLE3_SOURCE = ("assumption: llama.cpp PR #24536 EAGLE-3 per-position acceptance (0.805, 0.632, 0.483 at "
                 "D=3), positions 4+ extrapolated at -0.02 each")


TTT_STEPS = 3  # ModelOpt's EAGLE-3 default test-time-training steps (a recipe's training.ttt_steps overrides)


def ttt_steps(cfg) -> int:
    """The test-time-training steps an EAGLE-style head trains with: each keeps its draft logits for backward."""
    return getattr(getattr(cfg, "training", None), "ttt_steps", None) or TTT_STEPS


def is_eagle_layout(cfg: dict) -> bool:
    """ModelOpt's EAGLE export (EAGLE-3, and its EAGLE-MTP head under the same architecture name)."""
    arch = (cfg.get("architectures") or [""])[0]
    return "dflash_config" not in cfg and arch != "DFlashDraftModel" and ("draft_vocab_size" in cfg
                                                                          or arch.endswith("Eagle3"))


class Eagle3(Mechanism):
    name = "eagle3"
    config_class = Eagle3Drafter
    decoding_types = ("Eagle", "Eagle3")  # "Eagle": the 1.2-era spelling (core.releases)
    llamacpp_spec_type = "draft-eagle3"
    vllm_method = "eagle3"  # LlamaForCausalLMEagle3 (vllm/model_executor/models/llama_eagle3.py) reads our export
    title = "EAGLE-3"
    acceptance_kind = "chain"
    needs_training = True
    modelopt_mode, modelopt_preset = "eagle", "EAGLE3_DEFAULT_CFG"
    trtllm_first_layer = True
    dynamic_draft_len_since = "1.3"  # one-model path: PR #10860, after the 1.2 branch
    implicit_tier = (1, 0)  # core.trtllm_gates.MAIN_STATES: linear EAGLE-3 one-model: back to 0, drafter kept warm
    draft_vocabulary = True  # ModelOpt eagle mode: draft_vocab_size and d2t
    summary = "1+ decoder layer + fc over 3 captured target hidden states; D sequential draft steps"

    def default_config(self) -> Eagle3Drafter:
        return Eagle3Drafter()

    def default_acceptance(self, target: ModelShape, cfg: Eagle3Drafter) -> AcceptanceModel:
        return chain(EAGLE3_RATES, EAGLE3_SOURCE)

    def recognises(self, cfg: dict) -> bool:
        # ModelOpt's EAGLE-MTP head is told apart by eagle_config.use_aux_hidden_state: false
        return is_eagle_layout(cfg) and (cfg.get("eagle_config") or {}).get("use_aux_hidden_state") is not False

    def trainable_params(self, cfg: Eagle3Drafter, target: ModelShape) -> int:
        return head_params(cfg, target, len(cfg.layers_to_capture or ()) or 3)

    def kept_logit_passes(self, cfg) -> int:
        return ttt_steps(cfg)

    def trains_offline(self, cfg: Eagle3Drafter) -> bool:
        return bool(cfg.training.data.offline_features)

    def savestate_layers(self, cfg: Eagle3Drafter, target_config: dict) -> list[int] | None:
        from trtllm_spec.core.shape import text_value

        n = text_value(target_config, "num_hidden_layers")
        return list(cfg.layers_to_capture or default_capture_layers(n))

    def load_runtime(self, folder, target, max_len: int):
        from trtllm_spec.drafters.eagle3.runtime import Eagle3Drafter as Runtime

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

    def trtllm_tensor_renames(self, cfg: Eagle3Drafter) -> dict[str, str]:
        # TensorRT-LLM's Eagle3DraftModel names its one layer ``midlayer``; loaders before PR #11010 (Jan 2026)
        # load only that name, later ones also remap ``layers.0.`` (modeling_speculative.py Eagle3ForCausalLM.
        # load_weights, main @00679c66c3e38f6d2651ad0a5bef0f94d862e36c): ``midlayer.*`` is what every release reads
        return {"layers.0.": "midlayer."} if cfg.num_layers == 1 else {}

    def trtllm_refusal(self, cfg: Eagle3Drafter, profile: str) -> str | None:
        if cfg.num_layers == 1:
            return None
        return (f"drafter.num_layers: {cfg.num_layers} -- TensorRT-LLM {profile} cannot load a multi-layer EAGLE-3 "
                "head trained here: its Eagle3DraftModel builds every layer as an Eagle3DecoderLayer (hidden_norm and "
                "a 2H-wide q/k/v over [embedding; hidden]; only newer main makes later layers plain through "
                "eagle_config.next_layer_regular) while ModelOpt's layers after the first are plain Llama layers, so "
                "the shapes do not match (docs/trtllm_compat.md, 'Multi-layer EAGLE-3'). Use drafter.num_layers: 1 "
                "for a TensorRT-LLM bundle (train / measure / plan still run with more layers)")

    def llamacpp_convert(self, converter, drafter_dir, target_dir, out_file, dtype, log) -> dict:
        from trtllm_spec.drafters.eagle3 import llamacpp

        return llamacpp.convert(converter, drafter_dir, target_dir, out_file, dtype, log)

    def trtllm_speculative_config(self, cfg: Eagle3Drafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, eagle3_layers_to_capture=None, **extra) -> dict:
        # the release's spelling (core/releases.py): 1.2 "Eagle" + speculative_model_dir, the form every 1.2-era
        # llm_args.py reads (docs/trtllm_compat.md, "Release 1.2"); 1.3 / 1.4: the tags and key of the versioned
        # API pages (1.3.0rc27, 1.4.0rc1 / rc4 Eagle3DecodingConfig).
        from trtllm_spec.core.releases import get

        spelling = get(profile).spelling
        out: dict = {"decoding_type": spelling["eagle3_tag"], "max_draft_len": max_draft_len,
                     spelling["draft_model_key"]: speculative_model}
        layers = eagle3_layers_to_capture or cfg.layers_to_capture
        if layers:
            out["eagle3_layers_to_capture"] = sorted(int(i) for i in layers)
        if cfg.sa_enhancer is not None:  # Eagle3DecodingConfig.sa_config (1.3+; drafters/suffix/)
            from trtllm_spec.drafters.suffix import sa_config

            out["sa_config"] = sa_config(cfg.sa_enhancer, profile, self.title)
        return out

    def modelopt_config(self, target_cfg, cfg, *, draft_vocab_size, mask_token_id, offline) -> dict:
        from trtllm_spec.drafters.eagle3.modelopt import mode_config

        return mode_config(target_cfg, cfg, draft_vocab_size or target_cfg["vocab_size"], offline)

    def doctor_checks(self, cfg: dict, tensors: dict, target_cfg: dict) -> list:
        from trtllm_spec.drafters.eagle3.doctor import static

        return static(cfg, tensors, target_cfg)

    def doctor_parity(self, drafter_dir, target_dir, heldout, tolerance, placement=None):
        from trtllm_spec.drafters.eagle3.doctor import parity

        return parity(drafter_dir, target_dir, heldout, tolerance, placement)

