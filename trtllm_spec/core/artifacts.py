"""Typed artifacts passed between stages. Each one's ``to_json()`` is the JSON the stage has always written,
so files and golden outputs do not change when the code reads a field instead of a dict key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# How the drafter stage obtained the drafter (one vocabulary for `train` and `build`):
#   none        the mechanism needs no model (n-gram)
#   native      the target's own layers (native MTP)
#   reused      drafter.checkpoint, a local exported folder
#   hub         drafter.checkpoint, a hub id TensorRT-LLM downloads when serving (build only)
#   converted   drafter.convert_from, a third-party layout converted to the export layout
#   draft_model an external draft model (drafter.model)
#   trained     trained with ModelOpt and exported here
#   deferred    training needs the target's weights, which are not here (build only)
DrafterKind = Literal["none", "native", "reused", "hub", "converted", "draft_model", "trained", "deferred"]


@dataclass(frozen=True)
class DrafterResult:
    kind: DrafterKind
    drafter_dir: Path | None
    summary: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "drafter_dir": str(self.drafter_dir) if self.drafter_dir else None,
                "summary": self.summary}
