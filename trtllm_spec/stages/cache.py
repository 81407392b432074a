"""Stage outputs cached by a hash of their inputs, outside the bundle (so a rebuild reuses them even though
the bundle itself is rewritten atomically). ``<cache>/stages/<stage>-<hash>/`` with ``stage.json`` last."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from trtllm_spec.core.files import write_json_atomic
from trtllm_spec.core.targets import cache_dir


def stage_key(stage: str, inputs: dict) -> str:
    blob = json.dumps({"stage": stage, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


class StageCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_dir()) / "stages"

    def folder(self, stage: str, key: str) -> Path:
        return self.root / f"{stage}-{key}"

    def done(self, stage: str, key: str) -> dict | None:
        meta = self.folder(stage, key) / "stage.json"
        return json.loads(meta.read_text()) if meta.is_file() else None

    def start(self, stage: str, key: str, force: bool) -> Path:
        """A folder to work in; ``force`` wipes a previous result. Partial work (no stage.json) is kept so
        resumable stages (training) continue."""
        folder = self.folder(stage, key)
        if force and folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def finish(self, stage: str, key: str, record: dict) -> dict:
        write_json_atomic(self.folder(stage, key) / "stage.json", record)
        return record


def run_cached(cache: StageCache, stage: str, inputs: dict, force: bool,
               work: Callable[[Path], dict]) -> tuple[Path, dict, bool]:
    """The one cache protocol every cached stage follows: key -> folder -> done? -> start -> work -> finish.

    ``work(folder)`` writes the stage's output under ``folder`` and returns the record kept in ``stage.json``
    (written last, so an interrupted stage is never taken as done). Returns (folder, record, cached)."""
    key = stage_key(stage, inputs)
    folder = cache.folder(stage, key)
    if not force:
        record = cache.done(stage, key)
        if record is not None:
            return folder, record, True
    cache.start(stage, key, force)
    record = work(folder)
    cache.finish(stage, key, record)
    return folder, record, False
