"""Export a trained drafter with ModelOpt's ``export_speculative_decoding`` and correct the known gotchas:

- ``torch_dtype`` must equal the stored tensors' dtype (ModelOpt writes bfloat16 while EAGLE weights stay
  fp32): we cast floating tensors to the requested dtype and declare exactly that;
- no rope scaling unless asked (ModelOpt injects YaRN x32 unless ``*_export_rope_scaling={}``);
- ``draft_vocab_size`` always present (TensorRT-LLM 1.x detects EAGLE-3 by it);
- only tokenizer-independent files (config.json, model.safetensors) plus our ``trtllm_spec_drafter.json``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from trtllm_spec.core.artifacts import META_FILE, read_meta  # noqa: F401  (read_meta: re-exported)
from trtllm_spec.core.files import write_json_atomic

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def export_drafter(model, out: Path, dtype: str, meta: dict, state_dict: dict | None = None,
                   finish_config=None) -> None:
    """Write the deployment folder into ``out`` (which must be an empty, fresh folder). ``state_dict``: the full
    tensors to export instead of ``model.state_dict()`` (an FSDP-sharded model, gathered by
    ``train.distributed.export_state``). ``finish_config``: the mechanism's rewrite of the exporter's config.json
    (``Mechanism.exported_config``, e.g. DFlash's as DFlash2's)."""
    from modelopt.torch.export import export_speculative_decoding
    from safetensors.torch import load_file, save_file

    from trtllm_spec.train.quiet import modelopt_quiet

    with tempfile.TemporaryDirectory() as tmp:
        if state_dict is not None:  # ModelOpt's exporter reads model.state_dict(); give it the gathered tensors
            model.state_dict = lambda *a, **k: state_dict
        try:
            with modelopt_quiet():
                export_speculative_decoding(model, export_dir=tmp)
        finally:
            if state_dict is not None:
                del model.state_dict
        tensors = load_file(str(Path(tmp) / "model.safetensors"))
        cfg = json.loads((Path(tmp) / "config.json").read_text())
    target_dtype = DTYPES[dtype]
    fixed = {k: (v.to(target_dtype) if v.is_floating_point() else v).contiguous() for k, v in tensors.items()}
    if finish_config is not None:
        cfg = finish_config(cfg)
    cfg["torch_dtype"] = DTYPE_NAMES[target_dtype]
    cfg.pop("dtype", None)
    if "rope_scaling" in cfg and not meta.get("rope_scaling"):
        cfg["rope_scaling"] = None
    if cfg.get("architectures") == ["LlamaForCausalLMEagle3"] or "eagle_config" in cfg:
        cfg.setdefault("draft_vocab_size", cfg.get("vocab_size"))
        if cfg.get("draft_vocab_size") is None:
            cfg["draft_vocab_size"] = cfg.get("vocab_size")
    out.mkdir(parents=True, exist_ok=True)
    save_file(fixed, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_json_atomic(out / META_FILE, meta)


