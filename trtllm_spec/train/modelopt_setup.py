"""Turn a target into a target + drafter with ModelOpt (``mtsp.convert``), in the mode the mechanism names.

- The mode's config is the mechanism's (``Mechanism.modelopt_config``, its package's ``modelopt.py``): eagle3:
  ``EAGLE3_DEFAULT_CFG``; eagle_mtp (targets without native MTP layers): ``EAGLE_MTP_DEFAULT_CFG``; dflash /
  dspark / dflash2: the ``dflash`` mode, DSpark via ``dflash_architecture_config.projector_type: dspark``, DFlash2
  with its plugin (``Mechanism.modelopt_extend``) after the conversion. Drafter dimensions come from the target
  (ModelOpt's defaults are Llama-3-8B's), ``torch.compile`` is off (on CPU it costs ~90 s and runs slower), and no
  rope scaling is injected at export.
- ``align_eagle3_first_layer``: ModelOpt's HF EAGLE-3 first layer feeds ``hidden_norm(input_layernorm(g))``
  to attention while TensorRT-LLM's ``Eagle3DecoderLayer`` (and SafeAILab's reference) use ``hidden_norm(g)``;
  after training, ``input_layernorm`` is no longer uniform and the two disagree. We train with TensorRT-LLM's
  form, so what we export is what TensorRT-LLM computes (checked by ``doctor``'s parity test).
- ``init_eagle3_from_target``: start the drafter from the target's own weights instead of noise.
- ``target_logits_over_draft_vocab``: offline training computes the target's logits over the draft vocabulary
  only (the same numbers as ModelOpt's full-vocabulary product followed by its column selection, ~12x cheaper).
"""

from __future__ import annotations

import contextlib
import types

import torch

from trtllm_spec.errors import UserError


def convert(model, target_cfg: dict, drafter, draft_vocab_size: int | None = None,
            mask_token_id: int | None = None, offline: bool = False):
    """Convert ``model`` in place (base frozen) and return it. ``offline``: the target's hidden states come with
    the data (the features step, ``data/features``), so ModelOpt drops the target's decoder layers."""
    import modelopt.torch.speculative as mtsp

    from trtllm_spec.drafters.registry import get

    mech = get(drafter.type)
    if mech.modelopt_mode is None:
        raise UserError(f"drafter type {drafter.type} is not trained with ModelOpt (its descriptor names no "
                        "modelopt_mode)")
    try:  # a family ModelOpt's conversion does not read is a refusal naming it, not a traceback
        config = mech.modelopt_config(target_cfg, drafter, draft_vocab_size=draft_vocab_size,
                                      mask_token_id=mask_token_id, offline=offline)
        from trtllm_spec.train.quiet import modelopt_quiet

        with modelopt_quiet():  # its "Found base_model_..." lines: --verbose only
            mtsp.convert(model, [(mech.modelopt_mode, config)])
        mech.modelopt_extend(model, drafter)  # a plugin on the mode (DFlash2 on dflash), inside the refusal above
    except (KeyError, AttributeError, TypeError, ValueError, NotImplementedError, RuntimeError) as exc:
        family = target_cfg.get("model_type", "?")
        raise UserError(f"ModelOpt cannot convert a {family!r} target for a {drafter.type} drafter "
                        f"({type(exc).__name__}: {str(exc)[:160]}); the families it converts here include llama, "
                        "qwen3, qwen3_moe, mixtral and gpt_oss: train on one of those, or give a drafter "
                        "checkpoint (drafter.checkpoint)") from None
    if mech.trtllm_first_layer:
        align_eagle3_first_layer(model)
    return model


# ---- EAGLE-3 -------------------------------------------------------------------------------------------------

def _first_layer_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                         use_cache=False, position_embeddings=None, **kwargs):
    """TensorRT-LLM's first EAGLE-3 layer: attention gets the raw residual stream; ModelOpt's pre-hook on
    ``self_attn`` then builds [input_layernorm(embeddings); hidden_norm(g)]."""
    residual = hidden_states
    attn, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, use_cache=use_cache,
                             position_embeddings=position_embeddings, **kwargs)
    hidden_states = residual + attn
    return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


def align_eagle3_first_layer(model) -> None:
    layer = model.eagle_module.layers[0]
    layer.forward = types.MethodType(_first_layer_forward, layer)


def last_layer_state(model) -> dict[str, torch.Tensor]:
    """The target's last decoder layer and final norm, saved before conversion (offline mode drops the
    layers) so the drafter can start from them."""
    layer = model.model.layers[-1]
    state = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    state["final_norm.weight"] = model.model.norm.weight.detach().clone()
    return state


