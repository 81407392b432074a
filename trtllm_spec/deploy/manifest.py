"""manifest.json: what a bundle is made of and from (resolved recipe, versions, planner inputs, stage
statuses, command line) and the sha256 of every file; ``verify`` recomputes and reports any difference."""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_spec.core.files import sha256_file
from trtllm_spec.core.provenance import hash_tree
from trtllm_spec.errors import UserError

MANIFEST = "manifest.json"
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


# folders the bundle's own scripts write into it (bench.sh, bench_speculative.sh, replan.sh): not bundle content
RUNTIME_OUTPUTS = ("bench_results", "bench_results_speculative", "bench_results_plain", "replan")


def write_manifest(bundle: Path, body: dict) -> dict:
    manifest = {"schema": SCHEMA, **body, "files": hash_tree(bundle, exclude=(MANIFEST,))}
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest


def verify_bundle(bundle: Path) -> dict:
    """{'ok': bool, 'changed': [...], 'missing': [...], 'extra': [...]}; UserError when there is no manifest."""
    path = bundle / MANIFEST
    if not bundle.is_dir():
        raise UserError(f"{bundle} is not a folder; give a bundle written by 'trtllm-spec build'")
    if not path.is_file():
        raise UserError(f"{bundle} has no {MANIFEST}; is it a bundle written by 'trtllm-spec build'?")
    try:
        manifest = json.loads(path.read_text())
        recorded: dict[str, str] = manifest["files"]
        if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
            raise TypeError(recorded)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise UserError(f"{path} is not a valid manifest (unreadable, or 'files' is not a {{path: sha256}} table); "
                        "rebuild the bundle") from None
    actual = {p.relative_to(bundle).as_posix(): p for p in bundle.rglob("*")
              if p.is_file() and p.relative_to(bundle).as_posix() != MANIFEST
              and p.relative_to(bundle).parts[0] not in RUNTIME_OUTPUTS}
    missing = sorted(set(recorded) - set(actual))
    extra = sorted(set(actual) - set(recorded))
    changed = sorted(k for k in set(recorded) & set(actual) if sha256_file(actual[k]) != recorded[k])
    return {"ok": not (missing or extra or changed), "changed": changed, "missing": missing, "extra": extra,
            "files": len(recorded)}
