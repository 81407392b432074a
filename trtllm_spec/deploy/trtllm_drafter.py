"""The drafter folder a bundle ships, in the tensor names TensorRT-LLM loads (docs/trtllm_compat.md, "Weights").

The descriptor says which names to rewrite (``Mechanism.trtllm_tensor_renames``); this module rewrites the
safetensors files (and the shard index) of the bundle's copy in place. Our own export keeps ModelOpt's names,
so ``train`` / ``doctor`` / ``measure`` read either form.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_spec.errors import UserError


def renamed(name: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def rename_tensors(folder: Path, renames: dict[str, str]) -> list[str]:
    """Rewrite every ``*.safetensors`` in ``folder`` with ``renames`` (prefix -> prefix) applied to tensor names,
    keeping dtypes and file metadata; returns the files rewritten. A name that would collide is an error."""
    if not renames:
        return []
    from safetensors import safe_open
    from safetensors.torch import save_file

    done = []
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
            if all(renamed(k, renames) == k for k in names):
                continue
            meta = f.metadata()
            tensors = {renamed(k, renames): f.get_tensor(k) for k in names}
        if len(tensors) != len(names):
            raise UserError(f"{path}: renaming {renames} makes two tensors share a name; the checkpoint mixes "
                            "both layouts")
        tmp = path.with_name(path.name + ".partial")
        save_file(tensors, str(tmp), metadata=meta)
        tmp.replace(path)
        done.append(path.name)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        doc = json.loads(index.read_text())
        doc["weight_map"] = {renamed(k, renames): v for k, v in (doc.get("weight_map") or {}).items()}
        index.write_text(json.dumps(doc, indent=2) + "\n")
    return done
