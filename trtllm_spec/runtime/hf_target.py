"""A transformers-backed target for the reference decoder: any architecture ``AutoModelForCausalLM`` loads
(Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3, ...), behind the interface ``runtime/llama.LlamaModel`` offers the
decoder and the drafters: ``forward(tokens, start, cache, capture=, logits=)`` -> (logits, captured layer
outputs, final-norm output), ``new_cache``, ``cfg`` (layers, hidden, vocab, eos, rope theta), ``embed`` /
``lm_head`` / ``norm`` (what EAGLE-3, EAGLE-MTP and DFlash heads share with their target), ``device`` / ``dtype``.

Rollback: the decoder passes the position every call starts at; when the cache holds more (drafts the
verification rejected), it is cropped back to that position (``DynamicCache.crop``) before the new tokens run.
The cache is a ``DynamicCache`` of full layers (no ``config``): transformers 5.14's sliding-window layer
(``DynamicSlidingWindowLayer.crop``) refuses to crop once it has seen more tokens than its window, so gpt-oss
style sliding layers keep every key here and the model's own sliding-window mask (``create_sliding_window_
causal_mask``: full layers report offset 0 and every cached key) hides the ones outside the window -- the same
attention, more memory. MLA (DeepSeek-V3) caches its decompressed per-head keys/values in ordinary layers.

Captured layers: forward hooks on the decoder's layers give layer i's output (before the final norm), exactly
what ``LlamaModel`` captures (``output_hidden_states`` puts the final *normed* state in its last slot instead).
Which engine runs a target: ``runtime/targets.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from trtllm_spec.errors import DependencyMissing, UserError


@dataclass
class HFTargetConfig:
    """The fields of ``LlamaConfig`` the decoder and the drafters read, from a transformers config."""

    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    eos_token_ids: tuple[int, ...]


def load_causal_lm(folder: Path, torch_dtype, device: str, device_map: str | None = None):
    """(model in eval mode on ``device``, its eos ids, its text config) for any family transformers loads; a
    config transformers cannot read is a UserError naming the folder. ``device_map="auto"``: accelerate spreads
    the model over the visible GPUs instead (``device`` is then not used for placement)."""
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise DependencyMissing("transformers is needed to run this target: pip install 'trtllm-spec[train]'") \
            from None
    try:
        cfg = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"{folder}: transformers cannot read this config.json ({str(exc).splitlines()[0]}); "
                        "the hf engine runs the architectures transformers knows") from None
    placement = {"device_map": device_map} if device_map is not None else {}
    model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch_dtype, output_loading_info=True,
                                                       **placement)
    # transformers initialises missing tensors at random and only warns: a measurement of noise. Unexpected
    # tensors are fine (DeepSeek-V3 checkpoints carry their MTP layer, which the causal LM does not run).
    for kind in ("missing_keys", "mismatched_keys"):
        bad = sorted(info.get(kind) or (), key=str)
        if bad:
            raise UserError(f"{folder}: {len(bad)} tensor(s) {kind.split('_')[0]} for the {cfg.model_type!r} model "
                            f"config.json describes, e.g. {bad[0]!r}; the weights do not match config.json "
                            "(re-export the checkpoint)")
    model = (model if device_map is not None else model.to(device)).eval()
    eos = cfg.eos_token_id
    gen_cfg = getattr(model, "generation_config", None)
    if gen_cfg is not None and gen_cfg.eos_token_id is not None:
        eos = gen_cfg.eos_token_id
    eos_ids = tuple(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
    return model, eos_ids, cfg.get_text_config()


class HFCache:
    """One sequence's transformers cache; ``max_len`` bounds it like ``KVCache``."""

    def __init__(self, max_len: int) -> None:
        from transformers import DynamicCache

        self.kv = DynamicCache()  # full layers only: see the module docstring (sliding layers cannot crop)
        self.max_len = max_len

    def rollback(self, start: int) -> None:
        """Drop every cached position >= ``start`` (rejected drafts)."""
        have = self.kv.get_seq_length()
        if have > start:
            self.kv.crop(start)
        elif have < start:
            raise ValueError(f"cache holds {have} positions; a forward at {start} would leave a gap")


