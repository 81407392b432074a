"""Convert third-party EAGLE-3 drafters into our layout, and back (so round trips can be tested).

Our layout is the one NVIDIA ModelOpt's ``export_speculative_decoding`` writes and TensorRT-LLM loads
(nvidia-modelopt 0.47.0 ``modelopt/torch/export/plugins/hf_spec_export.py``; NVIDIA/TensorRT-LLM 1.2.1
``tensorrt_llm/_torch/models/modeling_speculative.py``): ``config.json`` with
``architectures: [LlamaForCausalLMEagle3]``, ``draft_vocab_size``
and ``eagle_config``; ``model.safetensors`` with ``fc``, ``layers.0.*``, ``norm``, ``lm_head`` and ``d2t``
(only when the draft vocabulary is smaller). Key maps: docs/converters.md. Sources read (never copied):

* SafeAILab/EAGLE @ cb7e084: ``eagle/model/cnets.py`` (``Model``: ``midlayer`` = the one decoder layer,
  ``fc`` [H, 3 * (target_hidden_size or H)], ``norm``, ``lm_head`` [draft_vocab, H], buffers ``d2t``
  int64 [draft_vocab] and ``t2d`` bool [vocab], frozen ``embed_tokens``); ``eagle/traineagle3/cnets.py``
  (``d2t[i] = used[i] - i``, ``t2d[t] = t in used``); ``eagle/model/ea_model.py`` (reads
  ``pytorch_model.bin``, else ``model.safetensors``); ``eagle/model/modeling_llama_kv.py`` (feeds the
  *inputs* of target layers 2, L//2, L-3 = the outputs of layers 1, L//2-1, L-4, TensorRT-LLM's default;
  no ids are stored).
* vllm-project/speculators @ c05b95b: ``src/speculators/models/eagle3/{config,core,model_definitions}.py``,
  ``src/speculators/model.py`` (``DraftVocabMixin``), ``src/speculators/train/vocab_mapping.py`` (same
  d2t/t2d convention), ``src/speculators/convert/eagle/eagle3_converter.py`` (``midlayer.`` ->
  ``layers.0.``). Layer ids are vLLM's: id i is the *input* of target layer i (HF ``hidden_states[i]``),
  see ``scripts/launch_vllm.py`` and ``src/speculators/convert/dflash/converter.py``; ours = theirs - 1.
* TensorRT-LLM ``tensorrt_llm/_torch/models/modeling_speculative.py``: ``Eagle3DecoderLayer`` takes the
  residual *before* ``hidden_norm`` (so speculators' ``norm_before_residual: true`` cannot be represented);
  a drafter whose ``target_hidden_size`` differs from ``hidden_size`` loads its own ``embed_tokens``.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any, Literal

import torch

from trtllm_spec.core.files import atomic_dir, check_output_dir, read_structured
from trtllm_spec.core.shape import default_capture_layers
from trtllm_spec.errors import UserError

Layout = Literal["ours", "eagle", "speculators"]
LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
         "mlp.up_proj", "mlp.down_proj", "hidden_norm", "input_layernorm", "post_attention_layernorm")
_TOP = {k: k for k in ("fc.weight", "norm.weight", "lm_head.weight", "d2t")}
#: source tensor name -> our tensor name
EAGLE_KEY_MAP = {**{f"midlayer.{n}.weight": f"layers.0.{n}.weight" for n in LAYER}, **_TOP}
SPECULATORS_KEY_MAP = {**{f"layers.0.{n}.weight": f"layers.0.{n}.weight" for n in LAYER}, **_TOP}
#: tensors TensorRT-LLM does not load from our layout: dropped and reported
DROPPED = {
    "t2d": "target->draft mask; ours keeps d2t only (checked to agree with it)",
    "embed_tokens.weight": "embeddings are the target's (TensorRT-LLM shares them)",
    "verifier_lm_head.weight": "speculators training-only copy of the target's head",
    "verifier_norm.weight": "speculators training-only copy of the target's final norm",
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
EAGLE_CONFIG = {"use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
                "use_last_layernorm": True, "use_mtp_layernorm": False, "next_layer_regular": True}
_SPECULATORS_FLAGS = {  # speculators options with no place in TensorRT-LLM's EAGLE-3 layer
    "norm_before_residual": "its residual is taken after hidden_norm, TensorRT-LLM's before",
    "norm_before_fc": "it normalises the captured states before fc (input_norm)",
    "fc_norm": "it normalises each captured state before fc (fc_norm.*)",
    "norm_output": "it feeds post-norm states back between drafting steps",
    "embed_requires_grad": "it trained its own embeddings, while TensorRT-LLM uses the target's",
}


# ---- reading --------------------------------------------------------------------------------------------
def _config(folder: Path) -> dict:
    if not folder.is_dir():
        raise UserError(f"drafter folder {folder} does not exist or is not a folder; check the path")
    cfg = read_structured(folder / "config.json", "drafter config")
    if not isinstance(cfg, dict):
        raise UserError(f"{folder / 'config.json'} is not a JSON object; is it a model config?")
    return cfg


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():  # sharded safetensors (save_pretrained of a large drafter)
        wmap = read_structured(index, "safetensors index")
        names = sorted(set((wmap.get("weight_map") or {}).values())) if isinstance(wmap, dict) else []
        if not names or any(not isinstance(n, str) or Path(n).name != n for n in names):
            raise UserError(f"{index} has no usable weight_map (plain shard names); re-export the drafter")
        return [folder / n for n in names]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return [folder / name]
    if (folder / "pytorch_model.bin.index.json").is_file():
        raise UserError(f"{folder} holds a sharded pickle checkpoint; convert it to safetensors first")
    raise UserError(f"{folder} has neither model.safetensors nor pytorch_model.bin; give the drafter folder")


def _safetensors(f: Path, names_only: bool = False) -> Any:
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    if not f.is_file():
        raise UserError(f"{f} is listed in the safetensors index but missing; re-download the drafter")
    try:
        if names_only:
            with safe_open(str(f), framework="pt") as st:
                return set(st.keys())
        return load_file(str(f))
    except (SafetensorError, OSError, ValueError) as exc:
        raise UserError(f"{f} is not a readable safetensors file ({exc}); re-download or re-export "
                        "it") from None


def load_weights(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """All tensors of a drafter folder and how they were read. Pickles only with ``weights_only=True``."""
    files = _weight_files(folder)
    if files[0].suffix == ".bin":
        how = "torch.load(weights_only=True) of pytorch_model.bin (no safetensors found)"
        return _load_pickle(files[0]), how
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(_safetensors(f))
    return out, "safetensors"


def _load_pickle(path: Path) -> dict[str, torch.Tensor]:
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = (str(exc).strip() or "unsupported object").splitlines()[0]
        raise UserError(f"{path} holds more than plain tensors and is only read with weights_only=True "
                        f"({first}); convert it to safetensors with a tool you trust") from None
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise UserError(f"{path} is not a readable PyTorch checkpoint ({exc}); re-download it") from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                            for k, v in obj.items()):
        raise UserError(f"{path} is not a flat name -> tensor state dict; save the drafter's state_dict()")
    out, seen = {}, set()
    for name, t in obj.items():  # tensors of one pickle may share storage, which safetensors cannot write
        ptr = t.untyped_storage().data_ptr()
        out[name] = t.clone() if ptr and ptr in seen else t
        seen.add(ptr)
    return out


def detect_layout(folder: str | Path) -> Layout:
    """Which EAGLE-3 layout a drafter folder holds: ``ours``, ``eagle`` (SafeAILab) or ``speculators``."""
    folder = Path(folder)
    cfg = _config(folder)
    if "speculators_model_type" in cfg or "speculators_config" in cfg:
        return "speculators"
    if "draft_vocab_size" not in cfg and "eagle_config" not in cfg:
        raise UserError(f"cannot tell the layout of {folder}: config.json has no speculators_model_type "
                        "(speculators), eagle_config (ours) or draft_vocab_size (SafeAILab EAGLE-3); "
                        "EAGLE-1/2 drafters are not converted")
    files = _weight_files(folder)
    if files[0].suffix == ".bin":  # ours is always safetensors
        return "eagle"
    names = set().union(*(_safetensors(f, names_only=True) for f in files))
    midlayer = any(n.startswith("midlayer.") for n in names)
    return "ours" if "eagle_config" in cfg and not midlayer else "eagle"


# ---- checks shared by every direction --------------------------------------------------------------------
def _dims(src: dict, where: str) -> dict:
    """Our config's dimension fields from a flat Llama-style config (SafeAILab's, speculators' inner one)."""
    missing = [k for k in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
               if not isinstance(src.get(k), int)]
    if missing:
        raise UserError(f"{where} lacks {', '.join(missing)}; is it an EAGLE-3 drafter config?")
    if src.get("hidden_act", "silu") != "silu" or src.get("attention_bias") or src.get("mlp_bias"):
        raise UserError(f"{where}: hidden_act {src.get('hidden_act')!r} or biases are not in the Llama "
                        "EAGLE-3 layer TensorRT-LLM builds (silu, no bias)")
    rope = src.get("rope_parameters")  # transformers 5 spelling of rope_theta + rope_scaling
    rope = rope if isinstance(rope, dict) else {}
    scaling = src.get("rope_scaling")
    if scaling is None and (rope.get("rope_type") or "default") != "default":
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    if isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) == "default":
        scaling = None  # transformers 5 / ModelOpt write {"rope_type": "default", ...} for "no scaling"
    heads, hidden = src["num_attention_heads"], src["hidden_size"]
    return {"hidden_size": hidden, "intermediate_size": src["intermediate_size"],
            "num_attention_heads": heads, "num_key_value_heads": src.get("num_key_value_heads") or heads,
            "head_dim": src.get("head_dim") or hidden // heads,
            "num_hidden_layers": src.get("num_hidden_layers", 1),
            "rms_norm_eps": float(src.get("rms_norm_eps", 1e-6)),
            "rope_theta": float(src.get("rope_theta") or rope.get("rope_theta") or 10000.0),
            "rope_scaling": scaling, "vocab_size": src["vocab_size"],
            "max_position_embeddings": src.get("max_position_embeddings", 2048)}


