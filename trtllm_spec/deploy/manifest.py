"""manifest.json: what a bundle is made of and from (resolved recipe, versions, planner inputs, stage
statuses, command line) and the sha256 of every file; ``verify`` recomputes and reports any difference."""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_spec.core.bundle import MANIFEST, RUNTIME_OUTPUTS, _bundle_files, verify_bundle  # noqa: F401
from trtllm_spec.core.provenance import hash_tree

SCHEMA = "trtllm-spec/bundle/v1"


TEXT_SUFFIXES = {".json", ".yaml", ".yml", ".md", ".sh", ".pbtxt", ".txt", ".sbatch", ".jsonl"}


def redact_text(text: str, prefixes: dict[str, str]) -> str:
    for prefix, token in sorted(((str(Path(k)), v) for k, v in prefixes.items() if k and len(str(k)) > 1),
                                key=lambda kv: -len(kv[0])):
        text = text.replace(prefix, token)
    return text


def redact_tree(bundle: Path, prefixes: dict[str, str]) -> int:
    """Replace absolute paths of the build machine in every text file of the bundle by placeholders
    (``<home>``, ``<cache>``, ...): a bundle travels and carries nothing of the machine that built it."""
    changed = 0
    for p in bundle.rglob("*"):
        if not p.is_file() or p.suffix not in TEXT_SUFFIXES:
            continue
        text = p.read_text(encoding="utf-8", errors="strict")
        new = redact_text(text, prefixes)
        if new != text:
            p.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def write_manifest(bundle: Path, body: dict) -> dict:
    manifest = {"schema": SCHEMA, **body, "files": hash_tree(bundle, exclude=(MANIFEST,))}
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest
