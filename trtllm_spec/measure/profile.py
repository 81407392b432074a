"""speculation_profile.json: per-position acceptance math, aggregation per category, and the validator.

Definitions (docs/speculation_profile.md has the full schema):

- An iteration verifies the drafts it was given and yields ``1 + accepted`` tokens; AL = tokens / iterations.
- ``requested[t]``: drafts the decoder asked for in iteration t, ``min(D, max_new_tokens - generated - 1)``
  (the decoder never drafts past ``max_new_tokens``). Iterations cut short by that limit do not count as
  rejections at the positions they did not request.
- Conditional rate a_i = accepted_i / attempted_i, where attempted_i counts iterations that requested at
  least i drafts and accepted drafts 1..i-1, and accepted_i those that also accepted draft i. A drafter that
  proposes fewer drafts than requested (n-gram without a match) fails at the first missing position, so
  AL(D) below equals the measured mean AL when no iteration is cut short. ``conditional_rates_given_proposed``
  counts only positions the drafter actually proposed (attempted_i restricted to ``proposed >= i``).
- Marginal m_i = a_1 * ... * a_i; chain drafters: AL(d) = 1 + sum_{i<=d} m_i for every d <= D from one run.
  Block drafters (DFlash/DSpark) draft all positions of a block at once, so AL(d) is measured per d.
- Positions never attempted are left off the rate lists (never extrapolated), as the planner expects.

Pure Python: no torch, so the planner and tests read it fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trtllm_spec.core.artifacts import PROFILE_SCHEMA as SCHEMA
from trtllm_spec.core.artifacts import SpeculationProfile
from trtllm_spec.errors import UserError

SECTION_KEYS = ("num_prompts", "generated_tokens", "iterations", "mean_acceptance_length", "conditional_rates",
                "marginal_rates", "acceptance_length", "al_histogram", "tokens_per_s_target", "tokens_per_s_spec",
                "speedup", "identical_outputs", "token_agreement")
TOP_KEYS = ("schema", "engine", "drafter", "target", "suite", "settings", "overall", "categories")


def acceptance_kind(drafter_type: str) -> str:
    """'block' for DFlash/DSpark (AL measured per D), 'chain' for the rest (AL(d) from one run): the
    descriptor's ``acceptance_kind``."""
    from trtllm_spec.drafters.registry import get

    return get(drafter_type).acceptance_kind


@dataclass
class PromptRun:
    """One suite prompt: the target-only reference, the speculative run, and (block drafters) the sweep."""

    id: str
    category: str
    prompt_tokens: int
    reference: list[int]  # target-only tokens
    output: list[int]  # speculative tokens
    target_s: float | None  # None: the reference came from the batched pass, plain decoding was not timed alone
    spec_s: float
    accepted: list[int]  # per iteration
    proposed: list[int]
    requested: list[int]
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0
    sweep: dict[int, tuple[int, int]] = field(default_factory=dict)  # d -> (tokens from iterations, iterations)
    sources: list[str] = field(default_factory=list)  # per iteration, which source drafted (SA enhancer)
    enhancer_s: float = 0.0  # time spent in the enhancer's automaton (part of draft_s)


# ---- per-iteration math --------------------------------------------------------------------------------

def requested_drafts(accepted: Sequence[int], draft_len: int, max_new_tokens: int) -> list[int]:
    """Drafts asked for per iteration, replaying runtime/decoder.py: one token comes from prefill, then
    iteration t asks for min(D, max_new_tokens - generated - 1)."""
    out, generated = [], 1
    for k in accepted:
        out.append(max(0, min(draft_len, max_new_tokens - generated - 1)))
        generated += 1 + k
    return out


def position_counts(accepted: Sequence[int], requested: Sequence[int], proposed: Sequence[int], draft_len: int
                    ) -> tuple[list[int], list[int], list[int]]:
    """(attempted_i, accepted_i, attempted_i among iterations that proposed >= i), for i = 1..D."""
    attempted, ok, proposed_att = [0] * draft_len, [0] * draft_len, [0] * draft_len
    for k, r, p in zip(accepted, requested, proposed, strict=True):
        for i in range(1, min(r, draft_len) + 1):
            if k < i - 1:
                break
            attempted[i - 1] += 1
            ok[i - 1] += k >= i
            proposed_att[i - 1] += p >= i
    return attempted, ok, proposed_att