def _stored_dtype(tensors: dict[str, torch.Tensor], cast: str | None, where: str) -> str:
    """The one float dtype of the weights; with ``cast``, convert them all to it first (in place)."""
    if cast is not None:
        if cast not in DTYPES:
            raise UserError(f"dtype {cast!r} is not one of {', '.join(DTYPES)}")
        tensors.update({k: t.to(DTYPES[cast]) for k, t in tensors.items() if t.is_floating_point()})
    found = {str(t.dtype).removeprefix("torch.") for t in tensors.values() if t.is_floating_point()}
    if len(found) != 1 or not found <= set(DTYPES):
        raise UserError(f"{where}: weights are stored as {', '.join(sorted(found)) or 'no float type'}; "
                        f"pass dtype= (one of {', '.join(DTYPES)}) to write them all in one type")
    return found.pop()


def vocab_map(d2t: torch.Tensor | None, t2d: torch.Tensor | None, vocab: int, draft_vocab: int,
              where: str) -> torch.Tensor | None:
    """Our ``d2t`` offsets (int64; None for a full draft vocabulary), checked against ``t2d`` if given."""
    if draft_vocab == vocab:
        if d2t is not None and bool(d2t.any()):
            raise UserError(f"{where}: d2t is not all zero although draft_vocab_size equals vocab_size; "
                            "TensorRT-LLM would ignore it, so the drafter cannot be converted faithfully")
        return None
    if not 0 < draft_vocab < vocab:
        raise UserError(f"{where}: draft_vocab_size {draft_vocab} must be in 1..vocab_size ({vocab})")
    if d2t is None and t2d is None:
        raise UserError(f"{where}: draft_vocab_size {draft_vocab} < vocab_size {vocab} but there is no d2t "
                        "or t2d to map draft ids to target ids; the checkpoint is incomplete")
    chosen = None
    if t2d is not None:
        if t2d.shape != (vocab,) or not (t2d.dtype == torch.bool or bool(((t2d == 0) | (t2d == 1)).all())):
            raise UserError(f"{where}: t2d must be a boolean mask of shape [{vocab}], not {t2d.dtype} "
                            f"{list(t2d.shape)}")
        chosen = t2d.bool().nonzero().flatten()
        if chosen.numel() != draft_vocab:
            raise UserError(f"{where}: t2d marks {chosen.numel()} target tokens, draft_vocab_size is "
                            f"{draft_vocab}")
        d2t = chosen - torch.arange(draft_vocab) if d2t is None else d2t
    if d2t.shape != (draft_vocab,) or d2t.is_floating_point() or d2t.dtype == torch.bool:
        raise UserError(f"{where}: d2t must hold {draft_vocab} integer offsets, not {d2t.dtype} "
                        f"{list(d2t.shape)}")
    targets = torch.arange(draft_vocab) + d2t.long()
    bad = targets[(targets < 0) | (targets >= vocab)]
    if bad.numel():
        raise UserError(f"{where}: d2t maps {bad.numel()} draft ids outside the target vocabulary (e.g. to "
                        f"{int(bad[0])}); d2t must hold offsets (target = draft + d2t[draft])")
    if targets.unique().numel() != draft_vocab:
        raise UserError(f"{where}: d2t maps {draft_vocab - targets.unique().numel()} draft ids onto target "
                        "ids already taken; each draft id needs its own target id")
    if chosen is not None and not torch.equal(targets.sort().values, chosen):
        raise UserError(f"{where}: t2d and d2t disagree on which target tokens are in the draft vocabulary; "
                        "the checkpoint is inconsistent")
    return d2t.long()


