"""Resolve what a recipe or flag calls a target: a checkpoint path, a fetched asset, or a preset.

Order: an existing path (as given, then relative to the recipe), a fetched asset in the cache
(``trtllm-spec assets fetch``), a built-in preset name or its HF id. Presets are shape data only.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from trtllm_spec.core.shape import ModelShape, load_config_json, shape_from_config
from trtllm_spec.errors import ShapeError

# model assets ``trtllm-spec assets fetch`` can provide, and the preset with the same shape
MODEL_ASSET_PRESETS = {"smollm2-135m": "smollm2-135m-instruct", "smollm2-135m-bf16": "smollm2-135m-instruct"}


def cache_dir() -> Path:
    """Where assets live: ``$TRTLLM_SPEC_CACHE`` or ``~/.cache/trtllm-spec``."""
    return Path(os.environ.get("TRTLLM_SPEC_CACHE") or Path.home() / ".cache" / "trtllm-spec").expanduser()


@dataclass(frozen=True)
class ResolvedTarget:
    spec: str
    kind: str  # "path" | "asset" | "preset"
    shape: ModelShape
    path: Path | None  # the HF folder (or config.json) for "path" and "asset"
    hf_id: str | None
    config: dict

    @property
    def has_weights(self) -> bool:
        return self.path is not None and self.path.is_dir() and any(self.path.glob("*.safetensors"))


@lru_cache(maxsize=1)
def _presets() -> dict[str, dict]:
    out = {}
    folder = resources.files("trtllm_spec.core") / "presets"
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            out[data["_preset"]["name"]] = data
    return out


def preset_names() -> list[str]:
    return sorted(_presets())


def preset_config(name: str) -> dict | None:
    presets = _presets()
    key = name.lower()
    if key in presets:
        return presets[key]
    for data in presets.values():
        if data["_preset"]["hf_id"].lower() == key:
            return data
    # short aliases: a name that is the prefix of exactly one preset
    matches = [k for k in presets if k.startswith(key)]
    return presets[matches[0]] if len(matches) == 1 else None


def asset_dir(name: str) -> Path | None:
    """The HF folder of a fetched model asset (``smollm2-135m``, ``smollm2-135m-bf16``), if present."""
    base, sub = (name[: -len("-bf16")], "hf-bf16") if name.endswith("-bf16") else (name, "hf")
    folder = cache_dir() / "models" / base / sub
    return folder if (folder / "config.json").is_file() else None


def resolve_target(spec: str, base_dir: Path | None = None) -> ResolvedTarget:
    p = Path(spec).expanduser()
    candidates = [p] if p.is_absolute() else [p, *([base_dir / p] if base_dir else [])]
    for c in candidates:
        if c.exists():
            cfg, cfg_path = load_config_json(c)
            shape = shape_from_config(cfg, name=c.name if c.is_dir() else c.parent.name, source=str(cfg_path))
            return ResolvedTarget(spec, "path", shape, c, cfg.get("_name_or_path"), cfg)
    asset = asset_dir(spec)
    if asset is not None:
        cfg, cfg_path = load_config_json(asset)
        return ResolvedTarget(spec, "asset", shape_from_config(cfg, name=spec, source=str(cfg_path)), asset,
                              cfg.get("_name_or_path"), cfg)
    data = preset_config(spec)
    if data is not None:
        meta = data["_preset"]
        cfg = {k: v for k, v in data.items() if k != "_preset"}
        shape = shape_from_config(cfg, name=meta["name"], source=f"preset {meta['name']} ({meta['source']})")
        return ResolvedTarget(spec, "preset", shape, None, meta["hf_id"], cfg)
    looks_like_path = spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") > 1
    near = difflib.get_close_matches(spec.lower(), preset_names(), n=1, cutoff=0.5)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    what = f"path {spec} does not exist" if looks_like_path else f"{spec!r} is not a path, fetched asset or preset"
    raise ShapeError(f"target: {what}. Presets: {', '.join(preset_names())}; fetched assets: "
                     f"'trtllm-spec assets list'.{hint}")


def resolve_shape(spec: str, base_dir: Path | None = None) -> ModelShape:
    return resolve_target(spec, base_dir).shape


# config.json keys that name or stamp a checkpoint without changing the model it holds
_CONFIG_STAMPS = ("_name_or_path", "transformers_version")


def config_sha256(cfg: dict) -> str:
    """The sha256 of a checkpoint's config (sorted JSON, without ``_CONFIG_STAMPS``): the same model under any
    folder name or copy (a bundle's ``target/``, a fetched asset, the user's folder) has the same one."""
    import hashlib

    body = {k: v for k, v in cfg.items() if k not in _CONFIG_STAMPS}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class TargetIdentity:
    """What a target name resolves to: ``key`` (``config.json sha256 ...`` for a checkpoint folder or fetched
    asset; None for a preset or a name that resolves to nothing here, which only names can be compared on) and a
    ``label`` naming the resolution for messages."""

    key: str | None
    label: str


def target_identity(spec: str | None, path: str | None = None, config_hash: str | None = None,
                    base_dir: Path | None = None) -> TargetIdentity:
    """The identity of a target given as ``spec`` (a path, fetched asset or preset name), its resolved folder
    ``path`` where one was recorded, or the ``config_hash`` recorded with it (``config_sha256``); the first of these
    that resolves here wins, in the order hash, path, spec."""
    if config_hash:
        return TargetIdentity(f"config.json sha256 {config_hash}", f"{path or spec} (config.json sha256 "
                                                                    f"{config_hash[:12]}, as recorded)")
    for given in (path, spec):
        if not given:
            continue
        try:
            t = resolve_target(str(given), base_dir)
        except (ShapeError, OSError):
            continue
        if t.path is not None and isinstance(t.config, dict) and t.config:
            h = config_sha256(t.config)
            return TargetIdentity(f"config.json sha256 {h}", f"{t.path} (config.json sha256 {h[:12]})")
        if t.kind == "preset":
            return TargetIdentity(None, f"preset {t.shape.name} ({t.hf_id})")
    return TargetIdentity(None, f"{spec or path!r} (not found here)")