@torch.no_grad()
def init_eagle3_from_target(model, d2t: torch.Tensor | None, last: dict[str, torch.Tensor], layer: bool = False
                            ) -> None:
    """Start the EAGLE-3 head from the target: always its final norm and the lm_head rows of the draft
    vocabulary (the output space the drafter must hit, learnt for free); with ``layer`` also its last decoder
    layer for the drafter layer (hidden half of q/k/v; the embedding half starts at zero) and an fc that passes
    the last captured layer through. ``last``: ``last_layer_state`` of the target.

    Measured on SmolLM2-135M (benchmarks/drafter_training.md): at CPU budgets (60-120 steps) no start beat
    ModelOpt's random init by more than the measurement noise (AL 1.17-1.23 either way), and copying the last
    layer was worst (the target's last layer expects its own residual stream, not fc's output), so the default
    is ``none``; the options stay for larger targets, where the lm_head is expensive to learn."""
    em = model.eagle_module
    h = model.eagle_config.hidden_size
    if hasattr(em, "norm"):
        em.norm.weight.copy_(last["final_norm.weight"])
    if hasattr(em, "lm_head"):
        rows = torch.arange(em.lm_head.weight.shape[0])
        ids = rows + d2t.to(rows.device) if d2t is not None else rows
        em.lm_head.weight.copy_(model._base_model_lm_head.weight[ids])
    if not layer:
        return
    dec = em.layers[0]
    for name in ("q_proj", "k_proj", "v_proj"):
        w = getattr(dec.self_attn, name).weight
        w.zero_()
        w[:, h:] = last[f"self_attn.{name}.weight"]
    dec.self_attn.o_proj.weight.copy_(last["self_attn.o_proj.weight"])
    for name in ("gate_proj", "up_proj", "down_proj"):
        getattr(dec.mlp, name).weight.copy_(last[f"mlp.{name}.weight"])
    dec.post_attention_layernorm.weight.copy_(last["post_attention_layernorm.weight"])
    dec.hidden_norm.weight.copy_(last["input_layernorm.weight"])
    dec.input_layernorm.weight.fill_(1.0)
    fc = em.fc.weight
    fc.zero_()
    fc[:, -h:] = torch.eye(h, dtype=fc.dtype)


def load_d2t(model, d2t: torch.Tensor) -> None:
    buf = getattr(model.eagle_module, "d2t", None)
    if buf is None:
        return
    if buf.shape != d2t.shape:
        raise UserError(f"d2t has {d2t.numel()} entries, the drafter's draft vocabulary {buf.numel()}")
    buf.copy_(d2t.to(buf.dtype))


# ---- offline training: the target's logits over the draft vocabulary only -------------------------------------

@contextlib.contextmanager
def target_logits_over_draft_vocab(model):
    """While active, an offline EAGLE forward computes the target's logits over the draft vocabulary only.

    Offline, ModelOpt 0.47 rebuilds the distillation target from the stored final hidden states with the target's
    whole lm_head (``hf_eagle.py``: ``base_outputs.logits = self._base_model_lm_head(out_hiddens)``, 49,152 columns
    for SmolLM2) and then keeps the draft vocabulary's columns (``_map_logits_to_draft_vocab``: ``logits[:, :,
    arange + d2t]``). Those columns are the products of the same hidden states with the same lm_head rows, so the
    base lm_head here multiplies by those rows only, and the mapping passes the draft-width result through: the same
    values, 4,096 instead of 49,152 columns (on the CPU default that product was 26% of a training step, 772 ms of
    2.93 s: ``benchmarks/decisions/train_speed.md``). Patched on the instances and restored on exit, so export and inference
    see the untouched model; under FSDP2 the weight is read inside the root's forward, where it is unsharded. A
    no-op for online training or a full-vocabulary drafter."""
    d2t = getattr(getattr(model, "eagle_module", None), "d2t", None)
    full = getattr(getattr(model, "eagle_config", None), "vocab_size", None)
    if not getattr(model, "eagle_offline", False) or d2t is None or full is None or len(d2t) >= full:
        yield
        return
    head = model._base_model_lm_head
    width = len(d2t)

    def draft_columns(hidden):
        rows = torch.arange(width, device=d2t.device) + d2t
        rows = rows.to(head.weight.device)
        bias = head.bias[rows] if head.bias is not None else None
        return torch.nn.functional.linear(hidden, head.weight[rows], bias)

    original = model._map_logits_to_draft_vocab

    def map_logits(logits):
        return logits if logits.shape[-1] == width else original(logits)

    head.forward, model._map_logits_to_draft_vocab = draft_columns, map_logits
    try:
        yield
    finally:
        del head.forward
        del model._map_logits_to_draft_vocab