def check_drafter(cfg: dict, tensors: dict[str, torch.Tensor], where: str) -> None:
    """Our layout's invariants: one layer, shapes implied by config.json, fc width, d2t. Raises UserError. The
    one layer may be named ``midlayer.`` (what a bundle ships for TensorRT-LLM) as well as ``layers.0.``."""
    if any(k.startswith("midlayer.") for k in tensors) and not any(k.startswith("layers.0.") for k in tensors):
        tensors = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v
                   for k, v in tensors.items()}
    c = {**cfg, **_dims(cfg, where)}
    h, inter, hd, dv, vocab = (c["hidden_size"], c["intermediate_size"], c["head_dim"],
                               c.get("draft_vocab_size"), c["vocab_size"])
    if not isinstance(dv, int):
        raise UserError(f"{where}: draft_vocab_size {dv!r} is not an integer")
    if c["num_hidden_layers"] != 1:
        raise UserError(f"{where}: {c['num_hidden_layers']} drafter layers; only 1-layer drafters convert")
    ht = c.get("target_hidden_size") or h
    ids = (c.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0]
    q, kv, p = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd, "layers.0."
    shapes = {"fc.weight": (h, len(ids) * ht), p + "self_attn.q_proj.weight": (q, 2 * h),
              p + "self_attn.k_proj.weight": (kv, 2 * h), p + "self_attn.v_proj.weight": (kv, 2 * h),
              p + "self_attn.o_proj.weight": (h, q), p + "mlp.gate_proj.weight": (inter, h),
              p + "mlp.up_proj.weight": (inter, h), p + "mlp.down_proj.weight": (h, inter),
              **{f"{p}{n}.weight": (h,) for n in LAYER[7:]},  # the three norms
              "norm.weight": (h,), "lm_head.weight": (dv, h), "embed_tokens.weight": (vocab, h)}
    optional = {"lm_head.weight"} if dv == vocab else set()  # TensorRT-LLM then takes the target's
    optional |= {"embed_tokens.weight"} if ht == h else set()
    for name, shape in shapes.items():
        t = tensors.get(name)
        if t is None and name not in optional:
            raise UserError(f"{where}: tensor {name} is missing; the checkpoint is incomplete")
        if t is not None and tuple(t.shape) != shape and name == "fc.weight":
            raise UserError(f"{where}: fc.weight has shape {list(t.shape)}; expected {list(shape)} "
                            f"({len(ids)} captured layers x target hidden {ht}); the drafter does not fit "
                            "its config or target")
        if t is not None and tuple(t.shape) != shape:
            raise UserError(f"{where}: {name} has shape {list(t.shape)}, config.json implies {list(shape)} "
                            f"(hidden {h}, heads {c['num_attention_heads']}/{c['num_key_value_heads']}, "
                            f"head_dim {hd}, intermediate {inter}); fix the config or the weights")
    extra = sorted(set(tensors) - set(shapes) - {"d2t"})
    if extra:
        raise UserError(f"{where}: tensors {', '.join(extra[:5])} are not part of the EAGLE-3 layout")
    if vocab_map(tensors.get("d2t"), None, vocab, dv, where) is None and "d2t" in tensors:
        raise UserError(f"{where}: d2t is present although draft_vocab_size equals vocab_size; drop it")