def rates(successes: Sequence[int], attempts: Sequence[int]) -> list[float]:
    """successes_i / attempts_i, stopping at the first position never attempted."""
    out = []
    for s, a in zip(successes, attempts, strict=True):
        if a == 0:
            break
        out.append(s / a)
    return out


def marginal_rates(conditional: Sequence[float]) -> list[float]:
    """m_i = a_1 * ... * a_i."""
    out, m = [], 1.0
    for a in conditional:
        m *= a
        out.append(m)
    return out


def chain_acceptance_lengths(conditional: Sequence[float], draft_len: int) -> dict[str, float]:
    """AL(d) = 1 + sum_{i<=d} m_i for d = 1..D; flat beyond the attempted positions."""
    out, al = {}, 1.0
    marginal = marginal_rates(conditional)
    for d in range(1, draft_len + 1):
        if d <= len(marginal):
            al += marginal[d - 1]
        out[str(d)] = al
    return out


def al_histogram(accepted: Iterable[int], draft_len: int) -> dict[str, int]:
    """Iterations that yielded k tokens, k = 1..1+D."""
    hist = {str(k): 0 for k in range(1, draft_len + 2)}
    for a in accepted:
        hist[str(a + 1)] += 1
    return hist


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# ---- aggregation ---------------------------------------------------------------------------------------

def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(float(x), nd)


def _tps(tokens: int, seconds: float) -> float | None:
    return tokens / seconds if seconds > 0 else None


def section(runs: Sequence[PromptRun], draft_len: int, kind: str, greedy: bool) -> dict:
    """The aggregate of ``runs`` (a category, or everything): see the module docstring."""
    acc = [k for r in runs for k in r.accepted]
    req = [k for r in runs for k in r.requested]
    prop = [k for r in runs for k in r.proposed]
    attempted, ok, proposed_att = position_counts(acc, req, prop, draft_len)
    cond = rates(ok, attempted)
    iterations = len(acc)
    mean_al = (sum(acc) + iterations) / iterations if iterations else 1.0
    if kind == "chain":
        al_map = chain_acceptance_lengths(cond, draft_len)
    else:
        al_map = {str(draft_len): mean_al}
        for d in sorted({d for r in runs for d in r.sweep}):
            tokens, its = (sum(r.sweep[d][i] for r in runs if d in r.sweep) for i in (0, 1))
            al_map[str(d)] = tokens / its if its else 1.0
        al_map = {str(k): al_map[str(k)] for k in sorted(map(int, al_map))}
    ref_tokens = sum(len(r.reference) for r in runs)
    gen_tokens = sum(len(r.output) for r in runs)
    spec_s = sum(r.spec_s for r in runs)
    timed = [r for r in runs if r.target_s is not None]  # the speedup compares the same prompts, decoded both ways
    target_s = sum(r.target_s for r in timed)
    tps_t, tps_s = _tps(sum(len(r.reference) for r in timed), target_s), _tps(gen_tokens, spec_s)
    tps_s_timed = _tps(sum(len(r.output) for r in timed), sum(r.spec_s for r in timed))
    shares = {"prefill": sum(r.prefill_s for r in runs), "draft": sum(r.draft_s for r in runs),
              "verify": sum(r.verify_s for r in runs)}
    shares["other"] = max(0.0, spec_s - sum(shares.values()))
    agree = sum(common_prefix(r.reference, r.output) for r in runs)
    extra = {}
    if any(r.sources for r in runs):
        extra["sources"] = source_counts(runs)
        extra["time_shares"] = {"enhancer": _r(sum(r.enhancer_s for r in runs) / spec_s, 4) if spec_s > 0 else None}
    return {
        "num_prompts": len(runs),
        "generated_tokens": gen_tokens,
        "reference_tokens": ref_tokens,
        "iterations": iterations,
        "mean_acceptance_length": _r(mean_al),
        "conditional_rates": [_r(a) for a in cond],
        "marginal_rates": [_r(m) for m in marginal_rates(cond)],
        "conditional_rates_given_proposed": [_r(a) for a in rates(ok, proposed_att)],
        "attempts": attempted,
        "acceptance_length": {k: _r(v) for k, v in al_map.items()},
        "al_histogram": al_histogram(acc, draft_len),
        "tokens_per_s_target": _r(tps_t, 3),
        "tokens_per_s_spec": _r(tps_s, 3),
        "speedup": _r(tps_s_timed / tps_t, 4) if tps_t and tps_s_timed else None,
        "timed_prompts": len(timed),
        "time_s": {"target": _r(target_s, 4), "spec": _r(spec_s, 4)},
        "time_shares": {k: _r(v / spec_s, 4) if spec_s > 0 else None for k, v in shares.items()},
        "identical_outputs": sum(r.reference == r.output for r in runs) if greedy else None,
        "token_agreement": _r(agree / ref_tokens if ref_tokens else 1.0) if greedy else None,
        **({"sources": extra["sources"]} if extra else {}),
        **({"enhancer_time_share": extra["time_shares"]["enhancer"]} if extra else {}),
    }


