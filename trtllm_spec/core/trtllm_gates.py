"""Speculation on/off gates TensorRT-LLM offers besides ``draft_len_schedule``, used where the plan justifies them.

- ``max_concurrency`` (DecodingBaseConfig, 1.3+; 1.3.0rc27 and 1.4.0rc1/rc4 API pages): "speculation will be
  disabled at batch sizes above this value"; TensorRT-LLM turns it into ``{max_concurrency: max_draft_len}`` and
  refuses it together with a schedule. The planner's 1.3+ schedule has a single key ``k`` mapping to
  max_draft_len exactly when it keeps full D up to batch ``k`` and predicts speculation stops paying above it; the
  bundle then says so with ``max_concurrency: k``, the documented cut-off, instead of a one-entry schedule.
- ``acceptance_rate_window_size`` / ``acceptance_rate_threshold`` (1.3+: "speculation will be disabled permanently
  once the rolling average [of accepted / drafted] over the last N speculation-enabled decoding iterations drops
  below this value") and 1.2's ``acceptance_window`` / ``acceptance_length_threshold`` (over completed requests):
  not written by the planner. A permanent switch-off driven by a short window would turn speculation off for
  good after one hard stretch of traffic, and the break-even rate it needs depends on the batch size the server
  runs at, which differs from request to request; ``replan.sh`` with the engine's own report is the correction
  the bundle offers instead.

Where a schedule takes effect (``engine_schedule``; docs/trtllm_compat.md, "Where a schedule takes effect"): the
engine applies ``draft_len_schedule`` / ``max_concurrency`` only in modes where ``SpeculativeDecodingMode.
support_dynamic_draft_len()`` is true (``_torch/speculative/interface.py``: one stored version lists EAGLE-3
one-model only, main adds MTP, MTP-Eagle, PARD, DFlash, draft-target one-model and SA, PR #12262; NGram and
DSpark never). The one-model path gained dynamic draft length in PR #10860 (merged 2026-03-13), after the 1.2
branch: a 1.2 bundle never carries a schedule. What a batch above the largest key (or a zero tier) runs is
``_torch/speculative/utils.get_draft_len_for_batch_size(schedule, batch, max_draft_len, min_runtime_draft_len)``,
and main changed it twice (``MAIN_STATES``; each descriptor's ``implicit_tier``): first every one-engine mode
floored at ``min_runtime_draft_len = 1`` (NVIDIA/TensorRT-LLM
``tests/unittest/_torch/speculative/hw_agnostic/test_min_runtime_draft_len.py``
@011d0933dcb5e592f5fa2626beaf42a96324c578: ``{4: 4, 8: 2, 32: 1}`` gives 1 at batch 33), then linear EAGLE-3
and MTP-Eagle one-model went back to 0 with the drafter kept warm (``keep_drafter_warm``; a later main version
of the same test file, ``test_min_runtime_draft_len_and_keep_warm_per_mode``) while draft-target, PARD,
DFlash, SA and tree EAGLE-3 keep the floor of 1 -- the state newest
main's ``draft_len_schedule`` description ("Batch sizes 33+: use draft_len=0 (implicit, speculation disabled)")
describes for EAGLE-3. The 1.4.0rc1 / rc4 pages cannot say which of the two a 1.4 release runs
(``min_runtime_draft_len`` is a property, not a field), so a 1.4 plan relies on neither: it drafts at least 1 token
wherever it drafts, and its schedule's largest key is the engine's ``max_batch_size``
(``planner.schedule.render_schedule``), so the implicit tier, 0 or 1, is never reached. Each descriptor names the
first release that applies a schedule to it (``Mechanism.dynamic_draft_len_since``); each release record says
whether it has ``max_concurrency`` and whether a tier can switch speculation off (``core/releases.py``).

Pure Python (no pydantic): the planner, the options builder and the reports use it.
"""

from __future__ import annotations


def cutoff_gate(schedule: dict[int, int] | None, max_draft_len: int, profile: str
                ) -> tuple[dict[int, int] | None, dict, str | None]:
    """(schedule to write, extra speculative_config fields, the reason) for the plan's schedule."""
    from trtllm_spec.core.releases import get

    if not get(profile).max_concurrency or not schedule or len(schedule) != 1 or max_draft_len <= 0:
        return schedule, {}, None
    (k, v), = schedule.items()
    if v != max_draft_len or not isinstance(k, int) or k < 1:  # a bad key is reported by the schedule's own check
        return schedule, {}, None
    reason = (f"the plan keeps D = {max_draft_len} up to batch {k} and predicts speculation stops paying above it: "
              f"max_concurrency: {k} turns it off there (TensorRT-LLM {profile}; equivalent to the schedule "
              f"{{{k}: {max_draft_len}}}, which TensorRT-LLM derives from it)")
    return None, {"max_concurrency": k}, reason


def gate_reasons(options: dict | None, profile: str) -> list[str]:
    """Why each gate in ``options`` is there (for the bundle's report)."""
    spec = (options or {}).get("speculative_config") or {}
    out = []
    if spec.get("max_concurrency"):
        _, _, reason = cutoff_gate({spec["max_concurrency"]: spec.get("max_draft_len")}, spec.get("max_draft_len") or 0,
                                   profile)
        out.append(reason or f"max_concurrency: {spec['max_concurrency']}")
    return out


# the two main states read (the module docstring) of what get_draft_len_for_batch_size runs above the largest key
# (and on a zero tier); each descriptor's ``implicit_tier`` holds its one-engine mode's value in each; a 1.4 plan
# must hold under both
MAIN_STATES = ("main, floor (test_min_runtime_draft_len.py @011d0933)",
               "newest main, keep-warm (test_min_runtime_draft_len.py, keep-warm version)")


def engine_schedule(mechanism, profile: str) -> tuple[bool, bool, str | None]:
    """(the engine applies a draft_len_schedule / max_concurrency to ``mechanism`` in ``profile``, a tier can switch
    speculation off, why not -- None when both hold)."""
    from trtllm_spec.core.releases import at_least, first_at_least, get, order

    title = getattr(mechanism, "title", getattr(mechanism, "name", "this drafter"))
    since = getattr(mechanism, "dynamic_draft_len_since", None)
    if not at_least(profile, since):
        later = first_at_least(since) if since is not None and order(since) > order(profile) else None
        hint = f"; TensorRT-LLM {later} does (engine.trtllm_version: '{later}')" if later else ""
        return False, False, (f"TensorRT-LLM {profile} applies no draft_len_schedule or max_concurrency to {title} "
                              f"(support_dynamic_draft_len() is false for it{hint})")
    if not get(profile).schedule_switches_off:
        implicit = getattr(mechanism, "implicit_tier", ())
        tiers = dict(zip(MAIN_STATES, implicit, strict=True)) if implicit else {}
        if len(set(tiers.values())) > 1:
            above = (" or ".join(f"D = {d} ({state})" for state, d in tiers.items())
                     + f"; which one a {profile} release runs is not settled")
        else:
            above = f"D = {next(iter(tiers.values()), 1)} in every main state read ({', '.join(tiers)})"
        return True, False, (f"TensorRT-LLM {profile} may not switch {title} speculation off at a batch size (above "
                             f"the largest key and on a zero tier main runs {above}); the plan drafts at least 1 "
                             "token wherever it drafts at all, and its schedule's largest key is max_batch_size, so "
                             "the implicit tier is never reached")
    return True, True, None