class HFTarget:
    engine = "hf"

    def __init__(self, model, eos_ids: tuple[int, ...], text_cfg, dtype, device: str) -> None:
        self.model, self.dtype, self.device = model, dtype, device
        rope = getattr(text_cfg, "rope_parameters", None) or {}
        self.cfg = HFTargetConfig(
            model_type=text_cfg.model_type, num_layers=text_cfg.num_hidden_layers, hidden_size=text_cfg.hidden_size,
            vocab_size=text_cfg.vocab_size,
            rope_theta=float(getattr(text_cfg, "rope_theta", None) or rope.get("rope_theta") or 10000.0),
            rms_norm_eps=float(getattr(text_cfg, "rms_norm_eps", None) or 1e-6), eos_token_ids=eos_ids)
        self.embed = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
        self.lm_head = head.weight if head is not None else self.embed
        decoder = model.get_decoder()
        self._layers = getattr(decoder, "layers", None)
        self._norm = getattr(decoder, "norm", None)
        self._want: tuple[int, ...] = ()
        self._seen: dict[int, torch.Tensor] = {}
        if self._layers is not None:
            for i, layer in enumerate(self._layers):
                layer.register_forward_hook(self._hook(i))
        if self._norm is not None:
            self._norm.register_forward_hook(self._hook(-1))

    @classmethod
    def from_pretrained(cls, folder: str | Path, dtype=torch.float32, device: str = "cpu") -> HFTarget:
        model, eos_ids, text_cfg = load_causal_lm(Path(folder), dtype, device)
        return cls(model, eos_ids, text_cfg, dtype, device)

    @property
    def norm(self) -> torch.Tensor:
        """The final norm's weight, for an EAGLE-MTP head (it normalises the last layer's output as an RMSNorm
        does); a family whose final norm is not a plain weighted RMSNorm is refused by name."""
        w = getattr(self._norm, "weight", None)
        if w is None or "rmsnorm" not in type(self._norm).__name__.lower() or "gemma" in self.cfg.model_type:
            raise UserError(f"a {self.cfg.model_type!r} target's final norm ({type(self._norm).__name__}) is not a "
                            "plain weighted RMSNorm, which an EAGLE-MTP head applies to the target's last layer; "
                            "use an EAGLE-3 or DFlash drafter with this family")
        return w

    def _hook(self, i: int):
        def keep(_module, _inputs, output):
            if i in self._want:
                self._seen[i] = output[0] if isinstance(output, tuple) else output
        return keep

    def new_cache(self, batch: int, max_len: int) -> HFCache:
        if batch != 1:
            raise ValueError("the hf target decodes one sequence at a time (data/regen_hf.py batches)")
        return HFCache(max_len)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor, cache: HFCache, *,
                capture: tuple[int, ...] = (), logits: str = "all", pad_left: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor | None, list[torch.Tensor], torch.Tensor | None]:
        """``LlamaModel.forward`` for one sequence: ``tokens`` [1, T] at positions start..start+T-1, after
        cropping the cache back to ``start``. Returns (logits [1, T or 1, V] or None, captured layer outputs
        [1, T, H], final-norm output [1, T, H])."""
        if tokens.shape[0] != 1 or pad_left is not None:
            raise ValueError("the hf target runs one unpadded sequence per forward")
        s0, t = int(start[0]), tokens.shape[1]
        if s0 + t > cache.max_len:
            raise UserError(f"sequence of {s0 + t} tokens exceeds the cache ({cache.max_len}); raise max_len")
        if capture and self._layers is None:
            raise UserError(f"a {self.cfg.model_type!r} target has no decoder 'layers' to capture hidden states "
                            "from; use the n-gram drafter with this family")
        bad = [i for i in capture if not 0 <= i < self.cfg.num_layers]
        if bad:
            raise UserError(f"captured layer {bad[0]} is outside the target's {self.cfg.num_layers} layers")
        cache.rollback(s0)
        self._want, self._seen = (*capture, -1), {}
        positions = torch.arange(s0, s0 + t, device=tokens.device)[None]
        try:
            out = self.model(input_ids=tokens, position_ids=positions, past_key_values=cache.kv, use_cache=True,
                             logits_to_keep=1 if logits != "all" else 0)
        finally:
            self._want = ()
        captured = [self._seen[i] for i in capture]
        return (None if logits == "none" else out.logits), captured, self._seen.get(-1)