def source_counts(runs: Sequence[PromptRun]) -> dict:
    """Per drafting source (the SA enhancer's "sa" / "neural"): iterations it drafted, draft tokens it proposed,
    tokens accepted of them, and the acceptance rate accepted / proposed."""
    out: dict[str, dict] = {}
    for r in runs:
        for src, k, p in zip(r.sources, r.accepted, r.proposed, strict=True):
            row = out.setdefault(src, {"iterations": 0, "drafted_tokens": 0, "accepted_tokens": 0})
            row["iterations"] += 1
            row["drafted_tokens"] += p
            row["accepted_tokens"] += k
    for row in out.values():
        row["acceptance_rate"] = _r(row["accepted_tokens"] / row["drafted_tokens"]) if row["drafted_tokens"] else None
        row["mean_acceptance_length"] = _r(1 + row["accepted_tokens"] / row["iterations"]) if row["iterations"] else None
    return dict(sorted(out.items()))


def prompt_record(r: PromptRun, greedy: bool) -> dict:
    its = len(r.accepted)
    return {"id": r.id, "category": r.category, "prompt_tokens": r.prompt_tokens,
            "generated_tokens": len(r.output), "iterations": its,
            "acceptance_length": _r((sum(r.accepted) + its) / its if its else 1.0),
            "target_s": _r(r.target_s, 4), "spec_s": _r(r.spec_s, 4),
            "identical": r.reference == r.output if greedy else None,
            "common_prefix_tokens": common_prefix(r.reference, r.output)}


def build_profile(runs: Sequence[PromptRun], *, drafter: dict, target: dict, suite: dict, settings: dict,
                  engine: str = "pytorch") -> dict:
    """The whole profile. ``drafter`` needs ``type`` and ``draft_len``; ``settings`` needs ``temperature``."""
    d, kind = int(drafter["draft_len"]), acceptance_kind(drafter["type"])
    greedy = float(settings["temperature"]) <= 0.0
    cats: dict[str, list[PromptRun]] = {}
    for r in runs:
        cats.setdefault(r.category, []).append(r)
    return SpeculationProfile.build(
        engine=engine,
        drafter={**drafter, "acceptance_kind": kind,
                 "al_method": "chain_analytic" if kind == "chain" else "measured_per_draft_len"},
        target=target, suite=suite, settings=settings,
        overall=section(runs, d, kind, greedy),
        categories={c: section(rs, d, kind, greedy) for c, rs in cats.items()},
        prompts=[prompt_record(r, greedy) for r in runs],
    )


# ---- validation ----------------------------------------------------------------------------------------

