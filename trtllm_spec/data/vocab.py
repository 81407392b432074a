"""Draft vocabulary: the most frequent target tokens of the training data, and the ``d2t`` offset table.

``d2t[i] = t_i - i`` where t_0 < t_1 < ... are the chosen target ids (sorted), so a draft id maps back as
``target = draft + d2t[draft]`` (the EAGLE-3 convention TensorRT-LLM reads). Special tokens (EOS, the
chat markers) are always kept; when the data has fewer distinct tokens than asked, the remaining slots are
filled with the lowest unused ids, so the table is always complete and valid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from trtllm_spec.errors import UserError


def draft_vocab(counts: Counter, vocab_size: int, draft_vocab_size: int, always: Iterable[int] = ()) -> list[int]:
    """The chosen target ids, ascending."""
    if not 1 <= draft_vocab_size <= vocab_size:
        raise UserError(f"draft_vocab_size {draft_vocab_size} must be in 1..vocab_size ({vocab_size})")
    keep = {t for t in always if 0 <= t < vocab_size}
    for tok, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(keep) >= draft_vocab_size:
            break
        if 0 <= tok < vocab_size:
            keep.add(tok)
    filler = (t for t in range(vocab_size) if t not in keep)
    while len(keep) < draft_vocab_size:
        keep.add(next(filler))
    return sorted(keep)[:draft_vocab_size]


def d2t_table(target_ids: list[int]) -> list[int]:
    return [t - i for i, t in enumerate(target_ids)]


def check_d2t(d2t: list[int], vocab_size: int) -> list[str]:
    """Problems with a d2t table (empty when valid): ids in range and unique."""
    ids = [i + off for i, off in enumerate(d2t)]
    problems = []
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        problems.append(f"{len(bad)} draft ids map outside the target vocabulary (e.g. {bad[0]})")
    if len(set(ids)) != len(ids):
        problems.append(f"{len(ids) - len(set(ids))} target ids are mapped more than once")
    return problems


def coverage(counts: Counter, target_ids: list[int]) -> float:
    """Fraction of training tokens the draft vocabulary can propose."""
    total = sum(counts.values())
    chosen = set(target_ids)
    return sum(c for t, c in counts.items() if t in chosen) / total if total else 0.0
