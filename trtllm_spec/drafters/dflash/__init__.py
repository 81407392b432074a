"""DFlash (block diffusion drafter): one parallel pass per block. DSpark (drafters/dspark) and DFlash2
(drafters/dflash2) build on it."""

from __future__ import annotations

from trtllm_spec.core.recipe import block_drafts
from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, DraftPass, Mechanism, dense_layer_shape
from trtllm_spec.drafters.dflash.config import DFlashDrafter
from trtllm_spec.planner.acceptance import AcceptanceModel, chain, table

# Assumption (no first-hand AL table found): a Qwen3-8B DFlash speculator reported 82.2% first-token
# acceptance and ~3.74 accepted tokens per step on math (Red Hat AI, as summarised by ai-primer.com); a decay
# of 0.97x per position from 0.822 gives AL(15) ~ 4.2, between those figures. z-lab reports up to 6.17x
# speedup on Qwen3-8B (z-lab.ai/projects/dflash), so this default is conservative.
DFLASH_RATES = [0.822 * 0.97**i for i in range(64)]
DFLASH_SOURCE = ("assumption: 0.822 first-position acceptance for a Qwen3-8B DFlash speculator (Red Hat AI, "
                 "third-hand), conditional rates decaying 0.97x per position")

# z-lab's DFlash2 (``architectures: ["DFlash2DraftModel"]``, z-lab's dflash/model.py): DFlash's config.json plus a
# grouped dynamic causal convolution and a top-K candidate selector over the target's logits, four integers in
# ``dflash_config`` (docs/dflash2.md, read from the sources: llama.cpp's converter tells DFlash2 by
# ``conv_kernel_size`` in ``dflash_config``, its loader by the ``selector_hidden.weight`` tensor, and its runtime
# (common/speculative.cpp) by ``selector_top_k > 0``). It is another mechanism (drafters/dflash2): the DFlash runtime
# would ignore its conv and selector weights, so a DFlash2 folder is neither recognised as DFlash nor accepted as
# one (``Mechanism.folder_refusal``).
DFLASH2_FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


def dflash2_signs(cfg: dict) -> list[str]:
    """What in a config.json says DFlash2 rather than DFlash: a DFlash2 architecture, or a conv / selector field
    (non-zero) in ``dflash_config`` or at the top level; [] where there is none."""
    archs = cfg.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs
    dc = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else {}
    signs = [f"architectures {[a for a in archs if isinstance(a, str)]}"] if any(
        isinstance(a, str) and "DFlash2" in a for a in archs) else []
    signs += [f"dflash_config.{k} = {dc[k]!r}" for k in DFLASH2_FIELDS if dc.get(k) not in (None, 0, False)]
    signs += [f"{k} = {cfg[k]!r}" for k in DFLASH2_FIELDS if cfg.get(k) not in (None, 0, False)]
    return signs