def _apply_target(cfg: dict, target_config: dict | None, notes: list[str]) -> int | None:
    """Check a drafter config against the target's; raise max_position_embeddings to the target's.

    Returns the target's layer count (None when unknown)."""
    if not target_config:
        return None
    from trtllm_spec.core.shape import text_config

    t = text_config(target_config)
    for key, mine in (("hidden_size", cfg.get("target_hidden_size") or cfg["hidden_size"]),
                      ("vocab_size", cfg["vocab_size"])):
        if t.get(key) is not None and t[key] != mine:
            raise UserError(f"the drafter expects target {key} {mine}, the target config has {t[key]}: it "
                            "was trained for another target")
    if (t.get("max_position_embeddings") or 0) > cfg["max_position_embeddings"]:
        notes.append(f"max_position_embeddings raised from {cfg['max_position_embeddings']} to the target's "
                     f"{t['max_position_embeddings']}")
        cfg["max_position_embeddings"] = t["max_position_embeddings"]
    layers = t.get("num_hidden_layers")
    ids = cfg["eagle_config"].get("eagle_aux_hidden_state_layer_ids") or []
    if layers is not None and any(not 0 <= i < layers for i in ids):
        raise UserError(f"captured layer ids {ids} are outside the target's {layers} layers: wrong target?")
    return layers


