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
RUNTIME_OUTPUTS = ("bench_results", "bench_results_speculative", "bench_results_plain", "bench_results_calibrate",
                   "replan")


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
    actual, links = _bundle_files(bundle)
    missing = sorted(set(recorded) - set(actual) - set(links))
    extra = sorted(set(actual) - set(recorded))
    changed = sorted(k for k in set(recorded) & set(actual) if sha256_file(actual[k]) != recorded[k])
    return {"ok": not (missing or extra or changed or links), "changed": changed, "missing": missing,
            "extra": extra, "symlinks": links, "files": len(recorded)}


def _bundle_files(bundle: Path) -> tuple[dict[str, Path], list[str]]:
    """(regular files by relative path, symlinks) under ``bundle``, walked without following links: a bundle
    holds plain files only (``build`` writes no link), so every link, to a file or a folder, inside or outside
    the bundle, identical content or not, is a difference (the files a linked folder shows are not counted as
    the bundle's)."""
    import os

    files: dict[str, Path] = {}
    links: list[str] = []
    for dirpath, dirnames, filenames in os.walk(bundle, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(bundle)
        if rel_dir.parts and rel_dir.parts[0] in RUNTIME_OUTPUTS:
            dirnames[:] = []
            continue
        for name in list(dirnames):
            if not rel_dir.parts and name in RUNTIME_OUTPUTS:
                dirnames.remove(name)  # what the bundle's scripts write (a link to scratch space too)
            elif (here / name).is_symlink():
                links.append((rel_dir / name).as_posix())
                dirnames.remove(name)
        for name in filenames:
            p = here / name
            rel = (rel_dir / name).as_posix()
            if rel == MANIFEST or (not rel_dir.parts and name in RUNTIME_OUTPUTS):
                continue
            if p.is_symlink():
                links.append(rel)
            elif p.is_file():
                files[rel] = p
    return files, sorted(links)
