"""Provenance recorded with every output folder: resolved recipe, package versions, hashes, command line."""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path

from trtllm_spec import __version__
from trtllm_spec.core.files import sha256_file

PACKAGES = ("trtllm-spec", "pydantic", "numpy", "click", "torch", "transformers", "nvidia-modelopt",
            "safetensors", "tritonclient", "tensorrt_llm")


def package_versions() -> dict[str, str | None]:
    """Installed versions, read from metadata (never imports the packages)."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["trtllm-spec"] = __version__
    return out


_COMMAND: list[str] | None = None


def set_command(args: list[str]) -> None:
    """Record the command line the CLI was invoked with (the CLI calls this; tests get their own args)."""
    global _COMMAND
    _COMMAND = ["trtllm-spec", *args]


def command_line() -> str:
    argv = list(_COMMAND) if _COMMAND is not None else [Path(sys.argv[0]).name, *sys.argv[1:]]
    return " ".join(shlex.quote(a) for a in argv)


def file_hashes(paths: list[Path], root: Path | None = None) -> dict[str, str]:
    out = {}
    for p in paths:
        if p.is_file():
            key = str(p.relative_to(root)) if root and p.is_relative_to(root) else str(p)
            out[key] = sha256_file(p)
    return out


def provenance(recipe: dict | None = None, inputs: list[Path] | None = None, extra: dict | None = None) -> dict:
    return {
        "created_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command_line(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "versions": package_versions(),
        "recipe": recipe,
        "inputs": file_hashes(inputs or []),
        **(extra or {}),
    }


def hash_tree(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative POSIX paths), except ``exclude``."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in exclude:
            out[rel] = sha256_file(p)
    return out