class DFlash(Mechanism):
    name = "dflash"
    config_class = DFlashDrafter
    decoding_types = ("DFlash",)
    llamacpp_spec_type = "draft-dflash"
    vllm_method = "dflash"  # vllm/v1/spec_decode/dflash.py
    title = "DFlash"
    acceptance_kind = "block"
    needs_training = True
    modelopt_mode = "dflash"
    dynamic_draft_len_since = "1.3"  # PR #12262 (DFlash)
    implicit_tier = (1, 1)  # core.trtllm_gates.MAIN_STATES: DFlash keeps the floor
    summary = "decoder layers fused with target hidden states denoise a block of mask tokens in one pass"

    def trainable_params(self, cfg, target: ModelShape) -> int:
        """The fc over the captured target layers, the draft decoder layers and a norm (the lm_head is the
        target's, frozen)."""
        h, i = target.hidden_size, target.intermediate_size
        q, kv = target.num_heads * target.head_dim, target.num_kv_heads * target.head_dim
        n_target = len(getattr(cfg, "target_layer_ids", None) or ()) or 5
        return n_target * h * h + cfg.num_layers * (h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h) + h

    def default_config(self) -> DFlashDrafter:
        return DFlashDrafter()

    def default_acceptance(self, target: ModelShape, cfg: DFlashDrafter) -> AcceptanceModel:
        chained = chain(DFLASH_RATES, DFLASH_SOURCE)
        d_max = self.max_draft_len(target, cfg)
        return table({d: chained.acceptance_length(d) for d in range(1, d_max + 1)}, DFLASH_SOURCE)

    def max_draft_len(self, target: ModelShape, cfg: DFlashDrafter) -> int | None:
        return cfg.max_draft_len  # core.recipe.block_drafts

    def recognises(self, cfg: dict) -> bool:
        if dflash2_signs(cfg):  # DFlash2 has a dflash_config too, and more that this runtime would ignore
            return False
        arch = (cfg.get("architectures") or [""])[0]
        dc = cfg.get("dflash_config") or {}
        # DFlash's architecture, or a dflash_config with no architecture named: another architecture is another
        # mechanism's (a sharer of the DFlash tag tells its folders by it: tests/toy_mechanism)
        return (arch == "DFlashDraftModel" or (not arch and "dflash_config" in cfg)) and (
            (dc.get("projector_type") == "dspark") == (self.name == "dspark"))

    def folder_refusal(self, cfg: dict, where: str) -> str | None:
        signs = dflash2_signs(cfg)
        if not signs:
            return None
        return (f"{where}: a DFlash2 drafter ({'; '.join(signs)}), not {self.title}: DFlash2 is another mechanism "
                f"(a grouped causal convolution and a top-K selector over the target's logits, which {self.title}'s "
                f"runtime would ignore); give it as drafter.type: dflash2 (a folder given alone is recognised as "
                f"DFlash2), or give a {self.title} checkpoint (architectures ['DFlashDraftModel'], no conv_* / "
                "selector_* fields in dflash_config)")

    def draft_limit(self, cfg: dict, where: str) -> tuple[int, str] | None:
        from trtllm_spec.errors import UserError

        dc = cfg.get("dflash_config") or {}
        block = cfg.get("block_size") or dc.get("block_size")
        if not isinstance(block, int) or block < 2:
            raise UserError(f"{where}: block_size {block!r} must be an integer >= 2 for a {self.name} drafter")
        shift = dc.get("shift_label", self.config_class.shift_label)
        return block_drafts(block, bool(shift))

    def load_runtime(self, folder, target, max_len: int):
        from trtllm_spec.drafters.dflash.runtime import DFlashDrafter as Runtime

        return Runtime(folder, target, max_len=max_len)

    def cost(self, target: ModelShape, cfg: DFlashDrafter) -> DraftCost:
        h = target.hidden_size
        layers = dense_layer_shape(target, cfg.num_layers, target.vocab_size, f"{self.name}-drafter")
        n_capture = len(cfg.target_layer_ids) if cfg.target_layer_ids else cfg.num_layers
        fc = n_capture * h * h + self._head_params(target)
        return DraftCost(
            # lm_head is the target's (shared), applied to every block position
            passes=(DraftPass(layers, per_token=False, lm_head_vocab=target.vocab_size, extra_params=fc),),
            drafter_layers=cfg.num_layers,
            weight_params=layers.num_layers * (layers.attn_params_per_layer() + layers.dense_mlp_params()) + fc,
            kv_shape=layers,
            sequential=False,
        )

    def _head_params(self, target: ModelShape) -> float:
        return 0.0

    def trtllm_extras(self, drafter_dir) -> dict:
        if drafter_dir is None:
            return {}
        import json

        dcfg = json.loads((drafter_dir / "config.json").read_text()).get("dflash_config", {})
        return {"dflash_mask_token_id": dcfg.get("mask_token_id"), "dflash_target_layer_ids": dcfg.get("target_layer_ids")}

    def llamacpp_convert(self, converter, drafter_dir, target_dir, out_file, dtype, log) -> dict:
        from trtllm_spec.drafters.dflash import llamacpp

        return llamacpp.convert(converter, drafter_dir, target_dir, out_file, dtype, log)

    def trtllm_speculative_config(self, cfg: DFlashDrafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, dflash_mask_token_id: int | None = None,
                                  dflash_target_layer_ids=None, **extra) -> dict:
        # DFlashDecodingConfig (TensorRT-LLM 1.3+): mask_token_id / target_layer_ids default to the drafter's
        # config.json dflash_config, so they are written only when known here
        out: dict = {"decoding_type": "DFlash", "max_draft_len": max_draft_len,
                     "speculative_model": speculative_model}
        mask = dflash_mask_token_id if dflash_mask_token_id is not None else cfg.mask_token
        if isinstance(mask, int) and not isinstance(mask, bool):
            out["mask_token_id"] = mask
        layers = dflash_target_layer_ids or cfg.target_layer_ids
        if layers:
            out["target_layer_ids"] = [int(i) for i in layers]
        return out

    def modelopt_config(self, target_cfg, cfg, *, draft_vocab_size, mask_token_id, offline) -> dict:
        from trtllm_spec.drafters.dflash.modelopt import mode_config

        return mode_config(target_cfg, cfg, mask_token_id)

    def doctor_checks(self, cfg: dict, tensors: dict, target_cfg: dict) -> list:
        from trtllm_spec.drafters.dflash.doctor import static

        return static(cfg, tensors, target_cfg)

