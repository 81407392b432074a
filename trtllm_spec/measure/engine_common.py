"""What the two readers of the engine's own numbers share (``engine_reports``: trtllm-bench reports;
``iteration_stats``: trtllm-serve iteration stats): the speculative options they are checked against, the number
test and the profile they both build. Its own module so that neither reader imports the other's privates (the
import graph has no cycle: ``tests/unit/test_dependencies.py``)."""

from __future__ import annotations

import math
from pathlib import Path

from trtllm_spec.core.bundle import Bundle
from trtllm_spec.core.releases import tag_type, tag_types
from trtllm_spec.measure.profile import acceptance_kind


def finite_number(x: object) -> bool:
    """A JSON number (not a bool) that is finite."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def sha256_of(path: Path) -> str:
    from trtllm_spec.core.files import sha256_file

    return sha256_file(path)


def options_type(options: dict | None, bundle: Bundle | None = None) -> str | None:
    """Our drafter type for the options' ``speculative_config.decoding_type`` (None: none or unknown). Where
    several mechanisms share the tag, the bundle's record of its drafter type says which (``bundle``: the bundle
    the options come from; without one a shared tag is refused, never guessed)."""
    spec = (options or {}).get("speculative_config") or {}
    tag = spec.get("decoding_type")
    if not isinstance(tag, str):
        return None
    if bundle is not None and bundle.drafter in tag_types(tag):
        return bundle.drafter
    return tag_type(tag, "the LLM API options' decoding_type",
                    "give the bundle they come from (its manifest records the drafter type)")


def bundle_draft_len(options: dict) -> int | None:
    """The draft length the options file runs (None: not written)."""
    spec = options.get("speculative_config") or {}
    d = spec.get("max_draft_len") or spec.get("num_nextn_predict_layers")
    return d if isinstance(d, int) and d >= 1 else None


def engine_profile(section: dict, d: int, kind: str, source: dict, *, temperature: float, dtype: str, target: dict,
                   suite: dict, bundle: Bundle | None, max_new_tokens) -> dict:
    """The speculation profile of one engine report (one category, ``all``), marked with its ``source``."""
    from trtllm_spec.core.artifacts import SpeculationProfile

    return SpeculationProfile.build(
        engine="trtllm", source=source,
        drafter={"type": kind, "path": None, "draft_len": d, "acceptance_kind": acceptance_kind(kind),
                 "al_method": "measured_at_bundle_draft_len", **({"bundle": str(bundle.path.resolve())} if bundle else {})},
        target=target, suite=suite,
        settings={"dtype": dtype, "temperature": temperature, "max_new_tokens": max_new_tokens,
                  "seed": None, "machine": None},
        overall=section, categories={"all": dict(section)},
    )
