"""Acceptance models: how many tokens one target iteration yields at draft length D.

- Chain drafters (EAGLE-3, MTP, draft model, n-gram): per-position conditional rates a_i give
  AL(D) = 1 + sum_{i<=D} prod_{j<=i} a_j; one run at the largest D gives every smaller D. Beyond the
  positions given, AL is held flat: we never extrapolate a measurement.
- Block drafters (DFlash, DSpark): AL measured per D. Between measured D we interpolate linearly; beyond
  the largest we hold AL flat (extra draft tokens assumed to add nothing); AL is made non-decreasing
  (verifying a shorter prefix of the same draft never accepts more).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_spec.core.files import read_structured
from trtllm_spec.errors import AcceptanceError


@dataclass(frozen=True)
class AcceptanceModel:
    kind: str  # "chain" | "table"
    conditional_rates: tuple[float, ...] = ()
    table: tuple[tuple[int, float], ...] = ()  # (D, AL) sorted by D
    source: str = ""
    measured: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def acceptance_length(self, d: int) -> float:
        """AL(D) in [1, 1 + D], non-decreasing in D."""
        if d <= 0:
            return 1.0
        if self.kind == "chain":
            al, marginal = 1.0, 1.0
            rates = self.conditional_rates
            for i in range(min(d, len(rates))):  # beyond the measured positions AL is held flat
                marginal *= rates[i]
                al += marginal
            return al
        best = 1.0
        for k in range(1, d + 1):
            best = max(best, min(1.0 + k, self._interp(k)))
        return best

    def _interp(self, d: int) -> float:
        points = ((0, 1.0), *self.table)
        for (d0, a0), (d1, a1) in zip(points, points[1:], strict=False):
            if d0 <= d <= d1:
                return a0 + (a1 - a0) * (d - d0) / (d1 - d0)
        return points[-1][1]

    def marginal_gain(self, d: int) -> float:
        """AL(D) - AL(D-1): what the D-th draft token adds."""
        return self.acceptance_length(d) - self.acceptance_length(d - 1)

    def max_measured_draft_len(self) -> int | None:
        if self.kind == "chain":
            return len(self.conditional_rates) or None
        return self.table[-1][0] if self.table else None

    def to_json(self) -> dict:
        out: dict = {"kind": self.kind, "source": self.source, "measured": self.measured}
        if self.kind == "chain":
            out["conditional_rates"] = list(self.conditional_rates)
        else:
            out["acceptance_length"] = {str(d): a for d, a in self.table}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def chain(rates: list[float] | tuple[float, ...], source: str, measured: bool = False) -> AcceptanceModel:
    return AcceptanceModel("chain", conditional_rates=tuple(float(r) for r in rates), source=source,
                           measured=measured)


def table(points: dict[int, float], source: str, measured: bool = False) -> AcceptanceModel:
    return AcceptanceModel("table", table=tuple(sorted((int(k), float(v)) for k, v in points.items())),
                           source=source, measured=measured)


# ---- reading files -------------------------------------------------------------------------------------

def load_acceptance(path: str | Path, category: str | None = None) -> AcceptanceModel:
    """Read ``{"conditional_rates": [...]}``, ``{"acceptance_length": {"1": 1.8, ...}}`` or a
    ``speculation_profile.json`` written by ``trtllm-spec measure`` (its ``overall`` or a category)."""
    p = Path(path)
    data = read_structured(p, "acceptance file", AcceptanceError)
    if not isinstance(data, dict):
        raise AcceptanceError(f"acceptance file {p} must hold a JSON object with 'conditional_rates' or "
                              "'acceptance_length'")
    if "overall" in data or "categories" in data:  # a speculation profile
        if category:
            cats = data.get("categories") or {}
            if category not in cats:
                raise AcceptanceError(f"acceptance file {p} has no category {category!r}; it has: "
                                      f"{', '.join(sorted(cats)) or 'none'}")
            data = cats[category]
        else:
            data = data.get("overall") or {}
        if not isinstance(data, dict):
            raise AcceptanceError(f"acceptance file {p}: the profile's section is not an object")
    return acceptance_from_dict(data, str(p), measured=True)


def acceptance_from_dict(data: dict, source: str, measured: bool = True) -> AcceptanceModel:
    rates = data.get("conditional_rates")
    al = data.get("acceptance_length")
    if rates is None and al is None:
        raise AcceptanceError(f"{source}: needs 'conditional_rates' (list of rates in [0,1]) or "
                              "'acceptance_length' ({\"1\": 1.8, \"2\": 2.4, ...})")
    if rates is not None and not isinstance(al, dict):
        return chain(_rates(rates, source), source, measured)
    return table(_al_table(al, source), source, measured)


def _rates(rates: object, source: str) -> list[float]:
    if not isinstance(rates, list) or not rates:
        raise AcceptanceError(f"{source}: 'conditional_rates' must be a non-empty list of numbers in [0, 1]")
    out = []
    for i, r in enumerate(rates):
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= float(r) <= 1.0:
            raise AcceptanceError(f"{source}: conditional_rates[{i}] = {r!r} is not a rate in [0, 1]")
        out.append(float(r))
    return out


def _al_table(al: object, source: str) -> dict[int, float]:
    if not isinstance(al, dict) or not al:
        raise AcceptanceError(f"{source}: 'acceptance_length' must map draft lengths to AL, "
                              "e.g. {\"1\": 1.8, \"2\": 2.4}")
    out: dict[int, float] = {}
    for k, v in al.items():
        try:
            d = int(k)
        except (TypeError, ValueError):
            raise AcceptanceError(f"{source}: acceptance_length key {k!r} is not a draft length (integer >= 1)") \
                from None
        if d < 1:
            raise AcceptanceError(f"{source}: acceptance_length key {k!r} must be >= 1")
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise AcceptanceError(f"{source}: acceptance_length[{k}] = {v!r} is not a number")
        if not 1.0 <= float(v) <= 1.0 + d:
            raise AcceptanceError(f"{source}: acceptance_length[{k}] = {v} is outside [1, 1 + D] = [1, {1 + d}]; "
                                  "AL counts the target's own token plus accepted drafts")
        out[d] = float(v)
    return out


def dump_acceptance(model: AcceptanceModel) -> str:
    return json.dumps(model.to_json(), indent=2)