# ---- foreign layouts -> ours ------------------------------------------------------------------------------
def _map_names(tensors: dict, key_map: dict, where: str, info: dict) -> dict[str, torch.Tensor]:
    out, unknown = {}, []
    for name, t in tensors.items():
        if name in key_map:
            if key_map[name] in out:
                raise UserError(f"{where}: {name} and another tensor both map to {key_map[name]}; mixed "
                                "layouts")
            out[key_map[name]] = t
            info["tensors_mapped"][name] = key_map[name]
        elif name in DROPPED:
            info["dropped"][name] = DROPPED[name]
        else:
            unknown.append(name)
    if unknown:
        raise UserError(f"{where}: tensors {', '.join(sorted(unknown)[:5])} have no place in the EAGLE-3 "
                        "layout TensorRT-LLM loads (biases, extra norms or layers?); not converting")
    return out


def _speculators_header(cfg: dict, where: str, notes: list[str]) -> tuple[dict, Any, list[int] | None]:
    """(our dims, draft vocab size, our layer ids) from a speculators config."""
    if cfg.get("speculators_model_type") != "eagle3":
        raise UserError(f"{where} is a speculators {cfg.get('speculators_model_type')!r} model; only eagle3 "
                        "converts to EAGLE-3")
    for flag, why in _SPECULATORS_FLAGS.items():
        if cfg.get(flag):
            raise UserError(f"{where} sets {flag}: true ({why}); TensorRT-LLM's EAGLE-3 layer cannot run it "
                            "as trained")
    inner = cfg.get("transformer_layer_config")
    if not isinstance(inner, dict) or inner.get("model_type") != "llama":
        kind = inner.get("model_type") if isinstance(inner, dict) else inner
        raise UserError(f"{where}: transformer_layer_config must be a Llama layer (model_type llama), not "
                        f"{kind!r}")
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids:
        if any(not isinstance(i, int) or i < 1 for i in ids):
            raise UserError(f"{where}: eagle_aux_hidden_state_layer_ids {ids} must be integers >= 1 (vLLM "
                            "numbering: id i is the input of layer i; 0 would be the embeddings)")
        notes.append(f"layer ids {ids} (vLLM: inputs of layers) -> {sorted(i - 1 for i in ids)} (outputs)")
        ids = sorted(i - 1 for i in ids)
    verifier = ((cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    if verifier:
        notes.append(f"trained for verifier {verifier}")
    # 32000 is speculators' own default for a missing draft_vocab_size
    return _dims(inner, f"{where} transformer_layer_config"), cfg.get("draft_vocab_size", 32000), ids


def _read_foreign(folder: Path, layout: Layout, target_config: dict | None, dtype: str | None,
                  info: dict) -> tuple[dict, dict[str, torch.Tensor]]:
    cfg, where, notes = _config(folder), str(folder), info["notes"]
    if layout == "speculators":
        dims, draft_vocab, ids = _speculators_header(cfg, where, notes)
        key_map = SPECULATORS_KEY_MAP
    else:  # SafeAILab: a flat Llama config; tensors under midlayer. (or already layers.0.)
        dims, draft_vocab = _dims(cfg, f"{where}/config.json"), cfg.get("draft_vocab_size")
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        key_map = {**SPECULATORS_KEY_MAP, **EAGLE_KEY_MAP}
    if not isinstance(draft_vocab, int):
        raise UserError(f"{where}: draft_vocab_size {draft_vocab!r} is not an integer")
    raw, info["loaded_with"] = load_weights(folder)
    target_hidden = cfg.get("target_hidden_size")
    own_embed = bool(target_hidden) and target_hidden != dims["hidden_size"]
    tensors = _map_names({k: v for k, v in raw.items() if not (own_embed and k == "embed_tokens.weight")},
                         key_map, where, info)
    if own_embed and "embed_tokens.weight" in raw:  # TensorRT-LLM gives such a drafter its own embeddings
        tensors["embed_tokens.weight"] = raw["embed_tokens.weight"]
        info["tensors_mapped"]["embed_tokens.weight"] = "embed_tokens.weight"
    d2t = vocab_map(tensors.pop("d2t", None), raw.get("t2d"), dims["vocab_size"], draft_vocab, where)
    if d2t is None:
        info["tensors_mapped"].pop("d2t", None)
        info["dropped"].update({k: "identity (draft vocabulary = target vocabulary)"
                                for k in ("d2t", "t2d") if k in raw})
    else:
        tensors["d2t"] = d2t
        if "d2t" not in raw:
            del info["dropped"]["t2d"]
            info["tensors_mapped"]["t2d"] = "d2t (offsets derived from the mask)"
    inner = cfg.get("transformer_layer_config") or {}
    declared = cfg.get("torch_dtype") or inner.get("torch_dtype") or inner.get("dtype")
    stored = _stored_dtype(tensors, dtype, where)
    if declared and declared != stored:
        notes.append(f"config said torch_dtype {declared}, the weights are {stored}: ours says {stored}")
    tc = target_config or {}
    from trtllm_spec.core.shape import text_value

    layers = text_value(tc, "num_hidden_layers")
    ids = ids or (default_capture_layers(layers) if isinstance(layers, int) else None)
    if not ids:
        notes.append("no capture layer ids known (pass target_config): TensorRT-LLM will use {1, L/2-1, L-4}")
    out_cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **dims,
               "draft_vocab_size": draft_vocab, "tie_word_embeddings": False, "torch_dtype": stored}
    if own_embed:
        out_cfg["target_hidden_size"] = target_hidden
    out_cfg["eagle_config"] = {**({"eagle_aux_hidden_state_layer_ids": sorted(ids)} if ids else {}),
                               **EAGLE_CONFIG}
    _apply_target(out_cfg, target_config, notes)
    return out_cfg, tensors


def _write(folder: Path, cfg: dict, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")


def _provenance(folder: Path, src: Path) -> None:
    """What was converted from where (also what marks the folder as ours for a later ``force``)."""
    from trtllm_spec.core.files import write_json_atomic
    from trtllm_spec.core.provenance import package_versions

    # the source's folder name only: a drafter travels into bundles, which carry no paths of the build machine
    write_json_atomic(folder / "provenance.json", {"converted_from": Path(src).name, "versions": package_versions()})


def convert_drafter(src: str | Path, out: str | Path, fmt: Literal["eagle", "speculators", "auto"] = "auto",
                    target_config: dict | None = None, *, force: bool = False,
                    dtype: str | None = None) -> dict:
    """Convert a SafeAILab (``eagle``) or ``speculators`` EAGLE-3 drafter in ``src`` to our layout in ``out``.

    ``target_config`` (the target's config.json as a dict) checks hidden/vocab sizes and gives the default
    captured layers; ``dtype`` casts all float weights. Returns a summary of what was mapped and dropped.
    """
    src, out = Path(src), Path(out)
    if fmt not in ("eagle", "speculators", "auto"):
        raise UserError(f"format {fmt!r} is not one of eagle, speculators, auto")
    found = detect_layout(src)
    if found == "ours":
        raise UserError(f"{src} is already in our layout; nothing to convert")
    if fmt != "auto" and fmt != found:
        raise UserError(f"{src} looks like the {found} layout, not {fmt}; pass fmt='auto' or the right "
                        "folder")
    check_output_dir(out, force, (src,))  # fail before reading gigabytes
    info: dict[str, Any] = {"layout": found, "source": str(src), "out": str(out), "tensors_mapped": {},
                            "dropped": {}, "notes": []}
    cfg, tensors = _read_foreign(src, found, target_config, dtype, info)
    check_drafter(cfg, tensors, str(src))
    with atomic_dir(out, force, (src,)) as tmp:
        _write(tmp, cfg, tensors)
        _provenance(tmp, src)
    return {**info, "dtype": cfg["torch_dtype"], "draft_vocab_size": cfg["draft_vocab_size"],
            "vocab_size": cfg["vocab_size"],
            "aux_hidden_state_layer_ids": cfg["eagle_config"].get("eagle_aux_hidden_state_layer_ids")}