def _num(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _section_problems(s: object, where: str, draft_len: int, kind: str, engine: str) -> list[str]:
    if not isinstance(s, dict):
        return [f"{where} is not an object"]
    missing = [k for k in SECTION_KEYS if k not in s]
    if missing:
        return [f"{where} lacks {', '.join(missing)}"]
    out = []
    cond, marg = s["conditional_rates"], s["marginal_rates"]
    if engine == "pytorch" or cond is not None:
        if not isinstance(cond, list) or not all(_num(a) and 0 <= a <= 1 for a in cond) or len(cond) > draft_len:
            out.append(f"{where}.conditional_rates must be at most {draft_len} rates in [0, 1]")
        elif not isinstance(marg, list) or len(marg) != len(cond) or any(
                not _num(m) or abs(m - e) > 1e-4 for m, e in zip(marg, marginal_rates(cond), strict=False)):
            out.append(f"{where}.marginal_rates must be the running products of conditional_rates")
    al = s["acceptance_length"]
    if not isinstance(al, dict) or not al:
        out.append(f"{where}.acceptance_length must map draft lengths to AL")
    else:
        for k, v in al.items():
            if not str(k).isdigit() or not 1 <= int(k) <= draft_len or not _num(v) or not 1 <= v <= 1 + int(k) + 1e-9:
                out.append(f"{where}.acceptance_length[{k!r}] = {v!r}: keys 1..{draft_len}, AL in [1, 1 + d]")
        if kind == "chain" and engine == "pytorch" and set(al) != {str(d) for d in range(1, draft_len + 1)}:
            out.append(f"{where}.acceptance_length of a chain drafter needs every d = 1..{draft_len}")
        if str(draft_len) not in al:
            out.append(f"{where}.acceptance_length lacks the measured D = {draft_len}")
    mean = s["mean_acceptance_length"]
    if not _num(mean) or not 1 <= mean <= 1 + draft_len + 1e-9:
        out.append(f"{where}.mean_acceptance_length = {mean!r} is outside [1, {1 + draft_len}]")
    hist = s["al_histogram"]
    if hist is not None:
        if not isinstance(hist, dict) or set(hist) != {str(k) for k in range(1, draft_len + 2)}:
            out.append(f"{where}.al_histogram needs keys 1..{draft_len + 1}")
        elif _num(mean) and isinstance(s["iterations"], int) and s["iterations"] > 0:
            if sum(hist.values()) != s["iterations"]:
                out.append(f"{where}.al_histogram counts {sum(hist.values())} iterations, not {s['iterations']}")
            elif abs(sum(int(k) * n for k, n in hist.items()) / s["iterations"] - mean) > 1e-4:
                out.append(f"{where}.mean_acceptance_length disagrees with al_histogram")
    if not isinstance(s["num_prompts"], int) or s["num_prompts"] < 1:
        out.append(f"{where}.num_prompts must be a positive integer")
    for k in ("tokens_per_s_target", "tokens_per_s_spec", "speedup", "token_agreement"):
        if s[k] is not None and (not _num(s[k]) or s[k] < 0):
            out.append(f"{where}.{k} = {s[k]!r} must be a non-negative number or null")
    if s["token_agreement"] is not None and s["token_agreement"] > 1:
        out.append(f"{where}.token_agreement must be in [0, 1]")
    return out


def profile_problems(p: object) -> list[str]:
    """Everything wrong with a speculation profile (empty list: valid)."""
    if not isinstance(p, dict):
        return ["a speculation profile is a JSON object"]
    missing = [k for k in TOP_KEYS if k not in p]
    if missing:
        return [f"missing top-level keys: {', '.join(missing)}"]
    if p["schema"] != SCHEMA:
        return [f"schema is {p['schema']!r}, expected {SCHEMA!r}"]
    dr = p["drafter"]
    if not isinstance(dr, dict) or not isinstance(dr.get("draft_len"), int) or dr["draft_len"] < 1 \
            or not isinstance(dr.get("type"), str):
        return ["drafter must hold 'type' and an integer 'draft_len' >= 1"]
    d, kind, engine = dr["draft_len"], acceptance_kind(dr["type"]), p["engine"]
    settings = p["settings"]
    out = [f"settings lacks {k}" for k in ("dtype", "temperature", "max_new_tokens")
           if not isinstance(settings, dict) or k not in settings]
    out += _section_problems(p["overall"], "overall", d, kind, engine)
    cats = p["categories"]
    if not isinstance(cats, dict) or not cats:
        return [*out, "categories must map category names to sections"]
    for c, s in cats.items():
        out += _section_problems(s, f"categories.{c}", d, kind, engine)
    if not out and sum(s["num_prompts"] for s in cats.values()) != p["overall"]["num_prompts"]:
        out.append("the categories' num_prompts do not add up to overall.num_prompts")
    return out


def validate_profile(p: object, where: str = "speculation profile") -> None:
    problems = profile_problems(p)
    if problems:
        raise UserError(f"{where} is not valid:\n" + "\n".join(f"- {x}" for x in problems))
